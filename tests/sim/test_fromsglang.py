"""hicache-sim scenario from-sglang: every flag of a real command mapped or listed as ignored, unknown ones refused."""

from __future__ import annotations

import pytest
import yaml

from sim.cli import main
from sim.errors import InputError
from sim.fromsglang import from_sglang, to_yaml
from sim.scenario import load_scenario, scenario_from_dict

M2_LAUNCH = ("python -m sglang.launch_server --model-path Qwen/Qwen3-14B --tp-size 2 --page-size 64 "
             "--enable-hierarchical-cache --hicache-write-policy write_through --hicache-ratio 2 --hicache-size 0")  # fmt: skip
M2_BENCH = ("python3 bench_multiturn.py --disable-random-sample --output-length 16 --request-length 2048 "
            "--num-clients 20 --num-rounds 10 --max-parallel 4 --request-rate 20 --ready-queue-policy random "
            "--disable-auto-run --seed 42")  # fmt: skip


def test_the_published_multiturn_commands_map_to_their_fields():
    sc = scenario_from_dict(from_sglang(M2_LAUNCH, [M2_BENCH], gpu="A10").scenario)
    assert sc.model.config == "qwen3-14b" and sc.hardware.tp_size == 2 and sc.hardware.gpu == "A10"
    assert sc.hicache.enabled and sc.hicache.page_size == 64 and sc.hicache.hicache_ratio == 2.0
    w = sc.workload
    assert (w.num_clients, w.num_rounds, w.max_parallel, w.request_rate) == (20, 10, 4, 20.0)
    assert (w.request_length, w.output_length, w.ready_queue_policy, w.disable_random_sample) == (2048, 16, "random", True)
    assert sc.seed == 42


def test_every_flag_is_mapped_or_listed_as_ignored_with_why():
    launch = ("python -m sglang.launch_server --model-path Qwen/Qwen3-14B --tp 2 --host 0.0.0.0 --port 30000 "
              "--enable-metrics --cuda-graph-max-bs-decode 8 --mem-fraction-static=0.8 --enable-mixed-chunk "
              "--disable-overlap-schedule")  # fmt: skip
    conv = from_sglang(launch, gpu="A10")
    assert "--enable-mixed-chunk -> scheduler.enable_mixed_chunk: True" in conv.mapped
    assert "--disable-overlap-schedule -> scheduler.overlap_schedule: False" in conv.mapped
    assert any(m.startswith("--tp 2 -> hardware.tp_size") for m in conv.mapped)  # a unique prefix, as argparse
    assert any(m.startswith("--mem-fraction-static=0.8 -> hardware.mem_fraction_static") for m in conv.mapped)
    ignored = {line.split(":")[0] for line in conv.ignored}
    assert ignored == {"--host 0.0.0.0", "--port 30000", "--enable-metrics", "--cuda-graph-max-bs-decode 8"}
    assert not conv.scenario["hicache"]["enabled"]  # no --enable-hierarchical-cache: GPU only
    text = to_yaml(conv)
    assert "# Ignored (not modelled):" in text
    assert "--cuda-graph-max-bs-decode 8: a kernel or execution-backend choice" in text  # its group's reason
    back = scenario_from_dict(yaml.safe_load(text))
    assert back.hardware.mem_fraction_static == 0.8 and back.scheduler.enable_mixed_chunk
    assert not back.scheduler.overlap_schedule


@pytest.mark.parametrize(("launch", "bench", "message"), [
    ("python -m sglang.launch_server --model-path Qwen/Qwen3-14B --frobnicate 3", [], "unknown flag --frobnicate"),
    ("python -m sglang.launch_server --model-path Qwen/Qwen3-14B --hicache", [], "ambiguous"),
    ("python -m sglang.launch_server --tp 2", [], "--model-path is required"),
    ("python -m sglang.launch_server --model-path some/unknown-model", [], "pass --model-config"),
    ("python -m vllm.entrypoints --model x", [], "expected a command running"),
    (M2_LAUNCH, ["python3 bench_multiturn.py --num-clients 2"], "--disable-auto-run"),
    (M2_LAUNCH, ["python -m sglang.bench_serving --dataset-name sharegpt"], "not modelled"),
    (M2_LAUNCH, ["python -m sglang.bench_serving --num-prompts"], "needs a value"),
])  # fmt: skip
def test_bad_commands_are_one_line_errors(launch, bench, message):
    with pytest.raises(InputError, match=message) as info:
        from_sglang(launch, bench, gpu="A10")
    assert "\n" not in str(info.value)


def test_bench_serving_commands_become_steps_in_order():
    bench = "python -m sglang.bench_serving --dataset-name random-ids --random-range-ratio 1 --request-rate inf --flush-cache"
    conv = from_sglang(M2_LAUNCH, [f"{bench} --max-concurrency 1 --num-prompts 4", f"{bench} --max-concurrency 8"],
                       gpu="A10")  # fmt: skip
    steps = scenario_from_dict(conv.scenario).workload.steps
    assert [s.max_concurrency for s in steps] == [1, 8] and steps[0].num_prompts == 4
    assert all(s.flush_cache and s.request_rate is None and s.random_range_ratio == 1.0 for s in steps)


def test_a_local_model_folder_gives_its_config(tmp_path):
    import shutil
    from importlib import resources

    folder = tmp_path / "MyQwen"
    folder.mkdir()
    shutil.copy(resources.files("sim").joinpath("data", "models", "qwen3-14b.json"), folder / "config.json")
    conv = from_sglang(f"python -m sglang.launch_server --model-path {folder}", gpu="H100")
    assert conv.scenario["model"]["config"] == str(folder / "config.json")


def test_cli_writes_the_yaml_and_refuses_unknown_flags_with_exit_2(tmp_path, capsys):
    out = tmp_path / "m2.yaml"
    assert main(["scenario", "from-sglang", "--gpu", "A10", "--launch", M2_LAUNCH, "--bench", M2_BENCH,
                 "--out", str(out)]) == 0  # fmt: skip
    assert load_scenario(out).workload.num_clients == 20
    assert main(["scenario", "from-sglang", "--gpu", "A10", "--launch", M2_LAUNCH + " --nope 1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown flag --nope" in err[0]


def test_max_running_requests_without_a_swa_ratio_is_sglangs_cap_mode_for_v4():
    launch = "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Flash --tp 8 --max-running-requests 32"
    conv = from_sglang(launch, gpu="H20")
    assert conv.scenario["hicache"]["swa_full_tokens_ratio"] == "cap"
    given = from_sglang(launch + " --swa-full-tokens-ratio 1.0", gpu="H20")
    assert given.scenario["hicache"]["swa_full_tokens_ratio"] == 1.0
    assert "swa_full_tokens_ratio" not in from_sglang(launch.rsplit(" --max", 1)[0], gpu="H20").scenario["hicache"]


def test_the_servers_version_picks_whose_defaults_fill_what_the_command_leaves_out():
    old = scenario_from_dict(from_sglang(M2_LAUNCH, [M2_BENCH], gpu="A10", sglang_version="0.5.2").scenario)
    new = scenario_from_dict(from_sglang(M2_LAUNCH, [M2_BENCH], gpu="A10").scenario)
    assert old.hardware.sglang_defaults == "0.5.2" and new.hardware.sglang_defaults == "0.5.23"
    assert (old.scheduler.chunked_prefill_size, new.scheduler.chunked_prefill_size) == (2048, 4096)
    assert old.hardware.kv_mem_gb > 3 * new.hardware.kv_mem_gb  # 0.867 against 0.678 of the A10, less the weights
    with pytest.raises(InputError, match="--sglang-version 0.4.0: known default rules are 0.5.23, 0.5.2"):
        from_sglang(M2_LAUNCH, gpu="A10", sglang_version="0.4.0")

"""hicache-sim scenario from-sglang: every flag of a real command mapped or listed as ignored, unknown ones refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sim.app.cli import main
from sim.base.errors import InputError
from sim.interop.fromsglang import from_sglang, to_yaml
from sim.scenario.load import load_scenario, scenario_from_dict

ROOT = Path(__file__).resolve().parents[3]
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


V4 = "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Flash --tp 8 "
QWEN = "python -m sglang.launch_server --model-path Qwen/Qwen3-14B --tp 2 "


@pytest.mark.parametrize(("launch", "flags", "message"), [
    (V4, "--hicache-size 1e308", "--hicache-size: 1e+308 is out of range (any number here is at most 1e+15"),
    (V4, "--hicache-size nan", "--hicache-size: must be a finite number"),
    (V4, "--mem-fraction-static 1e-9", "--mem-fraction-static: 1e-09 is out of range"),
    (QWEN, "--hicache-size 1e14", "--hicache-size 1e+14: ~1e16 is out of range"),  # the pages it derives, bounded too
    (V4, "--chunked-prefill-size 1", "--chunked-prefill-size 1: scheduler.chunked_prefill_size: 1 is below one page"),
    (QWEN, "--hicache-size 1 --chunked-prefill-size 1", "--chunked-prefill-size 1: scheduler.chunked_prefill_size"),
    (V4, "--hicache-size 100", "--hicache-size 100: DeepSeek V4 HiCache currently does not support --hicache-size"),
    (V4, "--page-size 64", "--page-size 64: value error, page_size 64 is not a multiple of compress_ratio 128"),
])  # fmt: skip
def test_a_flags_number_is_held_to_every_inputs_bounds_and_a_field_it_set_blames_it(launch, flags, message):
    """Found by the fuzzer's 10x profile: a size whose page count overflowed, and a cross-field error raised
    while sizing the host pool from --hicache-size, came out as tracebacks. V4 with --hicache-size is refused
    as SGLang refuses it at start."""
    with pytest.raises(InputError) as info:
        from_sglang(launch + flags, [], gpu="H200").check()
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


@pytest.mark.parametrize(("bench", "message"), [
    ("python -m sglang.bench_serving --num-prompts -5", "--bench --num-prompts -5: workload.steps.0.num_prompts"),
    ("python benchmark/hicache/bench_multiturn.py --num-clients -3 --disable-auto-run",
     "--bench --num-clients -3: workload.num_clients"),
])  # fmt: skip
def test_a_field_a_bench_flag_set_blames_that_flag(bench, message):
    with pytest.raises(InputError) as info:
        from_sglang(V4, [bench], gpu="H200").check()
    assert str(info.value).startswith(message) and "\n" not in str(info.value)


def test_a_model_config_that_cannot_be_read_names_the_option(tmp_path):
    with pytest.raises(InputError, match=r"^--model-config: model config '.*': a folder without a config.json"):
        from_sglang(V4, [], gpu="H200", model_config=str(tmp_path))
    with pytest.raises(InputError, match=r"^--model-config: model config '.*nope.json': no such file"):
        from_sglang(V4, [], gpu="H200", model_config=str(tmp_path / "nope.json"))


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


def test_a_scenario_that_could_not_start_is_not_written(tmp_path, capsys):
    """The converted scenario is checked as a run starts: here, the aiperf corpus it names has a bad record."""
    corpus = tmp_path / "w.jsonl"
    corpus.write_text('{"id": "a", "block_size": 64, "hash_id_scope": "local", "requests": '
                      '[{"t": 0, "type": "n", "in": -4, "out": 2, "hash_ids": []}]}\n')
    out = tmp_path / "s.yaml"
    bench = f"aiperf profile --input-file {corpus} --custom-dataset-type weka_trace"
    assert main(["scenario", "from-sglang", "--gpu", "H200", "--launch", V4, "--bench", bench, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{corpus}:1: requests[0].in: must be >= 1" in err[0] and not out.exists()


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


class TestCommandsAsTyped:
    """Commands are pasted from shells and docs: environment assignments, wrappers, interpreters, ``sglang serve``."""

    SERVER = "--model-path Qwen/Qwen3-14B --tp 2 --enable-hierarchical-cache"

    def test_numactl_and_env_prefixes_are_listed_as_ignored_and_the_server_still_parses(self):
        launch = (f"CUDA_VISIBLE_DEVICES=0,1 SGLANG_ENABLE_UNIFIED_RADIX_TREE=1 numactl --cpunodebind=0,1 "
                  f"--interleave 0,1 -N 0 python3 -u -m sglang.launch_server {self.SERVER}")  # fmt: skip
        conv = from_sglang(launch, gpu="A10")
        assert conv.scenario["hardware"]["tp_size"] == 2 and conv.scenario["hicache"]["enabled"]
        ignored = {line.split(": ")[0]: line.split(": ", 1)[1] for line in conv.ignored}
        assert ignored["numactl --cpunodebind=0,1 --interleave 0,1 -N 0"].startswith("CPU and memory placement")
        assert ignored["CUDA_VISIBLE_DEVICES=0,1"].startswith("process environment")
        assert "mem_cache/registry.py:146" in ignored["SGLANG_ENABLE_UNIFIED_RADIX_TREE=1"]

    def test_env_and_taskset_wrappers(self):
        launch = f"env SGLANG_LOG_LEVEL=info taskset -c 0-15 nohup python -m sglang.launch_server {self.SERVER}"
        conv = from_sglang(launch, gpu="A10")
        assert any(line.startswith("taskset -c 0-15: CPU") for line in conv.ignored)
        assert any(line.startswith("SGLANG_LOG_LEVEL=info: not a variable SGLang 0.5.23 reads") for line in conv.ignored)

    def test_an_env_var_that_changes_the_model_is_mapped(self):
        launch = f"SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP=1 python -m sglang.launch_server {self.SERVER}"
        sc = scenario_from_dict(from_sglang(launch, gpu="A10").scenario)
        assert sc.scheduler.disable_consecutive_prefill_overlap
        other = from_sglang(f"SGLANG_INIT_NEW_TOKEN_RATIO=0.5 python -m sglang.launch_server {self.SERVER}", gpu="A10")
        assert any("an SGLang setting the simulator does not model" in line for line in other.ignored)

    def test_time_and_sudo_wrappers(self):
        conv = from_sglang(f"sudo -E -u svc time python -m sglang.launch_server {self.SERVER}", gpu="A10")
        assert conv.scenario["hardware"]["tp_size"] == 2
        assert [line.split(":")[0] for line in conv.ignored] == ["sudo -E -u svc", "time"]
        assert all("how the command is run" in line for line in conv.ignored)

    def test_sglang_serve_with_a_positional_model_is_launch_server(self):
        conv = from_sglang("sglang serve Qwen/Qwen3-14B --tp 2 --model-type llm", gpu="A10")
        assert conv.scenario["model"]["config"] == "qwen3-14b" and conv.scenario["hardware"]["tp_size"] == 2
        assert any(line.startswith("--model-type llm: sglang serve's backend selector") for line in conv.ignored)
        assert from_sglang("sglang serve --model-path Qwen/Qwen3-14B", gpu="A10").scenario["model"]["name"] == "Qwen3-14B"


class TestFlagSpellings:
    """SGLang 0.5.2's spellings of renamed flags are their 0.5.23 flag; 0.5.2 flags 0.5.23 dropped are listed."""

    def test_old_and_new_spellings_of_the_cuda_graph_batch_are_the_same_flag(self):
        base = "python -m sglang.launch_server --model-path Qwen/Qwen3-14B"
        old = from_sglang(f"{base} --cuda-graph-max-bs 8", gpu="A10").ignored
        new = from_sglang(f"{base} --cuda-graph-max-bs-decode 8", gpu="A10").ignored
        assert old[0].startswith("--cuda-graph-max-bs 8 (0.5.2's spelling of --cuda-graph-max-bs-decode)")
        assert old[0].split(": ", 1)[1] == new[0].split(": ", 1)[1]

    def test_an_old_switch_becomes_its_new_flag_with_its_value(self):
        conv = from_sglang("python -m sglang.launch_server --model-path Qwen/Qwen3-14B --tp 4 --enable-ep-moe", gpu="H100")
        assert any(line.startswith("--enable-ep-moe (0.5.2's spelling of --ep-size 4)") for line in conv.ignored + conv.mapped)

    def test_a_dropped_bench_serving_option_is_listed_as_ignored(self):
        bench = "python -m sglang.bench_serving --dataset-name random-ids --random-image-num-images 2"
        conv = from_sglang(M2_LAUNCH, [bench], gpu="A10")
        assert "--random-image-num-images 2: a bench_serving option of SGLang 0.5.2 that 0.5.23 no longer has" in conv.ignored[0]

    def test_a_dropped_flag_is_listed_as_ignored(self):
        conv = from_sglang("python -m sglang.launch_server --model-path Qwen/Qwen3-14B --enable-nan-detection", gpu="A10")
        assert conv.ignored == ["--enable-nan-detection: a flag of SGLang 0.5.2 that 0.5.23 no longer has; not modelled"]

    def test_an_alias_is_its_flag(self):
        conv = from_sglang("python -m sglang.launch_server --model Qwen/Qwen3-14B --tensor-parallel-size 2 --enable-hicache",
                           gpu="A10")  # fmt: skip
        sc = scenario_from_dict(conv.scenario)
        assert sc.hardware.tp_size == 2 and sc.hicache.enabled and sc.model.config == "qwen3-14b"

    def test_the_eviction_policy_is_mapped_and_a_config_file_is_refused(self):
        base = "python -m sglang.launch_server --model-path Qwen/Qwen3-14B --tp 2"
        sc = scenario_from_dict(from_sglang(f"{base} --radix-eviction-policy lfu", gpu="A10").scenario)
        assert sc.hicache.radix_eviction_policy == "lfu"
        with pytest.raises(InputError, match="--config server.yaml: the flags in that file are not on the command line"):
            from_sglang(f"{base} --config server.yaml", gpu="A10")

    def test_disabling_the_radix_cache_is_flagged_loudly(self):
        (line,) = from_sglang("python -m sglang.launch_server --model-path Qwen/Qwen3-14B --disable-radix-cache",
                              gpu="A10").ignored  # fmt: skip
        assert "NOT MODELLED" in line

    def test_every_launch_flag_gets_a_reason_not_a_blank(self):
        from sim.interop.fromsglang import _sglang_flags

        # every switch but --enable-hisparse, which SGLang refuses beside --enable-mixed-chunk (and on Qwen)
        flags = [f for f, takes in _sglang_flags()["launch_server"].items() if takes is False
                 and f != "--enable-hisparse"]  # fmt: skip
        conv = from_sglang("python -m sglang.launch_server --model-path Qwen/Qwen3-14B --tp 2 " + " ".join(flags), gpu="A10")
        assert not any("a launch option, not modelled" in line for line in conv.ignored)  # each has its own or its group's
        assert all(": " in line and line.split(": ", 1)[1].strip() for line in conv.ignored)
        assert len(conv.ignored) + len(conv.mapped) >= len(flags)


class TestSchedulingFlags:
    BASE = "python -m sglang.launch_server --model-path Qwen/Qwen3-14B --tp 2"

    def test_prefill_decode_interval_is_modelled(self):
        sc = scenario_from_dict(from_sglang(f"{self.BASE} --prefill-decode-interval 4 --prefill-decode-interval-min-bs 2",
                                            gpu="A10").scenario)  # fmt: skip
        assert (sc.scheduler.prefill_decode_interval, sc.scheduler.prefill_decode_interval_min_bs) == (4, 2)

    def test_the_prefill_delayer_and_its_settings_are_modelled(self):
        conv = from_sglang(f"{self.BASE} --enable-prefill-delayer --prefill-delayer-max-delay-passes 10 "
                           "--prefill-delayer-token-usage-low-watermark 0.5", gpu="A10")  # fmt: skip
        s = scenario_from_dict(conv.scenario).scheduler
        assert (s.enable_prefill_delayer, s.prefill_delayer_max_delay_passes) == (True, 10)
        assert s.prefill_delayer_token_usage_low_watermark == 0.5
        assert not conv.ignored

    def test_two_batch_overlap_and_its_threshold_are_modelled(self):
        conv = from_sglang(f"{V4}--dp 8 --enable-dp-attention --enable-two-batch-overlap "
                           "--tbo-token-distribution-threshold 0.3", gpu="B200")  # fmt: skip
        s = scenario_from_dict(conv.scenario).scheduler
        assert (s.enable_two_batch_overlap, s.tbo_token_distribution_threshold) == (True, 0.3)
        assert "--enable-two-batch-overlap -> scheduler.enable_two_batch_overlap: True" in conv.mapped
        assert "--tbo-token-distribution-threshold 0.3 -> scheduler.tbo_token_distribution_threshold: 0.3" in conv.mapped
        assert not any("batch-overlap" in line or "tbo" in line for line in conv.ignored)

    def test_two_batch_overlap_without_dp_attention_is_refused_naming_the_flag(self):
        with pytest.raises(InputError, match="^--enable-two-batch-overlap: scheduler.enable_two_batch_overlap: needs "
                                             "DP attention"):  # fmt: skip
            from_sglang(f"{V4}--enable-two-batch-overlap", gpu="B200").check()

    @pytest.mark.parametrize("flag", ["--enable-single-batch-overlap", "--prefill-delayer-queue-min-ratio 0.2",
                                      "--stream-interval 4"])  # fmt: skip
    def test_sbo_the_delayers_queue_trigger_and_the_stream_interval_are_ignored_with_why(self, flag):
        (line,) = from_sglang(f"{self.BASE} {flag}", gpu="A10").ignored
        assert line.startswith(flag + ": ") and len(line) > len(flag) + 40


class TestTokenization:
    """A client that sends text makes the server tokenize it (tokenizer_manager.py:1058-1066); token ids do not."""

    SERVING = "python -m sglang.bench_serving --dataset-name random-ids --num-prompts 4"

    def test_bench_serving_text_prompts_charge_the_measured_tokenizer_rate(self):
        from sim.interop.fromsglang import TOKENIZER_TOKENS_PER_S

        sc = from_sglang(M2_LAUNCH, [self.SERVING], gpu="A10").scenario
        assert sc["scheduler"]["tokenizer_tokens_per_s"] == TOKENIZER_TOKENS_PER_S["random-ids"]
        prose = from_sglang(M2_LAUNCH, [self.SERVING.replace("random-ids", "random")], gpu="A10").scenario
        assert prose["scheduler"]["tokenizer_tokens_per_s"] == TOKENIZER_TOKENS_PER_S["prose"]

    def test_token_ids_from_the_client_or_a_server_without_a_tokenizer_charge_nothing(self):
        ids = from_sglang(M2_LAUNCH, [self.SERVING + " --tokenize-prompt"], gpu="A10").scenario
        assert "tokenizer_tokens_per_s" not in ids.get("scheduler", {})
        skip = from_sglang(M2_LAUNCH + " --skip-tokenizer-init", [self.SERVING], gpu="A10").scenario
        assert "tokenizer_tokens_per_s" not in skip.get("scheduler", {})

    def test_bench_multiturn_sends_text_in_the_0_5_2_era_and_token_ids_now_unless_openai(self):
        old = from_sglang(M2_LAUNCH, [M2_BENCH], gpu="A10", sglang_version="0.5.2").scenario
        assert old["scheduler"]["tokenizer_tokens_per_s"] > 0
        assert "tokenizer_tokens_per_s" not in from_sglang(M2_LAUNCH, [M2_BENCH], gpu="A10").scenario.get("scheduler", {})
        chat = from_sglang(M2_LAUNCH, [M2_BENCH + " --api-format openai"], gpu="A10").scenario
        assert chat["scheduler"]["tokenizer_tokens_per_s"] > 0


def test_every_bench_serving_option_has_its_own_reason_when_ignored():
    bench = "python -m sglang.bench_serving --dataset-name random-ids --extra-request-body {} --profile --gsp-num-groups 4"
    ignored = from_sglang(M2_LAUNCH, [bench], gpu="A10").ignored
    assert [line.split(": ", 1)[1].split(" ")[0] for line in ignored] == ["extra", "profiling", "an"]


class TestBenchMultiturnOptions:
    def test_round_barrier_rounds_and_range_ratio_map_to_the_workload(self):
        bench = M2_BENCH + " --enable-round-barrier --min-rounds 2 --max-rounds 6 --range-ratio 0.5"
        w = scenario_from_dict(from_sglang(M2_LAUNCH, [bench], gpu="A10").scenario).workload
        assert w.round_barrier and w.round_barrier_pause_s == 10.0
        assert (w.min_rounds, w.max_rounds, w.range_ratio) == (2, 6, 0.5)

    def test_every_option_is_mapped_listed_or_refused(self):
        from sim.interop.fromsglang import BENCH_MULTITURN_FLAGS

        bench = M2_BENCH + (" --host h --port 1 --model-path m --dataset-path d --log-file f --tag t --lora-path l "
                            "--api-format sglang --duration 0 --min-session-rounds 5 --max-session-rounds 25 "
                            "--distribution uniform --sub-question-input-length 64 --enable-round-barrier "
                            "--min-rounds 1 --max-rounds 10 --range-ratio 1")  # fmt: skip
        conv = from_sglang(M2_LAUNCH, [bench], gpu="A10")
        named = {line.split()[0] for line in conv.mapped + conv.ignored}
        assert set(BENCH_MULTITURN_FLAGS) <= named
        with pytest.raises(InputError, match="long-run mode"):
            from_sglang(M2_LAUNCH, [M2_BENCH + " --duration 600"], gpu="A10")


AGENTX = ("aiperf profile --scenario inferencex-agentx-mvp --url http://localhost:8000 --endpoint /v1/chat/completions "
          "--endpoint-type chat --streaming --model M --tokenizer M --tokenizer-trust-remote-code --concurrency 16 "
          "--benchmark-duration 3600 --stats-interval 30 --random-seed 42 --failed-request-threshold 0.10 "
          "--trajectory-start-min-ratio 0.25 --trajectory-start-max-ratio 0.75 --warmup-requests-per-lane 10 "
          "--warmup-grace-period 1800 --trace-idle-gap-cap-seconds 300 --use-server-token-count --no-gpu-telemetry "
          "--num-dataset-entries 393 --slice-duration 1.0 --public-dataset semianalysis_cc_traces_weka_062126")  # fmt: skip
V4_LAUNCH = ("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Flash --tp 8 --enable-hierarchical-cache "
             "--hicache-ratio 1")  # fmt: skip


def test_an_aiperf_agentx_command_becomes_a_lane_replay():
    weka = str(ROOT / "data" / "agentic" / "weka_synthetic.jsonl")
    conv = from_sglang(V4_LAUNCH, [f"{AGENTX} --input-file {weka} --custom-dataset-type weka_trace "
                                   "--benchmark-grace-period inf"], gpu="h200")  # fmt: skip
    wl = conv.scenario["workload"]
    assert wl == {"kind": "lanes", "format": "weka", "lanes": 16, "benchmark_duration_s": 3600.0,
                  "trajectory_start_min_ratio": 0.25, "trajectory_start_max_ratio": 0.75,
                  "warmup_requests_per_lane": 10, "idle_gap_cap_s": 300.0, "num_dataset_entries": 393,
                  "path": weka, "benchmark_grace_period_s": None, "warmup_grace_period_s": 1800.0}  # fmt: skip
    assert conv.scenario["seed"] == 42
    assert "--url" in " ".join(conv.ignored)
    assert conv.notes == ["--trace-idle-gap-cap-seconds 300: aiperf 0.13.0's inferencex-agentx-mvp scenario rejects it (it "
                          "keeps each trajectory's timeline) unless --unsafe-override, while InferenceX's own aiperf "
                          "build takes it as a cap on a trajectory tree's idle time; replayed with the cap as given, on "
                          "the trajectory's timeline (sim.workload.idlegap)"]
    assert "--warmup-grace-period 1800 -> workload.warmup_grace_period_s: 1800.0" in conv.mapped
    assert any(m.startswith("--use-server-token-count -> always") for m in conv.mapped)
    scenario_from_dict(conv.scenario, source="test")


def test_the_published_agentx_command_without_a_local_copy_replays_sessions_like_the_corpus():
    """No --input-file: the generator with the 062126 corpus's statistics (393 sessions), said in one line."""
    conv = from_sglang(V4_LAUNCH, [AGENTX], gpu="h200")
    wl = conv.scenario["workload"]
    assert wl["kind"] == "agentic" and wl["sessions"] == 393 and "path" not in wl and "format" not in wl
    assert wl["lanes"] == 16 and wl["warmup_grace_period_s"] == 1800.0 and wl["idle_gap_cap_s"] == 300.0
    assert len(conv.notes) == 2 and "no --input-file" in conv.notes[1] and "393 sessions generated" in conv.notes[1]
    sc = scenario_from_dict(conv.scenario, source="test")
    assert sc.workload.max_context == 990_000
    short = from_sglang(V4_LAUNCH, [AGENTX.replace("062126", "062126_256k") + " --num-dataset-entries 100"], gpu="h200")
    assert short.scenario["workload"]["sessions"] == 100 and short.scenario["workload"]["max_context"] == 256_000


def test_the_agentx_scenario_fills_its_defaults_and_keeps_each_trajectorys_timeline():
    """aiperf 0.13.0, common/scenario/inferencex_agentx_mvp.py:7-39: duration 1800 s, start ratios 0.0-1.0 where
    unset, no per-trajectory idle cap; without --scenario, aiperf's own defaults (the schema's) stand."""
    weka = str(ROOT / "data" / "agentic" / "weka_synthetic.jsonl")
    bare = f"aiperf profile --concurrency 4 --input-file {weka}"
    sc = from_sglang(V4_LAUNCH, [f"{bare} --scenario inferencex-agentx-mvp --trajectory-start-max-ratio 0.5"],
                     gpu="h200").scenario  # fmt: skip
    wl = sc["workload"]
    assert (wl["benchmark_duration_s"], wl["trajectory_start_min_ratio"], wl["trajectory_start_max_ratio"]) == (1800, 0, 0.5)
    assert wl["idle_gap_cap_s"] is None and scenario_from_dict(sc, source="t").workload.idle_gap_cap_s is None
    plain = from_sglang(V4_LAUNCH, [bare], gpu="h200").scenario["workload"]
    assert "idle_gap_cap_s" not in plain and "benchmark_duration_s" not in plain


@pytest.mark.parametrize("bench, grace, why", [
    ("--warmup-grace-period 60", None, "--warmup-grace-period 60: not the agentic warm-up's without --scenario"),
    ("--agentic-warmup-grace-period 90 --warmup-grace-period 60", 90.0, "60: --agentic-warmup-grace-period wins"),
    ("--agentic-warmup-grace-period inf", None, None),
])  # fmt: skip
def test_the_warm_up_grace_period_is_aiperfs_agentic_barrier(bench, grace, why):
    """aiperf 0.13.0, config/flags/_converter_profiling.py:78-87: --warmup-grace-period feeds the agentic
    warm-up only under --scenario, and --agentic-warmup-grace-period wins."""
    weka = str(ROOT / "data" / "agentic" / "weka_synthetic.jsonl")
    conv = from_sglang(V4_LAUNCH, [f"aiperf profile --concurrency 2 --input-file {weka} {bench}"], gpu="h200")
    assert conv.scenario["workload"].get("warmup_grace_period_s") == grace
    assert why is None or any(why in line for line in conv.ignored)


@pytest.mark.parametrize("extra, message", [
    ("--public-dataset other_corpus", "aiperf --public-dataset other_corpus: no local copy (--input-file) and no "
                                      "published statistics"),
    ("--input-file x.json --request-rate 5", "aiperf: unknown flag --request-rate"),
    ("--input-file x.json --custom-dataset-type mooncake_trace", "aiperf --custom-dataset-type mooncake_trace: only"),
    ("--input-file x.json --concurrency lots", "--concurrency: expected a number, got 'lots'"),
])  # fmt: skip
def test_aiperf_options_it_cannot_model_are_one_line_errors(extra, message):
    with pytest.raises(InputError) as exc:
        from_sglang(V4_LAUNCH, [f"{AGENTX} {extra}"], gpu="h200")
    assert str(exc.value).startswith(message)


def test_the_pinnable_ceiling_flag_sets_the_field_the_check_holds_the_pools_to(capsys):
    launch = V4 + " --enable-hierarchical-cache --hicache-ratio 2"  # 1,584.1 GB pinned over 8 ranks
    assert main(["scenario", "from-sglang", "--gpu", "H200", "--launch", launch, "--pinnable-gb", "1600"]) == 0
    assert yaml.safe_load(capsys.readouterr().out)["hardware"]["pinnable_gb"] == 1600
    for gb, says in [("1500", "past the pinnable ceiling of 1,500.0 GB (hardware.pinnable_gb)"), ("0", "--pinnable-gb")]:
        assert main(["scenario", "from-sglang", "--gpu", "H200", "--launch", launch, "--pinnable-gb", gb]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and says in err[0]

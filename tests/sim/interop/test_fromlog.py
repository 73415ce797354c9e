"""``scenario from-sglang --server-log``: what the server printed at start replaces what the scenario derives,
each field named by its log line, and a derived pool more than a page off is reported."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sim.app.cli import main
from sim.base.errors import InputError
from sim.interop.fromsglang import from_sglang, to_yaml
from sim.model.hostpools import host_pool_bytes
from sim.scenario.capacity import capacity_sources, logged_device_pools
from sim.scenario.load import build_model_spec, scenario_from_dict
from sim.scenario.resolve import derived_device_pools, device_pools, resolve

LOGS = Path(__file__).parents[2] / "data" / "server_logs"
QWEN_LOG = str(LOGS / "qwen3-14b_a10_tp2_hicache.log")
V4_LOG = str(LOGS / "deepseek-v4-pro_h200_tp8_hicache.log")
QWEN = "python -m sglang.launch_server --model-path Qwen/Qwen3-14B --tp-size 2 --enable-hierarchical-cache --hicache-ratio 2"
V4 = ("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Pro --tp-size 8 "
      "--enable-hierarchical-cache --hicache-ratio 2")  # fmt: skip


@pytest.fixture(scope="module")
def qwen():
    return from_sglang(QWEN, gpu="A10", server_log=QWEN_LOG)


@pytest.fixture(scope="module")
def v4():
    return from_sglang(V4, gpu="H200", server_log=V4_LOG)


@pytest.mark.parametrize("path, value", [
    ("hardware.max_total_num_tokens", 41283), ("scheduler.chunked_prefill_size", 4096),
    ("scheduler.max_prefill_tokens", 16384), ("scheduler.max_running_requests", 2048),
    ("hicache.host_pages", 2 * 41283),  # the logged 82,567 tokens less SGLang's padding page
])  # fmt: skip
def test_a_single_pool_servers_logged_capacities_become_its_fields(qwen, path, value):
    section, key = path.split(".")
    assert qwen.scenario[section][key] == value
    assert qwen.origins[path].startswith(f"--server-log {QWEN_LOG}:")


@pytest.mark.parametrize("path, value", [
    ("hardware.max_total_num_tokens", 3276800), ("hardware.swa_max_total_num_tokens", 327680),
    ("hicache.host_pages", 25600), ("hicache.host_swa_pages", 2560), ("scheduler.chunked_prefill_size", 16384),
    ("scheduler.max_running_requests", 512),
])  # fmt: skip
def test_deepseek_v4s_logged_pools_become_its_fields(v4, path, value):
    section, key = path.split(".")
    assert v4.scenario[section][key] == value


def test_the_context_length_is_listed_as_read_and_not_modelled(qwen):
    assert any(line.endswith("context_len=40960: a length limit, not modelled") for line in qwen.ignored)


def test_the_engine_runs_on_the_logged_pools_exactly(v4, qwen):
    sc = v4.check()
    cfg = resolve(sc).engine
    assert (cfg.l1_pages, cfg.l2_pages, cfg.l2_swa_pages) == (3276800 // 256, 25600, 2560)
    assert cfg.swa_full_tokens_ratio == pytest.approx(0.1)
    sq = qwen.check()
    assert resolve(sq).engine.l1_pages == 41283


def test_the_summary_and_the_yaml_say_which_capacities_came_from_the_log(v4):
    sc = v4.check()
    src = capacity_sources(sc, build_model_spec(sc))
    assert src == {"l1": "hardware.max_total_num_tokens (logged)", "swa": "hardware.swa_max_total_num_tokens (logged)",
                   "l2": "hicache.host_pages", "l2_swa": "hicache.host_swa_pages"}  # fmt: skip
    text = to_yaml(v4)
    assert f"{V4_LOG}:11: max_total_num_tokens=3276800 -> hardware.max_total_num_tokens: 3276800" in text


def test_a_derived_pool_more_than_a_page_off_the_logged_one_is_reported(v4):
    assert v4.checks and v4.checks[0].startswith("Full pool: derived ")
    assert "the server logged 3,276,800" in v4.checks[0]


def test_a_derived_pool_within_a_page_of_the_logged_one_is_not_reported(tmp_path):
    derived = from_sglang(QWEN, gpu="A10").check()
    l1, _ = device_pools(derived, build_model_spec(derived))
    log = tmp_path / "server.log"
    log.write_text(f"[2026-01-01 00:00:00 TP0] max_total_num_tokens={l1 + 1}, chunked_prefill_size=4096, "
                   "max_prefill_tokens=16384, max_running_requests=2048, context_len=40960, available_gpu_mem=3.7 GB\n")
    assert from_sglang(QWEN, gpu="A10", server_log=str(log)).checks == []


def test_with_dp_attention_the_per_worker_figures_are_scaled_to_the_instance(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("[2026-01-01 00:00:00 DP0 TP0] max_total_num_tokens=819200, chunked_prefill_size=2048, "
                   "max_prefill_tokens=16384, max_running_requests=64, context_len=1048576, available_gpu_mem=9 GB\n")
    launch = ("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Flash --tp 8 --dp 8 "
              "--enable-dp-attention")  # fmt: skip
    sched = from_sglang(launch, gpu="B200", server_log=str(log)).scenario["scheduler"]
    assert (sched["max_running_requests"], sched["chunked_prefill_size"]) == (512, 16384)


def test_max_total_tokens_caps_the_derived_pool():
    capped = from_sglang(QWEN + " --max-total-tokens 10000", gpu="A10")
    assert capped.scenario["hardware"]["max_total_tokens"] == 10000
    sc = capped.check()
    assert device_pools(sc, build_model_spec(sc))[0] == 10000  # of the 19,580 derived
    assert logged_device_pools(sc, 9000, 0.1) == (9000, 0.1)  # a cap above the derived pool changes nothing


def test_a_logged_swa_pool_needs_the_full_pool_beside_it():
    doc = yaml.safe_load(to_yaml(from_sglang(V4, gpu="H200", server_log=V4_LOG)))
    del doc["hardware"]["max_total_num_tokens"]
    with pytest.raises(InputError, match="hardware.swa_max_total_num_tokens: needs hardware.max_total_num_tokens"):
        scenario_from_dict(doc)


def test_the_cli_writes_the_logged_fields_and_prints_the_checks(tmp_path, capsys):
    out = tmp_path / "v4.yaml"
    assert main(["scenario", "from-sglang", "--gpu", "H200", "--launch", V4, "--server-log", V4_LOG,
                 "--out", str(out)]) == 0  # fmt: skip
    assert yaml.safe_load(out.read_text())["hardware"]["max_total_num_tokens"] == 3276800
    assert "log vs derived: Full pool: derived" in capsys.readouterr().out


def test_a_log_that_is_not_a_servers_is_exit_2_naming_the_file(tmp_path, capsys):
    log = tmp_path / "bench.log"
    log.write_text("round 1: 20 requests\n")
    assert main(["scenario", "from-sglang", "--gpu", "A10", "--launch", QWEN, "--server-log", str(log)]) == 2
    assert "bench.log: no SGLang startup summary" in capsys.readouterr().err


def test_validate_prints_each_capacity_with_its_source(tmp_path):
    from sim.scenario.validate import validate_file

    out = tmp_path / "v4.yaml"
    assert main(["scenario", "from-sglang", "--gpu", "H200", "--launch", V4, "--server-log", V4_LOG,
                 "--out", str(out)]) == 0  # fmt: skip
    text = validate_file(out)
    for line in ("l1 12,800 pages <- hardware.max_total_num_tokens (logged)",
                 "swa 1,280 pages <- hardware.swa_max_total_num_tokens (logged)",
                 "l2 25,600 pages <- hicache.host_pages", "l2_swa 2,560 pages <- hicache.host_swa_pages"):  # fmt: skip
        assert line in text
    assert f"max_running_requests 512 <- scheduler.max_running_requests, from --server-log {V4_LOG}:" in text
    assert "origins:" in out.read_text()  # written by from-sglang, read back by validate


ROCM_LOG = str(LOGS / "deepseek-v4-pro_mi355x_tp8_rocm.log")
ROCM = ("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Pro --tp 8 --enable-hierarchical-cache "
        "--hicache-ratio 3 --enable-deepseek-v4-fp4-indexer")  # fmt: skip


def test_the_published_rocm_setup_starts_with_each_host_pool_at_its_own_count():
    env = "SGLANG_HACK_FLASHMLA_BACKEND=unified_kv_triton "
    assert from_sglang(env + ROCM, gpu="MI355X", host_mem_gb=2960).scenario["model"]["kv_layout"] == "unified"
    sc = from_sglang(env + ROCM, gpu="MI355X", host_mem_gb=2960, server_log=ROCM_LOG).check()
    model = build_model_spec(sc)  # c4, c4_indexer (+ scale), c128 at 83,853 pages: 181 GB a rank
    assert host_pool_bytes(model, 83_853, 0, 256) * 8 < 2960e9
    paged = build_model_spec(sc.model_copy(update={"model": sc.model.model_copy(update={"kv_layout": "paged"})}))
    assert 83_853 * paged.bytes_per_page * 8 > 2 * 2960e9  # every paged pool at the Full count: what was refused


def test_the_published_rocm_run_pins_inside_its_nodes_gtt_and_a_lower_ceiling_refuses_it():
    env = "SGLANG_HACK_FLASHMLA_BACKEND=unified_kv_triton "
    sc = from_sglang(env + ROCM, gpu="MI355X", host_mem_gb=2960, server_log=ROCM_LOG).check()
    assert sc.hardware.pin_ceiling.gb == 1480.0  # ROCm: half the node's DRAM; 1,449 GB pinned (8 ranks)
    conv = from_sglang(env + ROCM, gpu="MI355X", host_mem_gb=2960, server_log=ROCM_LOG, pinnable_gb=1400)
    assert conv.scenario["hardware"]["pinnable_gb"] == 1400
    with pytest.raises(InputError, match=r"hicache.host_pages: host pools pin 1,449.1 GB \(8 ranks\), past the "
                                         r"pinnable ceiling of 1,400.0 GB \(hardware.pinnable_gb\)"):  # fmt: skip
        conv.check()


def test_the_logs_unified_flag_sets_the_layout_and_its_host_pools_match_the_model():
    conv = from_sglang(ROCM, gpu="MI355X", host_mem_gb=2960, server_log=ROCM_LOG)
    assert conv.scenario["model"]["kv_layout"] == "unified"
    assert "swa_max_total_num_tokens" not in conv.scenario["hardware"]  # the ring's paged pool is vestigial
    assert conv.scenario["hicache"]["host_pages"] == 83_853
    assert not [c for c in conv.checks if c.startswith("host pool")]  # every logged pool's bytes are the model's


def _logged_available_gb(path: str) -> float:
    """The KV memory the server sized its pools from: the log's ``available_bytes`` (GiB, 2 decimals), in GB."""
    import re

    return float(re.search(r"available_bytes=([\d.]+) GB", Path(path).read_text()).group(1)) * (1 << 30) / 1e9


def test_the_unified_layouts_derived_pool_is_the_logged_one_from_the_servers_memory():
    sc = from_sglang(ROCM, gpu="MI355X", host_mem_gb=2960, server_log=ROCM_LOG).check()
    model = build_model_spec(sc)
    at_logged = sc.model_copy(update={"hardware": sc.hardware.model_copy(
        update={"kv_mem_gb": _logged_available_gb(ROCM_LOG)})})  # fmt: skip
    derived, _ = derived_device_pools(at_logged, model)
    page_bytes = model.bytes_per_page
    slack = 0.005 * (1 << 30) / page_bytes + 1  # the log prints GiB to 2 decimals: 2.5 pages, and a page
    assert abs(derived - 7_155_456 // 256) <= slack
    without_rings = int(at_logged.hardware.kv_mem_gb * 1e9) // page_bytes
    assert without_rings - derived > 12_000  # the rings and states: 27.4 GB a rank at 1,024 requests


def test_the_unified_residual_is_the_memory_rules_not_the_pools():
    """From the memory rule's KV memory (152.88 GB on MI355X; the fixture's is 87.8 GB) the derivation overshoots
    the logged pool, by exactly the pages the extra memory holds: the rings are not the gap, the memory is."""
    sc = from_sglang(ROCM, gpu="MI355X", host_mem_gb=2960, server_log=ROCM_LOG).check()
    model = build_model_spec(sc)
    logged_gb = _logged_available_gb(ROCM_LOG)
    at_logged = sc.model_copy(update={"hardware": sc.hardware.model_copy(update={"kv_mem_gb": logged_gb})})
    by_rule, by_log = derived_device_pools(sc, model)[0], derived_device_pools(at_logged, model)[0]
    assert abs((by_rule - by_log) - (sc.hardware.kv_mem_gb - logged_gb) * 1e9 / model.bytes_per_page) <= 1
    assert by_rule > 2 * 7_155_456 // 256  # still reported as a mismatch (from-sglang's check, the summary)


def test_rings_that_leave_no_full_pool_are_refused_naming_the_fields():
    launch = "SGLANG_HACK_FLASHMLA_BACKEND=unified_kv_triton " + ROCM + " --max-running-requests 1024"
    sc = from_sglang(launch, gpu="MI355X", host_mem_gb=6000,
                     pinnable_gb=5000).check()  # the derived L1's host pools need more DRAM and pinning
    small = sc.model_copy(update={"hardware": sc.hardware.model_copy(update={"kv_mem_gb": 20.0})})
    with pytest.raises(InputError, match=r"model.kv_layout: .*\(27.41 GB at 1,024 requests\) leave no Full pool in "
                                         r"hardware.kv_mem_gb 20; lower scheduler.max_running_requests"):
        derived_device_pools(small, build_model_spec(small))


def test_with_a_draft_the_ring_grows_with_the_tokens_and_the_states_do_not():
    """pool_configurator.py:1250-1257, 1638-1668 with EAGLE (4 draft tokens, one draft layer): the ring is 131 rows
    and inflated by (61 + 1) / 61 like a token's bytes, the state rings are 16 and 256 rows and are not."""
    launch = ("SGLANG_HACK_FLASHMLA_BACKEND=unified_kv_triton python -m sglang.launch_server --model-path "
              "deepseek-ai/DeepSeek-V4-Pro --tp 8 --max-running-requests 256 --speculative-algorithm EAGLE "
              "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4")  # fmt: skip
    sc = from_sglang(launch, gpu="MI355X", accept_length=2.0).check()
    model = build_model_spec(sc)
    slots, infl = 257, 62 / 61
    ring = slots * 131 * 1024 * 61
    states = (-(-(slots * 16 + 17) // 4) * 4 * 4 * 640 * 4 * 30
              + -(-(slots * 256 + 257) // 128) * 128 * 1024 * 4 * 31)  # fmt: skip
    kv = sc.hardware.kv_mem_gb * 1e9
    sglang_pages = (kv - ring * infl - states) / (model.bytes_per_page / 256 * infl) // 256
    assert abs(derived_device_pools(sc, model)[0] - sglang_pages) <= 1


def test_a_host_pool_of_other_bytes_than_the_models_is_reported():
    conv = from_sglang(ROCM, gpu="MI355X", host_mem_gb=4000, server_log=V4_LOG)  # a CUDA log beside fp4 indexer
    assert any(c.startswith("host pool c4_indexer: 253,440 B a page logged") for c in conv.checks)


@pytest.mark.parametrize("env, gpu, message", [
    ("SGLANG_HACK_FLASHMLA_BACKEND=unified_kv_triton", "H200", "unified is ROCm's layout"),
    ("SGLANG_HACK_FLASHMLA_BACKEND=unified_kv_triton SGLANG_DSV4_UNIFIED_KV_FP8=1", "MI300X", "needs a gfx95 GPU"),
])  # fmt: skip
def test_the_unified_layout_is_refused_where_sglang_would_not_run_it(env, gpu, message):
    with pytest.raises(InputError, match=message):
        from_sglang(f"{env} {ROCM}", gpu=gpu, host_mem_gb=4000).check()


def test_v41_on_the_unified_layout_is_refused_naming_the_field():
    doc = {"name": "v41", "model": {"name": "deepseek-v4.1-flash", "kv_layout": "unified"}, "hardware": {"gpu": "MI355X"}}
    with pytest.raises(InputError, match="model.kv_layout: .*DeepSeek-V4.1 does not support the unified KV layout"):
        scenario_from_dict(doc)


@pytest.mark.parametrize("launch, log, gpu, message", [
    (QWEN, V4_LOG, "H200", r"deepseek-v4-pro_h200_tp8_hicache.log:1: the log says DeepSeek V4's pools .* but "
                           r"--model-path is a Qwen3ForCausalLM"),
    (V4, QWEN_LOG, "H200", r"qwen3-14b_a10_tp2_hicache.log:1: the log says the model is Qwen3ForCausalLM, but "
                           r"--model-path is a DeepseekV4ForCausalLM"),
    (QWEN.replace("--tp-size 2", "--tp-size 1"), QWEN_LOG, "A10", r"\.log:6: the log says rank TP1, but --tp-size 1"),
    (QWEN.replace(" --enable-hierarchical-cache --hicache-ratio 2", ""), QWEN_LOG, "A10",
     r"\.log:4: the log says host pools allocated \(HiCache on\), but no --enable-hierarchical-cache"),
    (QWEN + " --page-size 64", QWEN_LOG, "A10", r"\.log:4: .*82,567 tokens \(not whole pages\), but --page-size 64"),
])  # fmt: skip
def test_a_log_from_another_server_than_the_launch_is_refused_naming_the_line_and_the_flag(launch, log, gpu, message):
    with pytest.raises(InputError, match=message):
        from_sglang(launch, gpu=gpu, server_log=log)


def test_the_logged_launch_must_be_the_launch(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("[2026-03-02 10:14:00] server_args={'model_path': 'Qwen/Qwen3-14B', 'tp_size': 4, 'dp_size': 1, "
                   "'page_size': 1, 'enable_hierarchical_cache': True}\n" + Path(QWEN_LOG).read_text())
    with pytest.raises(InputError, match=r"server.log:1: the log says server_args tp_size=4, but --tp-size 2"):
        from_sglang(QWEN, gpu="A10", server_log=str(log))


def test_a_rocm_pool_refused_without_its_log_says_it_is_derived_how_far_off_and_what_settles_it():
    env = "SGLANG_HACK_FLASHMLA_BACKEND=unified_kv_triton "
    with pytest.raises(InputError) as exc:
        from_sglang(env + ROCM, gpu="MI355X", host_mem_gb=2960).check()
    text = str(exc.value)
    assert "derived from hardware.kv_mem_gb" in text and "about 2x over" in text and "--server-log" in text


def _host_line(log: Path, old: str, new: str, tmp_path: Path) -> Path:
    path = tmp_path / "server.log"
    text = log.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    return path


@pytest.mark.parametrize("launch, old, new, message", [
    # 82,567 tokens x (128 + 128) x 4 heads a rank x 40 layers x 2 B = 6.76 GB (pool_host/mha.py:290-296)
    (QWEN, "6.76 GB", "7.76 GB", r"host KV pool: 7.76 GB logged for 82,567 tokens, but Qwen3-14B .* takes 81,920 B "
                                 r"a token .*, 6.76 GB"),
    (QWEN + " --kv-cache-dtype fp8_e4m3", "6.76 GB", "6.76 GB", r"takes 40,960 B a token .*, 3.38 GB"),
    (QWEN, "6.76 GB host memory.", "6.76 GB host memory, packed MTP KV layers: target_layers=40, draft_layers=1, "
     "total_layers=41.", r"6.76 GB logged for 82,567 tokens, .* takes 83,968 B a token .*, 6.93 GB"),
])  # fmt: skip
def test_a_single_host_pools_gb_against_its_tokens_is_checked_by_the_models_bytes(tmp_path, capsys, launch, old,
                                                                                   new, message):  # fmt: skip
    """One line naming the log's line, exit 2, nothing written."""
    log = _host_line(Path(QWEN_LOG), old, new, tmp_path)
    out = tmp_path / "qwen.yaml"
    assert main(["scenario", "from-sglang", "--gpu", "A10", "--launch", launch, "--server-log", str(log),
                 "--out", str(out)]) == 2  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith(f"hicache-sim: error: {log}:4: ")
    assert __import__("re").search(message, err), err
    assert not out.exists()


def test_a_single_host_pool_of_the_models_bytes_is_taken_with_or_without_mtp_layers(tmp_path):
    mtp = ("6.76 GB host memory.", "6.93 GB host memory, packed MTP KV layers: target_layers=40, draft_layers=1, "
           "total_layers=41.")  # 82,567 x 81,920 x 41 / 40 B  # fmt: skip
    for log in (QWEN_LOG, _host_line(Path(QWEN_LOG), *mtp, tmp_path)):
        assert from_sglang(QWEN, gpu="A10", server_log=str(log)).scenario["hicache"]["host_pages"] == 2 * 41283


DSA_LOG = """[2026-03-02 10:14:12 TP0] Allocating kv hierarchical KV host pool: 640,064 tokens, {gb} GB host memory.
[2026-03-02 10:14:15 TP0] max_total_num_tokens=320000, chunked_prefill_size=8192, max_prefill_tokens=16384, \
max_running_requests=256, context_len=163840, available_gpu_mem=10.00 GB
"""


def test_a_dsa_models_host_kv_pool_holds_the_latent_alone(tmp_path):
    """DeepSeek V3.2's host KV pool is the MLA latent, (512 + 64) x 2 B x 61 layers a token (pool_host/mla.py:195-197):
    its indexer's keys have a host pool of their own, though the simulator's device pool holds both."""
    launch = "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3.2 --tp-size 8 --enable-hierarchical-cache"
    log = tmp_path / "server.log"
    log.write_text(DSA_LOG.format(gb=f"{640_064 * 576 * 2 * 61 / 1e9:.2f}"))
    assert from_sglang(launch, gpu="H200", server_log=str(log)).scenario["hicache"]["host_pages"] == 10_000
    log.write_text(DSA_LOG.format(gb=f"{640_064 * (576 * 2 + 132) * 61 / 1e9:.2f}"))  # the indexer's keys too
    with pytest.raises(InputError, match=r":1: host KV pool: 50.13 GB logged .* 70,272 B a token"):
        from_sglang(launch, gpu="H200", server_log=str(log))

"""The resolved server: every value the engine runs with comes from one resolution, with its source."""

from __future__ import annotations

import pytest

from sim.base.errors import InputError
from sim.scenario.load import build_model_spec, scenario_from_dict
from sim.scenario.resolve import (
    device_pools,
    dp_mlp_share,
    rank_chunk,
    rank_max_running,
    resolve,
    validated_server,
)


def v4(hardware: dict | None = None, hicache: dict | None = None, scheduler: dict | None = None):
    return scenario_from_dict({"name": "r", "model": "deepseek-v4-flash",
                               "hardware": {"kv_mem_gb": 40, **(hardware or {})},
                               "hicache": {"page_size": 256, "enabled": True, "hicache_ratio": 2, **(hicache or {})},
                               "scheduler": scheduler or {}})  # fmt: skip


def test_the_engine_runs_with_the_resolved_pools_and_budgets():
    server = resolve(v4(hardware={"tp_size": 2, "dp_size": 2, "enable_dp_attention": True}, scheduler={"max_running_requests": 64}))
    eng = server.engine
    assert (eng.l1_pages, eng.swa_full_tokens_ratio, eng.l2_pages, eng.l2_swa_pages) == (
        server.l1_pages, server.swa_ratio, server.l2_pages, server.l2_swa_pages)
    assert eng.max_running_requests == server.max_running == 32  # split over the two ranks
    assert eng.dp_mlp_share == server.dp_mlp_share > 0
    assert server.sources["max_running_requests"] == "scheduler.max_running_requests / hardware.attn_dp_size"


def test_a_logged_pool_replaces_the_derivation_and_says_so():
    sc = v4(hardware={"max_total_num_tokens": 256 * 1000})
    server = resolve(sc)
    assert server.l1_pages == 1000 != device_pools(v4(), build_model_spec(v4()))[0]
    assert server.sources["l1"] == "hardware.max_total_num_tokens (logged)"
    assert server.mismatches and server.mismatches[0].startswith("Full pool: derived")
    assert set(server.capacity_sources) == {"l1", "swa", "l2", "l2_swa"}


def test_budgets_without_dp_attention_are_the_scheduler_s_own():
    sc = v4()
    server = resolve(sc)
    assert (server.max_running, server.chunk) == (rank_max_running(sc), rank_chunk(sc))
    assert server.dp_mlp_share == dp_mlp_share(sc) == 0.0
    assert server.sources["dp_mlp_share"] == "none (no DP attention)"


def test_cap_mode_without_room_for_a_full_pool_is_refused_and_validate_lists_no_pools():
    sc = v4(hardware={"kv_mem_gb": 0.5}, hicache={"swa_full_tokens_ratio": "cap"},
            scheduler={"max_running_requests": 4096})  # fmt: skip
    with pytest.raises(InputError, match="swa_full_tokens_ratio"):
        resolve(sc)
    assert validated_server(sc) is None  # validate lists no pools: check_startable reports the refusal
    assert validated_server(v4()).lines(v4())[0].lstrip().startswith("pools")


def with_config(**model):
    return scenario_from_dict({"name": "r", "model": {"name": "DeepSeek-V4-Flash", "config": "deepseek-v4-flash", **model},
                               "hardware": {"kv_mem_gb": 120, "gpu": "B200", "tp_size": 8}})  # fmt: skip


def test_auto_precisions_say_what_they_chose_and_a_given_one_names_its_field():
    auto, fp4 = resolve(with_config()), resolve(with_config(expert_dtype="fp4"))
    assert auto.precisions["experts"] == "fp8"  # the bundled config is the FP8 checkpoint's
    assert auto.sources["experts_dtype"].startswith("auto: model.config")
    assert (fp4.precisions["experts"], fp4.sources["experts_dtype"]) == ("fp4", "model.expert_dtype")
    assert auto.precisions["kv"] == "fp8 nope + bf16 rope"


def test_the_fp4_indexer_on_nvidia_says_its_pools_are_sized_as_fp8():
    plain, fp4 = resolve(with_config()), resolve(with_config(fp4_indexer=True))
    assert plain.precisions["indexer"] == "fp8"
    assert fp4.precisions["indexer"] == "fp4" and "pools sized as fp8" in fp4.sources["indexer_dtype"]
    assert fp4.l1_pages == plain.l1_pages  # NVIDIA sizes the fp4 indexer at fp8's bytes


def test_a_config_model_s_kv_follows_kv_dtype_else_its_torch_dtype():
    def qwen(**model):
        return resolve(scenario_from_dict({"name": "q", "model": {"name": "qwen", "config": "qwen3-14b", **model},
                                           "hardware": {"kv_mem_gb": 20}}))  # fmt: skip

    auto, fp8 = qwen(), qwen(kv_dtype="fp8_e4m3")
    assert (auto.precisions["kv"], auto.sources["kv_dtype"]) == ("bfloat16", "auto: model.config's torch_dtype")
    assert (fp8.precisions["kv"], fp8.sources["kv_dtype"]) == ("fp8_e4m3", "model.kv_dtype")
    assert fp8.l1_pages == 2 * auto.l1_pages or abs(fp8.l1_pages - 2 * auto.l1_pages) <= 1
    assert "experts" not in auto.precisions  # a dense model has none


def test_the_step_backend_names_the_gpu_it_prices():
    roof = resolve(v4())
    assert roof.step_backend == "roofline, H200 at 989 TFLOP/s and 4.8 TB/s, spec-estimated efficiencies"
    assert roof.sources["step_backend"] == "auto: no hardware.gpu, so the scenario's own GPU figures"
    aic = resolve(scenario_from_dict({"name": "r", "model": "Qwen/Qwen3-30B-A3B", "hardware": {"gpu": "H800", "tp_size": 2},
                                      "compute": {"backend": "aiconfigurator"}}))  # fmt: skip
    assert aic.step_backend.startswith("aiconfigurator (measured SGLang kernels), H800: H100 kernel efficiencies")
    assert "collectives x2.25" in aic.step_backend and aic.sources["step_backend"] == "compute.backend, hardware.gpu"


def test_settings_and_validate_lines_carry_every_resolved_value_with_its_source():
    sc = v4(hardware={"tp_size": 2, "dp_size": 2, "enable_dp_attention": True})
    server = resolve(sc)
    settings = server.settings()
    assert settings["values"]["max_running_requests"] == server.max_running
    assert set(settings["values"]) == set(settings["sources"])
    assert {"kv_dtype", "indexer_dtype", "step_backend", "dp_mlp_share"} <= set(settings["sources"])
    lines = server.lines(sc)
    assert any(line.lstrip().startswith("budgets   max_running_requests") for line in lines)
    assert lines[-1].lstrip().startswith("step time roofline")
    assert not any("pages" in line for line in server.lines(v4().model_copy(update={"cluster": sc.cluster.model_copy(
        update={"role": "decode"})})))  # fmt: skip


def test_a_recorded_origin_is_named_after_its_field():
    sc = scenario_from_dict({"name": "o", "model": "deepseek-v4-flash", "hardware": {"kv_mem_gb": 40},
                             "scheduler": {"max_running_requests": 64},
                             "origins": {"scheduler.max_running_requests": "--max-running-requests 64"}})  # fmt: skip
    server = resolve(sc)
    assert server.sources["max_running_requests"] == "scheduler.max_running_requests, from --max-running-requests 64"
    assert server.sources["chunked_prefill_size"] == "scheduler.chunked_prefill_size"
    assert server.sources["l1"] == "hardware.kv_mem_gb (derived)"  # no origin recorded: as before


def test_a_chunk_sglang_s_rule_filled_names_the_rule():
    server = resolve(scenario_from_dict({"name": "g", "model": "deepseek-v4-flash", "hardware": {"gpu": "H200"}}))
    assert server.sources["chunked_prefill_size"].startswith("scheduler.chunked_prefill_size (SGLang 0.5.23's default")


@pytest.mark.parametrize("key", ["nosuch.field", "origins.x", "scheduler.max running"])
def test_origins_hold_field_paths_only(key):
    with pytest.raises(InputError, match=f"origins.{key}: not a scenario field path"):
        scenario_from_dict({"name": "o", "origins": {key: "--flag"}})


def test_the_schema_s_host_memory_check_sizes_the_pools_the_run_gets():
    # NVIDIA sizes the fp4 indexer's pools as fp8 (fewer Full pages than fp4's bytes would give): 88,192 host
    # pages and 152.4 GB of host pools, not the 160 GB a sizing at fp4's bytes gives; 10 GiB is SGLang's reserve.
    def fp4(host_mem_gb: float):
        return scenario_from_dict({"name": "f", "model": {"name": "deepseek-v4-flash", "fp4_indexer": True},
                                   "hardware": {"gpu": "B200", "kv_mem_gb": 40, "host_mem_gb": host_mem_gb},
                                   "hicache": {"enabled": True, "hicache_ratio": 4}})  # fmt: skip

    assert resolve(fp4(167)).l2_pages == 88_192
    with pytest.raises(InputError, match=r"hicache.hicache_ratio: host pools \(152.4 GB over 1 ranks\) exceed"):
        fp4(160)

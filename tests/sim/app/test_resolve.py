"""The resolved server: every value the engine runs with comes from one resolution, with its source."""

from __future__ import annotations

import pytest

from sim.app.resolve import device_pools, dp_mlp_share, pool_lines, rank_chunk, rank_max_running, resolve
from sim.app.scenario import build_model_spec, scenario_from_dict
from sim.base.errors import InputError


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
    assert pool_lines(sc) == []
    assert pool_lines(v4())[0].lstrip().startswith("pools")

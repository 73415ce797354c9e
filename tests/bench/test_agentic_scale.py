"""bench/agentic_scale.py feeds the AgentX command lines through ``scenario from-sglang`` unedited, and each rule
toggle changes only its own flag."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from sim.interop.fromsglang import from_sglang
from sim.scenario.load import scenario_from_dict

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("agentic_scale", ROOT / "bench" / "agentic_scale.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["agentic_scale"] = module
    spec.loader.exec_module(module)
    return module


def converted(bench, **change):
    case = {"lanes": 192, "sessions": 393, "duration": 3600.0, "seed": 2, "hicache": True,
            "router": "consistent_hashing", "delayer": False, "warmup_grace": 1800.0, **change}  # fmt: skip
    launch, benches = bench.commands(**case)
    conv = from_sglang(launch, benches, gpu="b300")
    return scenario_from_dict(conv.scenario, source="bench"), conv


def test_the_published_commands_convert_to_the_agentx_run_with_no_hand_edit(bench):
    sc, conv = converted(bench)
    assert (sc.workload.kind, sc.workload.lanes, sc.workload.sessions) == ("agentic", 192, 393)
    assert (sc.seed, sc.cluster.router, sc.hicache.enabled) == (2, "consistent_hashing", True)
    assert sc.hardware.dp_size == 8 and sc.hardware.enable_dp_attention
    assert not sc.scheduler.enable_prefill_delayer and sc.workload.warmup_grace_period_s == 1800.0
    assert sc.workload.warmup_requests_per_lane == 10  # InferenceX's published warm-up (benchmark_lib.sh)
    assert any("cluster.router: consistent_hashing" in m for m in conv.mapped)


@pytest.mark.parametrize(("change", "read"), [
    ({"hicache": False}, lambda sc: sc.hicache.enabled is False),
    ({"delayer": True}, lambda sc: sc.scheduler.enable_prefill_delayer is True),
    ({"router": "round_robin"}, lambda sc: sc.cluster.router == "round_robin"),
    ({"warmup_grace": 3600.0}, lambda sc: sc.workload.warmup_grace_period_s == 3600.0),
    ({"warmup_grace": None}, lambda sc: sc.workload.warmup_grace_period_s is None),
    ({"warmup": 1}, lambda sc: sc.workload.warmup_requests_per_lane == 1),
])  # fmt: skip
def test_each_toggle_changes_its_own_field_only(bench, change, read):
    base, _ = converted(bench)
    sc, _ = converted(bench, **change)
    assert read(sc) and not read(base)
    assert sc.workload.lanes == base.workload.lanes and sc.seed == base.seed


def test_one_small_case_reports_its_time_memory_and_figures(bench):
    r = bench.one({"lanes": 8, "sessions": 8, "duration": 60.0, "seed": 1, "hicache": True,
                   "router": "consistent_hashing", "delayer": False, "warmup_grace": None, "warmup": 1})  # fmt: skip
    assert r["measured"] > 0 and r["sent"] >= r["measured"] and r["peak_rss_mb"] > 0
    assert 0 < r["ttft_p50_s"] <= r["ttft_p99_s"] and 0 <= r["gpu_hit"] <= 1 and r["warmup_failed"] == 0


def test_inferencex_published_launch_converts_with_its_capacities_and_rules(bench):
    sc, conv = converted(bench, lanes=128, recipe=True, delayer=True)
    assert sc.scheduler.enable_prefill_delayer and sc.scheduler.max_running_requests == 256
    assert (sc.scheduler.chunked_prefill_size, sc.hicache.swa_full_tokens_ratio) == (65536, 0.075)
    assert sc.hardware.mem_fraction_static == 0.85
    assert (sc.hicache.enabled, sc.hicache.write_policy, sc.hicache.hicache_ratio) == (True, "write_back", 2)
    off, _ = converted(bench, lanes=128, recipe=True, delayer=True, hicache=False)
    assert not off.hicache.enabled and off.scheduler.enable_prefill_delayer

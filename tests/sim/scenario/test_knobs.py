"""A knob the scenario leaves without effect is named, with why, instead of identical rows in silence."""

from __future__ import annotations

import pytest

from sim.app.cli import main
from sim.scenario.knobs import inert_notes, why_inert
from sim.scenario.load import load_scenario

QUICK = "scenarios/quickstart.yaml"  # V4-Flash, L1 + L2, no L3, no HiSparse
L3 = "scenarios/dsv4_flash_l3_two_instances.yaml"
MLA = "scenarios/mla_baseline_multiturn.yaml"


def sc(path, *sets):
    return load_scenario(path, list(sets))


@pytest.mark.parametrize("key, path, sets, says", [
    ("hicache.prefetch_threshold", QUICK, [], "L3 is off"),
    ("l3.read_gbps", QUICK, [], "L3 is off"),
    ("hicache.load_back_threshold", MLA, ["hicache.enabled=false"], "no L2"),
    ("hicache.write_policy", QUICK, ["hicache.enabled=false"], "no L2"),
    ("hicache.load_back_threshold", QUICK, [], "window pools always load"),
    ("hisparse.top_k", QUICK, [], "HiSparse is off"),
    ("scheduler.tbo_token_distribution_threshold", QUICK, [], "two-batch overlap is off"),
    ("scheduler.prefill_delayer_max_delay_passes", QUICK, [], "the prefill delayer is off"),
    ("scheduler.prefill_delayer_token_usage_low_watermark", QUICK, [], "the prefill delayer is off"),
    ("hardware.pinnable_gb", QUICK, ["hicache.enabled=false"], "no L2"),
])
def test_a_knob_that_cannot_act_says_why(key, path, sets, says):
    assert says in why_inert(key, sc(path, *sets))


@pytest.mark.parametrize("key, path", [
    ("hicache.prefetch_threshold", L3),
    ("hicache.load_back_threshold", MLA),  # a single-pool model skips small loads
    ("hicache.page_size", QUICK),
    ("hicache.swa_full_tokens_ratio", QUICK),  # V4's device SWA pool, L2 or not
    ("hisparse.enabled", QUICK),
    ("workload.num_clients", QUICK),
    ("hardware.pinnable_gb", QUICK),
])
def test_a_knob_that_acts_gets_no_note(key, path):
    assert why_inert(key, sc(path)) is None


@pytest.mark.parametrize("key, switch", [
    ("scheduler.prefill_delayer_max_delay_passes", "scheduler.enable_prefill_delayer=true"),
    ("scheduler.tbo_token_distribution_threshold", "scheduler.enable_two_batch_overlap=true"),
])  # fmt: skip
def test_a_knob_whose_switch_is_on_gets_no_note(key, switch):
    assert why_inert(key, sc("scenarios/dsv4_flash_dp_mtp.yaml", switch)) is None  # DP attention: TBO may run


def test_a_grid_says_at_how_many_points_the_knob_is_idle():
    points = [sc(QUICK, f"hicache.enabled={on}") for on in ("true", "false")]
    (note,) = inert_notes(["hicache.write_policy", "workload.num_clients"], points, "--grid")
    assert note.startswith("--grid hicache.write_policy cannot act at 1 of 2 points: HiCache is off")


def test_sweep_and_run_print_the_note(tmp_path, capsys):
    assert main(["sweep", QUICK, "--grid", "hicache.prefetch_threshold=256,1024", "--out", str(tmp_path / "s"),
                 "--no-progress"]) == 0
    assert "--grid hicache.prefetch_threshold cannot act at any point: L3 is off" in capsys.readouterr().err
    assert main(["run", QUICK, "--set", "hisparse.policy=clock", "--out", str(tmp_path / "r"), "--no-progress"]) == 0
    assert "--set hisparse.policy cannot act here: HiSparse is off" in capsys.readouterr().err

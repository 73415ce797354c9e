"""Every run reports its page ages per tier (``sim.app.tierages``): the ages account for exactly the tokens the
caches hit and evict, the verdict names the tier too small for its reuse window, and ``plot ages`` draws them."""

import json

import pytest

from sim.app.cli import main
from sim.app.plot import plot
from sim.app.run import format_summary, run_scenario, write_outputs
from sim.base.errors import InputError
from sim.scenario.load import scenario_from_dict

WORKLOAD = {"kind": "multi_turn", "num_clients": 24, "max_parallel": 6, "request_length": 512, "output_length": 16,
            "num_rounds": 3, "request_rate": None}  # fmt: skip
SINGLE_POOL = {"name": "generic", "generic_bytes_per_token": 35136}


def scenario(model="deepseek-v4-flash", kv_mem_gb=0.2, **sections):
    """24 clients x 3 rounds x 528 tokens; 0.2 GB of V4 L1 holds about a third of it, L1 + L2 most."""
    base = {"name": "t", "seed": 1, "model": model, "hardware": {"kv_mem_gb": kv_mem_gb},
            "hicache": {"enabled": True, "hicache_ratio": 2.0}, "workload": WORKLOAD, **sections}  # fmt: skip
    return scenario_from_dict(base, source="test")


def tier_tokens(metrics: dict, event: str, tier: str) -> int:
    return sum(metrics["kv_age_tokens_total"][event].get(tier, {}).values())


@pytest.mark.parametrize("model", ["deepseek-v4-flash", SINGLE_POOL], ids=["v4", "single-pool"])
def test_the_ages_account_for_every_token_the_caches_hit_and_evict(model):
    s = run_scenario(scenario(model, kv_mem_gb=0.2 if model == "deepseek-v4-flash" else 0.3)).summary
    m, tok = s["metrics"], s["tokens"]
    assert tier_tokens(m, "evict", "device") == m["evicted_tokens_total"] > 0
    # every admission's hit, re-admissions after a retraction included
    hits = tier_tokens(m, "hit", "device") + tier_tokens(m, "hit", "host")
    assert hits == sum(m["cached_tokens_total"].values()) + tok["reprocessed_cached_tokens"] > 0
    assert m["kv_age_seconds"]["evict"]["device"]["count"] == m["evicted_tokens_total"]
    assert set(s["tier_ages"]["tiers"]) == {"device", "host"}


def test_a_small_l1_is_named_too_small_for_the_reuse_window_and_a_large_one_is_not():
    small = run_scenario(scenario(kv_mem_gb=0.2)).summary["tier_ages"]
    assert small["verdict"][0].startswith("L1 is too small for the reuse window")
    row = small["tiers"]["device"]
    assert 0 < row["age_at_evict_p50_s"] < small["tiers"]["host"]["age_at_hit_p50_s"]
    large = run_scenario(scenario(kv_mem_gb=4)).summary["tier_ages"]
    assert large["verdict"] == ["no tier evicted: each holds its reuse window"]
    assert large["tiers"]["device"]["evicted_tokens"] == 0 and large["tiers"]["device"]["hit_tokens"] > 0


def test_a_run_with_l3_records_l3_hits_once_not_again_when_l2_serves_what_l3_brought():
    sc = scenario(l3={"enabled": True}, hicache={"enabled": True, "hicache_ratio": 1.0, "prefetch_threshold": 64})
    s = run_scenario(sc).summary
    m = s["metrics"]
    landed = m["prefetched_tokens_total"]
    assert landed > 0 and tier_tokens(m, "hit", "storage") == landed
    host_hits = tier_tokens(m, "hit", "host")
    assert host_hits + landed >= m["cached_tokens_total"]["host"] + m["cached_tokens_total"]["storage"]


def test_the_summary_prints_the_ages_and_the_verdict():
    text = format_summary(run_scenario(scenario(kv_mem_gb=0.2)))
    assert "age L1 hit / evict p50" in text and "age L2 hit / evict p50" in text
    assert "tier sizing" in text and "L1 is too small for the reuse window" in text


class TestPlot:
    def test_plot_ages_draws_one_panel_per_tier_from_a_run_folder(self, tmp_path):
        write_outputs(run_scenario(scenario(kv_mem_gb=0.2)), tmp_path / "run")
        out = plot("ages", tmp_path / "run", tmp_path / "ages.png")
        assert out.read_bytes().startswith(b"\x89PNG")
        from sim.app.tierages import plot_ages, read_ages

        fig = plot_ages(read_ages(tmp_path / "run" / "summary.json"))
        axes = fig.get_axes()
        assert [a.get_title() for a in axes] == ["L1 (device)", "L2 (host)"]
        for ax in axes:
            assert ax.get_xscale() == "log" and "(s, log scale)" in ax.get_xlabel()
            legend = ax.get_legend()
            # the legend sits below the axes, outside the data
            assert legend is not None and legend.get_bbox_to_anchor().y1 < ax.get_window_extent().y0

    def test_a_summary_without_ages_is_refused_in_one_line(self, tmp_path, capsys):
        (tmp_path / "summary.json").write_text(json.dumps({"metrics": {}}))
        with pytest.raises(InputError, match="no page ages"):
            plot("ages", tmp_path, tmp_path / "a.png")
        assert main(["plot", "ages", str(tmp_path), "--out", str(tmp_path / "a.png")]) == 2
        assert not (tmp_path / "a.png").exists()


def test_a_tier_with_hits_and_no_evictions_says_so_in_its_legend():
    from sim.app.tierages import plot_ages
    from sim.cache.ages import TierAges

    ages = TierAges()
    ages.hit_at("device", 0.0, 10, 2.0)
    ages.evicted("device", -0.0, 10, 1)
    ages.hit_at("storage", 0.0, 10, 20.0)
    axes = plot_ages(ages).get_axes()
    assert [a.get_title() for a in axes] == ["L1 (device)", "L3 (storage)"]
    labels = [t.get_text() for t in axes[1].get_legend().get_texts()]
    assert "no evictions in this tier" in labels and not any("no " in t for t in (
        x.get_text() for x in axes[0].get_legend().get_texts()))

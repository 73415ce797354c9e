"""The plan's L3 marginal value (``sim.app.plan.l3value``): per write policy, the hits L3 adds, paired per
seed, against the bytes SGLang's write-at-admission makes the server write to storage."""

import json
from pathlib import Path

import pytest

from sim.app.cli import main
from sim.app.plan.l3value import markdown, section

QUICKSTART = str(Path(__file__).resolve().parents[4] / "scenarios" / "quickstart.yaml")


def row(hit_total, *, written=0, storage=0.0, input_tokens=1000):
    return {"hit_total": hit_total, "hit_storage": storage, "input_tokens": input_tokens,
            "link_bytes_l3_write": written, "storage_written_tokens": written // 100, "ttft_p90_s": 1.0}  # fmt: skip


def test_the_gain_is_paired_per_seed_and_priced_per_gb_written():
    runs = {("l3value", "write_through", False, 1): row(0.30), ("l3value", "write_through", True, 1): row(0.40, written=2e9),
            ("l3value", "write_through", False, 2): row(0.20), ("l3value", "write_through", True, 2): row(0.24, written=2e9)}  # fmt: skip
    (r,) = section([1, 2], ["write_through"], runs.get)["rows"]
    assert r["seeds_ok"] == 2
    assert r["hit_gain"]["mean"] == pytest.approx(0.07) and r["hit_gain"]["lo"] < 0.07 < r["hit_gain"]["hi"]
    assert r["hit_tokens_gained"] == pytest.approx(70)  # (100 + 40) / 2 tokens of 1000 input
    assert r["hit_tokens_per_gb_written"] == pytest.approx(35)


def test_a_policy_without_both_runs_of_a_seed_has_no_figures_and_a_loss_keeps_its_sign():
    runs = {("l3value", "write_back", True, 1): row(0.3, written=1e9),
            ("l3value", "write_through", False, 1): row(0.5), ("l3value", "write_through", True, 1): row(0.4, written=1e9)}  # fmt: skip
    rows = section([1], ["write_back", "write_through"], runs.get)["rows"]
    assert rows[0] == {"policy": "write_back", "seeds_ok": 0}
    assert rows[1]["hit_gain"]["mean"] == pytest.approx(-0.1)
    parts = markdown({"rows": rows})
    assert parts["rows"][0][:2] == ["write_back", "-"] and len(parts["rows"][0]) == len(parts["heads"])
    assert parts["rows"][1][4] == "-10.0%"  # one seed: no interval


def test_a_plan_reports_l3s_marginal_value_for_every_write_policy(tmp_path):
    out = tmp_path / "plan"
    assert main(["plan", "--scenario", QUICKSTART, "--set", "workload.num_clients=16",
                 "--ratios", "1", "--seeds", "1", "--workers", "1", "--out", str(out), "--no-progress"]) == 0  # fmt: skip
    d = json.loads((out / "plan.json").read_text())
    rows = d["l3"]["marginal"]["rows"]
    assert [r["policy"] for r in rows] == ["write_through", "write_through_selective", "write_back"]
    for r in rows:
        assert r["seeds_ok"] == 1 and r["storage_bytes_written"] > 0 and r["storage_tokens_written"] > 0
        assert r["hit_total_on"] - r["hit_total_off"] == pytest.approx(r["hit_gain"]["mean"])
    assert "### L3's marginal value, per write policy" in (out / "report.md").read_text()
    assert (out / "l3_marginal.csv").read_text().startswith("policy,")

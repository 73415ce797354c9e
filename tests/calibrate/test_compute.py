"""calibrate compute: the fit recovers the parameters the simulator itself ran with, and reports its error."""

from __future__ import annotations

import json

import numpy as np
import pytest

from calibrate.compute import Point, fit_compute, read_points
from sim.app.cli import main
from sim.app.run import run_scenario
from sim.base.errors import InputError
from sim.model.compute import Roofline
from sim.model.costs import load_cost_table
from sim.scenario.load import scenario_from_dict

TRUE = {"mfu": 0.35, "mbu": 0.75, "step_overhead_ms": 4.0, "attn_flops_scale": 1.3}
BASE = {"name": "cal", "seed": 1, "model": {"name": "qwen", "config": "qwen3-14b"},
        "hardware": {"gpu": "H100", "tp_size": 1}, "hicache": {"page_size": 64}}  # fmt: skip


def bench_serving_results(tmp_path, lengths=(1024, 4096, 16384, 30000), out_len=64):
    """Run the simulator at concurrency 1 with TRUE compute, and write what bench_serving --output-details writes."""
    steps = [{"num_prompts": 2, "random_input_len": n, "random_output_len": out_len, "random_range_ratio": 1.0,
              "max_concurrency": 1, "flush_cache": True, "seed": i} for i, n in enumerate(lengths)]  # fmt: skip
    sc = scenario_from_dict({**BASE, "compute": TRUE, "workload": {"kind": "bench_serving", "steps": steps}})
    df = run_scenario(sc).requests
    path = tmp_path / "results.jsonl"
    with path.open("w") as fh:
        for _, g in df.groupby("round"):
            tpot = ((g["e2e_s"] - g["ttft_s"]) / (g["output_tokens"] - 1)).tolist()
            fh.write(json.dumps({
                "max_concurrency": 1, "input_lens": g["input_tokens"].tolist(), "output_lens": g["output_tokens"].tolist(),
                "ttfts": g["ttft_s"].tolist(), "itls": [[t] * (out_len - 1) for t in tpot],
                "cached_tokens": (g["device_hit_tokens"] + g["host_hit_tokens"]).tolist(),
            }) + "\n")  # fmt: skip
    return path


def test_recovers_the_parameters_the_simulator_ran_with(tmp_path):
    points = read_points([str(bench_serving_results(tmp_path))])
    assert {p.kind for p in points} == {"prefill", "decode"} and len(points) == 16
    sc = scenario_from_dict(BASE)  # the same model and GPU, efficiencies unknown
    result = fit_compute(points, Roofline.from_scenario(sc), sc.scheduler.chunked_prefill_size)
    for key, value in TRUE.items():
        assert result.params[key] == pytest.approx(value, rel=0.02), key
    assert result.rms_error < 0.01


def test_pinned_parameters_stay_and_the_rest_are_fitted(tmp_path):
    points = read_points([str(bench_serving_results(tmp_path))])
    sc = scenario_from_dict(BASE)
    result = fit_compute(points, Roofline.from_scenario(sc), 8192, fixed={"attn_flops_scale": 1.3})
    assert result.params["attn_flops_scale"] == 1.3
    assert result.params["mfu"] == pytest.approx(0.35, rel=0.02)


def test_per_point_errors_show_a_model_that_cannot_fit():
    sc = scenario_from_dict(BASE)
    base = Roofline.from_scenario(sc)
    noisy = [Point("decode", 0, 1000 * b, b, 0.01 * (1 + 0.3 * (-1) ** b), f"b{b}") for b in range(1, 7)]
    result = fit_compute(noisy, base, 8192)
    assert result.rms_error > 0.1 and len(result.errors) == 6
    assert result.params["mfu"] == base.mfu  # no prefill point: left as it was


def test_csv_points_and_their_errors(tmp_path):
    good = tmp_path / "p.csv"
    good.write_text("kind,tokens,context,batch,seconds,label\nprefill,4096,0,1,0.5,a\ndecode,0,4096,1,0.01,b\n")
    assert [p.kind for p in read_points([str(good)])] == ["prefill", "decode"]
    bad = tmp_path / "bad.csv"
    bad.write_text("kind,tokens,context,batch,seconds\nwarmup,1,0,1,0.5\n")
    with pytest.raises(InputError, match="bad.csv:2"):
        read_points([str(bad)])
    with pytest.raises(InputError, match="no such file"):
        read_points([str(tmp_path / "none.csv")])
    broken = tmp_path / "r.jsonl"
    broken.write_text('{"input_lens": [1]}\n')
    with pytest.raises(InputError, match="output-details"):
        read_points([str(broken)])


def test_cli_writes_the_fit_into_a_cost_table_with_its_source(tmp_path, capsys):
    results = bench_serving_results(tmp_path, lengths=(2048, 8192, 30000))
    scenario = tmp_path / "s.yaml"
    scenario.write_text(json.dumps(BASE))
    out = tmp_path / "h100.json"
    assert main(["calibrate", "compute", str(results), "--scenario", str(scenario), "--out", str(out)]) == 0
    table = load_cost_table(out)
    assert table.compute_params["mbu"] == pytest.approx(0.75, rel=0.02)
    assert table.compute["source"]["kind"] == "measured-fit" and table.compute["source"]["points"] == 12
    assert table.entries  # the base table's copy costs are kept
    printed = capsys.readouterr().out
    assert "rms error" in printed and "error" in printed
    # A scenario naming the table runs with the fitted efficiencies, and says so.
    wl = {"kind": "synthetic", "num_requests": 2}
    summary = run_scenario(scenario_from_dict({**BASE, "hardware": {**BASE["hardware"], "cost_table": str(out)},
                                               "workload": wl})).summary  # fmt: skip
    assert summary["compute"]["origin"]["mbu"] == "fitted"
    assert np.isclose(summary["compute"]["mbu"], table.compute_params["mbu"])
    plain = run_scenario(scenario_from_dict({**BASE, "workload": wl})).summary
    assert plain["compute"]["origin"]["mfu"] == "spec-derived estimate"


def test_a_fit_with_as_many_points_as_free_parameters_says_it_is_exactly_determined():
    from calibrate.compute import fit_quality, format_fit

    sc = scenario_from_dict(BASE)
    base = Roofline.from_scenario(sc)
    points = [Point("prefill", 16000, 0, 1, 1.1), Point("decode", 0, 4000, 1, 0.0064),
              Point("decode", 0, 32000, 8, 0.008)]  # mfu, mbu and the overhead: three unknowns  # fmt: skip
    exact = fit_compute(points, base, 8192)
    assert exact.free == 3 and "exactly determined: 3 points for 3 free parameters" in format_fit(exact)
    more = fit_compute([*points, Point("decode", 0, 64000, 16, 0.0101)], base, 8192)
    assert fit_quality(more).startswith("rms error") and "4 points (3 free parameters)" in fit_quality(more)

"""Figures over seeds: Student-t intervals, paired comparisons, and ``run --seeds`` / ``sweep --seeds`` / ``diff``."""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.app.cli import main
from sim.app.seeds import aggregate, compare, format_intervals, interval, parse_seeds, t_quantile
from sim.base.errors import InputError

QUICKSTART = str(Path(__file__).resolve().parents[3] / "scenarios" / "quickstart.yaml")
SMALL = ["--set", "workload.num_clients=16", "--set", "workload.num_rounds=2"]


class TestInterval:
    def test_t_quantiles_match_scipy(self):
        stats = pytest.importorskip("scipy.stats")
        for df in (1, 2, 4, 9, 29, 30, 31, 45, 100, 1000):
            assert t_quantile(df) == pytest.approx(stats.t.ppf(0.975, df), rel=2e-4)

    def test_the_interval_is_mean_plus_minus_t_times_standard_error(self):
        iv = interval([1.0, 2.0, 3.0, 4.0, 5.0])
        assert iv.mean == 3.0
        assert iv.half == pytest.approx(2.7764 * math.sqrt(2.5) / math.sqrt(5), rel=1e-4)
        assert (iv.lo, iv.hi) == pytest.approx((3.0 - iv.half, 3.0 + iv.half))

    def test_one_seed_has_no_spread(self):
        iv = interval([7.0])
        assert (iv.mean, iv.lo, iv.hi, iv.half) == (7.0, 7.0, 7.0, None)

    def test_a_95_percent_interval_covers_the_mean_about_95_percent_of_the_time(self):
        rng = np.random.default_rng(0)
        covered = 0
        for _ in range(2000):
            iv = interval(rng.normal(10.0, 2.0, 5))
            covered += iv.lo <= 10.0 <= iv.hi
        assert 0.93 <= covered / 2000 <= 0.97


class TestSeedLists:
    def test_a_count_starts_at_the_scenario_seed(self):
        assert parse_seeds("3", base=7) == [7, 8, 9]

    def test_a_list_is_taken_as_given(self):
        assert parse_seeds("4,1,9", base=7) == [4, 1, 9]

    @pytest.mark.parametrize("text", ["0", "x", "1,1", "-1,2", ",", "1001", "99999999999999999999",
                                      "1," + "9" * 20])  # fmt: skip
    def test_bad_seed_lists_are_refused(self, text):
        with pytest.raises(InputError):
            parse_seeds(text, base=1)


class TestCompare:
    def test_a_paired_shift_far_above_its_noise_is_outside_the_noise(self):
        a = pd.DataFrame({"seed": [1, 2, 3, 4, 5], "input_tokens_per_s": [100.0, 200.0, 150.0, 120.0, 180.0]})
        b = a.assign(input_tokens_per_s=a["input_tokens_per_s"] * 1.1)
        (d,) = compare(a, b, ["input_tokens_per_s"])
        assert d.test == "paired t" and d.significant and d.ratio == pytest.approx(1.1)

    def test_the_same_shift_between_unpaired_seed_lists_is_lost_in_the_spread(self):
        a = pd.DataFrame({"seed": [1, 2, 3, 4, 5], "input_tokens_per_s": [100.0, 200.0, 150.0, 120.0, 180.0]})
        b = pd.DataFrame({"seed": [6, 7, 8, 9, 10], "input_tokens_per_s": list(a["input_tokens_per_s"] * 1.1)})
        (d,) = compare(a, b, ["input_tokens_per_s"])
        assert d.test == "Welch t" and not d.significant

    def test_against_a_single_run_the_interval_is_the_seeded_sides_spread_for_one_more_draw(self):
        values = [100.0, 200.0, 150.0, 120.0, 180.0]
        a = pd.DataFrame({"seed": [1, 2, 3, 4, 5], "input_tokens_per_s": values})
        b = pd.DataFrame({"seed": [9], "input_tokens_per_s": [400.0]})
        (d,) = compare(a, b, ["input_tokens_per_s"])
        half = t_quantile(4) * np.std(values, ddof=1) * math.sqrt(1 / 5 + 1)
        assert d.test == "t, B one seed" and (d.diff_lo, d.diff_hi) == pytest.approx((250 - half, 250 + half))
        assert d.significant  # 400 is far outside what A's spread gives one more seed
        (e,) = compare(b.assign(input_tokens_per_s=[160.0]), a, ["input_tokens_per_s"])
        assert e.test == "t, A one seed" and not e.significant and e.diff_hi - e.diff_lo == pytest.approx(2 * half)

    def test_the_ratio_is_the_ratio_of_the_means_with_the_differences_interval_over_a(self):
        a = pd.DataFrame({"seed": [1, 2, 3], "hit_device": [0.01, 0.06, 0.06]})
        b = a.assign(hit_device=[0.09, 0.04, 0.12])  # per-seed ratios 9, 0.67, 2: their t interval goes below 0
        (d,) = compare(a, b, ["hit_device"])
        assert d.test == "paired t" and d.ratio == pytest.approx(d.mean_b / d.mean_a)
        assert d.ratio_hi == pytest.approx(1 + d.diff_hi / d.mean_a)
        assert d.diff_lo < -d.mean_a and d.ratio_lo == 0.0  # cut at 0: a share's ratio cannot be negative

    def test_an_interval_of_a_share_is_cut_at_zero_in_the_table(self):
        df = pd.DataFrame({"seed": [1, 2, 3], "hit_device": [0.0, 0.0, 0.066]})
        row = aggregate(df, metrics=["hit_device"]).iloc[0]
        assert row["hit_device_lo"] == 0.0 and row["hit_device_mean"] - row["hit_device_half"] < 0
        assert "2.20% [0.00%, " in format_intervals(df)

    def test_aggregate_groups_by_grid_columns_and_leaves_out_failed_rows(self):
        df = pd.DataFrame({"x": [1, 1, 2, 2, 2], "seed": [1, 2, 1, 2, 3], "status": ["ok"] * 4 + ["failed"],
                           "hit_total": [0.1, 0.3, 0.5, 0.7, np.nan]})  # fmt: skip
        agg = aggregate(df, ["x"], ["hit_total"])
        assert list(agg["seeds"]) == [2, 2]
        assert list(agg["hit_total_mean"]) == pytest.approx([0.2, 0.6])


class TestCommands:
    def test_run_seeds_writes_every_seed_and_the_intervals_and_repeats_exactly(self, tmp_path, capsys):
        outs = []
        for name in ("a", "b"):
            out = tmp_path / name
            assert main(["run", QUICKSTART, "--seeds", "3", "--workers", "2", "--out", str(out),
                         "--no-progress"]) == 0  # fmt: skip
            outs.append(out)
        text = capsys.readouterr().out
        assert "3 seeds (1, 2, 3)" in text and "±" in text
        s = json.loads((outs[0] / "summary.json").read_text())
        assert s["seeds"] == [1, 2, 3]
        per_seed = pd.read_csv(outs[0] / "seeds.csv")
        fig = s["figures"]["input_tokens_per_s"]
        assert fig["mean"] == pytest.approx(per_seed["input_tokens_per_s"].mean())
        assert fig["lo"] < fig["mean"] < fig["hi"]
        assert len(set(per_seed["input_tokens_per_s"])) > 1  # the seed changes the run
        assert (outs[0] / "summary.json").read_bytes() == (outs[1] / "summary.json").read_bytes()

    def test_diff_pairs_two_seeded_runs_and_names_what_is_outside_the_noise(self, tmp_path, capsys):
        on, off = tmp_path / "on", tmp_path / "off"
        main(["run", QUICKSTART, *SMALL, "--seeds", "3", "--out", str(on), "--no-progress"])
        main(["run", QUICKSTART, *SMALL, "--seeds", "3", "--out", str(off), "--no-progress",
              "--set", "hicache.enabled=false"])  # fmt: skip
        capsys.readouterr()
        assert main(["diff", str(off), str(on), "--json", str(tmp_path / "d.json")]) == 0
        rows = {d["metric"]: d for d in json.loads((tmp_path / "d.json").read_text())}
        assert rows["hit_host"]["test"] == "paired t"
        assert rows["hit_host"]["significant"] and rows["hit_host"]["diff_lo"] > 0  # L2 hits only with L2
        assert rows["hit_storage"]["significant"] is False  # no L3 in either

    def test_sweep_seeds_adds_a_seed_axis_and_writes_intervals_per_point(self, tmp_path, capsys):
        out = tmp_path / "sw"
        assert main(["sweep", QUICKSTART, *SMALL, "--grid", "hicache.enabled=true,false", "--seeds", "2",
                     "--out", str(out), "--workers", "2", "--no-progress"]) == 0  # fmt: skip
        rows = pd.read_parquet(out / "sweep.parquet")
        assert sorted(set(rows["seed"])) == [1, 2] and len(rows) == 4
        agg = pd.read_csv(out / "sweep_seeds.csv")
        assert list(agg["seeds"]) == [2, 2]
        assert "±" in capsys.readouterr().out
        (out / "sweep_seeds.csv").write_text("stale\n")  # resumed from its sweep.yaml: the intervals again
        assert main(["sweep", str(out / "sweep.yaml"), "--out", str(out), "--no-progress"]) == 0
        assert pd.read_csv(out / "sweep_seeds.csv").equals(agg)

    def test_seeds_of_a_trace_replay_are_noted_as_giving_the_same_run(self, tmp_path, capsys):
        trace = str(Path(QUICKSTART).parent / "mooncake_conversation.yaml")
        assert main(["run", trace, "--set", "workload.max_requests=40", "--seeds", "2", "--out",
                     str(tmp_path / "r"), "--workers", "1", "--no-progress"]) == 0  # fmt: skip
        assert "every seed gave the same figures" in capsys.readouterr().err

    def test_diff_of_a_damaged_summary_is_one_line_and_exit_2(self, tmp_path, capsys):
        (tmp_path / "summary.json").write_text(json.dumps({"throughput": {}, "hit_rate": {}, "metrics": "x"}))
        assert main(["diff", str(tmp_path), str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"{tmp_path / 'summary.json'}: a damaged run summary" in err

    def test_diff_of_something_that_is_not_a_run_is_one_line_and_exit_2(self, tmp_path, capsys):
        (tmp_path / "summary.json").write_text("{}")
        assert main(["diff", str(tmp_path), str(tmp_path)]) == 2
        assert "not a hicache-sim run summary" in capsys.readouterr().err

"""``hicache-sim plot``: threshold sweeps, HiSparse misses and run occupancy, rendered whole or not at all."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sim.app.cli import main
from sim.app.plot import plot
from sim.base.errors import InputError

QUICKSTART = str(Path(__file__).resolve().parents[3] / "scenarios" / "quickstart.yaml")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def sweep_dir(tmp_path) -> Path:
    """A sweep.parquet as sim.app.sweep writes it: 4 prefetch x 2 load-back thresholds."""
    rows = []
    for i, (pt, lb) in enumerate((pt, lb) for pt in (64, 128, 256, 512) for lb in (1, 64)):
        rows.append({"point_id": f"p{i:02d}", "hicache.prefetch_threshold": pt, "hicache.load_back_threshold": lb,
                     "seed": 1, "input_tokens_per_s": 1e4 - 5 * pt - lb, "ttft_p90_s": 0.5 + pt / 1e3,
                     "ttft_p50_s": 0.3, "hit_total": 0.6 - pt / 2e3 - lb / 1e3})  # fmt: skip
    out = tmp_path / "sweep"
    out.mkdir()
    pd.DataFrame(rows).to_parquet(out / "sweep.parquet", index=False)
    return out


@pytest.fixture
def misses_file(tmp_path) -> Path:
    rng = np.random.default_rng(0)
    frames = [
        pd.DataFrame(
            {
                "step": np.repeat(np.arange(50), 3),
                "misses": rng.poisson(lam, 150),
                "policy": policy,
                "device_buffer_size": size,
                "request": np.tile(np.arange(3), 50),
                "layer": 0,
            }
        )  # fmt: skip
        for policy, size, lam in (("lru", 2048, 30), ("lru", 4096, 12), ("belady", 2048, 15))
    ]
    path = tmp_path / "misses.parquet"
    pd.concat(frames).to_parquet(path, index=False)
    return path


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("run") / "out"
    assert main(["run", QUICKSTART, "--set", "workload.num_clients=16", "--set", "cluster.instances=2",
                 "--set", "output.timeseries_interval_s=0.1", "--out", str(out), "--no-progress"]) == 0  # fmt: skip
    return out


def _assert_image(path: Path) -> None:
    body = path.read_bytes()
    assert len(body) > 1000
    assert body.startswith(PNG_MAGIC) if path.suffix == ".png" else b"<svg" in body[:2000]
    assert not list(path.parent.glob(f".{path.name}.*"))  # no temp file left behind


@pytest.mark.parametrize("suffix", [".png", ".svg"])
class TestKinds:
    def test_threshold_from_a_sweep_folder(self, sweep_dir, tmp_path, suffix):
        out = tmp_path / f"threshold{suffix}"
        assert main(["plot", "threshold", str(sweep_dir), "--out", str(out)]) == 0
        _assert_image(out)

    def test_misses_per_step_and_their_distribution(self, misses_file, tmp_path, suffix):
        out = tmp_path / f"misses{suffix}"
        assert main(["plot", "misses", str(misses_file), "--out", str(out)]) == 0
        _assert_image(out)

    def test_occupancy_from_a_run_folder(self, run_dir, tmp_path, suffix):
        out = tmp_path / f"occupancy{suffix}"
        assert main(["plot", "occupancy", str(run_dir), "--out", str(out)]) == 0
        _assert_image(out)


class TestThresholdAxes:
    def test_x_defaults_to_the_first_varying_grid_column(self, sweep_dir, tmp_path):
        from sim.app.plot import plot_threshold, read_sweep

        axes = plot_threshold(read_sweep(sweep_dir / "sweep.parquet")).get_axes()
        assert [ax.get_title() for ax in axes] == ["hit rate", "TTFT p90", "input throughput"]
        assert axes[0].get_xlabel() == "hicache.prefetch_threshold (tokens)"
        assert [line.get_label() for line in axes[0].get_lines()] == ["load_back_threshold=1",
                                                                      "load_back_threshold=64"]  # fmt: skip

    def test_x_and_y_choose_the_axes(self, sweep_dir, tmp_path):
        out = tmp_path / "lb.png"
        args = ["--x", "hicache.load_back_threshold", "--y", "ttft_p50_s", "hit_total"]
        assert main(["plot", "threshold", str(sweep_dir / "sweep.parquet"), "--out", str(out), *args]) == 0
        _assert_image(out)


class TestBadInput:
    @pytest.mark.parametrize(
        ("args", "expected"),
        [
            (["threshold", "{sweep}", "--x", "hicache.nope"], "hicache.nope"),
            (["threshold", "{sweep}", "--y", "latency"], "latency"),
            (["threshold", "{tmp}/absent"], "no such file"),
            (
                ["misses", "{sweep}/sweep.parquet"],
                "missing column(s) step, misses, policy, device_buffer_size",
            ),
            (["occupancy", "{sweep}/sweep.yaml"], "no such file"),
            (["misses", "{sweep}/sweep.parquet", "--x", "step"], "only to the threshold plot"),
            (["heatmap", "{sweep}"], "heatmap"),
        ],
    )
    def test_bad_input_exits_2_in_one_line_and_writes_nothing(
        self, sweep_dir, tmp_path, capsys, args, expected
    ):
        out = tmp_path / "figs" / "out.png"
        argv = ["plot", *(a.format(sweep=sweep_dir, tmp=tmp_path) for a in args), "--out", str(out)]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert expected in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
        assert not out.exists()

    def test_an_unknown_image_format_is_an_input_error(self, sweep_dir, tmp_path):
        with pytest.raises(InputError, match="png or .svg"):
            plot("threshold", sweep_dir, tmp_path / "out.pdf")

    def test_an_unknown_kind_is_an_input_error(self, sweep_dir, tmp_path):
        with pytest.raises(InputError, match="unknown plot kind"):
            plot("heatmap", sweep_dir, tmp_path / "out.png")


def test_rounds_plot_from_a_multiturn_run(tmp_path):
    from sim.app.run import run_scenario, write_outputs
    from sim.scenario.load import scenario_from_dict

    sc = scenario_from_dict({"name": "r", "hardware": {"kv_mem_gb": 1.0},
                             "workload": {"kind": "multi_turn", "num_clients": 4, "max_parallel": 2, "num_rounds": 3,
                                          "request_length": 256, "output_length": 8, "request_rate": None}})  # fmt: skip
    write_outputs(run_scenario(sc), tmp_path / "run")
    out = plot("rounds", tmp_path / "run", tmp_path / "rounds.png")
    assert out.stat().st_size > 0
    with pytest.raises(InputError, match="missing column"):
        pd.DataFrame({"round": [0]}).to_parquet(tmp_path / "bad.parquet")
        plot("rounds", tmp_path / "bad.parquet", tmp_path / "x.png")


class TestHonestAxes:
    def test_threshold_panels_read_from_zero_and_identical_lines_are_drawn_once_and_named(self, sweep_dir):
        from sim.app.plot import plot_threshold, read_sweep

        df = read_sweep(sweep_dir / "sweep.parquet")
        df["hit_total"] = 0.4  # a metric no parameter moves
        df["input_tokens_per_s"] = 1e4 - 5 * df["hicache.prefetch_threshold"]
        df["ttft_p90_s"] = 0.5
        axes = plot_threshold(df).get_axes()
        assert all(ax.get_ylim()[0] == 0 for ax in axes)
        assert [line.get_label() for line in axes[0].get_lines()] == ["load_back_threshold=1, 64 (identical lines)"]
        assert axes[0].yaxis.get_major_formatter()(0.4, 0) == "40%"

    def test_misses_draw_no_line_across_steps_that_were_not_simulated(self, tmp_path):
        from sim.app.plot import plot_misses

        steps = np.r_[np.arange(0, 8), np.arange(1000, 1008)]
        df = pd.DataFrame({"step": steps, "misses": 5.0, "policy": "lru", "device_buffer_size": 1024})
        ax = plot_misses(df).get_axes()[0]
        lines = [line for line in ax.get_lines() if len(line.get_xdata()) > 1]
        assert len(lines) == 2 and all(np.ptp(line.get_xdata()) == 7 for line in lines)
        dots = [line.get_xdata()[0] for line in ax.get_lines() if len(line.get_xdata()) == 1]
        assert dots == [3.5, 1003.5]  # one marker per window
        assert "steps not simulated" in [t.get_text() for t in ax.get_legend().get_texts()]

    def test_occupancy_draws_the_swa_pool_capacity_that_binds(self, run_dir):
        from sim.app.plot import plot_occupancy, read_timeseries

        l1 = plot_occupancy(read_timeseries(run_dir / "timeseries.parquet")).get_axes()[0]
        labels = [t.get_text() for t in l1.get_legend().get_texts()]
        assert any(lb.startswith("swa capacity (") for lb in labels)
        assert any(lb.startswith("kv capacity (") for lb in labels)

    def test_occupancy_of_one_instance_gives_kv_and_swa_their_own_colour_and_the_legend_room(self):
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        from sim.app.plot import plot_occupancy

        df = pd.DataFrame({"time_s": [1.0, 2.0], "instance": 0, "waiting": 0, "running": 1, "l1_kv_pages": [4, 9],
                           "l1_swa_pages": [2, 3], "l2_kv_pages": 0, "l2_swa_pages": 0})  # fmt: skip
        fig = plot_occupancy(df)
        FigureCanvasAgg(fig).draw()
        l1 = fig.get_axes()[0]
        colours = {line.get_label(): line.get_color() for line in l1.get_lines()}
        assert colours["kv"] != colours["swa"]
        for ax in fig.get_axes():  # below the data, never on it
            assert not ax.get_legend().get_window_extent().overlaps(ax.get_window_extent())

    def test_one_configurations_misses_get_a_narrow_box_panel(self):
        from sim.app.plot import plot_misses

        df = pd.DataFrame({"step": np.arange(20), "misses": 5.0, "policy": "lru", "device_buffer_size": 1024})
        line_ax, box_ax = plot_misses(df).get_axes()
        assert box_ax.get_position().width < line_ax.get_position().width / 2

    def test_an_l3_run_gets_an_l3_panel(self, tmp_path):
        from sim.app.plot import plot_occupancy

        df = pd.DataFrame({"time_s": [1.0, 2.0], "instance": 0, "waiting": 0, "running": 1, "l1_kv_pages": 1,
                           "l1_swa_pages": 1, "l2_kv_pages": 0, "l2_swa_pages": 0, "l3_pages": [3, 5]})  # fmt: skip
        df.attrs["capacity"] = {"l1": 10, "l3": None}
        titles = [ax.get_title() for ax in plot_occupancy(df).get_axes()]
        assert "L3 (shared storage) pages held" in titles

    def test_rounds_refuses_a_run_without_rounds_in_one_line(self, tmp_path, capsys):
        from sim.app.run import run_scenario, write_outputs
        from sim.scenario.load import scenario_from_dict

        sc = scenario_from_dict({"name": "open", "workload": {"kind": "synthetic", "num_requests": 20, "rate": 10.0,
                                                              "input_length": 256, "output_length": 4}})  # fmt: skip
        write_outputs(run_scenario(sc), tmp_path / "run")
        assert main(["plot", "rounds", str(tmp_path / "run"), "--out", str(tmp_path / "r.png")]) == 2
        err = capsys.readouterr().err
        assert "no rounds to plot" in err and len(err.strip().splitlines()) == 1
        assert not (tmp_path / "r.png").exists()

    def test_occupancy_of_a_decode_instance_says_what_to_plot_instead(self, tmp_path, capsys):
        run = tmp_path / "run"
        run.mkdir()
        (run / "summary.json").write_text('{"role": "decode"}')
        pd.DataFrame({"step": [0, 1]}).to_parquet(run / "timeseries.parquet")
        assert main(["plot", "occupancy", str(run), "--out", str(tmp_path / "o.png")]) == 2
        err = capsys.readouterr().err
        assert "a decode instance's run (HiSparse)" in err and "plot misses instead" in err
        assert len(err.strip().splitlines()) == 1 and not (tmp_path / "o.png").exists()

    def test_rounds_of_a_multiturn_run_have_integer_ticks_and_percent(self, run_dir):
        from sim.app.plot import plot_rounds, read_rounds

        ax_t, ax_h = plot_rounds(read_rounds(run_dir / "requests.parquet")).get_axes()
        assert ax_t.get_xlabel() == "round" and all(float(t).is_integer() for t in ax_t.get_xticks())
        assert [line.get_label() for line in ax_t.get_lines()] == ["mean", "p90"]
        assert ax_h.yaxis.get_major_formatter()(0.25, 0) == "25%"

    def test_the_rounds_tail_is_the_one_the_clients_report_prints(self, run_dir):
        import json

        from sim.app.plot import plot_rounds, read_rounds

        ax_t = plot_rounds(read_rounds(run_dir / "requests.parquet")).get_axes()[0]
        p90 = next(line for line in ax_t.get_lines() if line.get_label() == "p90").get_ydata()
        rounds = json.loads((run_dir / "summary.json").read_text())["client"]["rounds"]
        assert list(p90) == [r["ttft_p90_s"] for r in rounds]  # rank 0.9 n, not interpolated

    def test_rounds_refuses_a_lane_replay_and_a_decode_run_naming_what_to_plot(self, tmp_path):
        from sim.app.plot import read_rounds

        run = tmp_path / "run"
        run.mkdir()
        pd.DataFrame({c: [0, 1] for c in ("round", "ttft_s", "input_tokens", "device_hit_tokens", "host_hit_tokens",
                                          "storage_hit_tokens")}).to_parquet(run / "requests.parquet")  # fmt: skip
        for summary, says in (('{"client": {"client": "aiperf_agentic"}}', "sessions, not rounds"),
                              ('{"role": "decode"}', "plot misses")):  # fmt: skip
            (run / "summary.json").write_text(summary)
            with pytest.raises(InputError, match=says):
                read_rounds(run / "requests.parquet")

    def test_a_sweep_over_seeds_draws_each_points_interval(self, sweep_dir):
        from matplotlib.container import ErrorbarContainer

        from sim.app.plot import plot_threshold, read_sweep

        df = read_sweep(sweep_dir / "sweep.parquet")
        df = pd.concat([df, df.assign(seed=2, hit_total=df["hit_total"] + 0.1)], ignore_index=True)
        fig = plot_threshold(df)
        ax = fig.get_axes()[0]
        bars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
        assert len(bars) == 2 and "95% interval over 2 seeds" in fig.texts[0].get_text()
        means = np.asarray(bars[0].lines[0].get_ydata(), float)
        assert means == pytest.approx(df[df["hicache.load_back_threshold"] == 1].groupby("hicache.prefetch_threshold")
                                      ["hit_total"].mean().to_numpy())  # fmt: skip

    def test_occupancy_of_many_instances_is_their_mean_and_range(self):
        from sim.app.plot import MAX_INSTANCE_LINES, plot_occupancy

        n = MAX_INSTANCE_LINES + 1
        df = pd.DataFrame({"time_s": np.repeat([1.0, 2.0], n), "instance": np.tile(np.arange(n), 2), "waiting": 0,
                           "running": 1, "l1_kv_pages": np.arange(2 * n), "l1_swa_pages": 1, "l2_kv_pages": 0,
                           "l2_swa_pages": 0})  # fmt: skip
        l1 = plot_occupancy(df).get_axes()[0]
        assert [t.get_text() for t in l1.get_legend().get_texts()] == ["kv, mean", "swa, mean"]
        kv = l1.get_lines()[0].get_ydata()
        assert list(kv) == [np.mean(range(n)), np.mean(range(n, 2 * n))] and len(l1.collections) == 2

    def test_a_small_share_axis_gets_the_decimals_its_ticks_need(self):
        from matplotlib.figure import Figure

        from sim.app.plot import _percent_axis

        ax = Figure().subplots()
        ax.plot([0, 1], [0.0, 0.034])
        ax.set_ylim(0, 0.04)
        _percent_axis(ax)
        fig_text = [ax.yaxis.get_major_formatter()(v, 0) for v in (0.005, 0.01, 0.015)]
        assert len(set(fig_text)) == 3 and fig_text[0] == "0.5%"

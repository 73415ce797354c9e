"""calibrate: the quick CPU suite end to end (calibrate -> table -> sim.model.costs), and `calibrate check`."""

import json
from pathlib import Path

import numpy as np
import pytest

from calibrate.check import parse_tolerance
from calibrate.fit import fit_cost
from calibrate.suites import ITEM_BYTES, get_suite
from sim.app.cli import main
from sim.base.errors import InputError
from sim.model.costs import load_cost_table


@pytest.fixture(scope="module")
def quick_table(tmp_path_factory):
    """One quick CPU calibration through the real CLI, shared by the tests below."""
    out = tmp_path_factory.mktemp("cal") / "cpu.json"
    assert main(["calibrate", "--suite", "quick", "--device", "cpu", "--out", str(out), "--no-progress"]) == 0
    return out


def _planted(path, tmp_path, name, edit):
    data = json.loads(path.read_text())
    edit(data)
    new = tmp_path / name
    new.write_text(json.dumps(data))
    return str(new)


class TestTableToRun:
    def test_a_run_uses_the_calibrated_table_its_scenario_names_and_says_so(self, quick_table, tmp_path, capsys):
        scenario = str(Path(__file__).resolve().parents[2] / "scenarios" / "quickstart.yaml")
        args = ["run", scenario, "--out", str(tmp_path / "run"), "--no-progress",
                "--set", f"hardware.cost_table={quick_table}"]  # fmt: skip
        assert main(args) == 0
        printed = capsys.readouterr().out
        assert f"cost table: {quick_table} (measured on cpu" in printed
        summary = json.loads((tmp_path / "run" / "summary.json").read_text())
        assert summary["cost_table_kind"] == "measured" and str(quick_table) in summary["cost_table"]


class TestCalibrateOnCpu:
    def test_it_writes_a_table_that_sim_costs_loads(self, quick_table):
        table = load_cost_table(quick_table)
        assert table.source.kind == "measured" and table.source.device == "cpu"
        assert {e.backend for e in table.entries if e.op == "h2d"} == {"copy_engine", "batched", "kernel"}
        assert any(e.op == "swap_in" for e in table.entries)
        assert all(e.p10_s <= e.median_s <= e.p90_s for e in table.entries)
        assert set(table.fits) >= {("h2d", "kernel"), ("d2h", "copy_engine"), ("swap_in", "kernel")}
        assert table.transfer_seconds("h2d", "copy_engine", 4, 584) > 0
        assert table.swap_in_seconds(2, 16, 5, 584) > 0

    def test_it_records_where_the_numbers_came_from(self, quick_table):
        table = load_cost_table(quick_table)
        assert table.source.torch and table.source.triton and table.source.date
        assert table.describe().startswith(f"{quick_table} (measured on cpu")
        assert any("TRITON_INTERPRET=1" in n for n in table.source.notes)

    def test_it_saves_the_bandwidth_plot(self, quick_table):
        assert quick_table.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"

    def test_on_a_cpu_its_printout_claims_no_link_ceiling_nor_a_gpu_mechanism(self, quick_table):
        """A CPU "ceiling" is one large memcpy, which cached small copies outrun: no fraction of it is shown."""
        from calibrate.cli import format_run

        table = load_cost_table(quick_table)
        lines = format_run(table, {"batched": "staging"}).splitlines()
        header = next(i for i, line in enumerate(lines) if line.startswith("op "))
        assert lines[header].split()[-1] == "GB/s" and "ceil" not in lines[header]
        rows = lines[header + 1 : header + 1 + len(table.entries)]
        assert not any(row.rstrip().endswith("%") for row in rows)
        assert "no GPU, so no link ceiling" in lines[1]

    def test_on_a_gpu_each_entry_is_a_fraction_of_the_ceiling(self, quick_table):
        import dataclasses

        from calibrate.cli import format_run

        table = load_cost_table(quick_table)
        table = dataclasses.replace(table, source=dataclasses.replace(table.source, device="NVIDIA H200"))
        lines = format_run(table, {}).splitlines()
        header = next(i for i, line in enumerate(lines) if line.startswith("op "))
        assert lines[header].split()[-2:] == ["GB/s", "ceil"]
        assert all(row.rstrip().endswith("%") for row in lines[header + 1 : header + 1 + len(table.entries)])

    def test_a_cpu_copy_is_not_called_cudamemcpyasync(self):
        import torch

        from kernels.transfer import KVPool, plan_transfer

        a, b = (KVPool.allocate(1, 4, 8, dtype=torch.int64) for _ in range(2))
        assert plan_transfer(a, b, [0, 1], [2, 3], "copy_engine").mechanism.startswith("CPU memcpy")

    def test_out_is_required(self, capsys):
        assert main(["calibrate", "--suite", "quick"]) == 2
        assert "--out PATH is required" in capsys.readouterr().err


class TestCheck:
    def test_a_table_passes_against_itself(self, quick_table, capsys):
        assert main(["calibrate", "check", str(quick_table), "--baseline", str(quick_table)]) == 0
        assert "regressions: 0" in capsys.readouterr().out

    def test_a_planted_regression_fails(self, quick_table, tmp_path, capsys):
        def slow_down(d):
            d["entries"][2]["median_s"] *= 1.5

        new = _planted(quick_table, tmp_path, "slow.json", slow_down)
        assert main(["calibrate", "check", new, "--baseline", str(quick_table), "--tolerance", "10%"]) == 1
        out = capsys.readouterr().out
        assert "regressions: 1" in out and "+50.0%" in out and "FAIL" in out

    def test_a_regression_within_tolerance_passes(self, quick_table, tmp_path):
        new = _planted(
            quick_table,
            tmp_path,
            "slow.json",
            lambda d: d["entries"][2].update(median_s=d["entries"][2]["median_s"] * 1.5),
        )
        assert main(["calibrate", "check", new, "--baseline", str(quick_table), "--tolerance", "60%"]) == 0

    def test_a_lower_ceiling_is_a_regression(self, quick_table, tmp_path):
        new = _planted(
            quick_table, tmp_path, "link.json", lambda d: d["ceilings"].update(h2d=d["ceilings"]["h2d"] / 2)
        )
        assert main(["calibrate", "check", new, "--baseline", str(quick_table)]) == 1

    def test_another_schema_version_exits_2(self, quick_table, tmp_path, capsys):
        new = _planted(quick_table, tmp_path, "v2.json", lambda d: d.update(version=2))
        assert main(["calibrate", "check", new, "--baseline", str(quick_table)]) == 2
        assert "unknown cost-table version 2" in capsys.readouterr().err

    def test_another_device_exits_2_unless_allowed(self, quick_table, tmp_path, capsys):
        new = _planted(quick_table, tmp_path, "gpu.json", lambda d: d["source"].update(device="NVIDIA H200"))
        assert main(["calibrate", "check", new, "--baseline", str(quick_table)]) == 2
        assert "--allow-device-change" in capsys.readouterr().err
        assert main(["calibrate", "check", new, "--baseline", str(quick_table), "--allow-device-change"]) == 0

    def test_a_truncated_table_exits_2(self, quick_table, tmp_path, capsys):
        cut = tmp_path / "cut.json"
        cut.write_text(quick_table.read_text()[:300])
        assert main(["calibrate", "check", str(cut), "--baseline", str(quick_table)]) == 2
        assert "cut.json" in capsys.readouterr().err

    def test_a_bad_tolerance_exits_2(self, quick_table):
        assert (
            main(
                [
                    "calibrate",
                    "check",
                    str(quick_table),
                    "--baseline",
                    str(quick_table),
                    "--tolerance",
                    "lots",
                ]
            )
            == 2
        )


class TestParts:
    def test_tolerance_reads_percent_or_fraction(self):
        assert parse_tolerance("10%") == pytest.approx(0.1)
        assert parse_tolerance("0.25") == pytest.approx(0.25)
        with pytest.raises(InputError):
            parse_tolerance("-5%")

    def test_the_fit_recovers_latency_per_item_and_bandwidth(self):
        n = np.array([1, 4, 16, 64, 256, 1, 16, 256])
        size = np.array([584, 584, 584, 584, 584, 149_760, 149_760, 149_760])
        t = 3e-6 + n * 2e-6 + n * size / 40e9
        fit = fit_cost(n, n * size, t)
        assert fit.latency_s == pytest.approx(3e-6, rel=1e-6)
        assert fit.per_item_s == pytest.approx(2e-6, rel=1e-6)
        assert fit.bandwidth_Bps == pytest.approx(40e9, rel=1e-6)

    def test_the_fit_keeps_terms_non_negative(self):
        fit = fit_cost([1, 10, 100], [1e3, 1e4, 1e5], [2e-6, 1.5e-6, 9e-6])
        assert fit.latency_s >= 0 and fit.per_item_s >= 0 and fit.bandwidth_Bps > 0

    def test_the_gpu_grid_spans_the_v4_sizes_and_counts(self):
        suite = get_suite("default", "cuda")
        shapes = suite.transfer_shapes("copy_engine")
        assert {s for s, _ in shapes} == set(ITEM_BYTES.values())
        assert {n for _, n in shapes} >= {1, 65_536}
        assert all(n * s <= suite.max_bytes for s, n in shapes if n > 1)

    def test_the_cpu_suite_caps_the_interpreted_kernel(self):
        suite = get_suite("default", "cpu")
        assert max(n for _, n in suite.transfer_shapes("kernel")) <= suite.kernel_max_items
        assert max(n for _, n in suite.transfer_shapes("copy_engine")) > suite.kernel_max_items

    def test_an_unknown_suite_is_an_input_error(self):
        with pytest.raises(InputError, match="unknown suite"):
            get_suite("huge", "cpu")

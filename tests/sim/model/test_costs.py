"""sim.model.costs: the cost-table format, its lookups, its errors, and the regression comparison."""

import json
import subprocess
import sys

import pytest

from sim.base.errors import InputError
from sim.model.costs import (
    CostEntry,
    CostFit,
    CostLookupError,
    CostTable,
    TableSource,
    compare_tables,
    default_cost_table,
    load_cost_table,
    resolve_cost_table,
    write_cost_table,
)


@pytest.fixture(scope="module")
def spec() -> CostTable:
    return default_cost_table()


def _table(entries, fits=None, device="cpu", version=1) -> CostTable:
    source = TableSource("measured", device, torch="2.13.0", date="2026-11-29")
    ceilings = {"h2d": 50.0, "d2h": 50.0, "h2d_bidir": 25.0, "d2h_bidir": 50.0}
    return CostTable(source, ceilings, tuple(entries), fits or {}, "t.json", version)


def _entry(n, size, t, op="h2d", backend="copy_engine"):
    return CostEntry(op, backend, size, n, t, t * 0.9, t * 1.1)


class TestDefaultTable:
    def test_it_is_labelled_spec_derived(self, spec):
        assert spec.source.kind == "spec-derived"
        assert "spec-derived" in spec.describe()

    def test_every_op_and_backend_has_a_fit(self, spec):
        assert {("h2d", b) for b in ("copy_engine", "batched", "kernel")} <= spec.fits.keys()
        assert ("swap_in", "kernel") in spec.fits

    def test_notes_trace_every_parameter_to_a_source(self, spec):
        for op, backend in spec.fits:
            assert any(n.startswith(f"{op}/{backend}:") for n in spec.source.notes)


class TestTransferSeconds:
    def test_no_items_cost_nothing(self, spec):
        assert spec.transfer_seconds("h2d", "kernel", 0, 584) == 0.0

    def test_a_grid_point_returns_its_median(self):
        table = _table([_entry(1, 100, 1e-5), _entry(16, 100, 4e-5)])
        assert table.transfer_seconds("h2d", "copy_engine", 16, 100) == pytest.approx(4e-5)

    def test_interpolation_is_log_log_in_items(self):
        table = _table([_entry(1, 100, 1e-5), _entry(16, 100, 16e-5)])
        assert table.transfer_seconds("h2d", "copy_engine", 4, 100) == pytest.approx(4e-5)

    def test_time_grows_with_item_size_between_and_beyond_grid_rows(self, spec):
        sizes = [584, 1000, 10_000, 37_440, 100_000, 149_760, 1_000_000, 9_158_208, 20_000_000]
        for backend in ("copy_engine", "batched", "kernel"):
            times = [spec.transfer_seconds("h2d", backend, 64, size) for size in sizes]
            assert times == sorted(times), backend

    def test_time_grows_with_item_count(self, spec):
        times = [spec.transfer_seconds("d2h", "batched", n, 37_440) for n in (1, 3, 16, 100, 4096, 10**6)]
        assert times == sorted(times)

    def test_beyond_the_grid_the_fit_answers(self):
        fit = CostFit(latency_s=1e-6, bandwidth_Bps=1e9)
        table = _table([_entry(1, 100, 2e-6)], {("h2d", "copy_engine"): fit})
        assert table.transfer_seconds("h2d", "copy_engine", 1000, 100) == pytest.approx(1e-6 + 1e-4)

    def test_strict_mode_refuses_far_extrapolation(self):
        fit = CostFit(latency_s=1e-6, bandwidth_Bps=1e9)
        table = _table([_entry(1, 100, 2e-6), _entry(16, 100, 3e-6)], {("h2d", "copy_engine"): fit})
        table.max_extrapolation = 4.0
        assert table.transfer_seconds("h2d", "copy_engine", 64, 100) > 0  # 4x beyond: allowed
        with pytest.raises(
            CostLookupError, match=r"h2d/copy_engine 1000 x 100 B lies 62\.5x outside.*16 x 100 B"
        ):
            table.transfer_seconds("h2d", "copy_engine", 1000, 100)

    def test_a_missing_op_names_the_shape_and_the_nearest_measured_one(self):
        table = _table([_entry(16, 584, 1e-5), _entry(256, 584, 1e-4)])
        with pytest.raises(CostLookupError) as err:
            table.transfer_seconds("d2h", "kernel", 64, 584)
        message = str(err.value)
        assert "no d2h/kernel data for 64 x 584 B" in message
        assert (
            "nearest measured shape: h2d/copy_engine 16 x 584 B (4x fewer items, same bytes per item)"
            in message
        )
        assert isinstance(err.value, InputError)

    def test_repeated_lookups_are_memoised(self, spec):
        first = spec.transfer_seconds("h2d", "kernel", 123, 584)
        assert spec.transfer_seconds("h2d", "kernel", 123, 584) == first
        assert ("h2d", "kernel", 123, 584) in spec._memo


class TestSwapInSeconds:
    def test_more_misses_cost_more(self, spec):
        times = [spec.swap_in_seconds(16, 512, m, 584) for m in (0, 100, 1000, 8192)]
        assert times == sorted(times) and times[0] < times[-1]

    def test_an_empty_batch_costs_nothing(self, spec):
        assert spec.swap_in_seconds(0, 512, 0, 584) == 0.0

    def test_more_misses_than_lookups_is_a_bug(self, spec):
        with pytest.raises(ValueError, match="n_misses"):
            spec.swap_in_seconds(1, 4, 5, 584)

    def test_a_table_without_swap_in_says_so(self):
        with pytest.raises(CostLookupError, match="no swap_in/kernel data"):
            _table([_entry(1, 584, 1e-5)]).swap_in_seconds(1, 4, 2, 584)


class TestLoading:
    def test_a_written_table_reads_back_equal(self, tmp_path, spec):
        write_cost_table(spec, tmp_path / "t.json")
        again = load_cost_table(tmp_path / "t.json")
        assert again.entries == spec.entries and again.fits == spec.fits and again.source == spec.source

    def test_resolve_names_the_default_or_a_file(self, tmp_path, spec):
        assert resolve_cost_table(None).source.kind == "spec-derived"
        write_cost_table(spec, tmp_path / "mine.json")
        assert resolve_cost_table("mine", search_dir=tmp_path).path == str(tmp_path / "mine.json")

    def test_a_truncated_file_names_the_file_and_line(self, tmp_path, spec):
        path = tmp_path / "cut.json"
        path.write_text(json.dumps(spec.to_json(), indent=1)[:500])
        with pytest.raises(InputError, match=r"cut\.json:\d+: malformed JSON \(corrupt or truncated\?\)"):
            load_cost_table(path)

    def test_a_missing_file_is_an_input_error(self, tmp_path):
        with pytest.raises(InputError, match="cannot read cost table"):
            load_cost_table(tmp_path / "absent.json")

    @pytest.mark.parametrize(
        ("edit", "message"),
        [
            (lambda d: d.update(schema="other"), "schema: expected 'hicache-sim/cost-table'"),
            (lambda d: d.update(version=2), "version: unknown cost-table version 2"),
            (
                lambda d: d["entries"][0].update(median_s=-1.0),
                r"entries\[0\]\.median_s: must be non-negative",
            ),
            (lambda d: d["entries"][3].pop("n_items"), r"entries\[3\]\.n_items: missing"),
            (
                lambda d: d["entries"][0].update(item_bytes="584"),
                r"entries\[0\]\.item_bytes: must be an integer",
            ),
            (lambda d: d["ceilings"].pop("d2h_bidir"), r"ceilings\.d2h_bidir: missing"),
            (lambda d: d["fits"][0].update(bandwidth_Bps=0), r"fits\[0\]\.bandwidth_Bps: must be positive"),
            (
                lambda d: d["source"].update(kind="guessed"),
                r"source\.kind: must be one of measured, spec-derived",
            ),
        ],
    )
    def test_invalid_fields_are_named(self, tmp_path, spec, edit, message):
        data = spec.to_json()
        edit(data)
        path = tmp_path / "bad.json"
        path.write_text(json.dumps(data))
        with pytest.raises(InputError, match=message) as err:
            load_cost_table(path)
        assert str(err.value).startswith(str(path))


class TestCompare:
    def test_a_table_matches_itself(self, spec):
        report = compare_tables(spec, spec, 0.1)
        assert report.exit_code == 0 and not report.regressions and len(report.rows) > 100

    def test_a_slower_entry_beyond_tolerance_is_a_regression(self):
        base = _table([_entry(1, 584, 1e-5), _entry(16, 584, 2e-5)])
        new = _table([_entry(1, 584, 1.05e-5), _entry(16, 584, 3e-5)])
        report = compare_tables(new, base, 0.10)
        assert [r.label for r in report.regressions] == ["h2d/copy_engine 16 x 584 B"]
        assert report.exit_code == 1 and "FAIL" in report.format()

    def test_a_faster_entry_is_an_improvement(self):
        report = compare_tables(_table([_entry(1, 584, 1e-5)]), _table([_entry(1, 584, 2e-5)]), 0.10)
        assert len(report.improvements) == 1 and report.exit_code == 0

    def test_another_device_is_incompatible_unless_allowed(self):
        base, new = _table([_entry(1, 584, 1e-5)]), _table([_entry(1, 584, 1e-5)], device="NVIDIA H200")
        with pytest.raises(InputError, match="device 'NVIDIA H200' vs baseline 'cpu'"):
            compare_tables(new, base, 0.1)
        assert compare_tables(new, base, 0.1, allow_device_change=True).warnings == [
            "device changed: cpu -> NVIDIA H200"
        ]

    def test_another_schema_version_is_incompatible(self):
        with pytest.raises(InputError, match="schema version"):
            compare_tables(_table([], version=2), _table([]), 0.1)


def test_sim_costs_does_not_import_torch():
    code = "import sys, sim.model.costs; sim.model.costs.default_cost_table(); assert 'torch' not in sys.modules and 'triton' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


class TestComputeSection:
    def test_round_trips_with_its_source(self, spec, tmp_path):
        import dataclasses

        fitted = {"mfu": 0.2, "mbu": 0.8, "step_overhead_ms": 5.0, "attn_flops_scale": 1.0,
                  "source": {"kind": "measured-fit", "device": "H20"}}  # fmt: skip
        table = dataclasses.replace(spec, compute=fitted, path=None)
        write_cost_table(table, tmp_path / "t.json")
        back = load_cost_table(tmp_path / "t.json")
        assert back.compute == fitted
        assert back.compute_params == {"mfu": 0.2, "mbu": 0.8, "step_overhead_ms": 5.0, "attn_flops_scale": 1.0}

    def test_a_table_without_one_has_no_fitted_parameters(self, spec):
        assert spec.compute_params == {}

    @pytest.mark.parametrize(("field", "value", "message"), [
        ("mfu", 1.5, "compute.mfu: must be at most 1"),
        ("mbu", -1, "compute.mbu: must be"),
        ("speed", 1, "compute.speed: unknown field"),
    ])  # fmt: skip
    def test_bad_values_name_the_field(self, spec, field, value, message):
        data = spec.to_json()
        data["compute"] = {"mfu": 0.3, field: value}
        with pytest.raises(InputError, match=message):
            from sim.model.costs import parse_cost_table

            parse_cost_table(data, "t.json")

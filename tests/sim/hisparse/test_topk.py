"""Top-k access streams: the synthetic indexer and the recorded-trace file format."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sim.base.errors import InputError
from sim.hisparse.topk import (
    ParametricAccess,
    ParametricAccessParams,
    TopkTrace,
    TraceAccess,
    load_topk_trace,
    save_topk_trace,
)


def small_trace() -> TopkTrace:
    return TopkTrace.from_rows(
        step=np.array([0, 1, 2, 0, 1]),
        request=np.array([7, 7, 7, 8, 8]),
        layer=np.array([0, 0, 0, 0, 0]),
        seq_len=np.array([40, 41, 42, 20, 21]),
        ids=[np.array([0, 3, 9]), np.array([9, 9]), np.array([], dtype=np.int64), np.array([4]), np.array([0, 1])],
    )


# --- synthetic indexer ------------------------------------------------------------------------------


def test_parametric_rows_hold_top_k_distinct_ids_below_the_compressed_length():
    s = ParametricAccess().stream(0, 0, input_len=40_000, n_steps=50, top_k=512, rng=np.random.default_rng(1))
    for row, L in zip(s.ids, s.seq_len, strict=True):
        assert np.unique(row).size == 512
        assert row.min() >= 0 and row.max() < L // 4


def test_parametric_selects_the_sinks_and_the_most_recent_ids():
    p = ParametricAccessParams(sink_tokens=4, recent_fraction=0.25)
    s = ParametricAccess(p).stream(0, 0, 40_000, 5, 512, np.random.default_rng(2))
    n = s.seq_len[0] // 4
    assert set(range(4)) <= set(s.ids[0].tolist())
    assert set(range(n - 128, n)) <= set(s.ids[0].tolist())


def test_parametric_short_sequence_selects_everything():
    s = ParametricAccess().stream(0, 0, 100, 3, 512, np.random.default_rng(0))
    assert sorted(s.ids[0][s.ids[0] >= 0].tolist()) == list(range(25))


def test_parametric_is_deterministic_for_a_seed():
    a = ParametricAccess().stream(0, 0, 20_000, 20, 64, np.random.default_rng(5))
    b = ParametricAccess().stream(0, 0, 20_000, 20, 64, np.random.default_rng(5))
    assert np.array_equal(a.ids, b.ids)


def test_higher_overlap_means_more_ids_shared_by_consecutive_steps():
    def shared(overlap: float) -> float:
        p = ParametricAccessParams(overlap=overlap, recent_fraction=0.0, sink_tokens=0)
        s = ParametricAccess(p).stream(0, 0, 100_000, 30, 256, np.random.default_rng(3))
        return np.mean([np.intersect1d(s.ids[i], s.ids[i + 1]).size for i in range(29)])

    assert shared(0.9) > shared(0.0) + 100


def test_parameters_out_of_range_are_rejected():
    with pytest.raises(ValueError, match="overlap"):
        ParametricAccessParams(overlap=1.5)


# --- trace files -------------------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", [".npz", ".parquet"])
def test_save_then_load_round_trips(tmp_path, suffix):
    trace = small_trace()
    path = tmp_path / f"topk{suffix}"
    save_topk_trace(path, trace)
    back = load_topk_trace(path)
    for name in ("step", "request", "layer", "seq_len", "ids", "offsets"):
        assert np.array_equal(getattr(back, name), getattr(trace, name)), name
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary left behind


def test_replay_maps_requests_onto_recorded_streams():
    access = TraceAccess(small_trace())
    s = access.stream(1, 0, input_len=0, n_steps=10, top_k=512, rng=np.random.default_rng(0))
    assert s.seq_len.tolist() == [20, 21]
    assert s.ids.tolist() == [[4, -1], [0, 1]]


def write_parquet(path, **cols):
    pq.write_table(pa.table(cols), path)


GOOD = dict(step=[0, 1], request=[0, 0], layer=[0, 0], seq_len=[40, 41], ids=[[1, 2], [3]])


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"seq_len": None}, "missing column(s) seq_len"),
        ({"ids": [[1, -2], [3]]}, "negative id at row 0"),
        ({"ids": [[1, 10], [3]]}, "id 10 at row 0 (step 0) is beyond the compressed length 10"),
        ({"step": [1, 1]}, "steps not strictly increasing for request 0 layer 0 at row 1"),
        ({"step": [0.5, 1.0]}, "column 'step' must hold integers"),
        ({"step": [], "request": [], "layer": [], "seq_len": [], "ids": pa.array([], pa.list_(pa.int64()))},
         "no rows"),
    ],
)
def test_malformed_trace_names_the_file_and_the_problem(tmp_path, change, problem):
    cols = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    path = tmp_path / "bad.parquet"
    write_parquet(path, **cols)
    with pytest.raises(InputError) as exc:
        load_topk_trace(path)
    assert str(path) in str(exc.value)
    assert problem in str(exc.value)


def test_npz_without_offsets_is_rejected(tmp_path):
    path = tmp_path / "bad.npz"
    np.savez(path, step=[0], request=[0], layer=[0], seq_len=[8], ids=[1])
    with pytest.raises(InputError, match="missing column.*offsets"):
        load_topk_trace(path)


def test_unreadable_or_misnamed_files_are_input_errors(tmp_path):
    junk = tmp_path / "junk.parquet"
    junk.write_bytes(b"not parquet")
    with pytest.raises(InputError, match="cannot read"):
        load_topk_trace(junk)
    with pytest.raises(InputError, match=r"\.parquet or \.npz"):
        load_topk_trace(tmp_path / "trace.csv")
    with pytest.raises(InputError, match="not found"):
        load_topk_trace(tmp_path / "absent.npz")

"""Run recording: link busy time per window, percentiles."""

import numpy as np
import pytest

from sim.serve.metrics import Recorder, SampleBuffer, busy_fraction, dropped_by_reason, percentiles


def test_busy_fraction_counts_the_overlap_of_each_window_with_busy_intervals():
    busy = [(1.0, 2.0, 0), (3.0, 3.5, 0)]
    lo, hi = np.array([0.0, 1.5, 2.0, 3.0]), np.array([1.0, 2.5, 4.0, 3.25])
    assert busy_fraction(busy, lo, hi) == pytest.approx([0.0, 0.5, 0.25, 1.0])


def test_link_utilization_is_busy_time_over_the_horizon_per_instance():
    rec = Recorder()
    rec.transfer(0, "d2h", 0.0, 1.0, 100)
    rec.transfer(1, "d2h", 0.5, 1.5, 50)
    assert rec.link_utilization("d2h", instances=2, horizon=4.0) == pytest.approx(0.25)
    assert rec.link_bytes("d2h") == 150 and rec.link_bytes("h2d") == 0


def test_percentiles_of_nothing_are_zero():
    assert percentiles([]) == {"mean": 0.0, "p50": 0.0, "p90": 0.0, "p99": 0.0}
    assert percentiles([1.0, 3.0])["mean"] == 2.0


def test_dropped_tokens_by_reason_sum_the_pool_label_and_add_the_simulators_own():
    m = {"hicache_dropped_tokens_total": {"host_pressure": {"kv": 3}, "write_through_unbacked_eviction": {"kv": 0}},
         "sim_device_full_tokens_total": 5}  # fmt: skip
    assert dropped_by_reason(m) == {"host_pressure": 3, "write_through_unbacked_eviction": 0, "device_full": 5}
    assert dropped_by_reason({}) == {}


def test_a_sample_buffer_keeps_every_other_tick_past_its_limit():
    buf = SampleBuffer(rows_per_tick=2, max_rows=10)
    for tick in range(1, 101):
        for inst in range(2):
            buf.append((tick, inst))
    assert len(buf) <= 10 and buf.stride == 32  # 6 ticks at stride 16 were 12 rows
    assert list(buf) == [(t, i) for t in (32, 64, 96) for i in range(2)]


def test_a_sampler_asks_before_building_a_tick_and_rows_are_held_as_values():
    """A thinned tick costs no row (``wants_tick``); dict rows are held as their values and read back whole."""
    buf, built = SampleBuffer(rows_per_tick=2, max_rows=10), 0
    for tick in range(1, 101):
        if not buf.wants_tick():
            continue
        for inst in range(2):
            built += 1
            buf.append({"time_s": float(tick), "instance": inst})
    assert list(buf) == [{"time_s": float(t), "instance": i} for t in (32, 64, 96) for i in range(2)]
    assert buf.stride == 32 and built < 2 * 40  # the same ticks as appending every row, most never built
    assert all(type(row) is not dict for row in list.__iter__(buf))

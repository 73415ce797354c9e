"""The roofline step-time model."""

import pytest

from sim.compute import Roofline, attention_pairs

ROOF = Roofline(flops_per_token=2e10, attn_flops_per_pair=1e6, weight_bytes=1e10, kv_bytes_per_token=4000,
                peak_flops=1e15, hbm_Bps=4e12, mfu=0.5, mbu=0.5, overhead_s=0.002)  # fmt: skip


def test_attention_pairs_count_causal_query_key_pairs():
    assert attention_pairs(1, 0) == 1
    assert attention_pairs(3, 0) == 1 + 2 + 3
    assert attention_pairs(2, 10) == 11 + 12


def test_prefill_is_compute_bound_and_grows_with_context():
    short = ROOF.prefill_seconds(1000, attention_pairs(1000, 0))
    long = ROOF.prefill_seconds(1000, attention_pairs(1000, 100_000))
    assert short == pytest.approx((1000 * 2e10 + attention_pairs(1000, 0) * 1e6) / 5e14)
    assert long > short


def test_decode_reads_the_weights_once_and_each_requests_kv():
    assert ROOF.decode_seconds(0, 0) == 0.0
    assert ROOF.decode_seconds(8, 10_000) == pytest.approx((1e10 + 10_000 * 4000) / 2e12)


def test_a_mixed_step_takes_the_longer_part_plus_overhead():
    p = ROOF.prefill_seconds(4096, attention_pairs(4096, 0))
    d = ROOF.decode_seconds(64, 64 * 2000)
    assert ROOF.step_seconds(4096, attention_pairs(4096, 0), 64, 64 * 2000) == pytest.approx(max(p, d) + 0.002)

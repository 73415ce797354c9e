"""The roofline step-time model."""

import pytest

from sim.model.compute import Roofline, attention_pairs

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


def test_attention_scale_multiplies_the_context_term_only():
    import dataclasses

    scaled = dataclasses.replace(ROOF, attn_scale=2.0)
    pairs = attention_pairs(1000, 5000)
    extra = scaled.prefill_seconds(1000, pairs) - ROOF.prefill_seconds(1000, pairs)
    assert extra == pytest.approx(pairs * 1e6 / 5e14)


def test_a_moe_decode_step_reads_more_experts_as_the_batch_grows():
    import dataclasses

    moe = dataclasses.replace(ROOF, expert_bytes=1e8, n_experts=256, experts_per_token=8)
    assert moe.experts_touched(1) == pytest.approx(8)
    assert moe.experts_touched(32) == pytest.approx(256 * (1 - (1 - 8 / 256) ** 32))
    assert moe.experts_touched(10_000) == pytest.approx(256)
    assert moe.decode_seconds(32, 0) > moe.decode_seconds(1, 0) > ROOF.decode_seconds(1, 0)


def test_a_request_constant_read_is_charged_per_request():
    import dataclasses

    windowed = dataclasses.replace(ROOF, kv_bytes_per_request=1e6)
    assert windowed.decode_bytes(4, 0) - ROOF.decode_bytes(4, 0) == pytest.approx(4e6)


def test_fitted_efficiencies_fill_what_the_scenario_leaves_null():
    from sim.scenario.load import scenario_from_dict

    fitted = {"mfu": 0.2, "mbu": 0.9, "step_overhead_ms": 6.0, "attn_flops_scale": 1.5}
    unset = scenario_from_dict({"name": "t"})
    r = Roofline.from_scenario(unset, fitted)
    assert (r.mfu, r.mbu, r.overhead_s, r.attn_scale) == (0.2, 0.9, 0.006, 1.5)
    assert Roofline.from_scenario(unset).mfu == 0.4  # no table: the spec estimate
    pinned = scenario_from_dict({"name": "t", "compute": {"mfu": 0.5}})
    assert Roofline.from_scenario(pinned, fitted).mfu == 0.5

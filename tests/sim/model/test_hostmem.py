"""Pinned host memory per candidate, pool by pool, checked as SGLang checks it at start."""

import pytest

from sim.model.hostmem import (
    RESERVE_BYTES,
    V4_AUTO_REFUSED,
    V4_SIZE_REFUSED,
    auto_ratio,
    host_bytes,
    host_candidate,
    largest_fitting_ratio,
)
from sim.model.pools import get_model

V4 = get_model("deepseek-v4-flash")
MLA = get_model("generic", page_size=64, bytes_per_token=35136)


def cand(model=V4, **kw):
    args = dict(l1_pages=1000, swa_ratio=0.1, page_tokens=256, tp_size=8, node_dram_gb=2048, gpus_per_node=8)
    return host_candidate(model, **{**args, **kw})


def test_v4_paged_pools_pin_device_pages_times_the_ratio_on_their_anchor():
    c = cand(ratio=4.0)
    assert c.l2_pages == 4000 and c.l2_swa_pages == 400
    for pool in V4.pools:
        pages = 4000 if pool.anchor == "kv" else 400
        assert c.pool_bytes.get(pool.name, 0) == pages * pool.bytes_per_page
    assert c.per_rank == host_bytes(V4, 1000, 4000, 0.1, 256)
    assert c.per_node == 8 * c.per_rank  # every TP rank pins its own copy


def test_a_host_size_on_the_curve_costs_what_the_candidate_of_its_ratio_does():
    c = cand(ratio=2.0, l1_pages=550, swa_ratio=0.0985)  # 54 SWA device pages: 108 on host, not 10% of 1,100
    assert c.l2_pages == 1100 and c.l2_swa_pages == 108
    assert host_bytes(V4, 550, 1100, 0.0985, 256) == c.per_rank


def test_a_single_pool_host_pool_gets_sglangs_padding_page():
    c = cand(MLA, ratio=2.0, swa_ratio=0.0)
    assert c.pool_bytes["kv"] == (2000 + 1) * 35136 * 256


def test_a_candidate_past_the_node_is_refused_with_sglangs_message():
    c = cand(MLA, ratio=64.0, swa_ratio=0.0, node_dram_gb=200)
    assert c.status == "refused" and c.per_rank > c.budget_per_rank
    assert c.reason.startswith("Not enough host memory available. Requesting")
    assert c.budget_per_rank == (200 * 10**9 - RESERVE_BYTES) // 8


def test_v4_names_the_first_paged_pool_that_does_not_fit():
    c = cand(ratio=16.0, node_dram_gb=200)
    assert c.status == "refused"
    left, first = c.budget_per_rank, None
    for name, b in c.pool_bytes.items():  # pinned one after another: each against what is left
        if b > left:
            first = name
            break
        left -= b
    assert first is not None and first != next(iter(c.pool_bytes))  # the first pools fit, a later one does not
    assert c.reason.startswith(f"Not enough host memory for V4 paged pool {first}. Requesting")


def test_v4_refuses_hicache_size_and_auto_sizing_as_sglang_does():
    assert (cand(size_gb=100.0).status, cand(size_gb=100.0).reason) == ("refused", V4_SIZE_REFUSED)
    assert auto_ratio(V4, l1_pages=1000, swa_ratio=0.1, page_tokens=256, node_dram_gb=300, ranks_per_node=8) is None
    assert "auto-sizing does not support DeepSeekV4TokenToKVPool" in V4_AUTO_REFUSED


def test_a_host_pool_no_larger_than_the_device_pool_starts_with_sglangs_warning():
    assert cand(MLA, ratio=1.0, swa_ratio=0.0).status == "warning"
    assert cand(MLA, ratio=1.5, swa_ratio=0.0).status == "ok"
    assert cand(ratio=1.0).status == "ok"  # V4's paged host pools are built without that warning


def test_hicache_size_is_gb_over_the_bytes_of_a_page():
    c = cand(MLA, size_gb=100.0, swa_ratio=0.0)
    assert c.l2_pages == int(100e9 // (35136 * 256)) and c.status == "ok"
    assert c.flag == "--hicache-size 100"


def test_auto_sizing_lowers_the_default_ratio_until_the_pools_fit_the_fraction():
    device = 20000 * 256 * 35136
    budget = (300 * 10**9 - RESERVE_BYTES) // 8
    r = auto_ratio(MLA, l1_pages=20000, swa_ratio=0.0, page_tokens=256, node_dram_gb=300, ranks_per_node=8)
    assert r == pytest.approx(budget * 0.8 * 0.95 / device) and r < 2.0
    assert auto_ratio(MLA, l1_pages=10, swa_ratio=0.0, page_tokens=256, node_dram_gb=3000, ranks_per_node=8) == 2.0


def fit(model=V4, **kw):
    args = dict(l1_pages=1000, swa_ratio=0.1, page_tokens=256, tp_size=8, node_dram_gb=2048, gpus_per_node=8)
    return largest_fitting_ratio(model, **{**args, **kw})


@pytest.mark.parametrize("model", [V4, MLA])
@pytest.mark.parametrize("pinnable_gb", [None, 400.0, 50.0])
def test_the_largest_fitting_ratio_fits_and_the_next_step_does_not(model, pinnable_gb):
    r = fit(model, pinnable_gb=pinnable_gb)
    assert r > 0
    ceiling = float("inf") if pinnable_gb is None else pinnable_gb * 1e9
    here, nxt = cand(model, ratio=r), cand(model, ratio=round(r + 0.01, 6))
    assert here.status != "refused" and here.per_node <= ceiling
    assert nxt.status == "refused" or nxt.per_node > ceiling


def test_the_largest_ratio_is_what_the_pinnable_ceiling_over_the_per_node_pools_allows():
    per_unit = host_bytes(MLA, 1000, 1000, 0.0, 256) * 8  # ratio 1.0 on 8 ranks
    r = fit(MLA, pinnable_gb=per_unit * 3.5 / 1e9)
    assert 3.4 <= r <= 3.5  # the padding page takes a sliver
    assert fit(MLA, pinnable_gb=per_unit * 3.5 / 1e9, node_dram_gb=1.0) == 0.0  # DRAM below the reserve: none

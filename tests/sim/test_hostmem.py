"""Pinned host memory per candidate, pool by pool, checked as SGLang checks it at start."""

import pytest

from sim.hostmem import RESERVE_BYTES, auto_ratio, host_bytes, host_candidate
from sim.pools import get_model

V4 = get_model("deepseek-v4-flash")


def cand(**kw):
    args = dict(l1_pages=1000, swa_ratio=0.1, page_tokens=256, tp_size=8, node_dram_gb=2048, gpus_per_node=8)
    return host_candidate(V4, **{**args, **kw})


def test_every_pool_pins_its_pages_plus_sglangs_padding_page():
    c = cand(ratio=4.0)
    assert c.l2_pages == 4000 and c.l2_swa_pages == 400
    for pool in V4.pools:
        pages = 4000 if pool.anchor == "kv" else 400
        assert c.pool_bytes.get(pool.name, 0) == ((pages + 1) * pool.bytes_per_page if pool.bytes_per_page else 0)
    assert c.per_rank == host_bytes(V4, 4000, 0.1, 256)
    assert c.per_node == 8 * c.per_rank  # every TP rank pins its own copy


def test_a_candidate_past_the_node_is_refused_with_sglangs_message():
    c = cand(ratio=16.0, node_dram_gb=200)
    assert c.status == "refused"
    assert c.reason.startswith("Not enough host memory available. Requesting")
    assert c.budget_per_rank == (200 * 10**9 - RESERVE_BYTES) // 8
    assert c.per_rank > c.budget_per_rank


def test_a_host_pool_no_larger_than_the_device_pool_starts_with_sglangs_warning():
    assert cand(ratio=1.0).status == "warning"
    assert cand(ratio=1.5).status == "ok"


def test_hicache_size_is_gb_over_the_bytes_of_a_page_of_every_pool():
    c = cand(size_gb=100.0)
    assert c.l2_pages == int(100e9 // V4.bytes_per_page)
    assert c.flag == "--hicache-size 100"


def test_auto_sizing_lowers_the_default_ratio_until_the_pools_fit_the_fraction():
    device = 20000 * (V4.group_bytes_per_page("kv") + 0.1 * V4.group_bytes_per_page("swa"))
    budget = (300 * 10**9 - RESERVE_BYTES) // 8
    r = auto_ratio(V4, l1_pages=20000, swa_ratio=0.1, page_tokens=256, node_dram_gb=300, ranks_per_node=8)
    assert r == pytest.approx(budget * 0.8 * 0.95 / device) and r < 2.0
    assert auto_ratio(V4, l1_pages=10, swa_ratio=0.1, page_tokens=256, node_dram_gb=3000, ranks_per_node=8) == 2.0

"""Host pools as SGLang 0.5.23 builds them, pool by pool, at ``--hicache-ratio 3``: which pools the ratio scales
on the Full device pages, which on the SWA device pages, and which are not host pools at all."""

from __future__ import annotations

import math

import pytest

from sim.model.hostmem import host_candidate
from sim.model.hostpools import host_pool_bytes, host_pools, v4_host_pages
from sim.model.pools import generic_model, get_model
from sim.model.unified_kv import unified_model

RATIO = 3.0
FULL_DEVICE_PAGES, SWA_DEVICE_PAGES = 12_800, 1_280


def _v4_layer_page(slots: int, slot_bytes: int, align: int = 1) -> int:
    """Bytes of one layer's page as deepseek_v4_memory_pool.py pads it (bytes_per_page_padded)."""
    return math.ceil(slots * slot_bytes / align) * align


def test_v4_pro_on_cuda_scales_full_anchored_pools_on_full_pages_and_the_rest_on_swa_pages():
    # hybrid_pool_assembler.py:667-676: int(device pages x ratio), Full and SWA counted apart
    full, swa = v4_host_pages(FULL_DEVICE_PAGES, SWA_DEVICE_PAGES, RATIO)
    assert (full, swa) == (38_400, 3_840)
    got = {p.name: (p.pages, p.nbytes) for p in host_pools(get_model("deepseek-v4-pro"), full, swa, 256)}
    want = {  # layers x the padded page of one layer (V4 layout: 584-B rows, 576-B alignment), x pages
        "swa": (swa, swa * 61 * _v4_layer_page(256, 584, 576)),
        "c4": (full, full * 30 * _v4_layer_page(64, 584, 576)),
        "c4_indexer": (full, full * 30 * _v4_layer_page(64, 132)),  # the indexer takes the Full count too (:1084-1098)
        "c128": (full, full * 31 * _v4_layer_page(2, 584, 576)),
        "c4_state": (swa, swa * 30 * 8 * 2 * 2 * 512 * 4),  # ring rows x fp32 state row (:1114-1146)
        "c4_indexer_state": (swa, swa * 30 * 8 * 2 * 2 * 128 * 4),
    }
    assert got == want  # the kv anchor is logical (no bytes); the C128 state is not registered


def test_v41_has_no_state_rings_and_its_low_ratio_pools_take_the_full_count():
    names = {p.name: p.pages for p in host_pools(get_model("deepseek-v4.1-flash"), 300, 30, 256)}
    assert names == {"swa": 30, "c1": 300, "c1_indexer": 300, "c1_indexer_scale": 300, "c2": 300,
                     "c2_indexer": 300, "c2_indexer_scale": 300}  # fmt: skip


def test_a_single_pool_model_gets_sglangs_padding_page():
    model = generic_model(81_920)  # Qwen3-14B at TP2: 81,920 B a token per rank
    device_tokens = 41_283
    l2 = int(device_tokens * RATIO)  # pool_host/base.py:226
    (pool,) = host_pools(model, l2, 0, 1)
    assert pool.pages == l2 + 1 and pool.nbytes == (l2 + 1) * 81_920  # page_num = size // page_size + 1


def test_rocm_unified_v4_pro_at_ratio_3_gives_the_published_host_pools():
    # 8 x MI355X, fp4 indexer, --hicache-ratio 3: c4 164.86, c4_indexer 10.30, its scale 0.64, c128 5.32 GB a rank
    model = unified_model("deepseek-v4-pro", fp4_indexer=True)
    full, _ = v4_host_pages(27_951, 0, RATIO)
    got = {p.name: round(p.nbytes / 1e9, 2) for p in host_pools(model, full, 0, 256)}
    assert got == {"c4": 164.86, "c4_indexer": 10.30, "c4_indexer_scale": 0.64, "c128": 5.32}


def test_the_host_memory_check_counts_each_pool_at_its_own_count():
    model = get_model("deepseek-v4-pro")
    cand = host_candidate(model, l1_pages=FULL_DEVICE_PAGES, swa_ratio=0.1, page_tokens=256, tp_size=8,
                          node_dram_gb=2_960, gpus_per_node=8, ratio=RATIO)  # fmt: skip
    full, swa = v4_host_pages(FULL_DEVICE_PAGES, SWA_DEVICE_PAGES, RATIO)
    assert cand.per_rank == host_pool_bytes(model, full, swa, 256)
    every_pool_at_full = full * model.bytes_per_page
    assert cand.per_rank < every_pool_at_full / 2  # SWA-anchored pools hold a tenth of the pages


@pytest.mark.parametrize("model", [unified_model("deepseek-v4-pro"), get_model("deepseek-v4-flash")])
def test_deepseek_v4_refuses_hicache_size_on_either_layout(model):
    cand = host_candidate(model, l1_pages=1_000, swa_ratio=0.1, page_tokens=256, tp_size=8, node_dram_gb=2_000,
                          gpus_per_node=8, size_gb=100)  # fmt: skip
    assert cand.status == "refused" and "does not support --hicache-size" in cand.reason

"""The GPU catalog and SGLang 0.5.23's KV memory rule."""

from __future__ import annotations

import pytest

from sim.base.errors import InputError
from sim.model.hardware import (
    default_chunked_prefill_size,
    default_mem_fraction_static,
    get_gpu,
    gpu_names,
    kv_budget_bytes,
)


def test_the_catalog_covers_the_gpus_users_run_each_with_a_source():
    assert {"H20", "H100", "H800", "H200", "B200", "B300", "A10", "MI300X", "MI355X"} <= set(gpu_names())
    for name in gpu_names():
        g = get_gpu(name)
        assert g.source and g.hbm_tbps > 0 and g.memory_mib > 0 and g.tflops["bf16"] > 0 and g.host_link_gbps > 0


def test_lookup_ignores_case_and_names_the_known_gpus_on_a_miss():
    assert get_gpu("h20").name == "H20"
    with pytest.raises(InputError, match="known: H20"):
        get_gpu("Z9000")


def test_a_dtype_the_gpu_lacks_runs_at_its_bf16_rate():
    assert get_gpu("A10").peak_tflops("fp8") == get_gpu("A10").tflops["bf16"]
    assert get_gpu("H20").peak_tflops("fp8") == 296


def test_default_chunk_follows_the_memory_tier():
    assert default_chunked_prefill_size(get_gpu("A10").memory_mib) == 4096
    assert default_chunked_prefill_size(get_gpu("H100").memory_mib) == 8192
    assert default_chunked_prefill_size(get_gpu("H20").memory_mib) == 8192
    assert default_chunked_prefill_size(get_gpu("B200").memory_mib) == 16384


def test_default_mem_fraction_small_gpu_sums_the_reservations():
    # A10, TP2, chunk 4096: 512 + 1.5 x 4096 + 2/8 x 1024 + 2 x 48 (decode graphs, tp < 4)
    # + 8 MiB x 50 prefill-graph buckets up to 4096 tokens.
    reserved = 512 + 6144 + 256 + 96 + 8 * 50
    mem = get_gpu("A10").memory_mib
    assert default_mem_fraction_static(get_gpu("A10"), tp_size=2) == round((mem - reserved) / mem, 3)


def test_default_mem_fraction_large_gpu_reserves_at_least_10_gib():
    mem = get_gpu("H200").memory_mib
    frac = default_mem_fraction_static(get_gpu("H200"), tp_size=1, chunked_prefill_size=2048)
    assert frac == round((mem - 10 * 1024) / mem, 3)


def test_kv_budget_is_the_static_share_less_the_weights():
    g = get_gpu("H20")
    assert kv_budget_bytes(g, 0.85, 35e9) == pytest.approx(g.memory_mib * 2**20 * 0.85 - 35e9)


def test_sglang_0_5_2_reserves_by_memory_tier_and_chunks_2048_below_35_gib():
    # sglang 0.5.2 srt/server_args.py:452-518: below 35 GiB (2.8 + TP x PP / 10) GiB, H20 (12 + TP x PP / 2) GiB
    a10, h20 = get_gpu("A10"), get_gpu("H20")
    assert default_mem_fraction_static(a10, tp_size=2, version="0.5.2") == round(
        (a10.memory_mib - 3.0 * 1024) / a10.memory_mib, 3) == 0.867  # fmt: skip
    assert default_mem_fraction_static(h20, tp_size=8, version="0.5.2") == round(
        (h20.memory_mib - 16 * 1024) / h20.memory_mib, 3)  # fmt: skip
    assert default_chunked_prefill_size(a10.memory_mib, "0.5.2") == 2048
    assert default_chunked_prefill_size(a10.memory_mib) == 4096  # 0.5.23

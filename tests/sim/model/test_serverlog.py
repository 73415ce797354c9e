"""An SGLang startup log read line by line: each capacity it prints, exactly, with the line it came from."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.base.errors import InputError
from sim.model.serverlog import parse_server_log, read_server_log

LOGS = Path(__file__).parents[2] / "data" / "server_logs"
QWEN = LOGS / "qwen3-14b_a10_tp2_hicache.log"
V4 = LOGS / "deepseek-v4-pro_h200_tp8_hicache.log"
ROCM = LOGS / "deepseek-v4-pro_mi355x_tp8_rocm.log"


@pytest.mark.parametrize("key, value", [
    ("max_total_num_tokens", 41283), ("chunked_prefill_size", 4096), ("max_prefill_tokens", 16384),
    ("max_running_requests", 2048), ("context_len", 40960), ("kv_cache_tokens", 41283),
])  # fmt: skip
def test_the_scheduler_summary_and_the_device_pool_are_read_as_printed(key, value):
    log = read_server_log(QWEN)
    assert log.get(key) == value
    assert log.where(key).startswith(f"{QWEN}:")


def test_the_first_ranks_line_is_the_one_read():
    log = read_server_log(QWEN)
    assert log.values["available_gpu_mem_gb"] == 3.71  # TP0's, not TP1's 3.70
    assert log.lines["max_total_num_tokens"] == 5


def test_a_single_host_pool_gives_its_tokens_padding_page_included():
    assert read_server_log(QWEN).host_kv_tokens == 2 * 41283 + 1


@pytest.mark.parametrize("key, value", [
    ("dsv4_full_tokens", 3276800), ("dsv4_swa_tokens", 327680), ("dsv4_c4_tokens", 819200),
    ("dsv4_c128_tokens", 25600), ("max_total_num_tokens", 3276800), ("max_running_requests", 512),
    ("context_len", 1048576), ("chunked_prefill_size", 16384),
])  # fmt: skip
def test_deepseek_v4s_pool_sizes_are_read(key, value):
    assert read_server_log(V4).get(key) == value


@pytest.mark.parametrize("name, pages, layers, item, state", [
    ("swa", 2560, 61, 149760, False), ("deepseek_v4_c4", 25600, 30, 37440, False),
    ("deepseek_v4_c4_indexer", 25600, 30, 8448, False), ("deepseek_v4_c128", 25600, 31, 1728, False),
    ("deepseek_v4_c4_state", 2560, 30, 65536, True), ("deepseek_v4_c4_indexer_state", 2560, 30, 16384, True),
])  # fmt: skip
def test_each_v4_host_pool_is_read_with_its_pages_layers_and_bytes(name, pages, layers, item, state):
    pool = read_server_log(V4).host_pools[name]
    assert (pool.pages, pool.layers, pool.item_bytes, pool.state) == (pages, layers, item, state)
    assert pool.gb == pytest.approx(layers * pages * item / 1e9, abs=0.005)  # as SGLang prints it


def test_the_unified_kv_layout_is_read_from_the_memory_line():
    assert read_server_log(V4).unified_kv is False
    rocm = read_server_log(ROCM)
    assert rocm.unified_kv is True and rocm.unified_kv_fp8 is False
    assert {n: p.gb for n, p in rocm.host_pools.items()} == {
        "deepseek_v4_c4": 164.86, "deepseek_v4_c4_indexer": 10.30, "deepseek_v4_c4_indexer_scale": 0.64,
        "deepseek_v4_c128": 5.32}


def test_a_hybrid_swa_models_pool_line_and_the_auto_ratio_are_read():
    log = parse_server_log(
        "[2026-01-01 00:00:00] Use sliding window memory pool. full_layer_tokens=100352, swa_layer_tokens=20224\n"
        "[2026-01-01 00:00:01] HiCache auto-sizing: ratio 2.000 -> 1.375; 93.1 GiB host memory per rank "
        "(fraction 0.80, 8 ranks on this host), host pools 70.2 GiB.\n"
        "[2026-01-01 00:00:02] max_total_num_tokens=100352, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=1024, context_len=131072, available_gpu_mem=10.20 GB\n")
    assert (log.get("full_layer_tokens"), log.get("swa_layer_tokens")) == (100352, 20224)
    assert log.values["hicache_auto_ratio"] == 1.375


def test_a_file_without_the_startup_summary_is_refused_naming_it(tmp_path):
    path = tmp_path / "client.log"
    path.write_text("[2026-01-01 00:00:00] Prefill batch. #new-seq: 1, #new-token: 128\n")
    with pytest.raises(InputError, match=r"client\.log: no SGLang startup summary"):
        read_server_log(path)

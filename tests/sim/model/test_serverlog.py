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


SUMMARY = ("max_total_num_tokens={n}, chunked_prefill_size=4096, max_prefill_tokens=16384, "
           "max_running_requests=2048, context_len=40960, available_gpu_mem=3.71 GB")  # fmt: skip


@pytest.mark.parametrize("written, value", [("3276800", 3276800), ("3,276,800", 3276800), ("3.2768e6", 3276800)])
def test_a_count_is_read_whole_by_the_number_rule(written, value):
    log = parse_server_log(f"[2026-01-01 00:00:00 TP0] {SUMMARY.format(n=written)}\n")
    assert log.get("max_total_num_tokens") == value


@pytest.mark.parametrize("written, problem", [
    ("3276800.5", "not a whole number"), ("1" * 400, "out of range"), ("28.7.5", "not a number"),
    ("-5", "never empty"), ("0", "never empty"),
])  # fmt: skip
def test_a_count_the_rule_refuses_is_one_line_naming_the_log_line(written, problem):
    with pytest.raises(InputError, match=rf"^log:2: max_total_num_tokens[:=].*{problem}"):
        parse_server_log(f"\n[2026-01-01 00:00:00 TP0] {SUMMARY.format(n=written)}\n", "log")


def test_a_malformed_gb_is_one_line_naming_its_pool():
    line = V4.read_text().splitlines()[4].replace("23.39 GB", "28.7.5 GB")
    with pytest.raises(InputError, match=r"^log:1: host pool 'swa' GB: '28.7.5' is not a number"):
        parse_server_log(line + "\n", "log")


QWEN_TEXT = QWEN.read_text()


@pytest.mark.parametrize("wrap", [
    lambda line: f"2026-03-02T10:14:05+0000 gpu-node-3 python3[21873]: {line}",  # journalctl -o short-iso
    lambda line: f"2026-03-02T10:14:05.123456789Z {line}",  # docker logs -t
    lambda line: f"[pod/sglang-0/server] {line}",  # kubectl logs --prefix
    lambda line: f"\x1b[32m{line[:26]}\x1b[0m{line[26:]}\x1b[0m",  # ANSI colours
])  # fmt: skip
def test_a_log_as_operators_hold_it_reads_as_the_bare_one(tmp_path, wrap):
    path = tmp_path / "server.log"
    path.write_text("".join(wrap(line) + "\n" for line in QWEN_TEXT.splitlines()))
    held, bare = read_server_log(path), read_server_log(QWEN)
    assert (held.values, held.host_kv_tokens, held.architecture, held.ranks) == (
        bare.values, bare.host_kv_tokens, bare.architecture, bare.ranks)


def test_a_log_past_the_whole_file_bound_is_streamed(tmp_path):
    from sim.base.inputs import MAX_FILE_BYTES

    path = tmp_path / "long.log"
    noise = "[2026-03-02 10:20:00 TP0] Decode batch. #running-req: 12, #token: 40000, token usage: 0.97\n"
    with open(path, "w") as fh:
        fh.write(QWEN_TEXT)
        fh.write(noise * (MAX_FILE_BYTES // len(noise) + 10))
    assert read_server_log(path).get("max_total_num_tokens") == 41283


@pytest.mark.parametrize("edit, message", [
    (lambda t: t + t.splitlines()[4] + "\n", r":7: a second startup in one file: the scheduler's summary again from TP0 "
                                             r"\(first at line 5\)"),
    (lambda t: t.replace("TP1] max_total_num_tokens=41283", "TP1] max_total_num_tokens=41000"),
     r":6: max_total_num_tokens=41000 from TP1 disagrees with 41283 at line 5"),
    (lambda t: t.replace("82567 tokens", "0 tokens"), r":4: a host KV pool of 0 tokens"),
])  # fmt: skip
def test_a_log_that_contradicts_itself_is_refused_naming_the_line(tmp_path, edit, message):
    path = tmp_path / "server.log"
    path.write_text(edit(QWEN_TEXT))
    with pytest.raises(InputError, match=message):
        read_server_log(path)


@pytest.mark.parametrize("old, new, message", [
    ("full=3276800,", "full=3000000,", r":11: max_total_num_tokens=3276800 is more than DSV4 pool sizes' full=3000000"),
    ("swa=327680,", "swa=0,", r":3: dsv4_swa_tokens=0: a pool the server allocates is never empty"),
    ("28.75 GB", "2.75 GB", r":6: host pool 'deepseek_v4_c4': 2.75 GB logged, but layers x pages x bytes = 28.75"),
    ("pages=25600, item_bytes=37440", "pages=0, item_bytes=37440", r":6: host pool 'deepseek_v4_c4' of 0 pages"),
])  # fmt: skip
def test_a_v4_log_that_contradicts_itself_is_refused_naming_the_line(tmp_path, old, new, message):
    path = tmp_path / "server.log"
    text = V4.read_text()
    assert old in text
    path.write_text(text.replace(old, new, 1))
    with pytest.raises(InputError, match=message):
        read_server_log(path)


def test_a_host_kv_pools_gb_and_its_packed_mtp_layers_are_read(tmp_path):
    mtp = ("82567 tokens, 6.76 GB host memory.", "82567 tokens, 6.93 GB host memory, packed MTP KV layers: "
           "target_layers=40, draft_layers=1, total_layers=41.")  # fmt: skip
    log = parse_server_log(QWEN_TEXT.replace(*mtp), "server.log")
    assert (log.values["host_kv_gb"], log.get("host_kv_layers"), log.get("host_kv_target_layers")) == (6.93, 41, 40)
    assert parse_server_log(QWEN_TEXT, "server.log").get("host_kv_layers") is None
    bad = (mtp[0], mtp[1].replace("total_layers=41", "total_layers=42"))
    with pytest.raises(InputError, match=r"^server.log:4: host KV pool: target_layers=40 \+ draft_layers=1 is not "
                                         r"total_layers=42"):  # fmt: skip
        parse_server_log(QWEN_TEXT.replace(*bad), "server.log")

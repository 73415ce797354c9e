"""DeepSeek V4 on ROCm's unified KV layout: the pools SGLang registers for HiCache and their bytes."""

from __future__ import annotations

import pytest

from sim.app.cli import main
from sim.base.errors import InputError
from sim.model.modelref import resolve_model
from sim.model.unified_kv import row_bytes, unified_fixed, unified_model


def test_bf16_rows_are_1024_bytes_and_fp8_rows_split_into_nope_and_rope():
    assert row_bytes(fp8=False) == ((448 + 64) * 2, 0)  # deepseek_v4_memory_pool.py:818-822
    assert row_bytes(fp8=True) == (512, 64 * 2)  # DSV4_FP8_NOPE_ROW_BYTES + the bf16 rope half


def test_v4_pro_bf16_pools_and_bytes_a_token():
    model = unified_model("deepseek-v4-pro")
    per_token = {p.name: p.bytes_per_page / 256 for p in model.pools}
    assert per_token == {"kv": 0, "c4": 30 * 1024 / 4, "c4_indexer": 30 * 132 / 4, "c128": 31 * 1024 / 128}
    assert per_token["c4"] == 7_680  # the published host pools' c4 (the paged catalog: 4,387.5)
    assert not model.has_swa  # the SWA ring and the state rings are not host pools


def test_fp8_rows_add_the_rope_sibling_pools():
    names = [p.name for p in unified_model("deepseek-v4-pro", fp8=True).pools]
    assert names == ["kv", "c4", "c4_rope", "c4_indexer", "c128", "c128_rope"]


def test_rocms_fp4_indexer_is_two_pools():
    pools = {p.name: p.bytes_per_page for p in unified_model("deepseek-v4-flash", fp4_indexer=True).pools}
    assert (pools["c4_indexer"], pools["c4_indexer_scale"]) == (21 * 64 * 64, 21 * 64 * 4)


def test_v41_refuses_the_unified_layout():
    with pytest.raises(InputError, match="DeepSeek-V4.1 does not support the unified KV layout yet"):
        unified_model("deepseek-v4.1-flash")


def test_a_non_v4_model_has_no_rocm_layout():
    with pytest.raises(InputError, match="not a DeepSeek V4 model"):
        resolve_model("qwen3-14b", platform="rocm")


def test_pools_lists_the_rocm_pools(capsys):
    assert main(["pools", "deepseek-v4-pro", "--platform", "rocm", "--unified-kv-fp8"]) == 0
    out = capsys.readouterr().out
    assert "c4_rope" in out and "c128_rope" in out and "swa" not in out.split("\n", 1)[1]
    assert main(["pools", "deepseek-v4.1-flash", "--platform", "rocm"]) == 2


def _sglang_fixed(layers: int, c4: int, c128: int, max_running: int, row: int, ring: int, ring4: int, ring128: int) -> int:
    """pool_configurator.py's three fixed terms under the unified layout, transcribed term by term
    (_fixed_swa_bytes :1576-1599, _fixed_c4_state_bytes :1550-1574, _get_c128_state_fixed_bytes :1509-1531)."""
    slots = max_running + 1
    swa = slots * ring * row * layers
    rows4 = (slots * ring4 + ring4 + 1 + 3) // 4 * 4
    c4_state = rows4 * (4 * 512 * 4 + 4 * 128 * 4) * c4
    rows128 = (slots * ring128 + ring128 + 1 + 127) // 128 * 128
    return swa + c4_state + rows128 * 2 * 512 * 4 * c128


@pytest.mark.parametrize("fp8, draft, row, ring, rings", [
    (False, 0, 1024, 128, (8, 128)), (True, 0, 640, 128, (8, 128)), (False, 4, 1024, 131, (16, 256))])  # fmt: skip
def test_the_fixed_bytes_follow_sglangs_formula(fp8, draft, row, ring, rings):
    got = unified_fixed("deepseek-v4-flash", 3, fp8=fp8, draft_tokens=draft)
    assert got.total == _sglang_fixed(43, 21, 20, 3, row, ring, *rings)


def test_the_ring_is_every_layers_window_per_request_slot():
    fixed = unified_fixed("deepseek-v4-pro", 1024)
    assert fixed.swa_ring == 1025 * 128 * 1024 * 61  # 7.63 GiB a rank
    assert fixed.c128_state > fixed.swa_ring > fixed.c4_state  # fp32 C128 rings of 128 rows dominate


def test_an_unknown_model_is_refused_by_name():
    with pytest.raises(InputError, match="unknown model 'qwen3-14b'"):
        unified_fixed("qwen3-14b", 8)

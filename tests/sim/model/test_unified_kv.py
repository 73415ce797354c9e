"""DeepSeek V4 on ROCm's unified KV layout: the pools SGLang registers for HiCache and their bytes."""

from __future__ import annotations

import pytest

from sim.app.cli import main
from sim.base.errors import InputError
from sim.model.modelref import resolve_model
from sim.model.unified_kv import row_bytes, unified_model


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

"""What an MoE all-to-all backend keeps resident before SGLang sizes the KV pool (sim.model.moeweights)."""

from __future__ import annotations

import dataclasses

import pytest

from sim.model import modelcfg
from sim.model.moeweights import MoeLayout, a2a_resident_bytes

# A DeepSeek-V4-shaped MoE: FP8 shared experts with 128 x 128 blocks, FP4 routed experts.
V4 = MoeLayout(moe_layers=61, hidden=7168, moe_intermediate=3072, n_routed=384, n_shared=1, deepseek_moe=True,
               deepseek_v4=True, shared_fp8_block32=True, dense_weight_bytes=1.0)  # fmt: skip
EXPERT = 3 * 7168 * 3072


def extra(layout=V4, backend="megamoe", gpu="B200", tp=8, dtype="fp4") -> float:
    return a2a_resident_bytes(layout, backend=backend, gpu=gpu, tp_size=tp, expert_dtype=dtype)


def test_no_backend_or_no_moe_adds_nothing():
    assert extra(backend="none") == 0 == extra(layout=None)


def test_an_all_to_all_backend_replicates_the_shared_experts_on_every_rank():
    # deepseek_v2.py:874-896: whole on each rank instead of an eighth
    assert extra(backend="deepep") == pytest.approx(61 * EXPERT * (1 - 1 / 8))
    assert extra(backend="deepep", tp=1) == 0


def test_megamoe_adds_the_scale_copies_and_the_fused_shared_l1_on_sm100():
    replicated = extra(backend="deepep")
    scales = 61 * 384 / 8 * EXPERT / 32  # one UE8M0 byte per 32 weights, a second copy (mega_moe.py:681-700)
    l1 = 61 * 2 * 7168 * 3072  # mega_moe.py:706-717
    assert extra() == pytest.approx(replicated + scales + l1)
    assert extra(gpu="H200") == pytest.approx(replicated + scales)  # the fused shared expert is SM100 only


def test_megamoe_rebuilds_only_fp4_experts_and_fuses_only_v4s_fp8_shared_experts():
    replicated = extra(backend="deepep")
    assert extra(dtype="fp8") == pytest.approx(replicated)
    not_v4 = dataclasses.replace(V4, deepseek_v4=False)
    assert extra(layout=not_v4) == pytest.approx(replicated + 61 * 384 / 8 * EXPERT / 32)


def test_a_model_outside_deepseeks_moe_class_is_not_charged():
    assert extra(layout=dataclasses.replace(V4, deepseek_moe=False)) == 0


def test_v4_pro_s_config_gives_the_layout():
    cfg, name = modelcfg.load_config("deepseek-ai/DeepSeek-V4-Pro")
    shape = modelcfg.derive(cfg, tp_size=8, name=name, attn_dp_size=8)
    assert shape.moe_layout == V4 and shape.expert_dtype == "fp4"

"""H800 on the measured-kernel backend: H100's kernels, its collectives priced on H800's NVLink (400 GB/s both
ways, 200 one way, against the 450 one way of aiconfigurator-core's systems/h100_sxm.yaml:19)."""

from __future__ import annotations

import pytest

from sim.app.run import compute_line
from sim.model.pricing import step_model
from sim.scenario.load import scenario_from_dict

pytest.importorskip("aiconfigurator_core")

QWEN = {"name": "aic", "model": "Qwen/Qwen3-30B-A3B", "hardware": {"tp_size": 2},
        "compute": {"backend": "aiconfigurator"}}  # fmt: skip
# The estimator's communication ops for this model (all-reduce and the MoE dispatch around the experts).
COMM = ("context_embedding_ar", "context_moe_pre_dispatch", "context_moe_post_dispatch", "context_ar_1",
        "context_ar_2", "generation_embedding_ar", "generation_moe_pre_dispatch", "generation_moe_post_dispatch",
        "generation_ar_1", "generation_ar_2")  # fmt: skip


@pytest.fixture(scope="module")
def pair():
    def steps(gpu):
        return step_model(scenario_from_dict({**QWEN, "hardware": {**QWEN["hardware"], "gpu": gpu}}))

    return steps("H100"), steps("H800")


def _comm_ms(handle, *, prefill: bool, n: int, s: int, prefix: int = 0) -> float:
    ctx, gen = handle.run_static_per_op(batch_size=1, isl=2, osl=2, prefix=0)
    ops = ctx if prefill else gen
    idx = [i for i, op in enumerate(ops) if op[0] in COMM]
    assert idx, "the estimator prices communication as ops of its own"
    evaluate = handle.evaluate_context_ops if prefill else handle.evaluate_generation_ops
    kw = {"prefix": prefix} if prefill else {}
    return sum(op[1] for op in evaluate(idx, batch_size=n, s=s, **kw))


def test_a_prefill_on_h800_is_h100s_with_its_collectives_225_times_slower(pair):
    h100, h800 = pair
    comm = _comm_ms(h100.handle, prefill=True, n=1, s=4096)
    assert comm > 0
    extra = h800.prefill_seconds(4096, 4096 * 4097 / 2) - h100.prefill_seconds(4096, 4096 * 4097 / 2)
    assert extra == pytest.approx(1.25 * comm / 1e3, rel=1e-9)


def test_a_decode_pass_too(pair):
    h100, h800 = pair
    comm = _comm_ms(h100.handle, prefill=False, n=32, s=2048)
    extra = h800.decode_seconds(32, 32 * 2048) - h100.decode_seconds(32, 32 * 2048)
    assert extra == pytest.approx(1.25 * comm / 1e3, rel=1e-9)


def test_the_summary_says_how_h800_was_priced(pair):
    h100, h800 = pair
    assert "priced_as" not in h100.describe()
    line = compute_line(h800.describe())
    assert "on h100_sxm" in line and "H800: H100 kernel efficiencies" in line and "collectives x2.25" in line

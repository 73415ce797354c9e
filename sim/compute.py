"""GPU step time: a simple, replaceable roofline.

Prefill is compute-bound: linear FLOPs per token plus attention FLOPs per (token, context token) pair, at
``mfu`` of peak. Decode is memory-bound: the weights once per step plus each request's KV, at ``mbu`` of
HBM bandwidth. A mixed step takes the longer of the two, plus a fixed scheduler/launch overhead. The
defaults (``sim.scenario.ComputeConfig``) are estimates for V4-Flash, not measurements; any object with
``step_seconds`` can replace this one.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Roofline", "attention_pairs"]


def attention_pairs(tokens: int, start: int) -> float:
    """Query-key pairs of a causal chunk of ``tokens`` tokens whose first token sits at ``start``."""
    return tokens * start + tokens * (tokens + 1) / 2


@dataclass(frozen=True)
class Roofline:
    flops_per_token: float
    attn_flops_per_pair: float
    weight_bytes: float
    kv_bytes_per_token: float
    peak_flops: float  # FLOP/s
    hbm_Bps: float
    mfu: float
    mbu: float
    overhead_s: float

    @classmethod
    def from_scenario(cls, scenario) -> Roofline:
        c, hw = scenario.compute, scenario.hardware
        return cls(c.prefill_flops_per_token, c.attn_flops_per_token_per_ctx, c.decode_bytes_per_step,
                   c.kv_bytes_per_token_read, hw.peak_tflops * 1e12, hw.hbm_bandwidth_tbps * 1e12,
                   c.mfu, c.mbu, c.step_overhead_ms / 1e3)  # fmt: skip

    def prefill_seconds(self, tokens: int, pairs: float) -> float:
        return (tokens * self.flops_per_token + pairs * self.attn_flops_per_pair) / (self.peak_flops * self.mfu)

    def decode_seconds(self, n_requests: int, context_tokens: float) -> float:
        if not n_requests:
            return 0.0
        return (self.weight_bytes + context_tokens * self.kv_bytes_per_token) / (self.hbm_Bps * self.mbu)

    def step_seconds(self, prefill_tokens: int, pairs: float, n_decode: int, decode_context: float) -> float:
        """One scheduler step over a mixed batch."""
        return self.overhead_s + max(self.prefill_seconds(prefill_tokens, pairs),
                                     self.decode_seconds(n_decode, decode_context))  # fmt: skip

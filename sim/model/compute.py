"""GPU step time: a simple, replaceable roofline.

Prefill is compute-bound: linear FLOPs per token plus attention FLOPs per (token, context token) pair
(scaled by ``attn_scale``, the fitted context-length term), at ``mfu`` of peak. Decode is memory-bound: the
weights once per step plus each request's KV, at ``mbu`` of HBM bandwidth. For a MoE model a decode step
reads only the routed experts its tokens pick: of ``n_experts`` with ``experts_per_token`` each, a batch of
``n`` touches ``E (1 - (1 - k/E)^n)`` on average (uniform routing), so the weight read grows with the batch.
Every pass pays a fixed scheduler/launch overhead. SGLang's default pass is one or the other (the engine
picks, :mod:`sim.serve.engine`); a mixed-chunk pass is one forward over the chunk plus one token per decode row
(``ForwardMode.MIXED``, ``managers/schedule_batch.py:3267``), which reads the weights once and both does the
chunk's FLOPs and reads the rows' KV, so it takes the longer of the two. The defaults
(``sim.scenario.load.ComputeConfig``) are estimates, not measurements; ``hicache-sim calibrate compute`` fits
``mfu``, ``mbu``, ``overhead_s`` and ``attn_scale`` to measured runs. ``compute.backend`` picks it or
measured kernels (:mod:`sim.model.aic`, same calls; :func:`sim.model.pricing.step_model`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

__all__ = ["FITTED", "SPEC_DEFAULTS", "Roofline", "attention_pairs"]

# The ComputeConfig fields that ``calibrate compute`` fits and a cost table's ``compute`` section carries.
FITTED = ("mfu", "mbu", "step_overhead_ms", "attn_flops_scale")
SPEC_DEFAULTS = {"mfu": 0.4, "mbu": 0.7, "step_overhead_ms": 2.0, "attn_flops_scale": 1.0}  # estimates, not measured


def attention_pairs(tokens: int, start: int) -> float:
    """Query-key pairs of a causal chunk of ``tokens`` tokens whose first token sits at ``start``."""
    return tokens * start + tokens * (tokens + 1) / 2


@dataclass(frozen=True)
class Roofline:
    name: ClassVar[str] = "roofline"
    flops_per_token: float
    attn_flops_per_pair: float
    weight_bytes: float
    kv_bytes_per_token: float
    peak_flops: float  # FLOP/s
    hbm_Bps: float
    mfu: float
    mbu: float
    overhead_s: float
    attn_scale: float = 1.0
    kv_bytes_per_request: float = 0.0  # read per request per decode step whatever its length (windows, top-k)
    expert_bytes: float = 0.0  # one routed expert over all MoE layers; weight_bytes holds the rest
    n_experts: int = 0
    experts_per_token: int = 0
    why: str = ""  # what chose this backend (sim.model.pricing)

    @classmethod
    def from_scenario(cls, scenario, fitted: Mapping[str, float] | None = None, why: str = "") -> Roofline:
        """The scenario's roofline; ``fitted`` efficiencies (a cost table's ``compute`` section) fill the
        fields the scenario leaves null, :data:`SPEC_DEFAULTS` what neither sets."""
        c, hw = scenario.compute, scenario.hardware
        eff = {k: getattr(c, k) if getattr(c, k) is not None else (fitted or {}).get(k, SPEC_DEFAULTS[k])
               for k in FITTED}  # fmt: skip
        return cls(c.prefill_flops_per_token, c.attn_flops_per_token_per_ctx, c.decode_bytes_per_step,
                   c.kv_bytes_per_token_read, hw.peak_tflops * 1e12, hw.hbm_bandwidth_tbps * 1e12,
                   eff["mfu"], eff["mbu"], eff["step_overhead_ms"] / 1e3, eff["attn_flops_scale"],
                   c.kv_bytes_per_request, c.expert_bytes, c.n_experts, c.experts_per_token, why)  # fmt: skip

    def experts_touched(self, n_tokens: int) -> float:
        """Distinct routed experts a decode batch of ``n_tokens`` reads, on average."""
        if not self.n_experts:
            return 0.0
        return self.n_experts * (1.0 - (1.0 - self.experts_per_token / self.n_experts) ** n_tokens)

    def prefill_seconds(self, tokens: int, pairs: float) -> float:
        flops = tokens * self.flops_per_token + pairs * self.attn_flops_per_pair * self.attn_scale
        return flops / (self.peak_flops * self.mfu)

    def decode_bytes(self, n_requests: int, context_tokens: float) -> float:
        """HBM bytes one decode step over ``n_requests`` requests reads."""
        return (self.weight_bytes + self.expert_bytes * self.experts_touched(n_requests)
                + context_tokens * self.kv_bytes_per_token + n_requests * self.kv_bytes_per_request)  # fmt: skip

    def decode_seconds(self, n_requests: int, context_tokens: float) -> float:
        if not n_requests:
            return 0.0
        return self.decode_bytes(n_requests, context_tokens) / (self.hbm_Bps * self.mbu)

    def step_seconds(self, prefill_tokens: int, pairs: float, n_decode: int, decode_context: float,
                     n_prefill: int = 1) -> float:  # fmt: skip
        """One forward pass: prefill, decode, or both in one mixed-chunk batch. The roofline prices a
        prefill batch by its tokens and pairs alone, whatever ``n_prefill`` (its chunks)."""
        return self.overhead_s + max(self.prefill_seconds(prefill_tokens, pairs),
                                     self.decode_seconds(n_decode, decode_context))  # fmt: skip

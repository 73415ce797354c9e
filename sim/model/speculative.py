"""Speculative decoding (EAGLE / NEXTN / MTP) as SGLang 0.5.23 runs it: what a decode pass emits, costs and holds.

A decode pass of a speculative server is one draft-verify iteration (``speculative/eagle_worker_v2.py``): the
draft model runs ``num_steps - 1`` forwards over ``eagle_topk`` tokens per request (the first step's top-k
comes from the previous iteration, :808-830), the target verifies ``num_draft_tokens`` tokens per request in one
forward, and the draft extends over the same width (:1110-1160). Each request then emits its accepted drafts
plus one bonus token. The mean of that, ``accept_length``, is the scenario's: SGLang's acceptance depends on the
text, which a cache simulator does not have. A request's output after ``p`` passes is ``floor(p x
accept_length)`` tokens, so a request with ``n`` tokens to go finishes after ``ceil(n / accept_length)``
passes; deterministic, no draw, and exact for an integer accept length.

Pass time goes through the step-time backend's ``step_seconds`` (the roofline, or any backend with the same
method), so the draft and verify shapes are priced by whatever prices the other passes: the verify as ``n``
decode rows (their weight and KV reads) plus ``n (D - 1)`` more query tokens attending the rows' contexts
(their FLOPs); each draft forward as a decode pass over its tokens, scaled to the draft's share of the
layers (``draft_layers / layers``: the NEXTN head is one layer; its embedding and LM head are not priced
apart). A prefill pass adds the draft's extend over the same tokens at that share.

KV: each decode step holds a request's committed length plus ``2 x max(num_steps x topk, num_draft_tokens)``
slots, page-aligned (``mem_cache/allocation_sizing.py:29-93``, ``speculative/eagle_utils.py:857-870``;
the 2 is the overlap scheduler's double buffer), and the pools are sized with the draft's own KV layers
added to the target's (``model_executor/pool_configurator.py:1250-1257`` for DeepSeek V4, :256-314
otherwise), so each token costs ``(layers + draft_layers) / layers`` of its bytes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["SpecDecode", "backend_prices"]

_EPS = 1e-9  # keeps floor/ceil of p x accept_length exact where the product is an integer in exact arithmetic


def backend_prices(backend, what: str) -> bool:
    """Whether the step-time backend prices ``what`` ("speculative", "dp_attention") in its own decode
    shapes, so the engine must not add it again: a backend says so with ``prices_speculative`` /
    ``prices_dp_attention``; aiconfigurator-core's estimator (``compute.backend: aiconfigurator``) does both,
    its ``nextn`` pricing the draft and verify of a decode step and its attention-DP size the MoE over every
    rank's batch. The roofline prices neither."""
    return bool(getattr(backend, f"prices_{what}", getattr(backend, "name", "") == "aiconfigurator"))


@dataclass(frozen=True)
class SpecDecode:
    """A speculative server's decode: ``accept_length`` tokens per pass at the cost of one draft-verify."""

    num_steps: int
    topk: int
    draft_tokens: int  # verified per request per pass
    accept_length: float
    draft_share: float  # draft layers / target layers
    page_size: int = 1

    @classmethod
    def from_scenario(cls, sc, layers: int) -> SpecDecode | None:
        s = sc.speculative
        if not s.enabled:
            return None
        return cls(s.num_steps, s.eagle_topk, s.draft_tokens, float(s.accept_length), s.draft_layers / max(1, layers),
                   sc.hicache.page_size)  # fmt: skip

    # ----- tokens ------------------------------------------------------------------------------
    def tokens_after(self, passes: int) -> int:
        """Output tokens a request has made ``passes`` decode passes after its prefill (uncapped)."""
        return math.floor(passes * self.accept_length + _EPS)

    def passes_for(self, tokens: int) -> int:
        """Decode passes until a request has made ``tokens`` output tokens after its prefill."""
        return max(0, math.ceil(tokens / self.accept_length - _EPS))

    # ----- KV ----------------------------------------------------------------------------------
    @property
    def alloc_len(self) -> int:
        """KV slots one request may take in one decode step (``allocation_sizing.py:29-61``)."""
        width = max(self.num_steps * self.topk, self.draft_tokens)
        p = self.page_size
        if p == 1 or self.topk == 1:
            return width
        pages_per_branch = (p - 1 + self.num_steps + p - 1) // p  # worst page-aligned footprint per branch
        return max(pages_per_branch * p * self.topk, self.draft_tokens)

    @property
    def reserve(self) -> int:
        """Slots held past the committed length: twice :attr:`alloc_len` (``allocation_sizing.py:64-70``)."""
        return 2 * self.alloc_len

    @property
    def kv_inflation(self) -> float:
        """Bytes a pool token costs with the draft's KV layers, over the target's alone."""
        return 1.0 + self.draft_share

    # ----- time --------------------------------------------------------------------------------
    def decode_seconds(self, backend, n: int, context: float) -> float:
        """One draft-verify pass over ``n`` requests holding ``context`` tokens in all."""
        if backend_prices(backend, "speculative"):
            return backend.step_seconds(0, 0.0, n, context)
        extra = n * (self.draft_tokens - 1)
        pairs = extra * (context / n + self.draft_tokens / 2) if n else 0.0
        verify = backend.step_seconds(extra, pairs, n, context)
        overhead = getattr(backend, "overhead_s", 0.0)
        draft = (self.num_steps - 1) * (backend.step_seconds(0, 0.0, n * self.topk, context) - overhead)
        extend = backend.step_seconds(0, 0.0, n * self.draft_tokens, context) - overhead
        return verify + self.draft_share * (draft + extend)

    def prefill_seconds(self, backend, tokens: int, pairs: float, n_prefill: int = 1) -> float:
        """A prefill pass of ``n_prefill`` chunks: the target's forward, then the draft's extend over the same
        tokens."""
        target = backend.step_seconds(tokens, pairs, 0, 0.0, n_prefill)
        # Every backend leaves the extend to this: aiconfigurator's ``nextn`` prices the decode's draft and
        # verify, not the prompt's draft extend (its prefill of 4,096 V4-Flash tokens on 4 x H200 is 128.7 ms
        # at nextn 0 and 3 alike).
        return target + self.draft_share * (target - getattr(backend, "overhead_s", 0.0))

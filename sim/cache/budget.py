"""SGLang 0.5.23's prefill budget for one pool (``managers/schedule_policy.py``, ``mem_cache/prefill_budget.py``): the
arithmetic that the engine's admission (:mod:`sim.cache.requests`, :mod:`sim.cache.v4.hicache`) and the host-tier
drivers (:mod:`sim.offline.hostsched` and its subclasses) share, so each rule is written once. V4's sliding-window
share of the budget is :mod:`sim.cache.v4.budget`.

Outputs count in full, clipped at ``CLIP_MAX_NEW_TOKENS``: the requests have fixed lengths, as a client sending
``ignore_eos`` has them (``schedule_policy.py:786-794``; ``bench_serving`` and ``bench_multiturn`` send it).
"""

from __future__ import annotations

from typing import Any

__all__ = ["CLIP_MAX_NEW_TOKENS", "admission_demand", "chunk_end", "chunk_reservation", "clip_output", "output_left",
           "steps_to_page"]

CLIP_MAX_NEW_TOKENS = 4096  # SGLANG_CLIP_MAX_NEW_TOKENS_ESTIMATION (schedule_policy.py:89-91)


def clip_output(tokens: int) -> int:
    """The part of ``tokens`` output tokens that the budget counts."""
    return tokens if tokens < CLIP_MAX_NEW_TOKENS else CLIP_MAX_NEW_TOKENS


def output_left(r: Any) -> int:
    """The output request record ``r`` (either cache's, or a driver's) has still to make, as the budget counts it
    for a running request (``prefill_budget.py:156-167``)."""
    return clip_output(r.output_len - r.emitted)


def admission_demand(prompt_len: int, device_prefix: int, output_len: int, page: int) -> int:
    """What a candidate needs of the free plus evictable tokens: its extend past the device prefix, its output and
    a page (``schedule_policy.py:1406-1416``); it is admitted while this stays below the room."""
    return prompt_len - device_prefix + clip_output(output_len) + page


def chunk_reservation(chunk: int, ends_prompt: bool, output_len: int, page: int) -> int:
    """What the budget sets aside for a request's chunk of ``chunk`` tokens: the chunk in pages and a page, and the
    request's output once the chunk ends its prompt (``prefill_budget.py:156-167``, ``schedule_policy.py:672-680``)."""
    return -(-chunk // page) * page + page + (clip_output(output_len) if ends_prompt else 0)


def chunk_end(prompt_len: int, prefix: int, limit: int, page: int) -> int:
    """Where a first chunk from ``prefix`` ends when it may take ``limit`` tokens: the whole prompt if its paged
    extend fits, else cut at a page (``schedule_policy.py:1660-1672``; NVIDIA GPUs charge the paged extend)."""
    if -(-(prompt_len - prefix) // page) * page <= limit:
        return prompt_len
    return (prefix + limit // page * page) // page * page


def steps_to_page(r: Any, page: int, lookahead: int) -> int:
    """Decode steps until request record ``r`` (either cache's) next allocates a page, that step included: the
    next step allocates row ``seqlen - 1`` and the ``lookahead`` draft slots past it."""
    row = -(-r.allocated // page) * page  # the first row of the next page
    return max(1, row - (r.prompt_len + r.emitted) - lookahead + 2)

"""SGLang's sliding-window share of its prefill budget (``mem_cache/prefill_budget.py``): what one request's prefill
can hold of the SWA pool at its peak, and the first chunk it is admitted with, shared by the engine's V4 admission
(:mod:`sim.cache.v4.hicache`) and the host-tier driver (:mod:`sim.offline.v4hostcalls`)."""

from __future__ import annotations

__all__ = ["swa_chunk_limit", "swa_estimate"]


def swa_estimate(extend: int, max_new: int, *, window: int, page: int, limit: int | None = None,
                 host_hit: int = 0) -> int:  # fmt: skip
    """SWA tokens a request of ``extend`` prompt tokens (a chunk of at most ``limit`` of them allocated at once) and
    ``max_new`` output tokens reserves, with ``host_hit`` window tokens loaded back."""
    allocated = extend if limit is None else min(extend, limit)
    reserved = max(allocated - window, 0) + min(extend + max_new, window) + page
    if host_hit > 0:
        reserved += -(-host_hit // page) * page
    return reserved


def swa_chunk_limit(extend: int, max_new: int, *, window: int, page: int, limit: int, room: int | float, size: int | float,
                    host_hit: int = 0) -> int | None:  # fmt: skip
    """The first-chunk limit SGLang's SWA budget admits a request with (``SWAPrefillBudget.check_prefill``,
    ``prefill_budget.py:228-262``): ``limit`` when its estimate fits the ``room`` left; when it can never fit
    the pool (``size`` tokens), a chunk small enough to leave the output's window headroom (``_chunk_cap``);
    None when the request must wait (the pressure is only transient) or no such chunk is left."""
    need = swa_estimate(extend, max_new, window=window, page=page, limit=limit, host_hit=host_hit)
    if need < room:
        return limit
    if need < size:
        return None
    cap = int(room) - swa_estimate(0, max_new, window=window, page=page, host_hit=host_hit)
    cap = max(0, cap // page * page)
    return min(limit, cap) if cap > 0 else None

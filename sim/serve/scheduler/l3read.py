"""An L3 read in flight: what a queued request holds while its prefetch runs. :mod:`.prefetch` issues and ends
it; :class:`~sim.serve.scheduler.req.Running` carries it, so it sits below both."""

from __future__ import annotations

from dataclasses import dataclass

from sim.cache.node import Node

__all__ = ["Prefetch"]


@dataclass(slots=True)
class Prefetch:
    """An L3 read in flight for a queued request (SGLang's ``ongoing_prefetch`` entry)."""

    start: int  # first page read: the request's L1 + L2 match when the read was issued
    pages: int  # pages the read brings (storage's hit, or what the host had room for), held on the host
    swa_pages: int  # window pages held on the host with them (none for a partial read)
    requested_tokens: int  # the span asked for, which sizes the timeout and the in-flight cap
    anchor: Node  # host-locked until the read ends (unified_radix_cache.py:2168-2172)
    t_start: float
    t_end: float
    nbytes: int
    deadline: float | None = None  # set at the first blocked admission poll (timeout policy)

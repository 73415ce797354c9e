"""What the single-pool cache's parts share about its two tiers: a tier's page allocator, the write policy that
decides when a page is copied from L1 to L2, and one copy in flight.

These live below their users (:mod:`sim.cache.controller`, :mod:`sim.cache.evictor`, :mod:`sim.cache.requests`,
:mod:`sim.cache.stats`, :mod:`sim.cache.hicache`), which all read them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from sim.base.errors import InputError
from sim.cache.node import Node

__all__ = ["BackupOp", "Tier", "WritePolicy", "no_window_pool"]


class WritePolicy(str, Enum):
    WRITE_THROUGH = "write_through"
    WRITE_THROUGH_SELECTIVE = "write_through_selective"
    WRITE_BACK = "write_back"
    BOUNDARY = "boundary"  # SGLang's policy simulator, boundary_l1_l2 (sim/cache/boundary.py)

    @property
    def threshold(self) -> int | None:
        """Hit count that triggers a backup on insert (``unified_radix_cache.py:558-560``)."""
        return {"write_through": 1, "write_through_selective": 2}.get(self.value)

    @classmethod
    def parse(cls, value: str) -> WritePolicy:
        try:
            return cls(value)
        except ValueError:
            known = ", ".join(p.value for p in cls)
            raise InputError(f"unknown write policy {value!r} (known: {known})") from None


class Tier:
    """The page allocator of one tier (L1 or L2), in pages of the ``kv`` anchor.

    Only the anchor allocates: sidecars reuse its indices (SGLang ``hybrid_pool_assembler``), so every pool,
    all ``kv``-anchored here, holds exactly the anchor's pages. ``math.inf`` capacity means unbounded.
    """

    __slots__ = ("kv_cap", "kv_used")

    def __init__(self, kv_cap: float) -> None:
        self.kv_cap = kv_cap
        self.kv_used = 0

    def alloc(self, pages: int) -> bool:
        if self.kv_used + pages > self.kv_cap:
            return False
        self.kv_used += pages
        return True

    def free(self, kv_pages: int, swa_pages: int = 0) -> None:
        """Give ``kv_pages`` back; there are no window pages to give (``swa_pages`` must be 0)."""
        if swa_pages:
            no_window_pool("free", swa_pages)
        self.kv_used -= kv_pages


@dataclass
class BackupOp:
    """One node's device-to-host copy, from commit (t1) to ack (t3).

    ``nodes`` grows when a pending node is split (both halves wait for the same copy); ``locked`` is the
    node whose path lock the ack releases (None under write_back, which takes no lock).
    """

    id: int
    locked: Node | None
    nodes: list[Node]
    kv_pages: int

    @property
    def storage_nodes(self) -> list[Node]:
        """What goes on to L3 after the ack."""
        return self.nodes


def no_window_pool(call: str, pages: int) -> None:
    """A single-pool cache has no sliding-window pool: a call that names window pages is a caller's bug."""
    raise ValueError(f"{call}: {pages} window pages asked of a cache without a sliding-window pool")

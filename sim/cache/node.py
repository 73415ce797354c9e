"""The radix tree's node: one run of pages with its residency on both tiers and its locks.

It lives below the tree (:mod:`sim.cache.radix`), its residency bookkeeping (:mod:`sim.cache.residency`) and the
eviction orders (:mod:`sim.cache.eviction`), which all read it.
"""

from __future__ import annotations

from collections.abc import Hashable

__all__ = ["Node", "PageKey"]

PageKey = Hashable


class Node:
    """One run of pages."""

    __slots__ = (
        "key", "parent", "children", "id", "last_access", "hit_count", "used",
        "device", "host", "lock_ref", "host_lock_ref", "dev_children",
        "dev_mask", "host_mask", "pending", "loading",
    )  # fmt: skip

    def __init__(self, key: list[PageKey], parent: Node | None, node_id: int, now: int) -> None:
        self.key = key
        self.parent = parent
        # NOTE: a plain dict: a defaultdict would create children on lookup.
        self.children: dict[PageKey, Node] = {}
        self.id = node_id
        self.last_access = now
        self.hit_count = 0
        self.used = 0.0  # simulated seconds of its creation or last hit (sim.cache.ages; 0 with no clock)
        self.device = True
        self.host = False
        self.lock_ref = 0
        self.host_lock_ref = 0
        self.dev_children = 0
        self.dev_mask = 0  # which pools hold this node on device / host (set by sim.cache.hicache)
        self.host_mask = 0
        self.pending = None  # the in-flight write-through backup covering this node, if any
        self.loading: Node | None = None  # the anchor of a load-back into this node not yet acknowledged

    @property
    def pages(self) -> int:
        return len(self.key)

    def __repr__(self) -> str:
        tiers = ("D" if self.device else "") + ("H" if self.host else "")
        return f"Node(id={self.id}, pages={len(self.key)}, {tiers or 'dead'}, lock={self.lock_ref})"

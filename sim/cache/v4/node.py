"""The unified tree's records: a node (a run of pages with its Full and SWA state on both tiers), what a match
and an insert answer (``unified_tree_core.py``'s ``UnifiedTreeNode``, ``MatchResult``, ``InsertResult``), and the
host controller's copy in flight over nodes (:class:`Backup`, which a node points to while it waits)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

__all__ = ["Backup", "InsertOutcome", "Match", "PageKey", "UNode", "common_pages"]

PageKey = Hashable


class UNode:
    """A run of pages with its Full KV (always on device here) and its SWA state (live or tombstone)."""

    __slots__ = (
        "key", "parent", "children", "id", "last_access", "hit_count", "tokens", "used",
        "full", "full_kids", "host", "host_swa", "lock", "host_lock", "pending", "loading",
        "swa", "swa_lock", "swa_uuid", "swa_prev", "swa_next", "host_prev", "host_next",
    )  # fmt: skip

    def __init__(self, key: list[PageKey], parent: UNode | None, node_id: int, now: float, page: int,
                 used: float = 0.0) -> None:  # fmt: skip
        self.key = key
        self.parent = parent
        self.children: dict[PageKey, UNode] = {}
        self.id = node_id
        self.last_access = now
        self.hit_count = 0
        self.tokens = len(key) * page
        self.used = used  # simulated seconds of its creation or last hit (sim.cache.ages; 0 with no clock)
        self.full = True  # Full KV on device; False: evicted to host (``host``) or dead
        self.full_kids = 0  # children with Full KV on device (a device leaf has none)
        self.host = False  # Full KV on host (backed up)
        self.host_swa = False  # SWA state on host
        self.lock = 0
        self.host_lock = 0
        self.pending: Backup | None = None  # the write-through backup in flight over this node
        # the anchor of the load-back bringing its Full KV back (write_back pins it against reclaim and against
        # another anchor's load-back, ``load_back_pending_id``); None when none is in flight
        self.loading: UNode | None = None
        self.swa = False
        self.swa_lock = 0
        self.swa_uuid: int | None = None
        self.swa_prev: UNode | None = None
        self.swa_next: UNode | None = None
        self.host_prev: UNode | None = None  # the SWA host LRU's links (``swa.HostLRU``)
        self.host_next: UNode | None = None

    def __repr__(self) -> str:
        tiers = ("D" if self.full else "") + ("H" if self.host else "")
        return f"UNode(id={self.id}, tokens={self.tokens}, {tiers or 'dead'}, {'S' if self.swa else 'T'}, lock={self.lock})"


@dataclass(slots=True, init=False)  # its own __init__: see :mod:`sim.base.compiled`
class Match:
    """``device``: the SWA-valid device prefix (tokens) ending at ``node``; ``full_hit``: the Full prefix
    before the validator cut it back; ``branching``: the page-aligned Full hit beyond the valid end, if any.
    With a host tier, ``best`` is the deepest end valid on device or host, ``host`` the Full tokens between
    ``node`` and ``best`` held only on host, and ``swa_host`` the window tokens behind ``best`` held only on
    host (``components/full.py:123-145``, ``swa.py:379-420``)."""

    device: int
    node: UNode
    full_hit: int
    branching: int | None
    best: UNode
    best_len: int
    host: int
    swa_host: int

    def __init__(self, device: int, node: UNode, full_hit: int, branching: int | None, best: UNode,
                 best_len: int = 0, host: int = 0, swa_host: int = 0) -> None:  # fmt: skip
        self.device, self.node, self.full_hit, self.branching = device, node, full_hit, branching
        self.best, self.best_len, self.host, self.swa_host = best, best_len, host, swa_host


@dataclass(slots=True, init=False)
class InsertOutcome:
    """``prefix``: tokens already in the tree; ``node``: where the key ends; ``branch_inserted``: the insert
    reached the request's branching point."""

    prefix: int
    node: UNode
    branch_inserted: bool

    def __init__(self, prefix: int, node: UNode, branch_inserted: bool) -> None:
        self.prefix, self.node, self.branch_inserted = prefix, node, branch_inserted


@dataclass(slots=True, init=False)  # its own __init__, compiled: see :mod:`sim.base.compiled`
class Backup:
    """A device-to-host copy from commit to ack: ``node``'s Full KV (``full`` tokens) and the window state of
    the other ``nodes`` (``swa`` tokens in all). Under write-through the node is locked until the ack
    (``unified_radix_cache.py:1681-1818``)."""

    node: UNode
    nodes: list[UNode]
    full: int
    swa: int
    page: int
    lock_uuid: int | None
    locked: bool

    def __init__(self, node: UNode, nodes: list[UNode], full: int, swa: int, page: int) -> None:
        self.node, self.nodes, self.full, self.swa, self.page = node, nodes, full, swa, page
        self.lock_uuid, self.locked = None, False

    @property
    def kv_pages(self) -> int:
        return self.full // self.page

    @property
    def swa_pages(self) -> int:
        return self.swa // self.page

    @property
    def storage_nodes(self) -> list[UNode]:
        """What goes on to L3 after the ack: the node whose Full KV this copied."""
        return [self.node] if self.full else []


def common_pages(key: list[PageKey], keys: Sequence[PageKey], pos: int) -> int:
    """Pages of ``key`` that ``keys`` repeats from ``pos``; the first is known to match (the child was
    found by it)."""
    n = len(key)
    if n == 1 or key == keys[pos : pos + n]:
        return n
    i = 1
    for a, b in zip(key[1:], keys[pos + 1 : pos + n]):
        if a != b:
            break
        i += 1
    return i

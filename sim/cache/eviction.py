"""Device-tree eviction orders other than LRU: SGLang's ``--radix-eviction-policy``.

SGLang evicts the device leaf with the smallest ``EvictionStrategy.get_priority(node)``
(``mem_cache/evict_policy.py:10-100``, chosen by name in ``mem_cache/utils.py:60-82``;
the option is ``radix_eviction_policy`` in ``arg_groups/fields/memory.py:25-63``):

- ``lru``: last access time (``evict_policy.py:16-18``); the tree's own order, kept on its fast path;
- ``lfu``: (hit count, last access) (``evict_policy.py:21-23``);
- ``slru``: (segment, last access), segment 1 once the hit count reaches ``protected_threshold``
  (default 2), so every probationary leaf goes before any protected one (``evict_policy.py:84-100``);
- ``fifo`` / ``filo``: creation time, oldest / newest first (``evict_policy.py:26-28, 36-38``);
- ``mru``: most recently used first (``evict_policy.py:31-33``).

Not modelled: ``priority`` (``evict_policy.py:41-46``) orders by a per-request priority that no trace or
workload here carries (with every priority 0 it is LRU); ``tlru`` (``evict_policy.py:49-81``) needs
per-node depth and branch high-water bookkeeping in the tree (``unified_tree_core.py:191-210``), and
with its default parameters (threshold 0, next-prompt estimate 0) no node is ever "TEL-safe", so it
too is LRU.

A node's creation time is its id here (ids are handed out in creation order, splits included, as
SGLang's ``TreeNode`` reads the clock when a split creates the new parent).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from sim.base.errors import InputError

if TYPE_CHECKING:
    from sim.cache.node import Node

__all__ = ["EVICTION_POLICIES", "PriorityOrder", "eviction_order"]

EVICTION_POLICIES = ("lru", "lfu", "slru", "fifo", "filo", "mru")


def eviction_order(policy: str, config: dict[str, Any] | None = None) -> PriorityOrder | None:
    """The device victim order for ``policy``; None for ``lru`` (the tree's built-in order).

    ``config``: SGLang's ``--radix-eviction-policy-config`` (``arg_groups/fields/memory.py:46-63``); of the
    orders here only ``slru`` takes a parameter, ``protected_threshold`` (hit count, default 2). An unknown
    key is an error naming the key and the policy, as SGLang fails at startup.
    """
    name = policy.lower()
    config = dict(config or {})
    params = {"slru": {"protected_threshold"}}.get(name, set())
    unknown = sorted(set(config) - params)
    if unknown:
        raise InputError(f"radix_eviction_policy_config: {name} takes no parameter {unknown[0]!r}"
                         f" (takes: {', '.join(sorted(params)) or 'none'})")  # fmt: skip
    if name == "lru":
        return None
    if name == "slru":
        t = config.get("protected_threshold", 2)
        if not isinstance(t, int) or isinstance(t, bool) or t < 1:
            raise InputError(f"radix_eviction_policy_config: slru protected_threshold must be an integer >= 1, got {t!r}")
        return PriorityOrder(lambda n: (1 if n.hit_count >= t else 0, n.last_access))
    keys: dict[str, Callable[[Node], Any]] = {
        "lfu": lambda n: (n.hit_count, n.last_access),
        "fifo": lambda n: n.id,
        "filo": lambda n: -n.id,
        "mru": lambda n: -n.last_access,
    }
    if name not in keys:
        raise InputError(f"unknown eviction policy {policy!r} (known: {', '.join(EVICTION_POLICIES)})")
    return PriorityOrder(keys[name])


class PriorityOrder:
    """Device leaves ordered by ``key(node)``, smallest first, in a heap with lazy invalidation.

    The tree pushes a node whenever it becomes an evictable leaf or its access time changes. Keys that
    grow without a push (a hit count bumped after the access was filed) are caught when popped: an entry
    whose key is below the node's current key is pushed again at the current key, so such keys never
    need the tree to file them. An entry above the current key is stale (the node was re-filed since).
    """

    __slots__ = ("key", "heap")

    def __init__(self, key: Callable[[Node], Any]) -> None:
        self.key = key
        self.heap: list[tuple[Any, int, Node]] = []

    def push(self, node: Node, live_nodes: int, still_valid: Callable[[Node], bool]) -> None:
        heap = self.heap
        heapq.heappush(heap, (self.key(node), node.id, node))
        if len(heap) > 4 * live_nodes + 1024:
            self._compact(still_valid)

    def victims(self, still_valid: Callable[[Node], bool]) -> Iterator[Node]:
        """Valid entries, smallest current key first (the caller removes each before the next)."""
        heap, key = self.heap, self.key
        while heap:
            k, nid, node = heapq.heappop(heap)
            if node.parent is None or not still_valid(node):
                continue
            now = key(node)
            if now == k:
                yield node
            elif k < now:
                heapq.heappush(heap, (now, nid, node))

    def _compact(self, still_valid: Callable[[Node], bool]) -> None:
        """Keep one entry per valid node, at its current key."""
        key = self.key
        latest: dict[int, tuple[Any, int, Node]] = {}
        for entry in self.heap:
            node = entry[2]
            if node.parent is not None and still_valid(node):
                latest[node.id] = (key(node), node.id, node)
        self.heap = list(latest.values())
        heapq.heapify(self.heap)

"""What leaves each tier, and how: SGLang's device eviction (``unified_radix_cache.py:952-1060``: demote a
backed-up victim, delete an unbacked one, back it up first under write_back or drop its subtree) and host
eviction (``unified_tree_core.py:1931-2030``: host-only leaves least recently used first, write_back's
duplicate host copies before them), with the host allocation that asks for it
(``unified_radix_cache.py:1737-1762``).

:class:`TierEvictor` is a base of :class:`sim.cache.hicache.HiCache` and works on its state; a base rather
than a member because it runs once per evicted node on a replay's hot path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.cache.node import Node
from sim.cache.radix import RadixTree
from sim.cache.stats import HOST_PRESSURE, UNBACKED
from sim.cache.tiers import Tier, WritePolicy

if TYPE_CHECKING:
    from sim.cache.boundary import BoundaryWriter
    from sim.cache.stats import CacheStats

__all__ = ["TierEvictor"]


class TierEvictor:
    """Device and host eviction over a :class:`~sim.cache.hicache.HiCache`'s state (the write_back copy a
    device eviction makes comes from :class:`~sim.cache.controller.CacheController`)."""

    # Set by HiCache.__init__.
    tree: RadixTree
    stats: CacheStats
    l1: Tier
    l2: Tier
    page_tokens: int
    policy: WritePolicy
    l2_enabled: bool
    reserved_kv: int
    events: list[dict] | None
    _duplicates: dict[int, Node] | None
    _boundary: BoundaryWriter | None

    def _split_duplicate(self, node: Node) -> None:
        """A split's new parent is a duplicate if its KV is on both tiers and settled (``unified_tree_core.py:1529``)."""
        if node.device and node.host and node.loading is None and node.pending is None:
            self._duplicates.setdefault(node.id, node)


    # ----- device tier ------------------------------------------------------------------------
    def ensure_device(self, pages: int) -> bool:
        """Make ``pages`` fit beside every reservation, evicting device leaves in victim order; False if
        they cannot."""
        l1 = self.l1
        if l1.kv_cap - l1.kv_used - self.reserved_kv >= pages:
            return True
        for node in self.tree.device_victims():
            self._evict_device(node)
            if l1.kv_cap - l1.kv_used - self.reserved_kv >= pages:
                return True
        return False

    def _evict_device(self, node: Node) -> None:
        tokens = len(node.key) * self.page_tokens
        self.stats.evictions += 1
        self.stats.evicted_tokens += tokens
        if self.tree.ages is not None:
            self.tree.ages.evicted("device", node.used, tokens, node.hit_count)
        if self._boundary is not None:
            self._boundary.evict_device(node)
            return
        write_back = self.policy is WritePolicy.WRITE_BACK and self.l2_enabled
        # write_back backs up the victim alone, not its unbacked ancestors (unified_tree_core.py:2622-2644)
        if write_back and not node.host and not self._backup_node(node):
            self._drop_subtree(node, HOST_PRESSURE)
            return
        events = self.events
        self.l1.free(len(node.key))
        if node.host:
            self.stats.demotions += 1
            if events is not None:
                events.append({"demote": self._ref(node)})
            self.tree.demote(node)
        else:
            # Counted only under write_through in cache mode (unified_radix_cache.py:1060-1065, 909-930);
            # without L2, deleting is plain eviction, not a drop.
            if self.l2_enabled and self.policy is WritePolicy.WRITE_THROUGH:
                self.stats.dropped_tokens[UNBACKED] += tokens
                if events is not None:
                    events.append({"drop": UNBACKED, "tokens": tokens})
            if events is not None:
                events.append({"delete": self._ref(node)})
            self.tree.delete_leaf(node)

    def _drop_subtree(self, node: Node, reason: str, top: bool = True) -> None:
        """Delete ``node`` and every host-only descendant, children first."""
        if top and self.events is not None:
            self.events.append({"drop": reason, "tokens": self._subtree_tokens(node)})
            self.events.append({"delete": self._ref(node), "subtree": True})
        for child in list(node.children.values()):
            self._drop_subtree(child, reason, top=False)
        self.stats.dropped_tokens[reason] += len(node.key) * self.page_tokens
        if node.device:
            self.l1.free(len(node.key))
        if node.host:
            self.l2.free(len(node.key))
        self.tree.delete_leaf(node)

    def _subtree_tokens(self, node: Node) -> int:
        return sum(len(x.key) for x in _subtree(node)) * self.page_tokens

    # ----- host tier --------------------------------------------------------------------------
    def _alloc_host(self, pages: int) -> bool:
        """Allocate a node's host pages in every pool at once: when the host is short, ask host eviction for
        the difference once, then give up if it could not free that much (``unified_radix_cache.py:1737-1762``)."""
        if self._boundary is not None:
            return self._boundary.alloc_host(pages)
        if self.l2.alloc(pages):
            return True
        self.evict_host((pages - (self.l2.kv_cap - self.l2.kv_used)) * self.page_tokens)
        return self.l2.alloc(pages)

    def evict_host(self, tokens: int) -> int:
        """Free at least ``tokens`` host tokens, whole host leaves least recently used first (under write_back,
        host copies of device-resident nodes first, ``unified_tree_core.py:1931-2030``); returns pages freed."""
        want = -(-tokens // self.page_tokens)
        freed, nodes = 0, []
        if self._duplicates is not None:
            freed = self._reclaim_duplicates(want, nodes)
        if freed < want:
            for victim in self.tree.host_victims():
                if self.events is not None:
                    nodes.append(self._ref(victim))
                freed += len(victim.key)
                self._evict_host(victim)
                if freed >= want:
                    break
        if self.events is not None:
            self.events.append({"host_evict": tokens, "got": freed * self.page_tokens, "nodes": sorted(nodes)})
        return freed

    def _reclaim_duplicates(self, want: int, nodes: list) -> int:
        """write_back: give up host copies of nodes also on the device, sparing evictable device leaves in a
        first pass (``unified_tree_core.py:1975-2006``). The order is a dict's insertion order, as SGLang's
        ``full_host_duplicates`` (``:531``): entries go in by ``setdefault`` (``:1604-1610``: a write_back
        victim's ack, a write-through ack, a split, an un-eviction, a load ack) and leave lazily, when this walk
        passes them stale or releases them, so a node keeps the place it first took while its entry lives."""
        freed = 0
        for spare in (True, False):
            for node in list(self._duplicates.values()):
                if freed >= want:
                    return freed
                if not (node.device and node.host) or node.parent is None:
                    del self._duplicates[node.id]
                    continue
                if node.pending is not None or node.loading is not None or node.host_lock_ref:
                    continue
                if spare and node.lock_ref == 0 and node.dev_children == 0:
                    continue
                if self.events is not None:
                    nodes.append(self._ref(node))
                freed += len(node.key)
                self._aged_out(node)
                self.l2.free(len(node.key))
                self.tree.clear_host(node)
                del self._duplicates[node.id]
        return freed

    def _aged_out(self, node: Node) -> None:
        """``node``'s host copy goes: its age and reuse count, when the run records them."""
        if self.tree.ages is not None:
            self.tree.ages.evicted("host", node.used, len(node.key) * self.page_tokens, node.hit_count)

    def _evict_host(self, node: Node) -> None:
        self.stats.host_evictions += 1
        self.stats.host_evicted_tokens += len(node.key) * self.page_tokens
        self._aged_out(node)
        self.l2.free(len(node.key))
        self.tree.delete_leaf(node)
    def evict_tokens(self, tokens: int) -> int:
        """Evict device leaves until at least ``tokens`` tree tokens are freed (``evict(EvictParams)``)."""
        freed = 0
        for node in self.tree.device_victims():
            freed += len(node.key) * self.page_tokens
            self._evict_device(node)
            if freed >= tokens:
                break
        return freed



def _subtree(node: Node):
    stack = [node]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(x.children.values())

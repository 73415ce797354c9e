"""Device eviction in DeepSeek V4's tree (``unified_radix_cache.py:697-1058``, ``unified_tree_core.py:1644-1929,
2090-2123``; bare line numbers below are the latter's): the Full walk takes least recently used device leaves,
the SWA walk then follows the SWA LRU; a victim with a host copy is demoted, one without goes to the cache's
``evict_unbacked`` (or is deleted). :class:`DeviceEviction` is a base of :class:`~sim.cache.v4.unified.UnifiedTree`
and works on its state.
"""

from __future__ import annotations

from collections.abc import Callable

from mypy_extensions import trait

from sim.cache.v4.full import is_leaf
from sim.cache.v4.node import UNode
from sim.cache.v4.treestate import TreeState

__all__ = ["DeviceEviction"]


@trait
class DeviceEviction(TreeState):
    """Evicts device state; ``tracker`` is ``[full, swa]``, the tokens each call freed so far."""


    def evict(
        self,
        full_short: int,
        swa_short: int,
        full_free: Callable[[], int | float],
        swa_free: Callable[[], int | float],
    ) -> tuple[int, int]:
        """Free tree state until ``full_short`` more Full and ``swa_short`` more SWA tokens are free
        (``unified_radix_cache.py:697-1058``); returns the (Full, SWA) tokens evicted.

        Full goes first, LRU leaf by leaf. SWA then walks its own LRU: an evictable leaf goes whole (Full
        with it), any other unlocked node only loses its SWA (a tombstone), under write_back after a backup of
        its Full KV and unbacked window when neither is on host yet (best effort: it is tombstoned either way).
        """
        tracker = [0, 0]
        swa = self.swa
        full_free0, swa_free0 = full_free(), swa_free()
        full_target = full_free0 + full_short  # both targets are fixed before either walk
        swa_target = swa_free0 + swa_short
        # During the walks only the tree's ledgers move, so a pool's free tokens are read off them: what was free
        # at the start plus what left the tree since (full_free() and swa_free(), without a call per victim).
        full_base = full_free0 + self.full_evictable + self.full_protected
        swa_base = swa_free0 + swa.evictable + swa.protected
        if full_short > 0:
            while full_base - self.full_evictable - self.full_protected < full_target:
                node = self.pop_leaf()
                if node is None:
                    break
                self.evict_leaf(node, tracker)
        # swa.evictable is the SWA held by unlocked nodes: at 0 the walk below could only step over locked ones
        if (swa_short > 0 and swa.evictable and swa_base - swa.evictable - swa.protected < swa_target
                and tracker[1] < swa_short):  # fmt: skip
            lru = swa.lru
            cursor = lru.lru_unlocked()
            while cursor is not None and tracker[1] < swa_short:
                x = cursor
                cursor = lru.lru_unlocked(x)
                if is_leaf(x):
                    self.evict_leaf(x, tracker)
                else:
                    if self.back_up_window is not None and x.full and not x.host and not x.host_swa:
                        self.back_up_window(x)  # components/swa.py:795-813
                    tracker[1] += swa.tombstone(x)
                    self.update_leaf(x)
                if swa_base - swa.evictable - swa.protected >= swa_target or not swa.evictable:
                    break
                if cursor is not None and not lru.contains(cursor):
                    cursor = lru.lru_unlocked()
        return tracker[0], tracker[1]

    def evict_leaf(self, node: UNode, tracker: list[int]) -> None:
        """A device victim: demoted if backed up, else handed to ``evict_unbacked`` (``:1788-1823``)."""
        self.counts["evicted_leaves"] += 1
        if self.ages is not None:
            self.ages.evicted("device", node.used, node.tokens, node.hit_count)
        if node.host:
            self.demote(node, tracker)
        elif self.evict_unbacked is not None:
            self.evict_unbacked(node, tracker)
        else:
            self.delete_leaf(node, tracker)

    def demote(self, node: UNode, tracker: list[int]) -> None:
        """Free a backed-up leaf's device copy; it stays in the tree, host-only (``:2090-2123``)."""
        self.counts["demotions"] += 1
        if self.events is not None:
            self.events.append({"demote": self.ref(node)})
        tracker[0] += node.tokens
        self.full_evictable -= node.tokens
        node.full = False
        parent = node.parent
        assert parent is not None
        parent.full_kids -= 1
        tracker[1] += self.swa.tombstone(node)
        self.update_leaf(node)
        self.update_leaf(parent)

    def delete_leaf(self, node: UNode, tracker: list[int]) -> None:
        """Delete a device leaf and then every childless ancestor left with neither a device nor a host
        copy of its Full KV (``:1903-1929, 2289-2346``)."""
        cur = node.parent
        self._remove(node, tracker)
        while cur is not self.root:
            assert cur is not None
            if cur.children or cur.lock or cur.swa_lock or cur.host_lock or cur.full or cur.host:
                break
            nxt = cur.parent
            self._remove(cur, tracker)
            cur = nxt

    def _remove(self, node: UNode, tracker: list[int]) -> None:
        """Take a childless node out of the tree with whatever it still holds (``:1878-1929``)."""
        parent = node.parent
        assert parent is not None
        if node.full:
            tracker[0] += node.tokens
            self.full_evictable -= node.tokens
            node.full = False
            parent.full_kids -= 1
        tracker[1] += self.swa.tombstone(node)
        self._free_host(node)
        del parent.children[node.key[0]]
        node.parent = None
        self.num_nodes -= 1
        self.update_leaf(parent)
        self._compact()

"""DeepSeek V4's radix tree: SGLang 0.5.23's ``UnifiedTreeCore`` with a FULL and an SWA component.

The FULL component is the tree's backbone: a node exists while its Full KV does, device eviction takes the
least recently used unlocked leaf (``components/full.py:209-246``, a heap on ``last_access_time``), and locks
cover the whole root path. The SWA rules are in :mod:`sim.cache.v4.swa`. Citations are to
``mem_cache/unified_cache/unified_tree_core.py`` unless a file is named.

LRU time is SGLang's access counter, read where SGLang reads it: two ticks per new node (access and
creation time), one per node an insert walks, one for a split child, and one per match, whose path from the
match end up gets that time minus 1e-5 per level (``:1012-1036``). So eviction order matches SGLang's call
for call (``shared/vectors/v4``).
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from sim.cache.v4.swa import SWAComponent

__all__ = ["InsertOutcome", "Match", "UNode", "UnifiedTree"]

PageKey = Hashable


class UNode:
    """A run of pages with its Full KV (always on device here) and its SWA state (live or tombstone)."""

    __slots__ = (
        "key", "parent", "children", "id", "last_access", "hit_count", "tokens",
        "full", "full_kids", "host", "host_swa", "lock", "host_lock", "pending", "loading",
        "swa", "swa_lock", "swa_uuid", "swa_prev", "swa_next",
    )  # fmt: skip

    def __init__(self, key: list[PageKey], parent: UNode | None, node_id: int, now: float, page: int) -> None:
        self.key = key
        self.parent = parent
        self.children: dict[PageKey, UNode] = {}
        self.id = node_id
        self.last_access = now
        self.hit_count = 0
        self.tokens = len(key) * page
        self.full = True  # Full KV on device; False: evicted to host (``host``) or dead
        self.full_kids = 0  # children with Full KV on device (a device leaf has none)
        self.host = False  # Full KV on host (backed up)
        self.host_swa = False  # SWA state on host
        self.lock = 0
        self.host_lock = 0
        self.pending: object | None = None  # the write-through backup in flight over this node
        self.loading = False  # its Full KV is being loaded back (write_back pins it against reclaim)
        self.swa = False
        self.swa_lock = 0
        self.swa_uuid: int | None = None
        self.swa_prev: UNode | None = None
        self.swa_next: UNode | None = None

    def __repr__(self) -> str:
        tiers = ("D" if self.full else "") + ("H" if self.host else "")
        return f"UNode(id={self.id}, tokens={self.tokens}, {tiers or 'dead'}, {'S' if self.swa else 'T'}, lock={self.lock})"


@dataclass(frozen=True, slots=True)
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
    best_len: int = 0
    host: int = 0
    swa_host: int = 0


@dataclass(frozen=True, slots=True)
class InsertOutcome:
    """``prefix``: tokens already in the tree; ``node``: where the key ends; ``branch_inserted``: the insert
    reached the request's branching point."""

    prefix: int
    node: UNode
    branch_inserted: bool


class UnifiedTree:
    """FULL + SWA radix tree over page keys of ``page`` tokens with a ``window``-token sliding window."""

    def __init__(self, page: int, window: int, hicache: bool = False) -> None:
        self.page = page
        self.window = window
        self.hicache = hicache
        self.backup: Callable[[UNode], None] | None = None  # the controller's write-through hook
        self.evict_unbacked: Callable[[UNode, list[int]], None] | None = None  # default: delete
        self.back_up_window: Callable[[UNode], None] | None = None  # write_back: before tombstoning SWA
        self._ids = itertools.count()
        self._clock = 0.0
        self.root = self._node([], None)
        self.root.host = True  # the root counts as backed up (an L3 read may start from it)
        self.root.lock = 1
        self.root.swa_lock = 1
        self.swa = SWAComponent(self, window)
        self.full_evictable = 0
        self.full_protected = 0
        self.leaves: set[UNode] = set()
        self._heap: list[tuple[float, int, UNode]] = []
        self.host_leaves: set[UNode] = set()
        self._host_heap: list[tuple[float, int, UNode]] = []
        self.host_tokens = 0
        self.host_swa_tokens = 0
        self.counts: Counter = Counter()  # evicted_leaves, demotions, host_evictions
        self.events: list[dict] | None = None  # host-tier decisions in order (hicache-sim tree); None: off
        # write_back only: nodes with Full KV on both tiers, in the order they became so; host eviction reclaims
        # their host copies first (unified_tree_core.py:1604-1610, 1975-2030)
        self.duplicates: dict[UNode, None] | None = None
        self.num_nodes = 0

    def sentinel(self) -> UNode:
        return UNode([], None, -1, 0.0, self.page)

    def _tick(self) -> float:
        self._clock += 1
        return self._clock

    def _node(self, key: list[PageKey], parent: UNode | None) -> UNode:
        self._clock += 2  # access time, then creation time
        return UNode(key, parent, next(self._ids), self._clock - 1, self.page)

    # ----- keys -------------------------------------------------------------------------------
    def page_keys(self, tokens: Sequence[int]) -> list[PageKey]:
        """Whole pages of ``tokens`` (a partial last page is never cached)."""
        p = self.page
        return [tuple(tokens[i : i + p]) for i in range(0, len(tokens) // p * p, p)]

    # ----- match ------------------------------------------------------------------------------
    def match(self, keys: Sequence[PageKey]) -> Match:
        """Longest SWA-valid prefix of ``keys`` (``:905-1068``); splits a partly matched node and refreshes
        the LRU from the match end up. The walk stops at a dead node (neither on device nor on host)."""
        node = root = self.root
        pos, n = 0, len(keys)
        best = dev = root
        dev_pages = best_pages = 0
        valid_any, valid_dev = self.swa.validator(host=True), self.swa.validator()
        hicache = self.hicache
        while pos < n:
            child = node.children.get(keys[pos])
            if child is None or not (child.full or child.host):
                break
            matched = _common(child.key, keys, pos)
            pos += matched
            partial = matched < len(child.key)
            node = self._split(child, matched) if partial else child
            ok = valid_any(node) and (node.full or node.host) if hicache else False
            if valid_dev(node) and node.full:
                dev, dev_pages = node, pos
                ok = True
            if ok:
                best, best_pages = node, pos
            if partial:
                break
        if best is not root:
            self.swa.lru.refresh_window(best, root, self.window + self.page)
        t = self._tick()
        x = best
        while x is not None:
            x.last_access = t
            self._refile(x)
            t -= 1e-5
            x = x.parent
        device = dev_pages * self.page
        host = sum(x.tokens for x in self.path_up(best, dev) if x.host) if hicache else 0
        aligned = pos * self.page
        branch = aligned if aligned > device + host else None
        swa_host = self._swa_host(best) if hicache else 0
        return Match(device, dev, aligned, branch, best, best_pages * self.page, host, swa_host)

    def peek(self, keys: Sequence[PageKey]) -> tuple[int, int]:
        """(device pages, device-or-host pages) of the raw prefix of ``keys``, changing nothing: a router's
        estimate, without the window check."""
        node, pos, n, dev = self.root, 0, len(keys), 0
        while pos < n:
            child = node.children.get(keys[pos])
            if child is None or not (child.full or child.host):
                break
            matched = _common(child.key, keys, pos)
            pos += matched
            if child.full:
                dev = pos
            if matched < len(child.key):
                break
            node = child
        return dev, pos

    def insert_host(self, keys: Sequence[PageKey], window_pages: int) -> int:
        """Place pages read from L3 as a host-only leaf, the last ``window_pages`` of them with their window
        state (``:2395-2490``); returns the pages added. Pages already in the tree are left as they are."""
        node, pos, n = self.root, 0, len(keys)
        while pos < n:
            child = node.children.get(keys[pos])
            if child is None:
                break
            matched = _common(child.key, keys, pos)
            if matched < len(child.key):
                child = self._split(child, matched)
            node, pos = child, pos + matched
        if pos >= n:
            return 0
        leaf = self._node(list(keys[pos:]), node)
        leaf.full = False
        node.children[leaf.key[0]] = leaf
        self.num_nodes += 1
        if 0 < window_pages < len(leaf.key):
            self.set_host(self._split(leaf, len(leaf.key) - window_pages), [])
        self.set_host(leaf, [leaf] if window_pages else [])
        self.update_leaf(leaf)
        self.update_leaf(node)
        return n - pos

    def path_up(self, node: UNode, stop: UNode | None = None):
        """``node`` and its ancestors up to (not including) ``stop`` or the root."""
        while node is not stop and node is not self.root:
            yield node
            node = node.parent

    def _swa_host(self, node: UNode) -> int:
        """Window tokens behind ``node`` that are only on host (what a load-back must bring in)."""
        n = host = 0
        while node is not self.root and n < self.window:
            if node.swa:
                n += node.tokens
            elif node.host_swa:
                n += node.tokens
                host += node.tokens
            else:
                break
            node = node.parent
        return host

    # ----- insert -----------------------------------------------------------------------------
    def insert(
        self,
        keys: Sequence[PageKey],
        *,
        prev_prefix: int,
        inserted: int,
        window_start: int,
        branching: int | None = None,
    ) -> InsertOutcome:
        """Insert a request's page-aligned key (``:1129-1465``).

        *prev_prefix*: tokens the request already holds from the tree; *inserted*: tokens it inserted before
        (their hit counts are not raised again); *window_start*: its SWA-evicted boundary (SWA below it is
        gone, so only the part at or beyond it is published or restored).
        """
        page = self.page
        root = self.root
        root.last_access = self._tick()
        leaves, heap = self.leaves, self._heap
        node, pos, n = root, 0, len(keys)
        while pos < n:
            child = node.children.get(keys[pos])
            if child is None:
                break
            self._clock += 1
            child.last_access = self._clock
            if child in leaves:  # _refile, inlined: every insert walks its whole path
                heapq.heappush(heap, (self._clock, child.id, child))
            elif child in self.host_leaves:
                heapq.heappush(self._host_heap, (self._clock, child.id, child))
            matched = _common(child.key, keys, pos)
            if matched < len(child.key):
                child = self._split(child, matched)
            start = pos * page
            end = start + child.tokens
            if not child.full:  # host-only: the request's fresh KV becomes its device copy (``:1564-1590``)
                self._unevict(child)
                part = self._clip(child, start, end, window_start) if not child.swa else None
                if part is not None:
                    self.swa.publish(part)
            elif prev_prefix < end and not child.swa:
                child = self._restore_window(child, start, end, window_start)
            if end > inserted:
                self._hit(child)
            node = child
            pos += matched
        prefix = pos * page
        target, new_leaf = node, pos < n
        if new_leaf:
            target = self._add_leaf(node, list(keys[pos:]))
            self._populate(target, prefix, window_start)
        branch_inserted = branching is not None and n * page >= branching
        if target is not root:
            self.swa.lru.refresh_window(target, root, self.window + page)
            if new_leaf:
                if n * page > inserted:
                    self._hit(target)
            elif (self.hicache and target.host and target.pending is None and self.backup is not None
                  and self.swa.unbacked_window(target)):  # an existing backed node whose window is new
                self.backup(target)
        return InsertOutcome(prefix, target, branch_inserted)

    def _hit(self, node: UNode) -> None:
        """Count a hit; with a write-through policy, back the node up once it reaches the threshold
        (``_inc_hit_count_and_check``, ``:1104-1123``)."""
        node.hit_count += 1
        if self.hicache and self.backup is not None and not node.host:
            self.backup(node)

    def load(self, node: UNode) -> None:
        """A host-only node's Full KV loaded back to the device (``commit_load_back``, ``:2694-2733``)."""
        self._unevict(node)

    def _unevict(self, node: UNode) -> None:
        node.full = True
        if self.duplicates is not None and not node.loading:
            self.settle(node)
        node.parent.full_kids += 1
        if node.lock:
            self.full_protected += node.tokens
        else:
            self.full_evictable += node.tokens
        self.update_leaf(node)
        self.update_leaf(node.parent)

    def _clip(self, node: UNode, start: int, end: int, window_start: int) -> UNode | None:
        """The part of a tombstoned span at or beyond ``window_start``, split off as its own node."""
        live = max(start, window_start)
        if live >= end:
            return None
        if live > start:
            self._split(node, (live - start) // self.page)
        return node

    def _restore_window(self, node: UNode, start: int, end: int, window_start: int) -> UNode:
        """An insert that recomputed a tombstoned node inside its window gives it SWA again
        (``swa.py:551-589``); a locked node keeps its Full KV and only takes the SWA pages."""
        part = self._clip(node, start, end, window_start)
        if part is not None:
            self.swa.publish(part)
        return node

    def _populate(self, leaf: UNode, start: int, window_start: int) -> None:
        """Publish a new leaf's in-window SWA, capping the locked run at one window of pages
        (``swa.py:591-607, 622-660``)."""
        part = self._clip(leaf, start, start + leaf.tokens, window_start)
        if part is None:
            return
        tail = -(-self.window // self.page) * self.page
        if part.swa_lock == 0 and part.tokens > tail:
            parent = self._split(part, (part.tokens - tail) // self.page)
            self.swa.publish(parent)
        self.swa.publish(part)

    def _add_leaf(self, parent: UNode, key: list[PageKey]) -> UNode:
        leaf = self._node(key, parent)
        parent.children[key[0]] = leaf
        parent.full_kids += 1
        self.num_nodes += 1
        self.full_evictable += leaf.tokens
        self.update_leaf(leaf)
        self.update_leaf(parent)
        return leaf

    def _split(self, child: UNode, pages: int) -> UNode:
        """Split ``child`` after ``pages`` pages; returns the new parent (``:1467-1530``)."""
        parent = child.parent
        new = self._node(child.key[:pages], parent)
        child.key = child.key[pages:]
        new.children[child.key[0]] = child
        parent.children[new.key[0]] = new
        child.parent = new
        new.hit_count = child.hit_count
        new.tokens = len(new.key) * self.page
        child.tokens -= new.tokens
        new.lock = child.lock
        new.full, new.host, new.host_swa = child.full, child.host, child.host_swa  # a host lock stays on its anchor
        new.full_kids = 1 if child.full else 0
        if child.pending is not None:  # both halves wait for the same copy
            new.pending = child.pending
            child.pending.nodes.append(new)
        new.loading = child.loading
        self.swa.on_split(new, child)
        if self.duplicates is not None:
            self.settle(new)
        if new.swa:
            self.swa.lru.insert_after(child, new)
        child.last_access = self._tick()
        self.num_nodes += 1
        self._refile(child)  # same leaf status, a new time; the new parent has a child, so is no leaf
        return new

    # ----- locks ------------------------------------------------------------------------------
    def lock(self, node: UNode) -> int | None:
        """Lock ``node``'s root path (Full) and its window run (SWA); returns the SWA boundary id."""
        x, root, leaves, moved = node, self.root, self.leaves, 0
        while x is not root:
            if x.lock == 0:
                if x.full:
                    moved += x.tokens
                leaves.discard(x)
            x.lock += 1
            x = x.parent
        self.full_evictable -= moved
        self.full_protected += moved
        uuid = self.swa.lock(node)
        self.update_leaf(node)
        return uuid

    def relock(self, old: UNode, old_uuid: int | None, new: UNode) -> int | None:
        """``unlock(old, old_uuid)`` then ``lock(new)``, with the same end state. A request's checkpoint moves
        its lock down its own path, so where ``old`` is an ancestor of ``new`` (or ``new`` itself) only the
        nodes between them change their count; the shared root path is not walked twice."""
        root, seg, x = self.root, [], new
        while x is not old and x is not root:
            seg.append(x)
            x = x.parent
        if x is not old:
            self.unlock(old, old_uuid)
            return self.lock(new)
        self.swa.unlock(old, old_uuid)
        leaves, moved = self.leaves, 0
        for x in seg:
            if x.lock == 0:
                if x.full:
                    moved += x.tokens
                leaves.discard(x)
            x.lock += 1
        self.full_evictable -= moved
        self.full_protected += moved
        uuid = self.swa.lock(new)
        self.update_leaf(new)
        return uuid

    def _host_run(self, node: UNode):
        """``node`` and the ancestors that cover the window behind it: what a host lock pins (the Full component
        pins its anchor alone, ``components/full.py:290-301``; the SWA component the window run, ``swa.py:849-895``)."""
        covered = 0
        while node is not self.root and covered < self.window:
            yield node
            covered += node.tokens
            node = node.parent

    def host_lock_path(self, node: UNode) -> None:
        """Keep ``node``'s host copies from host eviction while a load-back or an L3 read uses them."""
        for x in self._host_run(node):
            x.host_lock += 1
            self.host_leaves.discard(x)

    def host_unlock_path(self, node: UNode) -> None:
        for x in self._host_run(node):
            x.host_lock -= 1
            if not x.host_lock:
                self.update_leaf(x)

    def unlock(self, node: UNode, uuid: int | None) -> None:
        self.swa.unlock(node, uuid)
        x, root, moved = node, self.root, 0
        while x is not root:
            if x.lock == 1:
                if x.full:
                    moved += x.tokens
                x.lock = 0
                if not x.full_kids:  # a node with a device child is no leaf of either kind
                    self.update_leaf(x)
            elif x.lock <= 0:
                raise RuntimeError(f"unlock of an unlocked node {x!r}")
            else:
                x.lock -= 1
            x = x.parent
        self.full_evictable += moved
        self.full_protected -= moved
        self.update_leaf(node)

    # ----- leaves and the Full LRU --------------------------------------------------------------
    def update_leaf(self, node: UNode) -> None:
        """Keep the device leaves (Full on device, unlocked, no child with Full on device) and the host
        leaves (Full only on host, no children, unlocked on both tiers, no copy in flight) current
        (``:1592-1602, 2348-2387``)."""
        if node is self.root:
            return
        unlocked = not node.lock and not node.swa_lock
        if node.full:
            if unlocked and not node.full_kids:
                if node not in self.leaves:
                    self.leaves.add(node)
                    heapq.heappush(self._heap, (node.last_access, node.id, node))
            else:
                self.leaves.discard(node)
            if self.hicache:
                self.host_leaves.discard(node)
            return
        self.leaves.discard(node)
        if node.host and unlocked and not node.host_lock and not node.children and node.pending is None:
            if node not in self.host_leaves:
                self.host_leaves.add(node)
                heapq.heappush(self._host_heap, (node.last_access, node.id, node))
        else:
            self.host_leaves.discard(node)

    def _refile(self, node: UNode) -> None:
        if node in self.leaves:
            heapq.heappush(self._heap, (node.last_access, node.id, node))
        elif node in self.host_leaves:
            heapq.heappush(self._host_heap, (node.last_access, node.id, node))

    def _pop(self, heap: list, members: set) -> UNode | None:
        while heap:
            t, _, node = heapq.heappop(heap)
            if node in members and node.last_access == t:
                return node
        return None

    def _remove(self, node: UNode, tracker: list[int]) -> None:
        """Take a childless node out of the tree with whatever it still holds (``:1878-1929``)."""
        if node.full:
            tracker[0] += node.tokens
            self.full_evictable -= node.tokens
            node.full = False
            node.parent.full_kids -= 1
        tracker[1] += self.swa.tombstone(node)
        self._free_host(node)
        self.leaves.discard(node)
        self.host_leaves.discard(node)
        parent = node.parent
        del parent.children[node.key[0]]
        node.parent = None
        self.num_nodes -= 1
        self.update_leaf(parent)
        if len(self._heap) > 4 * self.num_nodes + 1024:
            self._heap = [e for e in self._heap if e[2] in self.leaves and e[0] == e[2].last_access]
            heapq.heapify(self._heap)
        if len(self._host_heap) > 4 * self.num_nodes + 1024:
            self._host_heap = [e for e in self._host_heap if e[2] in self.host_leaves and e[0] == e[2].last_access]
            heapq.heapify(self._host_heap)

    def _free_host(self, node: UNode) -> None:
        if node.host:
            self.host_tokens -= node.tokens
            node.host = False
        if node.host_swa:
            self.host_swa_tokens -= node.tokens
            node.host_swa = False
            self.swa.host_lru.remove(node)

    def delete_leaf(self, node: UNode, tracker: list[int]) -> None:
        """Delete a device leaf and then every childless ancestor left with neither a device nor a host
        copy of its Full KV (``:1903-1929, 2289-2346``)."""
        parent = node.parent
        self._remove(node, tracker)
        cur = parent
        while cur is not self.root and not cur.children and not (cur.lock or cur.swa_lock or cur.host_lock):
            if cur.full or cur.host:
                break
            nxt = cur.parent
            self._remove(cur, tracker)
            cur = nxt

    def demote(self, node: UNode, tracker: list[int]) -> None:
        """Free a backed-up leaf's device copy; it stays in the tree, host-only (``:2090-2123``)."""
        self.counts["demotions"] += 1
        if self.events is not None:
            self.events.append({"demote": self.ref(node)})
        tracker[0] += node.tokens
        self.full_evictable -= node.tokens
        node.full = False
        node.parent.full_kids -= 1
        tracker[1] += self.swa.tombstone(node)
        self.update_leaf(node)
        self.update_leaf(node.parent)

    def set_host(self, node: UNode, swa_nodes: Sequence[UNode]) -> None:
        """Record a backup: ``node``'s Full KV and the window state of ``swa_nodes`` now have host copies."""
        if not node.host:
            node.host = True
            self.host_tokens += node.tokens
        for x in swa_nodes:
            if not x.host_swa:
                x.host_swa = True
                self.host_swa_tokens += x.tokens
                if not x.swa:
                    self.swa.host_lru.push_mru(x)

    def ref(self, node: UNode) -> list[int]:
        """``[start, end, last]``: the node's token span on its root path and its last token id."""
        start, x = 0, node.parent
        while x is not None and x is not self.root:
            start += x.tokens
            x = x.parent
        return [start, start + node.tokens, node.key[-1][-1]]

    def settle(self, node: UNode) -> None:
        """Track ``node`` as a duplicate if its Full KV is on both tiers with no copy in flight (write_back)."""
        if self.duplicates is not None and node.full and node.host and node.pending is None and not node.loading:
            self.duplicates.setdefault(node)

    def _reclaim(self, tokens: int, nodes: list) -> int:
        """Give up host copies of Full KV also on the device, sparing evictable device leaves in a first pass;
        only the Full host layer goes, window state stays (``unified_tree_core.py:1975-2040``)."""
        freed = 0
        for spare in (True, False):
            for x in list(self.duplicates):
                if freed >= tokens:
                    return freed
                if x.parent is None or not (x.full and x.host):
                    del self.duplicates[x]
                    continue
                if x.pending is not None or x.loading or x.host_lock or (spare and x in self.leaves):
                    continue
                if self.events is not None:
                    nodes.append(self.ref(x))
                freed += x.tokens
                x.host = False
                self.host_tokens -= x.tokens
                del self.duplicates[x]
        return freed

    def evict_host(self, tokens: int) -> int:
        """Delete least recently used host leaves until ``tokens`` host tokens are freed (``:1931-1960``)."""
        freed = 0
        tracker = [0, 0]
        nodes = []
        if self.duplicates is not None:
            freed = self._reclaim(tokens, nodes)
        while freed < tokens:
            node = self._pop(self._host_heap, self.host_leaves)
            if node is None:
                break
            if self.events is not None:
                nodes.append(self.ref(node))
            freed += node.tokens
            self.counts["host_evictions"] += 1
            parent = node.parent
            self._remove(node, tracker)
            if parent is not self.root:
                self.update_leaf(parent)
        if self.events is not None:
            self.events.append({"host_evict": tokens, "got": freed, "nodes": sorted(nodes)})
        return freed

    def evict_host_swa(self, tokens: int) -> int:
        """Free at least ``tokens`` of the SWA host pool, oldest host-only window first: a host leaf goes whole,
        any other node loses only its host window state (``components/swa.py:1495-1549``)."""
        freed = 0
        tracker = [0, 0]
        for x in self.swa.host_lru.oldest_first():
            if freed >= tokens:
                break
            if x.host_lock or x.parent is None:
                continue
            freed += x.tokens
            if x in self.host_leaves:
                self.counts["host_evictions"] += 1
                parent = x.parent
                self._remove(x, tracker)
                if parent is not self.root:
                    self.update_leaf(parent)
            else:
                self.host_swa_tokens -= x.tokens
                x.host_swa = False
                self.swa.host_lru.remove(x)
                self.update_leaf(x)
        if self.events is not None:
            self.events.append({"host_evict": tokens, "got": freed, "pool": "swa"})
        return freed

    def evict_leaf(self, node: UNode, tracker: list[int]) -> None:
        """A device victim: demoted if backed up, else handed to ``evict_unbacked`` (``:1788-1823``)."""
        self.counts["evicted_leaves"] += 1
        if node.host:
            self.demote(node, tracker)
        elif self.evict_unbacked is not None:
            self.evict_unbacked(node, tracker)
        else:
            self.delete_leaf(node, tracker)

    # ----- eviction ---------------------------------------------------------------------------
    def evict(
        self,
        full_short: int,
        swa_short: int,
        full_free: Callable[[], int],
        swa_free: Callable[[], int],
    ) -> tuple[int, int]:
        """Free tree state until ``full_short`` more Full and ``swa_short`` more SWA tokens are free
        (``unified_radix_cache.py:697-1058``); returns the (Full, SWA) tokens evicted.

        Full goes first, LRU leaf by leaf. SWA then walks its own LRU: an evictable leaf goes whole (Full
        with it), any other unlocked node only loses its SWA (a tombstone), under write_back after a backup of
        its Full KV and unbacked window when neither is on host yet (best effort: it is tombstoned either way).
        """
        tracker = [0, 0]
        full_target = full_free() + full_short  # both targets are fixed before either walk
        swa_target = swa_free() + swa_short
        if full_short > 0:
            while full_free() < full_target:
                node = self._pop(self._heap, self.leaves)
                if node is None:
                    break
                self.evict_leaf(node, tracker)
        if swa_short > 0 and swa_free() < swa_target and tracker[1] < swa_short:
            lru = self.swa.lru
            cursor = lru.lru_unlocked()
            while cursor is not None and tracker[1] < swa_short:
                x = cursor
                cursor = lru.lru_unlocked(x)
                if x in self.leaves:
                    self.evict_leaf(x, tracker)
                else:
                    if self.back_up_window is not None and x.full and not x.host and not x.host_swa:
                        self.back_up_window(x)  # components/swa.py:795-813
                    tracker[1] += self.swa.tombstone(x)
                    self.update_leaf(x)
                if swa_free() >= swa_target:
                    break
                if cursor is not None and not lru.contains(cursor):
                    cursor = lru.lru_unlocked()
        return tracker[0], tracker[1]

    # ----- inspection -------------------------------------------------------------------------
    @property
    def full_tokens(self) -> int:
        return self.full_evictable + self.full_protected

    @property
    def swa_tokens(self) -> int:
        return self.swa.evictable + self.swa.protected

    def paths(self) -> list[list[UNode]]:
        """Every root-to-leaf path, as its nodes."""
        out: list[list[UNode]] = []
        stack = [(c, [c]) for c in self.root.children.values()]
        while stack:
            node, path = stack.pop()
            if not node.children:
                out.append(path)
            stack.extend((c, path + [c]) for c in node.children.values())
        return out


def _common(key: list[PageKey], keys: Sequence[PageKey], pos: int) -> int:
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

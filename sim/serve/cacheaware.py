"""The SGLang router's cache-aware policy (``sglang_router.launch_router --policy cache_aware``) as sglang-router
0.3.2 decides, the version InferenceX pins: the router's own approximate tree of what it sent where, and its own
count of requests in flight, not the engines' caches. Paths are those of sglang-router 0.3.2's source
distribution on PyPI (the Rust router, ``src/``, and its Python launcher, ``bindings/python/``).

Per request (``src/policies/cache_aware.rs:351-473``, ``select_worker``):

- The load of a worker is the router's count of its requests in flight: one more when a request is sent, one
  less when its response ends (``WorkerLoadGuard``, ``src/core/worker.rs:1103-1140``, taken for cache_aware in
  ``src/routers/http/router.rs:294-296``). With ``--dp-aware`` each attention-DP rank is a worker with its own
  count.
- Imbalanced when ``max - min > balance_abs_threshold`` and ``max > min x balance_rel_threshold`` (lines
  371-372, over every worker): the least loaded worker takes it (lines 287-347; the first on a tie, as Rust's
  ``min_by_key``).
- Otherwise the longest prefix of the request's text in the tree (``tree.rs:531-619``): the match rate is the
  matched share of the text (lines 395-401); above ``cache_threshold`` a worker holding the deepest matched node
  takes it, else the least loaded worker (lines 403-416; the 0.3.2 rule: older routers took the worker with the
  smallest tree).
- Either way the text is inserted into the tree under the chosen worker (lines 321, 420).
- Every ``eviction_interval_secs`` (0: never) each worker's share of the tree is trimmed to ``max_tree_size``,
  least recently used leaves first (lines 101-123, ``tree.rs:718-821``).

The tree is one radix tree shared by the workers (its *tenants*): a node records which workers sent text through
it and when (a global epoch counter, ``tree.rs:225``). Inserting stamps the last node with a new epoch and adds
the worker at epoch 0 to the nodes before it that it is not on yet (``tree.rs:362-527``); a match stamps the node it ends on with the
epoch only when the epoch is a multiple of 8 (``tree.rs:601-607``). The worker a match picks is the node's cached
tenant: the worker that created it while it still holds it (``tree.rs:566-599``); when it no longer does the
router takes whichever tenant its map yields first, here the lowest index (a deterministic stand-in).

Granularity: the router matches characters of the request's text (the chat messages joined,
``src/protocols/chat.rs:641``); here the text is
the request's input page keys, so a match is whole pages and the rate is matched tokens over input tokens (a
ratio, so close to the character ratio where text and tokens align). A worker's share of the tree is counted in
tokens, so ``max_tree_size`` (characters to the router) bounds tokens here: a looser cap by the text's
characters per token. Eviction runs lazily at the next request after each interval's tick, which sees the
same tree the tick would have (only requests change it).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

from sim.cache.v4.node import common_pages

__all__ = ["CacheAwareOptions", "CacheAwareRouter", "RouterTree"]


@dataclass(frozen=True)
class CacheAwareOptions:
    """The policy's flags, with sglang-router 0.3.2's launcher defaults (``bindings/python/src/sglang_router/
    router_args.py:33-37``; the Rust side's own defaults, ``src/policies/mod.rs:101-111``, are not what a launch
    gets)."""

    cache_threshold: float = 0.3  # --cache-threshold
    balance_abs_threshold: int = 64  # --balance-abs-threshold
    balance_rel_threshold: float = 1.5  # --balance-rel-threshold
    eviction_interval_s: int = 60  # --eviction-interval-secs
    max_tree_size: int = 2**26  # --max-tree-size


class _Node:
    __slots__ = ("key", "children", "parent", "tenants", "cached")

    def __init__(self, key: list, parent: _Node | None, tenants: dict[int, int], cached: int | None) -> None:
        self.key, self.parent, self.tenants, self.cached = key, parent, tenants, cached
        self.children: dict = {}


class RouterTree:
    """The router's approximate radix tree over page keys, every worker a tenant; ``size[w]``: the pages of the
    tree worker ``w`` holds."""

    def __init__(self, workers: int) -> None:
        self.root = _Node([], None, {}, None)
        self.size = [0] * workers
        self.epoch = 0
        for w in range(workers):  # init_workers: each worker inserts the empty text
            self.insert([], w)

    def _next_epoch(self) -> int:
        self.epoch += 1
        return self.epoch - 1

    def insert(self, keys: Sequence, w: int) -> None:
        """Record that ``keys`` went to worker ``w``."""
        node, pos, n = self.root, 0, len(keys)
        node.tenants.setdefault(w, 0)
        while pos < n:
            child = node.children.get(keys[pos])
            if child is None:
                node.children[keys[pos]] = _Node(list(keys[pos:]), node, {w: self._next_epoch()}, w)
                self.size[w] += n - pos
                return
            shared = common_pages(child.key, keys, pos)
            if shared < len(child.key):  # split: the matched part becomes a node of its own, same tenants
                mid = _Node(child.key[:shared], node, dict(child.tenants), child.cached)
                child.key, child.parent = child.key[shared:], mid
                mid.children[child.key[0]] = child
                node.children[keys[pos]] = child = mid
            if w not in child.tenants:
                child.tenants[w] = 0
                self.size[w] += shared
            node, pos = child, pos + shared
        node.tenants[w] = self._next_epoch()

    def match(self, keys: Sequence) -> tuple[int, int]:
        """(pages of ``keys`` matched, by any worker; the worker picked at the node the match ends on)."""
        node, pos, n = self.root, 0, len(keys)
        while pos < n:
            child = node.children.get(keys[pos])
            if child is None:
                break
            shared = common_pages(child.key, keys, pos)
            node, pos = child, pos + shared
            if shared < len(child.key):
                break
        w = node.cached
        if w is None or w not in node.tenants:
            w = node.cached = min(node.tenants)
        epoch = self._next_epoch()
        if epoch & 7 == 0:
            node.tenants[w] = epoch
        return pos, w

    def evict(self, max_pages: int) -> None:
        """Trim each worker over ``max_pages`` to it, its least recently stamped leaves first."""
        over = {w for w, s in enumerate(self.size) if s > max_pages}
        if not over:
            return  # the router walks the tree anyway, and changes nothing
        heap, seq, stack = [], 0, list(self.root.children.values())
        while stack:
            node = stack.pop()
            stack.extend(node.children.values())
            below = {w for c in node.children.values() for w in c.tenants}
            for w, stamp in node.tenants.items():
                if w in over and w not in below:
                    heap.append((stamp, seq, w, node))
                    seq += 1
        heapq.heapify(heap)
        while heap:
            _, _, w, node = heapq.heappop(heap)
            if self.size[w] <= max_pages or w not in node.tenants:
                continue
            if any(w in c.tenants for c in node.children.values()):
                continue
            self.size[w] -= len(node.key)
            del node.tenants[w]
            parent = node.parent
            if not node.children and not node.tenants:
                del parent.children[node.key[0]]
            if parent is not self.root and w in parent.tenants and not any(
                w in c.tenants for c in parent.children.values()
            ):
                heapq.heappush(heap, (parent.tenants[w], seq, w, parent))
                seq += 1


class CacheAwareRouter:
    """Picks a worker per request and counts each worker's requests in flight (:meth:`done` when one ends)."""

    def __init__(self, opts: CacheAwareOptions, workers: int, page_tokens: int) -> None:
        self.opts, self.page_tokens = opts, page_tokens
        self.tree = RouterTree(workers)
        self.loads = [0] * workers
        self.max_pages = opts.max_tree_size // page_tokens
        self.next_eviction_s = float(opts.eviction_interval_s) if opts.eviction_interval_s > 0 else None

    def pick(self, keys: Sequence, input_tokens: int, now: float) -> int:
        """The worker for a request of ``input_tokens`` whose whole pages are ``keys``, sent at ``now``."""
        if self.next_eviction_s is not None and now >= self.next_eviction_s:
            self.tree.evict(self.max_pages)
            interval = self.opts.eviction_interval_s
            self.next_eviction_s = (now // interval + 1) * interval
        loads, o = self.loads, self.opts
        lo, hi = min(loads), max(loads)
        least = loads.index(lo)
        w = least
        if not (hi - lo > o.balance_abs_threshold and hi > lo * o.balance_rel_threshold):
            pages, holder = self.tree.match(keys)
            if input_tokens and pages * self.page_tokens / input_tokens > o.cache_threshold:
                w = holder
        self.tree.insert(keys, w)
        loads[w] += 1
        return w

    def done(self, w: int) -> None:
        """A request sent to ``w`` ended (its response closed)."""
        self.loads[w] -= 1

"""HiCache for a model without sliding-window pools: residency decisions over the tree, atomic across every
registered pool.

It owns the per-pool page allocators of L1 (device) and L2 (host), the write policy, the write-through
window (backups committed but not yet acknowledged), load-back decisions and the counters SGLang exports.
It knows nothing of time: a request-order replay calls :meth:`HiCache.serve`, which reserves a request's pages
whole; the timed engine calls the request phases of its base :class:`sim.cache.requests.RequestPhases`
(admission, chunk, decode, release, acks) at the instants its processes reach them, which allocate as
SGLang's scheduler does, per chunk and decode step.

Semantics follow SGLang 0.5.23 (``unified_radix_cache.py``, ``unified_tree_core.py``; notes and line
citations in ``shared/reference/sglang_hicache.md`` sections 1-3):

- device eviction takes the LRU unlocked device leaf: backed up -> demote; unbacked under write_through
  -> delete (``hicache_dropped_tokens_total{reason="write_through_unbacked_eviction"}``); unbacked under
  write_back -> back up, then demote, or drop the subtree if the host is full (``reason="host_pressure"``);
- host allocation walks the pools anchor first and rolls every allocation back if one pool is short,
  evicting host LRU leaves on demand first;
- backups cover unbacked ancestors first, so host copies stay prefix-closed;
- a write-through backup is committed at once and device-locked until its ack.

This module holds the tree's matches and inserts and the replay's whole requests; the controller's transfers (backups, acks, load-backs, L3 placements)
are its base :class:`sim.cache.controller.CacheController`, eviction on both tiers its base
:class:`sim.cache.evictor.TierEvictor`, the counters :mod:`sim.cache.stats`. The engine drives it, and V4's
cache, through :class:`sim.cache.protocol.PrefixCache`.

Models with sliding-window pools (DeepSeek V4) are not modelled here: their cache is SGLang's FULL + SWA
tree (:mod:`sim.cache.v4.swacache`, driven by :mod:`sim.cache.v4.hicache` in the engine and ``sim.offline.replay.replay_v4`` in a
replay), and :class:`HiCache` refuses them.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from sim.base.errors import InputError
from sim.cache.ages import TierAges
from sim.cache.boundary import BoundaryWriter
from sim.cache.controller import CacheController
from sim.cache.eviction import eviction_order
from sim.cache.evictor import TierEvictor
from sim.cache.lookup import Lookup
from sim.cache.node import Node
from sim.cache.radix import InsertResult, RadixTree
from sim.cache.requests import Admission, RequestPhases
from sim.cache.stats import DEVICE_FULL, CacheStats, hicache_metrics
from sim.cache.tiers import BackupOp, Tier, WritePolicy, no_window_pool
from sim.model.pools import HitPolicy, ModelSpec

__all__ = [
    "Admission",
    "CacheStats",
    "HiCache",
    "WritePolicy",
]


@dataclass
class Reservation:
    """A request served whole in a replay (:meth:`HiCache.serve`): the device pages it still holds in reserve."""

    lookup: Lookup
    device_tokens: int = 0
    host_tokens: int = 0
    computed_tokens: int = 0
    kv_reserved: int = 0
    held: list[Node] = field(default_factory=list)  # nodes this request locks until release
    inserted_pages: int = 0  # pages this request already inserted (SGLang's req.kv.cache_inserted_len)


class HiCache(RequestPhases, TierEvictor, CacheController):
    """L1/L2 residency for one instance of a model without sliding-window pools.

    *page_tokens*: tokens per tree page (the model's page size, or a trace's block size); pool bytes
    scale with it. *l1_pages*/*l2_pages*: capacity of the ``kv`` anchor in tree pages (``None``:
    unbounded; ``l2_pages=0``: no L2). *eviction_policy*, *eviction_config*: the device victim order,
    SGLang's ``--radix-eviction-policy`` and ``--radix-eviction-policy-config`` (:mod:`sim.cache.eviction`).
    *chunked_prefill_size*: the chunk a prefilling request's next pass is budgeted for; *decode_lookahead*:
    the draft slots a decode step holds past its newest token (speculative decoding).
    """

    window = None  # no sliding-window pool (:attr:`sim.cache.protocol.PrefixCache.window`)

    def __init__(
        self,
        model: ModelSpec,
        *,
        l1_pages: int | None,
        l2_pages: int | None = 0,
        policy: WritePolicy | str = WritePolicy.WRITE_THROUGH,
        load_back_threshold: int = 10,
        page_tokens: int | None = None,
        eviction_policy: str = "lru",
        eviction_config: dict | None = None,
        one_page_nodes: bool = False,
        chunked_prefill_size: int = 8192, decode_lookahead: int = 0,
    ) -> None:
        for name, value in (("l1_pages", l1_pages), ("l2_pages", l2_pages)):
            if value is not None and value < 0:
                raise InputError(f"{name}: must be >= 0, got {value}")
        if l1_pages == 0:
            raise InputError("l1_pages: must be > 0")
        if load_back_threshold < 0:
            raise InputError(f"load_back_threshold: must be >= 0, got {load_back_threshold}")
        if model.has_swa:
            raise ValueError(f"{model.name} has sliding-window pools: HiCache models one pool group; use "
                             f"V4's cache, sim.cache.v4.hicache.V4HiCache (sim.offline.replay.v4_cache for a replay)")
        self.model = model
        self.policy = WritePolicy.parse(policy) if isinstance(policy, str) else policy
        self.threshold = self.policy.threshold
        self.load_back_threshold = load_back_threshold
        self.page_tokens = page_tokens or model.page_size
        self.l2_enabled = l2_pages != 0
        self.tree = RadixTree(self.page_tokens, one_page_nodes=one_page_nodes)
        self.eviction_policy = eviction_policy
        self.tree.use_eviction_order(eviction_order(eviction_policy, eviction_config))
        boundary = self.policy is WritePolicy.BOUNDARY and self.l2_enabled
        self._boundary = BoundaryWriter(self) if boundary else None

        # Pool bytes scale with the tree page.
        self.page_bytes = {p.name: int(p.bytes_per_page * self.page_tokens / model.page_size) for p in model.pools}
        self.kv_bytes = sum(self.page_bytes.values())
        self.all_pages_mask = sum(1 << i for i, p in enumerate(model.pools) if p.hit_policy is HitPolicy.ALL_PAGES)
        self.l1 = Tier(math.inf if l1_pages is None else l1_pages)
        self.l2 = Tier(math.inf if l2_pages is None else l2_pages)
        self.reserved_kv = 0  # a replay's whole-request reservations (serve)
        self.start_requests(chunked_prefill_size, decode_lookahead)
        self.stats = CacheStats()
        self._op_ids = itertools.count()
        self.pending: dict[int, BackupOp] = {}
        # write_back backups made inside a device eviction: SGLang blocks the eviction on their D2H copy
        # and acks them at once (unified_radix_cache.py:1028-1036, 3478-3489); the timed engine charges
        # the copy and starts the L3 write after it, a replay drops them.
        self.write_back_copies: list[list[BackupOp]] = []
        # The host-tier decisions in order, as SGLang's recorded answers list them (``hicache-sim tree``);
        # None (the default) records nothing.
        self.events: list[dict] | None = None
        # write_back: nodes whose KV is on both tiers, in the order they became so; host eviction reclaims
        # these copies first (unified_tree_core.py:1604-1610, 1975-2006)
        self._duplicates: dict[int, Node] | None = None
        if self.policy is WritePolicy.WRITE_BACK:
            self._duplicates = {}
            self.tree.on_split = self._split_duplicate

    # ----- pages and bytes --------------------------------------------------------------------
    def pool_bytes(self, kv_pages: int, swa_pages: int = 0) -> dict[str, int]:
        """Bytes per pool of a transfer of ``kv_pages`` pages (no window pages: ``swa_pages`` must be 0)."""
        if swa_pages:
            no_window_pool("pool_bytes", swa_pages)
        if not kv_pages:
            return {}
        return {name: kv_pages * b for name, b in self.page_bytes.items() if b}

    # ----- request phases ---------------------------------------------------------------------
    def lookup(self, keys: Sequence, input_tokens: int) -> Lookup:
        """Match a request (capped at ``input_tokens - 1``) and lock what it matched."""
        m = self.tree.match(keys, max(0, (input_tokens - 1) // self.page_tokens))
        host_pages = m.best_pages - m.device_pages if self.l2_enabled else 0
        load = host_pages > 0 and host_pages * self.page_tokens >= self.load_back_threshold
        self.tree.lock(m.device_node)
        self.tree.host_lock(m.best_node)
        return Lookup(keys, input_tokens, m.device_pages, host_pages, load, m.device_node, m.best_node)

    def abandon(self, lk: Lookup) -> None:
        """Release a lookup's locks (an admitted request's are its own, :class:`sim.cache.requests.KVRecord`)."""
        self.tree.unlock(lk.device_node)
        self.tree.host_unlock(lk.best_node)

    def insert_request(self, keys: Sequence, inserted_pages: int, held_from: int) -> InsertResult:
        """Insert a request's first ``len(keys)`` pages, whose rows it holds from page ``held_from``: hit counts
        once per request (``inserted_pages``), its rows for pages the tree already had freed
        (``unified_tree_core.py:1332-1366``), write-through backups queued."""
        res = self.tree.insert(keys)
        self._count_once(inserted_pages, res.path)
        revived = sum(len(n.key) for n in res.revived)
        for n in res.revived:
            n.dev_mask = self.all_pages_mask
            if self._duplicates is not None:
                self._duplicates.setdefault(n.id, n)
        for node in res.path[len(res.path) - self._new_nodes(res) :] if res.inserted_pages else ():
            node.dev_mask = self.all_pages_mask
        dup = res.prefix_pages - held_from - revived
        if dup > 0:
            self.l1.free(dup)
        self._back_up_hits(res.path, inserted_pages)
        if self._boundary is not None:
            self._boundary.touch(res.path)
        return res

    def _count(self, lk: Lookup, device_tokens: int, host_tokens: int) -> None:
        s = self.stats
        s.requests += 1
        s.input_tokens += lk.input_tokens
        s.input_pages += len(lk.keys)
        s.cached_tokens["device"] += device_tokens
        s.cached_tokens["host"] += host_tokens
        s.cached_pages["device"] += device_tokens // self.page_tokens
        s.cached_pages["host"] += host_tokens // self.page_tokens
        s.computed_tokens += lk.input_tokens - device_tokens - host_tokens
        if self.tree.ages is not None and (device_tokens or host_tokens):
            _record_hits(self.tree.ages, lk, host_tokens, self.page_tokens)

    def _count_once(self, inserted_pages: int, path: list[Node]) -> int:
        """A request counts a hit on each node once: SGLang raises a node's hit count only where the node
        ends past what this request already inserted (``cache_inserted_len``,
        ``unified_tree_core.py:1371-1374, 1433-1439``; ``unified_radix_cache.py:1255``), and never under
        write_back (``unified_tree_core.py:1108-1109``). The tree counted every node of the path; this
        takes back the repeats, so a prompt inserted again with its output is not counted twice. Returns
        the pages inserted after this insert."""
        write_back = self.policy is WritePolicy.WRITE_BACK and self.l2_enabled
        end = 0
        for node in path:
            end += len(node.key)
            if end <= inserted_pages or write_back:
                node.hit_count -= 1
        return max(inserted_pages, end)

    # ----- a request served whole (a replay) --------------------------------------------------
    def serve(self, keys: Sequence, input_tokens: int) -> Reservation | None:
        """Request-order replay of one request: match, load back, compute, insert, and ack its backups at the
        end of its step. Its device pages are reserved whole before it computes, as a replay with one request
        at a time allows. Returns None when L1 could not hold the request (its device prefix still counts as a
        hit; the rest is computed and not cached)."""
        self.write_back_copies.clear()  # no time here: a replay does not charge the copies
        lk = self.lookup(keys, input_tokens)
        adm = self._reserve_whole(lk)
        if adm is None:
            self.abandon(lk)
            self._count(lk, lk.device_pages * self.page_tokens, 0)
            self.stats.dropped_tokens[DEVICE_FULL] += (len(keys) - lk.device_pages) * self.page_tokens
            return None
        self._commit_whole(adm)
        for node in adm.held:
            self.tree.unlock(node)
        self.abandon(lk)
        self.reserved_kv -= adm.kv_reserved
        self.ack_all()
        return adm

    def _reserve_whole(self, lk: Lookup) -> Reservation | None:
        """Reserve device pages for what the request will make resident and load back its host hit; None, with
        nothing changed but evictions, when L1 cannot make room. Loaded pages are committed to the tree at
        once, as SGLang commits device indices before the H2D copy completes (``unified_radix_cache.py:1820-1937``)."""
        kv_need = max(0, len(lk.keys) - lk.device_pages)
        if not self.ensure_device(kv_need):
            return None
        adm = Reservation(lk, kv_reserved=kv_need)
        self.reserved_kv += kv_need
        pt = self.page_tokens
        host_tokens = 0
        if lk.load:
            self.tree.lock(lk.best_node)  # before reviving, so that what is revived is protected
            adm.held.append(lk.best_node)
            revive = []
            node = lk.best_node
            while node is not self.tree.root and not node.device:
                revive.append(node)
                node = node.parent
            pages = 0
            for n in reversed(revive):
                self.tree.revive(n)
                pages += self._take(adm, n)
            self.stats.load_kv_pages += pages
            host_tokens = lk.host_pages * pt
            if self.events is not None:
                self.events.append({"load": self._ref(lk.best_node), "tokens": pages * pt})
        elif lk.host_pages:
            self.stats.load_back_skipped_tokens += lk.host_pages * pt
        adm.device_tokens, adm.host_tokens = lk.device_pages * pt, host_tokens
        adm.computed_tokens = lk.input_tokens - adm.device_tokens - host_tokens
        self._count(lk, adm.device_tokens, host_tokens)
        return adm

    def _take(self, adm: Reservation, node: Node) -> int:
        """Allocate a node's device pages out of the request's reservation (which counted them); returns
        the pages."""
        pages = len(node.key)
        adm.kv_reserved -= pages
        self.reserved_kv -= pages
        if adm.kv_reserved < 0 or not self.l1.alloc(pages):
            raise RuntimeError(f"device allocation outside the request's reservation: {node!r}")
        node.dev_mask = self.all_pages_mask
        return pages

    def _commit_whole(self, adm: Reservation) -> None:
        """Insert the request's pages (computed by now) into the tree, backing up under the write-through
        policies every path node whose hit count reached the threshold, ancestors first."""
        keys = adm.lookup.keys
        if not keys:
            return
        res = self.tree.insert(keys)
        inserted = adm.inserted_pages
        adm.inserted_pages = self._count_once(inserted, res.path)
        last = res.path[-1]
        self.tree.lock(last)
        adm.held.append(last)
        for node in res.revived:
            self._take(adm, node)
        if res.inserted_pages:
            for node in res.path[len(res.path) - self._new_nodes(res) :]:
                self._take(adm, node)
        self._back_up_hits(res.path, inserted)
        if self._boundary is not None:
            self._boundary.touch(res.path)

    # ----- reporting --------------------------------------------------------------------------
    def record_ages(self, ages: TierAges) -> None:
        self.tree.ages = ages

    def metrics(self) -> dict:
        """The counters under SGLang's metric names (:func:`sim.cache.stats.hicache_metrics`)."""
        return hicache_metrics(self)


def _record_hits(ages: TierAges, lk: Lookup, host_tokens: int, page_tokens: int) -> None:
    """The matched nodes' ages at this hit, by the tier that serves them, and their new last use."""
    now = ages.clock.now
    node: Node | None = lk.best_node if host_tokens else lk.device_node
    tier = "host" if host_tokens else "device"
    while node is not None and node.parent is not None:
        if node is lk.device_node:
            tier = "device"
        ages.hit_at(tier, node.used, len(node.key) * page_tokens, now)
        node.used = now
        node = node.parent

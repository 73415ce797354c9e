"""The HiCache controller: residency decisions over the tree, atomic across every registered pool.

It owns the per-pool page allocators of L1 (device) and L2 (host), the write policy, the write-through
window (backups committed but not yet acknowledged), load-back decisions and the counters SGLang exports.
It knows nothing of time: a request-order replay calls :meth:`HiCache.serve`; the timed engine calls the
phases (:meth:`lookup`, :meth:`admit`, :meth:`commit`, :meth:`release`, :meth:`ack`) at the instants its
processes reach them.

Semantics follow SGLang 0.5.23 (``unified_radix_cache.py``, ``unified_tree_core.py``; notes and line
citations in ``shared/reference/sglang_hicache.md`` sections 1-3):

- device eviction takes the LRU unlocked device leaf: backed up -> demote; unbacked under write_through
  -> delete (``hicache_dropped_tokens_total{reason="write_through_unbacked_eviction"}``); unbacked under
  write_back -> back up, then demote, or drop the subtree if the host is full (``reason="host_pressure"``);
- host allocation walks the pools anchor first and rolls every allocation back if one pool is short,
  evicting host LRU leaves on demand first;
- backups cover unbacked ancestors first, so host copies stay prefix-closed;
- a write-through backup is committed at once and device-locked until its ack.

Models with sliding-window pools (DeepSeek V4) are not modelled here: their cache is SGLang's FULL + SWA
tree (:mod:`sim.cache.v4.swacache`, driven by :mod:`sim.cache.v4.hicache` in the engine and ``sim.offline.replay.replay_v4`` in a
replay), and :class:`HiCache` refuses them.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

from sim.base.errors import InputError
from sim.cache.boundary import BoundaryWriter
from sim.cache.eviction import eviction_order
from sim.cache.radix import InsertResult, Node, RadixTree, node_ref
from sim.model.pools import HitPolicy, ModelSpec

__all__ = [
    "Admission",
    "BackupOp",
    "CacheStats",
    "HiCache",
    "Lookup",
    "Tier",
    "WritePolicy",
]

UNBACKED = "write_through_unbacked_eviction"
HOST_PRESSURE = "host_pressure"
DEVICE_FULL = "device_full"


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
    swa_used = 0  # window pages: only V4's cache has any; the engine samples both caches' tiers alike

    def __init__(self, kv_cap: float) -> None:
        self.kv_cap = kv_cap
        self.kv_used = 0

    def alloc(self, pages: int) -> bool:
        if self.kv_used + pages > self.kv_cap:
            return False
        self.kv_used += pages
        return True

    def free(self, pages: int, swa_pages: int = 0) -> None:
        """Give ``pages`` back (``swa_pages``: none here; the engine frees an L3 read's reservation in
        both caches with one call)."""
        self.kv_used -= pages


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
    swa_pages = 0  # window pages: only V4's copies carry any; the engine sums both caches' copies alike

    @property
    def storage_nodes(self) -> list[Node]:
        """What goes on to L3 after the ack."""
        return self.nodes


@dataclass
class CacheStats:
    """Raw counters; :meth:`HiCache.metrics` names them as SGLang's Prometheus metrics do."""

    requests: int = 0
    input_tokens: int = 0
    input_pages: int = 0
    cached_tokens: Counter = field(default_factory=Counter)  # by cache_source: device, host
    cached_pages: Counter = field(default_factory=Counter)
    computed_tokens: int = 0
    evictions: int = 0
    evicted_tokens: int = 0
    demotions: int = 0
    host_evictions: int = 0
    host_evicted_tokens: int = 0
    dropped_tokens: Counter = field(default_factory=Counter)  # by reason
    backup_kv_pages: int = 0
    load_kv_pages: int = 0
    load_back_skipped_tokens: int = 0
    backup_failed_tokens: int = 0
    host_alloc_failures: int = 0  # host reservations that could not be met, as SGLang's policy simulator counts
    dedup_evictions: int = 0  # boundary: host copies of device pages given up for L2 room

    def hit_rate(self, sources: Sequence[str] = ("device",), *, by: str = "tokens") -> float:
        """Share of input tokens (or whole input pages) served from the given cache sources."""
        counts, total = (self.cached_pages, self.input_pages) if by == "pages" else (
            self.cached_tokens, self.input_tokens)  # fmt: skip
        return sum(counts[s] for s in sources) / total if total else 0.0


@dataclass
class Lookup:
    """A matched request. Its matched path stays locked until :meth:`HiCache.release`."""

    keys: Sequence
    input_tokens: int
    device_pages: int
    host_pages: int  # host hit beyond the device prefix, in pages
    load: bool  # the host hit is loaded back (>= load_back_threshold), else recomputed
    device_node: Node
    best_node: Node


@dataclass
class Admission:
    """What admitting a request decided, and the device pages it still holds in reserve."""

    lookup: Lookup
    device_tokens: int = 0
    host_tokens: int = 0
    computed_tokens: int = 0
    load_kv_pages: int = 0
    kv_reserved: int = 0
    held: list[Node] = field(default_factory=list)  # nodes this request locks until release
    inserted_pages: int = 0  # pages this request already inserted (SGLang's req.kv.cache_inserted_len)
    load_swa_pages = 0  # window pages loaded: only V4's admissions have any; the engine times both alike


class HiCache:
    """L1/L2 residency for one instance of a model without sliding-window pools.

    *page_tokens*: tokens per tree page (the model's page size, or a trace's block size); pool bytes
    scale with it. *l1_pages*/*l2_pages*: capacity of the ``kv`` anchor in tree pages (``None``:
    unbounded; ``l2_pages=0``: no L2). *eviction_policy*, *eviction_config*: the device victim order,
    SGLang's ``--radix-eviction-policy`` and ``--radix-eviction-policy-config`` (:mod:`sim.cache.eviction`).
    *swa_full_tokens_ratio* sizes window pools, which only V4's cache has; it is accepted, unused, because
    the engine and the CLI build either cache from the same settings.
    """

    window_pages = 0  # no window state: the engine's L3 reads ask both caches for theirs

    def __init__(
        self,
        model: ModelSpec,
        *,
        l1_pages: int | None,
        l2_pages: int | None = 0,
        policy: WritePolicy | str = WritePolicy.WRITE_THROUGH,
        load_back_threshold: int = 10,
        page_tokens: int | None = None,
        swa_full_tokens_ratio: float = 0.1,
        eviction_policy: str = "lru",
        eviction_config: dict | None = None,
        one_page_nodes: bool = False,
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
        self.reserved_kv = 0
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

    def _split_duplicate(self, node: Node) -> None:
        """A split's new parent is a duplicate if its KV is on both tiers and settled (``unified_tree_core.py:1529``)."""
        if node.device and node.host and not node.loading and node.pending is None:
            self._duplicates.setdefault(node.id, node)

    def _ref(self, node: Node) -> list[int]:
        return node_ref(node, self.page_tokens)

    # ----- pages and bytes --------------------------------------------------------------------
    def pool_bytes(self, kv_pages: int, swa_pages: int = 0) -> dict[str, int]:
        """Bytes per pool of a transfer of ``kv_pages`` pages (``swa_pages``: window pages, none here; the
        engine prices both caches' copies with one call)."""
        if not kv_pages:
            return {}
        return {name: kv_pages * b for name, b in self.page_bytes.items() if b}

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
        first pass (``unified_tree_core.py:1975-2006``)."""
        freed = 0
        for spare in (True, False):
            for node in list(self._duplicates.values()):
                if freed >= want:
                    return freed
                if not (node.device and node.host) or node.parent is None:
                    del self._duplicates[node.id]
                    continue
                if node.pending is not None or node.loading or node.host_lock_ref:
                    continue
                if spare and node.lock_ref == 0 and node.dev_children == 0:
                    continue
                if self.events is not None:
                    nodes.append(self._ref(node))
                freed += len(node.key)
                self.l2.free(len(node.key))
                self.tree.clear_host(node)
                del self._duplicates[node.id]
        return freed

    def _evict_host(self, node: Node) -> None:
        self.stats.host_evictions += 1
        self.stats.host_evicted_tokens += len(node.key) * self.page_tokens
        self.l2.free(len(node.key))
        self.tree.delete_leaf(node)

    def _backup_node(self, node: Node) -> bool:
        """write_back: back up one device victim and wait for its copy; False if the host is full."""
        pages = len(node.key)
        if not self._alloc_host(pages):
            self._backup_failed(node, pages)
            return False
        op = self._start_backup(node, pages, lock=False)
        if self.events is not None:
            self.events.append({"ack": self._ref(node), "wait": True})
        self.write_back_copies.append([op])
        return True

    def _backup_failed(self, node: Node, pages: int) -> None:
        self.stats.backup_failed_tokens += pages * self.page_tokens
        self.stats.host_alloc_failures += 1
        if self.events is not None:
            self.events.append({"backup": self._ref(node), "tokens": pages * self.page_tokens, "failed": True})

    def _backup_chain(self, node: Node) -> None:
        """Write-through: back up ``node`` and its unbacked ancestors, parent first, stopping at the first the
        host has no room for (``unified_tree_core.py:2622-2644``, ``unified_radix_cache.py:1687-1720``)."""
        chain = []
        while node is not self.tree.root and not node.host:
            chain.append(node)
            node = node.parent
        for n in reversed(chain):
            pages = len(n.key)
            if not self._alloc_host(pages):
                self._backup_failed(n, pages)
                return
            self._start_backup(n, pages, lock=True)

    def _start_backup(self, n: Node, pages: int, *, lock: bool) -> BackupOp:
        """Commit a host copy of ``n`` in pages already allocated, and its D2H copy."""
        self.tree.set_host(n, self.all_pages_mask)
        op = BackupOp(next(self._op_ids), n if lock else None, [n], pages)
        if self.events is not None:
            self.events.append({"backup": self._ref(n), "tokens": pages * self.page_tokens})
        if lock:  # the write-through window: pending and device-locked until the copy is acked
            n.pending = op
            self.tree.lock(n)
            self.pending[op.id] = op
        else:
            self._record_backup(op)
        return op

    def _record_backup(self, op: BackupOp) -> None:
        self.stats.backup_kv_pages += op.kv_pages

    def ack(self, op: BackupOp) -> None:
        """The D2H copy of ``op`` completed: clear the pending mark and release the window's lock."""
        del self.pending[op.id]
        for n in op.nodes:
            n.pending = None
            if n.device and self._duplicates is not None:
                self._duplicates.setdefault(n.id, n)
        if op.locked is not None:
            if self.events is not None:  # the span of every node the copy covered (split halves included)
                refs = [self._ref(n) for n in op.nodes if n.parent is not None]
                last = max(refs, key=lambda r: r[1])
                self.events.append({"ack": [min(r[0] for r in refs), last[1], last[2]]})
            self.tree.unlock(op.locked)
        for n in op.nodes:
            self.tree.refile(n)
        self._record_backup(op)

    def ack_all(self) -> list[BackupOp]:
        ops = list(self.pending.values())
        for op in ops:
            self.ack(op)
        return ops

    def reserve_host(self, kv_pages: int, swa_pages: int, min_kv_pages: int) -> int:
        """Take host pages for an L3 read before it starts, as SGLang allocates a prefetch's host pages when
        its lookup hits, evicting host LRU leaves (``hybrid_cache_controller.py:796-829``): all of them,
        else as many as are free if that is at least ``min_kv_pages`` (a partial read), else none. Returns
        the pages taken; the caller gives them back (:meth:`Tier.free`) before :meth:`insert_host` places
        what landed. ``swa_pages`` (window pages, the engine's call to both caches) is 0 here."""
        if self._alloc_host(kv_pages):
            return kv_pages
        part = min(kv_pages, int(self.l2.kv_cap - self.l2.kv_used))
        return part if part >= max(1, min_kv_pages) and self.l2.alloc(part) else 0

    def insert_host(self, keys: Sequence, n_pages: int, window: bool) -> int:
        """Put pages prefetched from storage into L2 as host-only nodes; returns pages added.

        Stops early if the host is full even after host eviction (the tail is then not inserted).
        ``window`` (whether the read brought window state, the engine's call to both caches) is False here.
        """
        res = self.tree.insert(keys[:n_pages], device=False)
        if not res.inserted_pages:
            return 0
        new = res.path[len(res.path) - self._new_nodes(res) :]
        leaf = new[-1]
        self.tree.host_lock(leaf)  # not evicted while making room for itself
        ok = self._alloc_host(res.inserted_pages)
        self.tree.host_unlock(leaf)
        if not ok:
            for node in reversed(new):
                self.tree.delete_leaf(node)
            return 0
        for node in new:
            self.tree.set_host(node, self.all_pages_mask)
            self.tree.refile(node)
        return res.inserted_pages

    # ----- request phases ---------------------------------------------------------------------
    def lookup(self, keys: Sequence, input_tokens: int) -> Lookup:
        """Match a request (capped at ``input_tokens - 1``) and lock what it matched."""
        m = self.tree.match(keys, max(0, (input_tokens - 1) // self.page_tokens))
        host_pages = m.best_pages - m.device_pages if self.l2_enabled else 0
        load = host_pages > 0 and host_pages * self.page_tokens >= self.load_back_threshold
        self.tree.lock(m.device_node)
        self.tree.host_lock(m.best_node)
        return Lookup(keys, input_tokens, m.device_pages, host_pages, load, m.device_node, m.best_node)

    def admit(self, lk: Lookup, extra_pages: int = 0) -> Admission | None:
        """Reserve device pages for what the request will make resident and load back its host hit.

        ``extra_pages``: pages the request adds later (its output, cached at the end). Returns None, with
        nothing changed but evictions, when L1 cannot make room. Loaded pages are
        committed to the tree at once, as SGLang commits device indices before the H2D copy completes
        (``unified_radix_cache.py:1820-1937``); the caller times the copy.
        """
        kv_need = max(0, len(lk.keys) + extra_pages - lk.device_pages)
        if not self.ensure_device(kv_need):
            return None
        adm = Admission(lk, kv_reserved=kv_need)
        self.reserved_kv += kv_need
        pt = self.page_tokens
        if lk.load:
            self.tree.lock(lk.best_node)  # before reviving, so that what is revived is protected
            adm.held.append(lk.best_node)
            revive = []
            node = lk.best_node
            while node is not self.tree.root and not node.device:
                revive.append(node)
                node = node.parent
            for n in reversed(revive):
                self.tree.revive(n)
                adm.load_kv_pages += self._take(adm, n)
            self.stats.load_kv_pages += adm.load_kv_pages
        elif lk.host_pages:
            self.stats.load_back_skipped_tokens += lk.host_pages * pt
        adm.device_tokens = lk.device_pages * pt
        adm.host_tokens = lk.host_pages * pt if lk.load else 0
        adm.computed_tokens = lk.input_tokens - adm.device_tokens - adm.host_tokens
        self._count(lk, adm.device_tokens, adm.host_tokens)
        return adm

    def load_back(self, lk: Lookup) -> int:
        """Start loading ``lk``'s host hit back to the device, as SGLang's ``init_load_back`` does at admission
        (``unified_radix_cache.py:1857-1920``): nothing below ``load_back_threshold`` tokens; device room made by
        evicting device leaves, or nothing if that fails; the loaded nodes join the device tree at once and stay
        locked until :meth:`load_done`. Returns the pages loaded."""
        if not lk.host_pages or not lk.load:
            if lk.host_pages:
                self.stats.load_back_skipped_tokens += lk.host_pages * self.page_tokens
            return 0
        revive = []
        node = lk.best_node
        while node is not self.tree.root and not node.device:
            revive.append(node)
            node = node.parent
        pages = sum(len(n.key) for n in revive)
        self.tree.lock(lk.device_node)
        ok = self.ensure_device(pages)
        self.tree.unlock(lk.device_node)
        if not ok:
            return 0
        for n in reversed(revive):
            self.tree.revive(n)
            self.l1.alloc(len(n.key))
            n.dev_mask = self.all_pages_mask
            n.loading = True
        self.tree.lock(lk.best_node)
        self.tree.host_lock(lk.best_node)
        self.stats.load_kv_pages += pages
        if self.events is not None:
            self.events.append({"load": self._ref(lk.best_node), "tokens": pages * self.page_tokens})
        return pages

    def load_done(self, node: Node) -> None:
        """A load-back's ack: the nodes unlock on both tiers; their host copies stay as duplicates
        (``unified_radix_cache.py:3530-3584``)."""
        if self.events is not None:
            self.events.append({"load_done": self._ref(node)})
        self.tree.unlock(node)
        x = node
        while x is not self.tree.root and x.loading:
            x.loading = False
            if self._duplicates is not None:
                self._duplicates.setdefault(x.id, x)
            x = x.parent
        self.tree.host_unlock(node)

    def insert_request(self, keys: Sequence, inserted_pages: int, held_from: int) -> InsertResult:
        """Insert a request's first ``len(keys)`` pages, whose rows it holds from page ``held_from``: hit counts
        once per request (``inserted_pages``), its rows for pages the tree already had freed
        (``unified_tree_core.py:1332-1366``), write-through backups queued."""
        res = self.tree.insert(keys)
        adm = Admission(None, inserted_pages=inserted_pages)  # type: ignore[arg-type]
        self._count_once(adm, res.path)
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
        return res

    def _back_up_hits(self, path: list[Node], inserted_pages: int) -> None:
        """Back up the nodes whose hit count this insert raised to the threshold: only those ending past what
        the request inserted before (``unified_tree_core.py:1368-1374, 1431-1439``), each with its unbacked
        ancestors, after the walk."""
        threshold = self.threshold
        if not self.l2_enabled or threshold is None:
            return
        end = 0
        for node in path:
            end += len(node.key)
            if end > inserted_pages and not node.host and node.hit_count >= threshold:
                self._backup_chain(node)

    def evict_tokens(self, tokens: int) -> int:
        """Evict device leaves until at least ``tokens`` tree tokens are freed (``evict(EvictParams)``)."""
        freed = 0
        for node in self.tree.device_victims():
            freed += len(node.key) * self.page_tokens
            self._evict_device(node)
            if freed >= tokens:
                break
        return freed

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

    def _take(self, adm: Admission, node: Node) -> int:
        """Allocate a node's device pages out of the request's reservation (which counted them); returns
        the pages."""
        pages = len(node.key)
        adm.kv_reserved -= pages
        self.reserved_kv -= pages
        if adm.kv_reserved < 0 or not self.l1.alloc(pages):
            raise RuntimeError(f"device allocation outside the request's reservation: {node!r}")
        node.dev_mask = self.all_pages_mask
        return pages

    def commit(self, adm: Admission, keys: Sequence | None = None) -> list[BackupOp]:
        """Insert the request's pages (computed by now) into the tree; returns the backups it started.

        Under the write-through policies every path node whose hit count reached the threshold is backed
        up, ancestors first.
        """
        keys = adm.lookup.keys if keys is None else keys
        if not keys:
            return []
        before = len(self.pending)
        res = self.tree.insert(keys)
        inserted = adm.inserted_pages
        self._count_once(adm, res.path)
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
        return list(self.pending.values())[before:] if len(self.pending) > before else []

    def _new_nodes(self, res: InsertResult) -> int:
        """How many nodes at the end of ``res.path`` the insert created (one, or one per page)."""
        return res.inserted_pages if self.tree.one_page_nodes else 1

    def _count_once(self, adm: Admission, path: list[Node]) -> None:
        """A request counts a hit on each node once: SGLang raises a node's hit count only where the node
        ends past what this request already inserted (``cache_inserted_len``,
        ``unified_tree_core.py:1371-1374, 1433-1439``; ``unified_radix_cache.py:1255``), and never under
        write_back (``unified_tree_core.py:1108-1109``). The tree counted every node of the path; this
        takes back the repeats, so a prompt inserted again with its output is not counted twice."""
        write_back = self.policy is WritePolicy.WRITE_BACK and self.l2_enabled
        done, end = adm.inserted_pages, 0
        for node in path:
            end += len(node.key)
            if end <= done or write_back:
                node.hit_count -= 1
        adm.inserted_pages = max(done, end)

    def release(self, adm: Admission) -> None:
        """The request is done with the cache: drop its locks and any unused reservation."""
        for node in adm.held:
            self.tree.unlock(node)
        adm.held.clear()
        self.abandon(adm.lookup)
        self.reserved_kv -= adm.kv_reserved
        adm.kv_reserved = 0

    def abandon(self, lk: Lookup) -> None:
        """Release a lookup's locks (an admitted request's through :meth:`release`)."""
        self.tree.unlock(lk.device_node)
        self.tree.host_unlock(lk.best_node)

    def serve(self, keys: Sequence, input_tokens: int) -> Admission | None:
        """Request-order replay of one request: match, load back, compute, insert, and ack its backups
        at the end of its step. Returns None when L1 could not hold the request (its device prefix still
        counts as a hit; the rest is computed and not cached)."""
        self.write_back_copies.clear()  # no time here: a replay does not charge the copies
        lk = self.lookup(keys, input_tokens)
        adm = self.admit(lk)
        if adm is None:
            self.abandon(lk)
            self._count(lk, lk.device_pages * self.page_tokens, 0)
            self.stats.dropped_tokens[DEVICE_FULL] += (len(keys) - lk.device_pages) * self.page_tokens
            return None
        self.commit(adm)
        self.release(adm)
        self.ack_all()
        return adm

    # ----- reporting --------------------------------------------------------------------------
    def metrics(self) -> dict:
        """Counters under SGLang's metric names (``sglang:`` prefix dropped) and label sets
        (``observability/metrics_collector.py``): a labelled counter is a dict keyed by its label values,
        nested in label order. Token counters carry the ``pool`` label of the pool that owns the slot
        indices, ``kv``; sidecars ride on its indices and only the bytes counters, all pools combined,
        include them (``hybrid_cache_controller.py:953-1000``). Counters SGLang does not export start
        with ``sim_``."""
        s, pt = self.stats, self.page_tokens
        backup = self.pool_bytes(s.backup_kv_pages)
        load = self.pool_bytes(s.load_kv_pages)

        # SGLang pre-seeds host_pressure, and write_through_unbacked_eviction under write_through only, once
        # HiCache is on (unified_radix_cache.py:565-574); the pool label is always kv.
        reasons = [HOST_PRESSURE, UNBACKED] if self.policy is WritePolicy.WRITE_THROUGH else [HOST_PRESSURE]
        dropped = {r: {"kv": s.dropped_tokens[r]} for r in reasons} if self.l2_enabled else {}
        return {
            "cached_tokens_total": {"device": s.cached_tokens["device"], "host": s.cached_tokens["host"]},
            "evicted_tokens_total": s.evicted_tokens,
            "hicache_dropped_tokens_total": dropped,
            "hicache_backup_tokens_total": {"kv": s.backup_kv_pages * pt},
            "hicache_backup_bytes_total": sum(backup.values()),
            "load_back_tokens_total": {"kv": s.load_kv_pages * pt},
            "load_back_bytes_total": sum(load.values()),
            "hicache_host_used_tokens": self.l2.kv_used * pt,
            "hicache_host_total_tokens": None if self.l2.kv_cap == math.inf else self.l2.kv_cap * pt,
            "sim_computed_tokens_total": s.computed_tokens,
            "sim_device_full_tokens_total": s.dropped_tokens[DEVICE_FULL],
            "sim_hicache_backup_bytes_by_pool": backup,
            "sim_load_back_bytes_by_pool": load,
        }  # fmt: skip



def _subtree(node: Node):
    stack = [node]
    while stack:
        x = stack.pop()
        yield x
        stack.extend(x.children.values())

"""DeepSeek V4's prefix cache over paged Full and SWA pools, and the cache calls a running request makes.

:class:`SWACache` owns the two page pools (:mod:`sim.cache.v4.pools`), the host controller
(:mod:`sim.cache.v4.controller`) and the :class:`~sim.cache.v4.unified.UnifiedTree`; a running request's KV
record is :class:`sim.cache.v4.running.Running` (SGLang's ``Req.kv``: the tree-owned prefix, the SWA-evicted
boundary, the rows it allocated). The calls follow SGLang 0.5.23 (paths relative to ``sglang/srt/``):

- **admit** (``managers/schedule_batch.py:1692-1775``): match the prompt with the key capped at
  ``len - 1`` (V4.1's bounded SWA replay caps it ``replay_tail`` tokens lower, ``mem_cache/common.py:193-211``),
  lock the match end;
- **extend** one prefill chunk (``managers/schedule_policy.py:1140, 1665``): the first chunk of a prompt
  longer than ``chunked_prefill_size`` ends on a page, later ones take up to the chunk size; every token of
  the chunk gets a Full and an SWA slot, allocated by pages after evicting from the tree for the chunk
  plus one page (``mem_cache/allocation.py:175-258``, ``allocator/swa.py:203-214``); a chunk that does not
  end the prompt is checkpointed into the tree, as is the end of a prefill that does not finish the request;
- **decode** one step: before every step but the first, once ``seqlen - 1 - window`` has passed the
  SWA-evicted boundary by 128 tokens, the request frees its out-of-window SWA
  (``managers/schedule_batch.py:4047-4123``); then one page's worth is made free by eviction and a page is
  allocated when the new token starts one (``mem_cache/allocation.py:572-623``);
- **checkpoint** (``mem_cache/unified_radix_cache.py:1164-1336``): an unfinished request frees its
  out-of-window SWA up to the key first; a request with a branching point inserts only up to it; the insert
  moves the lock to the new end;
- **release** (``mem_cache/common.py:400-437``): a checkpoint of prompt + output minus the last token, then
  every row the tree did not take goes back to the pools.

Pool usage is derived, not tracked row by row: after any insert the tree owns the request's rows below
``protected`` (its duplicates freed, ``unified_tree_core.py:1332-1366``), so the request holds its Full pages
from ``protected`` and its SWA pages from ``max(protected, evicted)`` up to what it allocated.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from sim.cache.ages import TierAges
from sim.cache.v4.controller import WRITE_THRESHOLD, HostController
from sim.cache.v4.node import Backup
from sim.cache.v4.pools import OutOfMemory
from sim.cache.v4.running import Running
from sim.cache.v4.swa import SWA_EVICTION_INTERVAL, out_of_window_boundary
from sim.cache.v4.unified import Match, UnifiedTree
from sim.model.hostmem import swa_pages
from sim.model.pools import ModelSpec

__all__ = ["OutOfMemory", "SWACache", "v4_cache"]

class SWACache(HostController):
    """Paged Full and SWA pools (``full_pages``/``swa_pages`` of ``page`` tokens; None: unbounded) under a
    FULL + SWA tree."""

    def __init__(
        self,
        *,
        page: int,
        window: int,
        full_pages: int | None,
        swa_pages: int | None,
        chunked_prefill_size: int = 8192,
        replay_tail: int = 0,
        host_full_pages: int | None = 0,
        host_swa_pages: int | None = 0,
        write_policy: str = "write_through",
        load_back_threshold: int = 10,
    ) -> None:
        self.page = page
        self.window = window
        inf = float("inf")
        self.full_cap = inf if full_pages is None else full_pages * page
        self.swa_cap = inf if swa_pages is None else swa_pages * page
        self.host_full_cap = inf if host_full_pages is None else host_full_pages * page
        self.host_swa_cap = inf if host_swa_pages is None else host_swa_pages * page
        self.chunked_prefill_size = chunked_prefill_size
        self.replay_tail = replay_tail
        # Speculative decoding: a decode step holds this many slots past the new token (sim.model.speculative).
        self.decode_lookahead = 0
        self.hicache = host_full_pages != 0
        if write_policy not in ("write_through", "write_through_selective", "write_back"):
            raise ValueError(f"unknown write policy {write_policy!r}")
        self.write_policy = write_policy
        self.threshold = WRITE_THRESHOLD.get(write_policy)
        self.load_back_threshold = load_back_threshold
        self.tree = UnifiedTree(page, window, hicache=self.hicache)
        if self.hicache:
            self.tree.backup = self._backup_on_insert
            self.tree.evict_unbacked = self._evict_unbacked
            if write_policy == "write_back":
                self.tree.back_up_window = self.back_up_window
                self.tree.duplicates = {}
        self.pending: dict[int, Backup] = {}  # write-through copies not yet acknowledged
        self.write_back_copies: list[list[Backup]] = []  # copies made at eviction, for a clocked caller
        self._new_backups: list[Backup] = []
        self.host_reserved = 0  # host tokens held for L3 reads in flight
        self.host_swa_reserved = 0
        self.stats: Counter = self.tree.counts  # one set of counters: the tree's and the controller's
        self.dropped: Counter = Counter()  # tokens by reason, as hicache_dropped_tokens_total
        self.running: set[int] = set()
        # A clocked caller holds each load-back's locks until its ack (load_done); otherwise they drop at once.
        self.hold_loads = False
        self.loads: list[tuple] = []
        self._req_full = 0  # pages held by running requests
        self._req_swa = 0

    # ----- request calls ----------------------------------------------------------------------
    def lookup(self, keys: Sequence, prompt_len: int) -> Match:
        """SGLang's admission match: the key capped at ``prompt_len - 1`` (and ``replay_tail`` lower), in
        whole pages; ``keys`` may run past the prompt."""
        limit = max(0, prompt_len - 1 - self.replay_tail) // self.page
        return self.tree.match(keys[:limit])

    def admit(self, keys: Sequence, prompt_len: int, output_len: int = 0, match: Match | None = None) -> Running:
        """Match (unless the caller's admission check already did: ``match``) and lock a request whose
        prompt + output pages are ``keys``."""
        m = self.lookup(keys, prompt_len) if match is None else match
        uuid = self.tree.lock(m.node)
        r = Running(keys, prompt_len, output_len, m, m.node, uuid, m.device, m.branching)
        r.prefilled = r.allocated = m.device
        if self.hicache:
            self._load_back(r)
        self._account(r)
        s = self.stats
        s["requests"] += 1
        s["input_tokens"] += prompt_len
        s["input_pages"] += prompt_len // self.page
        s["device_hit_tokens"] += m.device
        s["host_hit_tokens"] += r.host_hit
        if self.tree.ages is not None and (m.device or r.host_hit):
            self._record_hits(self.tree.ages, m, r.host_hit)
        self.running.add(id(r))
        return r

    def _record_hits(self, ages: TierAges, m: Match, host_hit: int) -> None:
        """The matched nodes' ages at this hit, by the tier that serves them, and their new last use."""
        now, tree = ages.clock.now, self.tree
        if host_hit:
            for node in tree.path_up(m.best, m.node):
                ages.hit_at("host", node.used, node.tokens, now)
                node.used = now
        for node in tree.path_up(m.node):
            ages.hit_at("device", node.used, node.tokens, now)
            node.used = now

    def next_chunk(self, r: Running) -> tuple[int, int]:
        start, n = r.prefilled, r.prompt_len
        c = self.chunked_prefill_size
        if not r.chunks and n - start > c:
            return start, (start + c // self.page * self.page) // self.page * self.page
        return start, start + min(n - start, c)

    def extend(self, r: Running, tokens: int | None = None, *, defer: bool = False) -> tuple[int, int]:
        """Run one prefill chunk, SGLang's next one or the next ``tokens``; returns its token range. A middle
        chunk is checkpointed at once, or with ``defer`` by the caller at the start of the next scheduler
        iteration, as SGLang does (``managers/scheduler.py:3916-3919``)."""
        start, end = self.next_chunk(r) if tokens is None else (r.prefilled, r.prefilled + tokens)
        if not self.try_extend(r, end, defer=defer):
            self._alloc_rows(r, end)  # raises OutOfMemory, naming the pages
        return start, end

    def try_extend(self, r: Running, end: int, *, defer: bool = False) -> bool:
        """:meth:`extend` up to ``end``; False if the pools cannot take the chunk even after eviction (a failed
        attempt, without the cost of an exception)."""
        start, p, tree = r.prefilled, self.page, self.tree
        swa = tree.swa
        need = end - start + p
        # full_free() and swa_free(), inlined: a pass tries every admitted request, and in an SWA-starved run
        # nearly all of them fail here, without evicting
        full_free = self.full_cap - tree.full_evictable - tree.full_protected - self._req_full * p
        swa_free = self.swa_cap - swa.evictable - swa.protected - self._req_swa * p
        if need > full_free or (need > swa_free and swa.evictable):  # else evict_to_free has nothing to do
            self._make_free(r, need)
            full_free, swa_free = self.full_free(), self.swa_free()
        new = (-(-end // p) - -(-r.allocated // p)) * p  # _fits, on the free tokens just read
        if new > 0 and (new > full_free or new > swa_free):
            return False
        self._alloc_rows(r, end)
        r.prefilled = end
        r.chunks.append((start, end))
        if end < r.prompt_len:
            if not defer:
                self.checkpoint(r, end)
            return True
        r.emitted = 1 if r.output_len else 0
        if r.output_len <= 1:
            self.release(r)
        else:
            self.checkpoint(r, end)
        return True

    def decode(self, r: Running) -> None:
        """One decode step: free out-of-window SWA, allocate the new token's slot, emit a token."""
        seqlen = r.prompt_len + r.emitted
        if r.decode_steps >= 1 and seqlen - 1 - self.window >= r.evicted + SWA_EVICTION_INTERVAL:
            self._free_window(r, seqlen - 1)
        self._make_free(r, self.page)
        self._alloc_rows(r, max(r.allocated, seqlen + self.decode_lookahead))
        r.decode_steps += 1
        r.emitted += 1
        if r.emitted >= r.output_len:
            self.release(r)

    def decode_many(self, r: Running, n: int) -> None:
        """``n`` decode steps (fewer if the request finishes): the same state as ``n`` calls of :meth:`decode`.

        A step evicts only when less than a page is free before it allocates, so the steps run in segments:
        as many as the free pages cover with one page to spare go in bulk, visiting only the steps where the
        SWA boundary can move; the step after a segment runs alone (it may evict). A replay of long outputs
        then costs O(pages), not O(tokens).
        """
        p, tree = self.page, self.tree
        swa = tree.swa
        while not r.finished and n > 0:
            full_free = self.full_cap - tree.full_evictable - tree.full_protected - self._req_full * p  # inlined
            swa_free = self.swa_cap - swa.evictable - swa.protected - self._req_swa * p
            free = swa_free if swa_free < full_free else full_free  # min(full_free, swa_free)
            spare = r.output_len if free == float("inf") else int(free // p) - 1  # pages the segment may allocate
            first = r.prompt_len + r.emitted  # seqlen at the next step; it allocates row first - 1
            ahead = self.decode_lookahead
            k = min(n, r.output_len - r.emitted, (-(-r.allocated // p) + spare) * p - first + 1 - ahead)
            if k <= 0:
                self.decode(r)
                n -= 1
                continue
            end = first + k - 1
            start = first if r.decode_steps >= 1 else first + 1  # the first decode step never frees
            r.evicted = _bulk_window(r.evicted, start, end, r.protected, self.window, p)
            r.allocated = max(r.allocated, end + ahead)
            r.decode_steps += k
            r.emitted += k
            n -= k
            self._account(r)
            if r.emitted >= r.output_len:
                self.release(r)

    def finish(self, r: Running) -> None:
        """Run ``r`` to its end: remaining chunks, then decode steps, then release."""
        while not r.finished and r.prefilled < r.prompt_len:
            self.extend(r)
        if not r.finished:
            self.decode_many(r, r.output_len)

    def _free_window(self, r: Running, pre_len: int) -> None:
        r.evicted = out_of_window_boundary(r.evicted, pre_len, r.protected, self.window, self.page)
        self._account(r)

    def checkpoint(self, r: Running, up_to: int) -> None:
        """Insert the request's first ``up_to`` tokens and move its lock to where they end."""
        cache_len = up_to
        branching = r.branching if r.branching is not None and r.branching > r.protected else None
        if branching is not None and branching <= up_to:
            cache_len = branching
        else:
            branching = None
        if not r.finished:
            self._free_window(r, cache_len - 1)
        keys = r.keys[: cache_len // self.page]
        if keys:
            res = self.tree.insert(keys, prev_prefix=r.protected, inserted=r.inserted, window_start=r.evicted,
                                   branching=branching)  # fmt: skip
            r.inserted = max(r.inserted, len(keys) * self.page)
            r.lock_uuid = self.tree.relock(r.lock_node, r.lock_uuid, res.node)
            r.lock_node = res.node
            r.protected = len(keys) * self.page
            if res.branch_inserted:
                r.branching = None
                if not r.finished:
                    self._free_window(r, r.prefilled - 1)  # get_fill_ids() stops at extend_end
        self._account(r)

    def abort(self, r: Running) -> None:
        """Drop a running request without caching what it computed beyond its tree-owned prefix."""
        self.tree.unlock(r.lock_node, r.lock_uuid)
        r.allocated = r.protected
        self._account(r)
        self.running.discard(id(r))
        self.stats["retractions"] += 1

    def release(self, r: Running) -> None:
        """The request finished: the tree keeps prompt + output minus the newest token; the rest is freed."""
        r.finished = True
        self.checkpoint(r, r.kv_len)
        self.tree.unlock(r.lock_node, r.lock_uuid)
        r.allocated = r.protected
        self._account(r)
        self.running.discard(id(r))


def _bulk_window(evicted: int, first: int, last: int, dead_lo: int, window: int, page: int) -> int:
    """The SWA-evicted boundary after decode steps with ``seqlen`` from ``first`` to ``last``: each step frees
    once ``seqlen - 1 - window`` is an eviction interval past the boundary. Visits only the steps where
    the boundary can move."""
    keep = -(-max(window, page) // page) * page
    s = first
    while True:
        s = max(s, evicted + SWA_EVICTION_INTERVAL + window + 1)  # the next step that triggers a free
        if s > last:
            return evicted
        new = out_of_window_boundary(evicted, s - 1, dead_lo, window, page)
        if new == evicted:  # nothing to free until the threshold passes the boundary by a page
            s = max(s + 1, evicted + page + keep + 1)
        else:
            evicted, s = new, s + 1


def v4_cache(model: ModelSpec, *, l1_pages: int | None, l2_pages: int | None, policy: str, page: int,
             load_back_threshold: int, swa_ratio: float, chunked_prefill_size: int = 8192,
             l2_swa_pages: int | None = None) -> SWACache:  # fmt: skip
    """SGLang's V4 cache for ``model``: the SWA pools are ``swa_ratio`` of the Full ones on each tier
    (:func:`sim.model.hostmem.swa_pages`); the SWA host pool is ``l2_swa_pages`` where the caller
    sized it from the ratio as SGLang does (:func:`sim.model.hostmem.swa_host_pages`), else the same share of
    the Full host pages."""
    host_swa = (l2_swa_pages if l2_swa_pages is not None else swa_pages(l2_pages, swa_ratio)) if l2_pages else 0
    return SWACache(page=page, window=model.sliding_window, full_pages=l1_pages,
                    swa_pages=None if l1_pages is None else swa_pages(l1_pages, swa_ratio),
                    host_full_pages=l2_pages, host_swa_pages=host_swa,
                    write_policy=policy, load_back_threshold=load_back_threshold,
                    chunked_prefill_size=chunked_prefill_size)  # fmt: skip

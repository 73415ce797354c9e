"""The timed engine's cache interface over DeepSeek V4's exact prefix cache (:mod:`sim.cache.v4.swacache`).

The engine drives one cache object per instance through a small set of calls (lookup, admit, commit, release,
acks, L3 reservations) and reads pool usage for its samples. :class:`V4HiCache` answers those calls for a V4
model from :class:`~sim.cache.v4.swacache.SWACache`, so a timed run makes exactly the cache calls a request makes in
SGLang (the ones ``hicache-sim tree`` checks against SGLang's recordings), and adds what only the engine needs:

- **admission budget** (``managers/schedule_policy.py`` ``PrefillAdder``, ``mem_cache/prefill_budget.py:27-59,
  176-318``), the V4 host-tier driver's (:mod:`sim.offline.v4hostcalls`): a request is admitted while its extend
  past the device prefix, its output and a page stay below the Full pool's free plus evictable tokens (its device
  prefix locked), less every decoding request's remaining output and the prefilling requests' next chunks, and its
  sliding-window estimate below the SWA pool's free plus evictable tokens less the prefilling requests' SWA
  reservations. Outputs count in full, clipped at 4,096: the engine's requests have fixed lengths, as clients
  sending ``ignore_eos`` have them (``schedule_policy.py:786-794``), so SGLang's ``new_token_ratio`` never enters;
- **the scheduler's iteration**: a middle chunk is checkpointed, and a load-back's locks released, at the start of
  the next iteration (``managers/scheduler.py:3889-3919``), after the write acks;
- **decode pages on demand**: a decoding request's state is brought up to date only at the steps where it
  allocates a page (the steps where its SWA boundary can move coincide with them), so a batch costs one call
  per request per page, not per token;
- **L3**: host pages reserved for a read, and the pages a read brought placed in the tree as host-only nodes.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from sim.base.errors import InputError
from sim.cache.ages import TierAges
from sim.cache.budget import (
    admission_demand,
    chunk_end,
    chunk_reservation,
    clip_output,
    output_left,
    steps_to_page,
)
from sim.cache.v4.budget import swa_chunk_limit, swa_estimate
from sim.cache.v4.node import Backup
from sim.cache.v4.running import Running
from sim.cache.v4.swacache import SWACache, v4_cache
from sim.cache.v4.unified import UNode
from sim.model.pools import ModelSpec
from sim.workload.request import Request

__all__ = ["V4HiCache", "check_v4_setup", "request_keys", "v4_metrics"]



def check_v4_setup(model: ModelSpec, *, page_tokens: int, write_policy: str, eviction_policy: str) -> None:
    """Raise the one-line error for a V4 setup the exact cache does not model (yet)."""
    if page_tokens != model.page_size:
        raise InputError(f"hicache.page_size: {model.name} pages by {model.page_size} tokens "
                         f"(SGLang asserts it), got {page_tokens}")  # fmt: skip
    if write_policy == "boundary" or eviction_policy != "lru":
        raise InputError("hicache: the boundary write policy and eviction policies other than lru are not "
                         f"modelled on DeepSeek V4's cache yet ({model.name})")  # fmt: skip


@dataclass(init=False)  # these two have their own __init__, compiled: see :mod:`sim.base.compiled`
class V4Lookup:
    """A match with no lock taken: what a router, lpm or the L3 lookup reads."""

    keys: Sequence
    input_tokens: int
    device_pages: int
    host_pages: int
    best_node: UNode

    def __init__(self, keys: Sequence, input_tokens: int, device_pages: int, host_pages: int,
                 best_node: UNode) -> None:  # fmt: skip
        self.keys, self.input_tokens, self.device_pages = keys, input_tokens, device_pages
        self.host_pages, self.best_node = host_pages, best_node


@dataclass(init=False)
class V4Admission:
    """An admitted request: the fields the engine records, and the cache's request record."""

    run: Running
    device_tokens: int
    host_tokens: int
    computed_tokens: int
    load_kv_pages: int
    load_swa_pages: int
    first_end: int  # where its first chunk ends
    reserve: int  # Full tokens the budget sets aside for its next chunk (and its output, if that ends the prompt)
    swa_reserve: int  # SWA tokens likewise

    def __init__(self, run: Running, device_tokens: int, host_tokens: int, computed_tokens: int,
                 load_kv_pages: int, load_swa_pages: int, first_end: int = 0) -> None:  # fmt: skip
        self.run, self.device_tokens, self.host_tokens = run, device_tokens, host_tokens
        self.computed_tokens, self.load_kv_pages, self.load_swa_pages = computed_tokens, load_kv_pages, load_swa_pages
        self.first_end, self.reserve, self.swa_reserve = first_end, 0, 0


class _Tier:
    """Page usage of one tier, as the engine's sampler reads it."""

    def __init__(self, cache: SWACache, host: bool) -> None:
        self._c, self._host = cache, host

    @property
    def kv_used(self) -> int:
        """Pages in use, host reservations for L3 reads in flight included."""
        c = self._c
        return (c.tree.host_tokens + c.host_reserved if self._host else c.full_used) // c.page

    @property
    def swa_used(self) -> int:
        c = self._c
        return (c.tree.host_swa_tokens + c.host_swa_reserved if self._host else c.swa_used) // c.page

    def free(self, kv_pages: int, swa_pages: int = 0) -> None:
        """Give back a host reservation (an L3 read that ended)."""
        self._c.host_reserved -= kv_pages * self._c.page
        self._c.host_swa_reserved -= swa_pages * self._c.page


class _Window:
    """The SWA side of the cache (:class:`sim.cache.protocol.SlidingWindow`)."""

    def __init__(self, l1: _Tier, l2: _Tier, pages: int) -> None:
        self._l1, self._l2, self.pages = l1, l2, pages

    @property
    def l1_used(self) -> int:
        return self._l1.swa_used

    @property
    def l2_used(self) -> int:
        return self._l2.swa_used


class _TreeView:
    """The tree calls the engine makes: a side-effect-free peek and host locks around an L3 read."""

    def __init__(self, cache: SWACache) -> None:
        self._t = cache.tree

    def peek(self, keys: Sequence, max_pages: int | None = None) -> tuple[int, int]:
        return self._t.peek(keys if max_pages is None else keys[:max_pages])

    def host_lock(self, node: UNode) -> None:
        self._t.host_lock_path(node)

    def host_unlock(self, node: UNode) -> None:
        self._t.host_unlock_path(node)

    @property
    def evictable_tokens(self) -> int:
        return self._t.full_evictable


class V4HiCache:
    """One instance's V4 cache, as the engine sees it. *l1_pages*/*l2_pages* are Full pool pages of the
    model's page size; the SWA pools are ``swa_full_tokens_ratio`` of them."""

    def __init__(self, model: ModelSpec, *, l1_pages: int | None, l2_pages: int | None, policy: str,
                 load_back_threshold: int, page_tokens: int, swa_full_tokens_ratio: float,
                 chunked_prefill_size: int, decode_lookahead: int = 0, l2_swa_pages: int | None = None) -> None:  # fmt: skip
        self.model = model
        self.c = v4_cache(model, l1_pages=l1_pages, l2_pages=l2_pages, policy=policy, page=page_tokens,
                          load_back_threshold=load_back_threshold, swa_ratio=swa_full_tokens_ratio,
                          chunked_prefill_size=chunked_prefill_size, l2_swa_pages=l2_swa_pages)  # fmt: skip
        self.c.decode_lookahead = decode_lookahead  # speculative decoding's draft slots (sim.model.speculative)
        self.c.hold_loads = True  # a load-back's locks stay until its ack (start_iteration)
        self.page_tokens = page_tokens
        self.load_back_threshold = load_back_threshold
        self.page_bytes = {p.name: p.bytes_per_page for p in model.pools}
        self._pool_bytes: dict[tuple[int, int], dict[str, int]] = {}
        self.l1, self.l2 = _Tier(self.c, host=False), _Tier(self.c, host=True)
        self.window = _Window(self.l1, self.l2, math.ceil(model.sliding_window / page_tokens))
        self.tree = _TreeView(self.c)
        self.prefilling: dict[int, V4Admission] = {}
        self.deferred: list[Running] = []  # middle chunks checkpointed at the start of the next iteration
        self.decoding: dict[int, V4Admission] = {}
        self._decode_left = 0  # the decoding requests' remaining outputs, each clipped (what admission sets aside)
        self._last_keys: tuple = (None, [])  # the last request try_admit saw, and its keys

    # ----- what the engine reads ----------------------------------------------------------------
    @property
    def stats(self) -> Counter:
        return self.c.stats

    @stats.setter
    def stats(self, value: Counter) -> None:  # /flush_cache keeps the counters across a new cache
        self.c.stats = self.c.tree.counts = value

    @property
    def pending(self) -> dict[int, Backup]:
        return self.c.pending

    @property
    def write_back_copies(self) -> list[list[Backup]]:
        return self.c.write_back_copies

    def pool_bytes(self, kv_pages: int, swa_pages: int = 0) -> dict[str, int]:
        """Bytes per pool of a copy (or a sample); memoised, as every flush and load asks (callers only read
        the dict)."""
        memo = self._pool_bytes
        out = memo.get((kv_pages, swa_pages))
        if out is None:
            if len(memo) >= 4096:  # the sampler's page counts take many values: keep the memo bounded
                memo.clear()
            out = memo[kv_pages, swa_pages] = {
                pool.name: (kv_pages if pool.anchor == "kv" else swa_pages) * pool.bytes_per_page
                for pool in self.model.pools
                if (kv_pages if pool.anchor == "kv" else swa_pages) and pool.bytes_per_page
            }
        return out

    def record_ages(self, ages: TierAges) -> None:
        self.c.tree.ages = ages

    def metrics(self) -> dict:
        return v4_metrics(self.c, self.model)

    # ----- lookups --------------------------------------------------------------------------------
    def lookup(self, keys: Sequence, input_tokens: int) -> V4Lookup:
        m = self.c.lookup(keys, input_tokens)
        p = self.page_tokens
        return V4Lookup(keys, input_tokens, m.device // p, (m.best_len - m.device) // p, m.best)

    def abandon(self, lk: V4Lookup) -> None:
        """Nothing to undo: a lookup takes no lock."""

    # ----- admission, prefill, decode, release ----------------------------------------------------
    def try_admit(self, req: Request, resumed: int = 0, chunk_limit: int | None = None) -> V4Admission | None:
        """Admit ``req`` (its prompt, with ``resumed`` output tokens a retraction made, re-prefilled) if the
        budget allows; ``chunk_limit``: the tokens its first chunk may take in this pass."""
        last = self._last_keys  # a request the pools stalled is tried again at every pass: its keys once
        if last[0] is not req:
            last = self._last_keys = (req, request_keys(req, self.page_tokens))
        return self.admit_request(last[1], req.input_len + resumed, req.output_len - resumed, chunk_limit)

    def admit_request(self, keys: Sequence, input_len: int, output_len: int,
                      chunk_limit: int | None = None) -> V4Admission | None:  # fmt: skip
        """Admit if the budget allows (see the module docstring); None leaves the request waiting."""
        c, p = self.c, self.page_tokens
        m = c.lookup(keys, input_len)
        limit = c.chunked_prefill_size if chunk_limit is None else chunk_limit
        host = m.best_len - m.device if c.hicache else 0
        uuid = c.tree.lock(m.node)  # the budget check runs with the device prefix locked
        full_room, swa_room = self._rooms()
        if admission_demand(input_len, m.device, output_len, p) < full_room:
            first = swa_chunk_limit(-(-(input_len - m.device - host) // p) * p, clip_output(output_len), window=c.window,
                                    page=p, limit=limit, room=swa_room, size=c.swa_cap, host_hit=m.swa_host)  # fmt: skip
        else:
            first = None
        c.tree.unlock(m.node, uuid)
        if first is None or chunk_end(input_len, m.device + host, first, p) <= m.device + host < input_len:
            return None  # an empty first chunk is not admitted (OTHER, schedule_policy.py:1663-1672)
        r = c.admit(keys, input_len, output_len, match=m)  # SGLang matches once: the budget check reads it
        adm = V4Admission(r, r.match.device, r.host_hit, input_len - r.prefilled, r.load_full // p,
                          r.load_swa // p, first_end=chunk_end(input_len, r.prefilled, first, p))  # fmt: skip
        self._reserve(adm, max(0, adm.first_end - r.prefilled))
        self.prefilling[id(r)] = adm
        return adm

    def _rooms(self, reserved: bool = True) -> tuple[int | float, int | float]:
        """Full and SWA tokens free or evictable, less the decoding requests' outputs and (``reserved``) what the
        budget sets aside for the prefilling requests' next chunks."""
        c = self.c
        full, swa = c.full_free() + c.tree.full_evictable - self._decode_left, c.swa_free() + c.tree.swa.evictable
        if reserved:
            for a in self.prefilling.values():
                full -= a.reserve
                swa -= a.swa_reserve
        return full, swa

    def _reserve(self, adm: V4Admission, chunk: int) -> None:
        """Set aside ``adm``'s next chunk of ``chunk`` tokens: in pages and a page, with its output if the chunk
        ends the prompt, on the Full pool; its sliding-window estimate on the SWA pool (``prefill_budget.py:156-167,
        303-318``)."""
        r, c, p = adm.run, self.c, self.page_tokens
        ends = r.prefilled + chunk >= r.prompt_len
        adm.reserve = chunk_reservation(chunk, ends, r.output_len, p)
        adm.swa_reserve = swa_estimate(-(-chunk // p) * p, clip_output(r.output_len) if ends else 0, window=c.window,
                                       page=p, limit=c.chunked_prefill_size)  # fmt: skip

    def extend(self, adm: V4Admission, tokens: int) -> int:
        """Run up to ``tokens`` more prompt tokens of ``adm`` (a truncated chunk ends on a page, as SGLang's
        chunking does); returns the tokens run, 0 if the pools cannot take them now. The first chunk is the one
        admission budgeted; a later one takes at most the room on both pools less the decoding requests' outputs
        (``add_chunked_req`` runs first in a pass; ``available_chunk_tokens``, ``prefill_budget.py:295-299``)."""
        r, p, c = adm.run, self.page_tokens, self.c
        start = r.prefilled
        if r.chunks:  # the chunked request's chunk is taken first in a pass, before anything is reserved
            full_room, swa_room = self._rooms(reserved=False)
            tokens = min(tokens, int(full_room), int(swa_room) - p)
            end = min(r.prompt_len, start + max(0, tokens))
        else:
            # (a load-back that failed after the budget check can leave the chunk budgeted empty: uncapped)
            end = min(adm.first_end, start + tokens) if adm.first_end > start else start + tokens
        if end < r.prompt_len:
            end = end // p * p
        if end <= start or not c.try_extend(r, end, defer=True):
            if r.chunks:
                self._reserve(adm, min(r.prompt_len - start, c.chunked_prefill_size))
            return 0
        if r.prefilled < r.prompt_len:  # the next pass's budget charges its next chunk first (add_chunked_req)
            self.deferred.append(r)
            self._reserve(adm, min(r.prompt_len - r.prefilled, c.chunked_prefill_size))
            return end - start
        del self.prefilling[id(r)]
        if not r.finished:
            self.decoding[id(r)] = adm
            self._decode_left += output_left(r)
        return end - start

    def start_iteration(self) -> None:
        """The start of a scheduler iteration, after the write acks: the load-backs started before it are acked
        (their copies landed within the pass that carried them), then the middle chunks are checkpointed
        (``managers/scheduler.py:3889-3919``)."""
        c = self.c
        for load in c.loads:
            c.load_done(load)
        c.loads.clear()
        for r in self.deferred:
            if not r.finished:
                c.checkpoint(r, r.prefilled)
        self.deferred.clear()

    def steps_to_page(self, adm: V4Admission) -> int:
        return steps_to_page(adm.run, self.page_tokens, self.c.decode_lookahead)

    def decode(self, adm: V4Admission, steps: int) -> None:
        """Bring ``adm`` ``steps`` decode steps forward (raises :class:`MemoryError` if a pool runs dry)."""
        r = adm.run
        decoding = id(r) in self.decoding
        if decoding:
            self._decode_left -= output_left(r)
        try:
            self.c.decode_many(r, steps)
        except MemoryError:  # the request stays decoding until it is retracted: its output stays set aside
            if decoding:
                self._decode_left += output_left(r)
            raise
        if r.finished:
            self.decoding.pop(id(r), None)
        elif decoding:
            self._decode_left += output_left(r)

    def retract(self, adm: V4Admission, keep_free: int = 0) -> None:
        """Give a decoding request's KV back without caching its output, then evict from the tree until
        ``keep_free`` tokens are free for the requests that stay (``release_req``,
        ``managers/schedule_batch.py:2388-2392``); it will be admitted again (V4 recomputes it)."""
        self._stop_decoding(adm.run)
        self.c.abort(adm.run)
        if keep_free:
            self.c.evict_to_free(keep_free, keep_free)

    def commit(self, adm: V4Admission | None) -> list[Backup]:
        """The backups the request's inserts started since the last call (the inserts themselves ran per
        chunk, in :meth:`extend`, :meth:`decode` and :meth:`release`)."""
        return self.c.take_new_backups()

    def release(self, adm: V4Admission) -> None:
        r = adm.run
        self._stop_decoding(r)
        if not r.finished:
            self.c.finish(r)

    def _stop_decoding(self, r: Running) -> None:
        """``r`` leaves the decoding requests (if it is one): its remaining output is no longer set aside."""
        if self.decoding.pop(id(r), None) is not None:
            self._decode_left -= output_left(r)

    def ack(self, op: Backup) -> None:
        self.c.ack(op)

    def serve(self, keys: Sequence, input_tokens: int, output_tokens: int = 1) -> V4Admission:
        """A whole request at once, acks included, with no clock (to set a cache up)."""
        r = self.c.admit(keys, input_tokens, output_tokens)
        self.c.finish(r)
        self.c.ack_all()
        return V4Admission(r, r.match.device, r.host_hit, input_tokens - r.match.best_len, r.load_full, r.load_swa)

    # ----- L3 ---------------------------------------------------------------------------------------
    def reserve_host(self, kv_pages: int, swa_pages: int, min_kv_pages: int) -> int:
        """Reserve host room for an L3 read: all ``kv_pages``, else as many as fit if at least ``min_kv_pages``;
        host leaves are evicted to make room (``unified_radix_cache.py:3111-3140``)."""
        c, p, pages, min_pages = self.c, self.page_tokens, kv_pages, min_kv_pages
        short = pages * p - c.host_full_free()
        if short > 0:
            c.stats["host_evicted_tokens"] += c.tree.evict_host(int(short))
        fit = min(pages, int(c.host_full_free() // p))
        if fit < pages and fit < min_pages:
            return 0
        swa = swa_pages if fit == pages else 0
        c.host_reserved += fit * p
        c.host_swa_reserved += swa * p
        return fit

    def insert_host(self, keys: Sequence, n_pages: int, window: bool) -> int:
        """Place pages read from L3 in the tree as host-only nodes; returns the pages added."""
        return self.c.tree.insert_host(list(keys[:n_pages]), self.window.pages if window else 0)


def request_keys(req: Request, page: int) -> list:
    """Page keys of a request's whole prompt + output pages: the trace's or workload's own where it gives
    them (``final_keys``), else the prompt's followed by keys unique to this request's output."""
    total = (req.input_len + max(1, req.output_len)) // page
    keys = req.final_keys if req.final_keys and len(req.final_keys) >= total else req.keys
    return list(keys[:total]) + [("out", req.rid, j) for j in range(len(keys), total)]


def v4_metrics(c: SWACache, model: ModelSpec) -> dict:
    """The V4 cache's counters under SGLang's metric names and label sets (``sim_`` for the simulator's own)."""
    s = c.stats
    per_token = {p.name: p.bytes_per_page / model.page_size for p in model.pools if p.bytes_per_page}
    full_pools = {p.name for p in model.pools if p.anchor == "kv"}

    def by_pool(full: int, swa: int) -> dict[str, int]:
        return {n: int((full if n in full_pools else swa) * b) for n, b in per_token.items()}

    backup = by_pool(s["backup_full_tokens"], s["backup_swa_tokens"])
    load = by_pool(s["load_full_tokens"], s["load_swa_tokens"])
    # SGLang pre-seeds host_pressure, and write_through_unbacked_eviction under write_through only
    # (unified_radix_cache.py:565-574).
    reasons = ["host_pressure"] + (["write_through_unbacked_eviction"] if c.write_policy == "write_through" else [])
    return {
        "cached_tokens_total": {"device": s["device_hit_tokens"], "host": s["host_hit_tokens"]},
        "evicted_tokens_total": s["evicted_tokens"],
        "hicache_dropped_tokens_total": {r: {"kv": c.dropped[r]} for r in reasons} if c.hicache else {},
        "hicache_backup_tokens_total": {"kv": s["backup_full_tokens"], "swa": s["backup_swa_tokens"]},
        "hicache_backup_bytes_total": sum(backup.values()),
        "load_back_tokens_total": {"kv": s["load_full_tokens"], "swa": s["load_swa_tokens"]},
        "load_back_bytes_total": sum(load.values()),
        "hicache_host_used_tokens": c.tree.host_tokens,
        "hicache_host_total_tokens": None if c.host_full_cap == math.inf else int(c.host_full_cap),
        "sim_computed_tokens_total": s["input_tokens"] - s["device_hit_tokens"] - s["host_hit_tokens"],
        "sim_swa_evicted_tokens_total": s["swa_evicted_tokens"],
        "sim_hicache_backup_bytes_by_pool": backup,
        "sim_load_back_bytes_by_pool": load,
    }  # fmt: skip

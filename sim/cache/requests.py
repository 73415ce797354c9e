"""A running request's KV rows on the single-pool cache: SGLang's ``Req.kv`` (:class:`KVRecord`) and the calls
that move it, as the timed engine and the host-tier driver (:mod:`sim.offline.hostcalls`) both make them.

Rows are allocated as they are computed, not reserved at admission: each prefill chunk and each decode step
first evicts device leaves until its demand is free (a chunk: its tokens and a page; a step: a page), then
takes the pages its new rows start (``mem_cache/allocation.py:175-258, 572-625``). A checkpoint inserts the
whole pages computed so far and moves the request's lock to where they end; the release checkpoints the KV
the request computed, its prompt and every output token but the newest (``kv_committed_len``,
``allocation.py:485, 686``; ``mem_cache/common.py:400-437``), and frees what the tree did not take.

:class:`RequestRows` is a base of :class:`sim.cache.hicache.HiCache` and works on its state, as its
:class:`~sim.cache.controller.CacheController` and :class:`~sim.cache.evictor.TierEvictor` bases do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sim.cache.budget import admission_demand, chunk_end, chunk_reservation, output_left, steps_to_page
from sim.cache.node import Node
from sim.cache.radix import RadixTree

if TYPE_CHECKING:
    from sim.cache.tiers import BackupOp, Tier

__all__ = ["Admission", "KVRecord", "RequestPhases", "RequestRows"]


@dataclass
class KVRecord:
    """One request's KV record, in tokens. ``keys``: the page keys of its prompt and output, as far as they are
    known (a workload without output keys gives the prompt's), so a checkpoint of ``n`` tokens inserts at most
    ``keys[: n // page]``."""

    keys: Sequence
    prompt_len: int
    output_len: int
    lock: Node
    protected: int = 0  # tokens the tree owns (cache_protected_len)
    inserted: int = 0  # pages inserted so far (cache_inserted_len)
    allocated: int = 0  # rows with KV slots
    prefilled: int = 0  # extend_end
    emitted: int = 0  # output tokens produced
    decode_steps: int = 0
    chunks: list = field(default_factory=list)
    finished: bool = False

    @property
    def kv_len(self) -> int:
        """Tokens whose KV is computed: the prompt part prefilled plus every output token but the newest."""
        return self.prefilled + max(0, self.emitted - 1)


class RequestRows:
    """Allocation, prefill chunks, decode steps, checkpoints and release of :class:`KVRecord` s. Uses its
    cache's ``ensure_device`` (:class:`~sim.cache.evictor.TierEvictor`) and ``insert_request``."""

    # Set by HiCache.__init__.
    tree: RadixTree
    l1: Tier
    page_tokens: int
    pending: dict[int, BackupOp]
    decode_lookahead: int  # speculative decoding's draft slots past the newest token (sim.model.speculative)
    new_backups: list[BackupOp]

    def take_new_backups(self) -> list[BackupOp]:
        """The backups the checkpoints queued since the last call."""
        ops, self.new_backups = self.new_backups, []
        return ops

    def alloc_rows(self, r: KVRecord, end: int, demand: int) -> bool:
        """Give ``r`` rows up to ``end``, first evicting device leaves until ``demand`` tokens are free; False,
        with nothing allocated, when the pages are not there even after eviction."""
        p = self.page_tokens
        self.ensure_device(-(-demand // p))
        new = -(-end // p) - -(-r.allocated // p)
        if new > 0 and not self.l1.alloc(new):
            return False
        r.allocated = max(r.allocated, end)
        return True

    def extend_rows(self, r: KVRecord, end: int) -> bool:
        """Prefill up to ``end`` (False: no room, nothing run). The last chunk makes the first output token and
        checkpoints the prompt; a middle chunk is the caller's to checkpoint, at the start of the next
        scheduler iteration (``managers/scheduler.py:3916-3919``)."""
        start, p = r.prefilled, self.page_tokens
        if not self.alloc_rows(r, end, (end - start) + p if p > 1 else end - start):
            return False
        r.prefilled = end
        r.chunks.append([start, end])
        if end < r.prompt_len:
            return True
        r.emitted = 1 if r.output_len else 0
        if r.output_len <= 1:
            self.release_rows(r)
        else:
            self.checkpoint(r, end)
        return True

    def decode_row(self, r: KVRecord) -> None:
        """One decode step: a page made free, the newest token's row (and the draft slots) allocated, a token
        made. Raises :class:`MemoryError` when the row has no page even after eviction."""
        if not self.alloc_rows(r, r.prompt_len + r.emitted + self.decode_lookahead, self.page_tokens):
            raise MemoryError("no device page for a decode step even after eviction")
        r.decode_steps += 1
        r.emitted += 1
        if r.emitted >= r.output_len:
            self.release_rows(r)

    def decode_rows(self, r: KVRecord, n: int) -> None:
        """``n`` decode steps (fewer if the request finishes): the same state as ``n`` calls of :meth:`decode_row`.

        A step evicts only when no page is free before it, so the steps that the free pages cover with one to
        spare go in bulk, and the step after them alone (it may evict): O(pages), not O(tokens)."""
        l1, p, ahead = self.l1, self.page_tokens, self.decode_lookahead
        while not r.finished and n > 0:
            free = l1.kv_cap - l1.kv_used
            spare = r.output_len if free == float("inf") else int(free) - 1  # pages the segment may allocate
            first = r.prompt_len + r.emitted  # the rows the next step needs, draft slots aside
            k = min(n, r.output_len - r.emitted, (-(-r.allocated // p) + spare) * p - first - ahead + 1)
            if k <= 0:
                self.decode_row(r)
                n -= 1
                continue
            end = first + k - 1 + ahead
            if not self.alloc_rows(r, end, 0):  # within the free pages: cannot fail
                raise RuntimeError(f"decode segment of {k} steps outside the free pages")
            r.decode_steps += k
            r.emitted += k
            n -= k
            if r.emitted >= r.output_len:
                self.release_rows(r)

    def checkpoint(self, r: KVRecord, up_to: int) -> None:
        """Insert the whole pages up to ``up_to`` that have keys; the request's lock moves to the path's end."""
        p = self.page_tokens
        keys = r.keys[: up_to // p]
        if not keys:
            return
        before = len(self.pending)
        res = self.insert_request(keys, r.inserted, r.protected // p)
        r.inserted = max(r.inserted, len(keys))
        self.tree.unlock(r.lock)
        r.lock = res.path[-1]
        self.tree.lock(r.lock)
        r.protected = max(r.protected, len(keys) * p)
        if len(self.pending) > before:
            self.new_backups.extend(list(self.pending.values())[before:])

    def abort_rows(self, r: KVRecord) -> None:
        """Free the rows without caching what the request computed beyond its tree-owned prefix."""
        r.finished = True
        self._free_rows(r)

    def release_rows(self, r: KVRecord) -> None:
        """The request finished: the tree takes the KV it computed; the rest is freed."""
        r.finished = True
        self.checkpoint(r, r.kv_len)
        self._free_rows(r)

    def _free_rows(self, r: KVRecord) -> None:
        p = self.page_tokens
        self.tree.unlock(r.lock)
        self.l1.kv_used -= -(-r.allocated // p) - r.protected // p
        r.allocated = r.protected


@dataclass
class Admission:
    """An admitted request as the engine sees it: its cache hits and load, its KV record, and what the
    admission budget still sets aside for it (its next chunk, and its output once that chunk ends the prompt)."""

    run: KVRecord
    device_tokens: int
    host_tokens: int
    computed_tokens: int
    load_kv_pages: int
    reserve: int = 0
    first_end: int = 0  # where its first chunk ends


class RequestPhases(RequestRows):
    """The timed engine's calls on the single-pool cache (:class:`sim.cache.protocol.PrefixCache`): SGLang's
    admission budget, one prefill chunk at a time, decode steps brought up to date at page boundaries,
    retraction, release; acks of load-backs and the middle chunks' checkpoints at the start of an iteration.

    The budget is ``PrefillAdder``'s for one pool (``managers/schedule_policy.py:1395-1440``,
    ``mem_cache/prefill_budget.py:91-167``): a request is admitted while its uncached prompt, its output and a
    page stay below the free plus evictable tokens, with its device prefix locked, less every decoding request's
    remaining output and what the prefilling requests' next chunks reserve (``_update_prefill_budget``,
    ``schedule_policy.py:895-934``), outputs in full (:mod:`sim.cache.budget`, shared with the host-tier driver),
    so ``new_token_ratio`` does not enter."""

    chunked_prefill_size: int
    prefilling: dict[int, Admission]
    decode_left: int  # the decoding requests' remaining outputs, each clipped
    loads: list[Node]  # load-backs started this iteration, acked at the start of the next
    deferred: list[KVRecord]  # requests whose middle chunk is checkpointed at the start of the next iteration

    def start_requests(self, chunked_prefill_size: int, decode_lookahead: int) -> None:
        """No request running yet."""
        self.chunked_prefill_size, self.decode_lookahead = chunked_prefill_size, decode_lookahead
        self.prefilling, self.decode_left, self.loads, self.deferred, self.new_backups = {}, 0, [], [], []

    def room(self, reserved: bool = True) -> int:
        """Free plus evictable device tokens, less the decoding requests' outputs and (``reserved``) what the
        budget sets aside for the prefilling requests' next chunks."""
        room = (self.l1.kv_cap - self.l1.kv_used) * self.page_tokens + self.tree.evictable_tokens - self.decode_left
        return room - sum(a.reserve for a in self.prefilling.values()) if reserved else room

    def try_admit(self, req, resumed: int = 0, chunk_limit: int | None = None) -> Admission | None:
        """Admit ``req`` (its prompt, with ``resumed`` output tokens a retraction made, prefilled again) if the
        budget allows, loading back its host hit; None leaves it waiting with nothing held. ``chunk_limit``:
        the tokens its first chunk may take in this pass (``rem_chunk_tokens``)."""
        p = self.page_tokens
        prompt_len, output_len = req.input_len + resumed, req.output_len - resumed
        keys = req.final_keys if req.final_keys else req.keys
        lk = self.lookup(keys, prompt_len)  # locks the device prefix and host-locks the best match
        matched = lk.device_pages * p
        limit = self.chunked_prefill_size if chunk_limit is None else chunk_limit
        # the budget counts the extend past the device prefix; the first chunk starts past the host hit too
        # (_select_prefill_admission, schedule_policy.py:1596-1672); an empty chunk is not admitted (OTHER)
        host = lk.host_pages * p if lk.load else 0
        if (not admission_demand(prompt_len, matched, output_len, p) < self.room()
                or chunk_end(prompt_len, matched + host, limit, p) <= matched + host < prompt_len):  # fmt: skip
            self.abandon(lk)
            return None
        loaded = self.load_back(lk) * p
        prefix = matched + loaded
        first_end = chunk_end(prompt_len, prefix, limit, p)
        if first_end <= prefix < prompt_len:  # no host hit loaded, and no chunk left for the recompute
            self.abandon(lk)
            return None
        lock = lk.best_node if loaded else lk.device_node
        self.tree.lock(lock)
        self.abandon(lk)
        r = KVRecord(keys, prompt_len, output_len, lock, protected=prefix, allocated=prefix, prefilled=prefix)
        adm = Admission(r, matched, loaded, prompt_len - prefix, loaded // p, first_end=first_end)
        if loaded:
            self.loads.append(lk.best_node)
        self._reserve(adm, first_end - prefix)
        self.prefilling[id(r)] = adm
        self._count(lk, matched, loaded)
        return adm

    def _reserve(self, adm: Admission, chunk: int) -> None:
        """Set aside ``adm``'s next chunk of ``chunk`` tokens in pages, a page, and its output if the chunk ends
        the prompt (``prefill_budget.py:156-167``)."""
        r = adm.run
        adm.reserve = chunk_reservation(chunk, r.prefilled + chunk >= r.prompt_len, r.output_len, self.page_tokens)

    def extend(self, adm: Admission, tokens: int) -> int:
        """Run up to ``tokens`` more prompt tokens of ``adm`` (a truncated chunk ends on a page); returns the
        tokens run, 0 if the pool cannot take them now. The first chunk is the one admission budgeted (a
        prompt longer than the room it had, cut at a page: ``schedule_policy.py:1660-1672``); a later one
        takes at most the room less the decoding requests' outputs (``add_chunked_req`` runs first in a pass;
        ``available_chunk_tokens``, ``prefill_budget.py:139-142``)."""
        r, p = adm.run, self.page_tokens
        start = r.prefilled
        if r.chunks:  # the chunked request's chunk is taken first in a pass, before anything is reserved
            room = self.room(reserved=False)
            end = min(r.prompt_len, start + (min(tokens, room) if room > 0 else tokens))
        else:
            end = min(adm.first_end, start + tokens)
        if end < r.prompt_len:
            end = end // p * p
        if end <= start or not self.extend_rows(r, end):
            if r.chunks:
                self._reserve(adm, min(r.prompt_len - start, self.chunked_prefill_size))
            return 0
        if end < r.prompt_len:  # the next pass's budget charges its next chunk first (add_chunked_req)
            self.deferred.append(r)
            self._reserve(adm, min(r.prompt_len - end, self.chunked_prefill_size))
            return end - start
        del self.prefilling[id(r)]
        adm.reserve = 0
        if not r.finished:
            self.decode_left += output_left(r)
        return end - start

    def start_iteration(self) -> None:
        """The start of a scheduler iteration, after the write acks: the load-backs started before it are acked
        (their copies landed within the pass that carried them), then the middle chunks are checkpointed
        (``managers/scheduler.py:3889-3919``)."""
        for node in self.loads:
            self.load_done(node)
        self.loads.clear()
        for r in self.deferred:
            if not r.finished:
                self.checkpoint(r, r.prefilled)
        self.deferred.clear()

    def steps_to_page(self, adm: Admission) -> int:
        return steps_to_page(adm.run, self.page_tokens, self.decode_lookahead)

    def decode(self, adm: Admission, steps: int) -> None:
        """Bring ``adm`` ``steps`` decode steps forward (raises :class:`MemoryError` if the pool runs dry)."""
        r = adm.run
        self.decode_left -= output_left(r)
        try:
            self.decode_rows(r, steps)
        finally:
            if not r.finished:
                self.decode_left += output_left(r)

    def retract(self, adm: Admission, keep_free: int = 0) -> None:
        """Give a decoding request's rows back uncached, then evict until ``keep_free`` tokens are free for the
        requests that stay (``release_req``, ``managers/schedule_batch.py:2388-2392``)."""
        r = adm.run
        if self.prefilling.pop(id(r), None) is None and not r.finished:
            self.decode_left -= output_left(r)
        self.abort_rows(r)
        if keep_free:
            self.ensure_device(-(-keep_free // self.page_tokens))

    def commit(self, adm: Admission | None) -> list[BackupOp]:
        """The backups the request's checkpoints started since the last call (the checkpoints ran per chunk,
        decode and release)."""
        return self.take_new_backups()

    def release(self, adm: Admission) -> None:
        r = adm.run
        if not r.finished:
            if self.prefilling.pop(id(r), None) is None:
                self.decode_left -= output_left(r)
            self.release_rows(r)

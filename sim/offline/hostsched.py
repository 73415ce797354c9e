"""SGLang's scheduler iterations around a HiCache, without a clock: the frame in which both host-tier drivers
(:mod:`sim.offline.hostcalls` for the plain model, :mod:`sim.offline.v4hostcalls` for DeepSeek V4) answer the
host-tier call format of ``shared/vectors/hicache``. The calls map onto SGLang's scheduler as that README describes
(paths relative to ``sglang/srt/``):

- every scheduler iteration starts with ``check_hicache_events`` (``managers/scheduler.py:3889-3898``): queued
  backups are submitted, then completed write acks and load acks are reaped in FIFO order, each stopping at the
  first copy still in flight (``mem_cache/unified_radix_cache.py:3651-3707``; :mod:`sim.offline.copies`);
- admission (``managers/schedule_policy.py:1395-1590``): the match with the key capped at ``len - 1``, the
  budget check with the device prefix locked (``mem_cache/prefill_budget.py:91-167``; a fixed-length request's
  output counts in full, ``schedule_policy.py:672-680``), the load-back of a host hit at or above
  ``load_back_threshold`` (``unified_radix_cache.py:1820-1937``), the first chunk (``schedule_policy.py:1660-1672``);
- the batch's queued loads start as one copy when the batch closes (``managers/scheduler.py:4351-4355``); each
  chunk and decode step allocates, evicting device leaves when short (``mem_cache/allocation.py:175-258``, ``:625``);
- after each batch's result, the backups its inserts queued are submitted as one merged copy
  (``managers/scheduler.py:5106``; ``managers/cache_controller.py:885-920``).

A driver adds what its cache decides: the pools a config call sizes, the admission verdict, a later chunk's room,
how a chunk, a decode step, a checkpoint and an abort run on its cache, and the fields of a match.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import ClassVar

from sim.base.errors import InputError
from sim.cache.budget import chunk_end, chunk_reservation, output_left
from sim.offline.calls import MAX_COUNT, Fields, host_runs
from sim.offline.copies import HostCopies
from sim.offline.driver import CallDriver, cached_fields, handles, paths_answer, progress_fields

__all__ = ["HOST_CALL_FIELDS", "HOST_CONFIG_KEYS", "HostScheduler", "PrefillAdder", "state_answer",
           "tiers_flag"]

_KEEP_BATCH = frozenset({"admit", "match", "state", "evict", "evict_host", "config"})  # ops the open batch outlives
_EVICTING = frozenset({"request", "admit", "extend", "decode", "finish", "evict"})  # answers that report evictions

# What each host-tier call may carry, by op (:data:`sim.offline.calls.Fields`; the format's README lists them). Every
# call is checked against this before it is applied; a config key left out keeps its previous value, so the keys the
# model needs (:data:`HOST_CONFIG_KEYS`) are checked once merged.
_TOKENS, _OUTPUT, _RID, _ID = ("tokens", 0, True), ("tokens", 0, False), ("rid", 0, True), ("rid", 0, False)
HOST_CALL_FIELDS: dict[str, Fields] = {op: {"id": _ID, **fields} for op, fields in {
    "config": {"model": ("plain|v4", 0, False), "kv": ("mha|mla", 0, False), "page_size": ("int", 1, False),
               "full_pages": ("int", 1, False), "swa_pages": ("int", 1, False), "window": ("int", 1, False),
               "chunked_prefill_size": ("int", -(1 << 31), False), "max_prefill_tokens": ("int", 1, False),
               "hicache_ratio": ("num", 0, False), "write_policy": ("write_through|write_through_selective|write_back", 0,
               False), "write_through_threshold": ("int?", 1, False), "load_back_threshold": ("int", 0, False),
               "load_policy": ("forward|explicit", 0, False)},
    "request": {"tokens": _TOKENS, "output": _OUTPUT},
    "admit": {"rid": _RID, "tokens": _TOKENS, "output": _OUTPUT},
    "extend": {"rid": _RID},
    "decode": {"rid": _RID, "n": ("int", 0, False)},
    "finish": {"rid": _RID},
    "match": {"tokens": _TOKENS, "admission": ("bool", 0, False)},
    "ack": {"n": ("int", 0, False)},
    "complete_loads": {},
    "step": {},
    "evict_host": {"n": ("int", 0, True)},
    "evict": {"full": ("int", 0, True), "swa": ("int", 0, False)},
    "state": {},
}.items()}  # fmt: skip
HOST_CONFIG_KEYS = {  # the config keys each model's pools need
    "plain": ("page_size", "full_pages", "chunked_prefill_size", "hicache_ratio", "write_policy", "load_back_threshold",
              "load_policy"),
    "v4": ("page_size", "full_pages", "swa_pages", "window", "chunked_prefill_size", "hicache_ratio", "write_policy",
           "load_back_threshold", "load_policy"),
}  # fmt: skip


def tiers_flag(device: bool, host: bool) -> str:
    """A node's tiers as a ``state`` answer writes them: B(oth), D(evice), H(ost) or - (neither)."""
    return ("B" if host else "D") if device else ("H" if host else "-")


def state_answer(paths, num_nodes: int, tokens_of, tiers, loading: set[int]) -> dict:
    """A host-tier ``state`` answer: each node flagged with its tiers, then ``w`` while its backup is in flight and
    ``l`` while a load-back brings it back (``loading``: their ids)."""

    def flag(node) -> str:
        return tiers(node) + ("w" if node.pending is not None else "") + ("l" if id(node) in loading else "")

    return {"num_nodes": num_nodes, "paths": paths_answer(paths, tokens_of, flag, host_runs)}


def _on_admitted(handler):
    """A handler of a call on request ``rid``: it gets the request's record; a refused request answers skipped. A
    call the request's state does not allow (:func:`_out_of_order`) is an input error."""

    @functools.wraps(handler)
    def on_request(self, call: dict) -> dict:
        r = self._request(self.reqs, call)
        if not r.admitted:
            return {"skipped": "not admitted"}
        problem = _out_of_order(call["op"], r, r.rid in self.forward)
        if problem:
            raise InputError(f"rid: request {r.rid!r} {problem}")
        return handler(self, r, call)

    return on_request


def _out_of_order(op: str, r, in_forward: bool) -> str | None:
    """Why request ``r`` cannot take call ``op`` now (SGLang's scheduler never issues it), or None: no chunk or decode
    step runs on a released request (a ``finish`` of one, as after its last decode step, answers what it ran), a
    prefill chunk needs prompt left, and decode steps follow the whole prefill."""
    if r.finished:
        return None if op == "finish" else "has finished: it is released and no chunk or decode step runs on it"
    if op == "extend" and not in_forward and r.prefilled >= r.prompt_len:
        return "has no prompt left to prefill (decode or finish it)"
    if op == "decode" and (in_forward or r.prefilled < r.prompt_len):
        return "has prompt left to prefill (extend or finish it first)"
    return None


def _check_new(reqs: dict, rid) -> None:
    """A new request may not take the name of one still running."""
    r = reqs.get(rid)
    if r is not None and r.admitted and not r.finished:
        raise InputError(f"rid: request {rid!r} is already running (finish it first)")


def check_config(cfg: dict, model: str) -> int:
    """Refuse a merged config the model's pools cannot be built from; returns the chunk size the scheduler uses
    (SGLang turns chunking off for a size <= 0, ``managers/scheduler.py:1372-1373``)."""
    for key in HOST_CONFIG_KEYS[model]:
        if key not in cfg:
            raise InputError(f"{key}: required field missing (no config call so far set it)")
    chunk, page = cfg["chunked_prefill_size"], cfg["page_size"]
    if 0 < chunk < page:
        raise InputError(f"chunked_prefill_size: {chunk} is below one page ({page}): SGLang rounds a chunk down to "
                         "whole pages and admits no prompt longer than it (schedule_policy.py:1664-1672)")  # fmt: skip
    return chunk if chunk > 0 else MAX_COUNT


@dataclass
class PrefillAdder:
    """The open batch, as SGLang's ``PrefillAdder`` builds one per scheduler iteration
    (``managers/schedule_policy.py:607-661``): the requests it took (``can_run_list``), the chunk tokens left
    (``rem_chunk_tokens``), whether it takes no more (``budget_state``, ``:874``) and, for V4, the SWA tokens it
    reserved."""

    page: int
    rem_chunk_tokens: int
    can_run_list: list = field(default_factory=list)
    stop: bool = False
    swa_reserved: int = 0

    def reserved(self) -> int:
        """What the budget sets aside for the requests taken: each one's first chunk in pages and a page, and its
        output in full when the chunk ends its prompt (``prefill_budget.py:156-167``, ``schedule_policy.py:672-680``)."""
        return sum(chunk_reservation(r.extend_end - r.prefix_at_admit, r.extend_end >= r.prompt_len, r.output_len,
                                     self.page) for r in self.can_run_list)  # fmt: skip

    def add(self, r, limit: int) -> int:
        """Take admitted ``r`` with its first chunk, at most ``limit`` tokens, a prompt longer than that chunked at
        a page (``schedule_policy.py:1660-1672``); returns the chunk's end."""
        prefix = r.prefix_at_admit = r.prefilled
        end = r.extend_end = chunk_end(r.prompt_len, prefix, limit, self.page)
        self.rem_chunk_tokens -= end - prefix
        self.can_run_list.append(r)
        return end


class HostScheduler(CallDriver):
    """Host-tier calls on one cache, rebuilt by each ``config`` call. A subclass supplies the cache's side:
    ``_build`` (the cache, its event log, the pool sizes), ``_evicted``, ``_usage``, ``_new_backups``, ``_admit``,
    ``_chunk_room``, ``_extend``, ``_decode``, ``_checkpoint``, ``_drop``, ``_match_fields`` and the ops that ask
    the cache alone (``match``, ``evict``, ``evict_host``, ``state``)."""

    kind = "host-tier"
    call_fields = HOST_CALL_FIELDS
    window: ClassVar[bool] = False  # the cache has SWA pools (the answers' window fields)

    def __init__(self) -> None:
        self.cfg: dict = {}
        self.c = None

    # ----- the call frame ---------------------------------------------------------------------------
    def _apply(self, handler, call: dict) -> dict:
        op = call["op"]
        if op != "config" and self.c is None:
            raise InputError("op: a host-tier stream starts with a config call")
        if self.c is not None:
            self.events.clear()
            self.c.write_back_copies.clear()  # no clock: a write_back copy is waited for at once
            before = self._evicted()
        if op not in _KEEP_BATCH and not (op == "extend" and call.get("rid") in self.forward):
            self._close_batch()
        try:
            res = handler(call)
        except MemoryError as e:  # the request cannot go on: released uncached, as the answers' error/aborted
            res = {"error": str(e), "aborted": True}
            self._abort(call.get("rid") or call.get("id", "?"))
        if op in _EVICTING and "evicted_full" not in res:
            res.update({k: v - before[k] for k, v in self._evicted().items()})
        return res

    def _state(self) -> dict:
        q = self.copies
        return {"events": list(self.events), **self._usage(), "pending_writes": len(self.c.pending),
                "write_acks": len(q.ack_write_queue), "pending_loads": q.pending_loads,
                "load_acks": len(q.ack_load_queue), "running": len(self.running)}  # fmt: skip

    @handles("config")
    def _op_config(self, call: dict) -> dict:
        cfg = self.cfg
        cfg.update((k, v) for k, v in call.items() if k not in ("op", "id"))
        self.chunk = check_config(cfg, "v4" if self.window else "plain")
        self.page = cfg["page_size"]
        self.c, self.events, pools = self._build(cfg)
        if cfg.get("write_through_threshold") is not None:
            self.c.threshold = cfg["write_through_threshold"]
        self._reset()
        out = dict(cfg)
        out["write_through_threshold"] = self.c.threshold if self.c.threshold is not None else 2
        out.update(pools)
        return {"config": out}

    def _reset(self) -> None:
        self.reqs: dict = {}
        self.running: list = []  # admitted, not finished
        self.batch: PrefillAdder | None = None  # the open batch
        self.forward: set[str] = set()  # batch members whose forward has not run yet
        self.released: dict = {}  # rid -> the request a finish call released: SGLang releases a request once
        self.copies = HostCopies()

    # ----- scheduler iterations ---------------------------------------------------------------------
    def _poll(self) -> None:
        """``check_hicache_events``: submit queued backups, reap completed write and load acks in order."""
        self.copies.start_writing(self._new_backups())
        self.copies.reap(self.c.ack, self.c.load_done)

    def _start_iteration(self) -> None:
        self._poll()
        for r in self.running:
            if r.pending_checkpoint:
                r.pending_checkpoint = False
                self._checkpoint(r, r.prefilled)

    def _close_batch(self) -> None:
        """The open batch closes: its queued loads start as one copy."""
        if self.batch is None:
            return
        self.batch = None
        tokens = self.copies.start_loading()
        if tokens is not None:
            self.events.append({"load_start": tokens})

    def _end_of_batch_result(self) -> None:
        """After the batch's result: the backups it queued go out as one merged copy."""
        if self.cfg["load_policy"] == "forward":
            self.copies.complete_loads()
        self.copies.start_writing(self._new_backups())

    def _open_batch(self) -> None:
        if self.batch is None or self.batch.stop:
            self._close_batch()
            self._start_iteration()
            self.batch = PrefillAdder(self.page, self.chunk)

    # ----- admission --------------------------------------------------------------------------------
    def _reserved(self) -> int:
        """What the budget sets aside: every running request's remaining output (``prefill_budget.py:156-167``),
        and what the open batch took."""
        taken = [] if self.batch is None else self.batch.can_run_list
        out = sum(output_left(r) for r in self.running if r.prefilled >= r.prompt_len and r not in taken)
        return out + (0 if self.batch is None else self.batch.reserved())

    def _join_batch(self, r, limit: int) -> int:
        """Admitted ``r`` joins the open batch (:meth:`PrefillAdder.add`); returns its first chunk's end."""
        end = self.batch.add(r, limit)
        self.running.append(r)
        self.forward.add(r.rid)
        return end

    # ----- forward ----------------------------------------------------------------------------------
    def _run_chunk(self, r) -> tuple[int, int]:
        start, end = r.prefilled, r.extend_end
        self._extend(r, end)
        r.pending_checkpoint = end < r.prompt_len  # a middle chunk is inserted at the start of the next iteration
        self.forward.discard(r.rid)
        self._after(r)
        return start, end

    def _decode_step(self, r) -> None:
        self._start_iteration()
        self._decode(r)
        self._after(r)
        self._end_of_batch_result()

    def _next_chunk_iteration(self, r) -> None:
        """A later chunk: its own iteration, ``min(rest, room)`` rounded down to a page unless it is the last."""
        self._start_iteration()
        end = r.prefilled + min(r.prompt_len - r.prefilled, self._chunk_room())
        if end < r.prompt_len:
            end = end // self.page * self.page
        if end <= r.prefilled < r.prompt_len:  # no progress: SGLang parks the chunk until memory frees; no call here does
            raise MemoryError(f"a later chunk got no tokens from the prefill budget ({r.prefilled} of {r.prompt_len} "
                              "prompt tokens prefilled)")  # fmt: skip
        r.extend_end = end
        self._run_chunk(r)
        self._end_of_batch_result()

    def _finish(self, r) -> None:
        while not r.finished and r.prefilled < r.prompt_len:
            if r.rid in self.forward:
                self._run_chunk(r)
                self._end_of_batch_result()
            else:
                self._next_chunk_iteration(r)
        while not r.finished:
            self._decode_step(r)

    def _after(self, r) -> None:
        if r.finished and r in self.running:
            self.running.remove(r)

    def _abort(self, rid: str) -> None:
        """Release a request that cannot go on without caching what it computed."""
        r = self.reqs.get(rid)
        if r is None or r.finished or r not in self.running:
            return
        self._drop(r)
        self.running.remove(r)
        self.forward.discard(rid)

    # ----- answers ----------------------------------------------------------------------------------
    def _admission_fields(self, r) -> dict:
        out = {**self._match_fields(r), "admitted": r.admitted}
        if r.admitted:
            out["loaded"] = r.loaded
        else:
            out["refused"] = r.refused
        return out

    def _finished_fields(self, r) -> dict:
        return {**self._admission_fields(r), **cached_fields(r, window=self.window)}

    def _progress(self, r, chunk: tuple | None = None) -> dict:
        out = progress_fields(r, chunk)
        return {**out, **self._finished_fields(r)} if r.finished else out

    # ----- ops --------------------------------------------------------------------------------------
    @handles("request")
    def _op_request(self, call: dict) -> dict:
        _check_new(self.reqs, call.get("id", "?"))
        self._open_batch()
        r = self._admit(call, call.get("id", "?"))
        if not r.admitted:
            return self._admission_fields(r)
        self._close_batch()
        self._run_chunk(r)  # even an empty prompt runs its (empty) first chunk
        self._end_of_batch_result()
        self._finish(r)
        return self._finished_fields(r)

    @handles("admit")
    def _op_admit(self, call: dict) -> dict:
        _check_new(self.reqs, call["rid"])
        self._open_batch()
        return self._admission_fields(self._admit(call, call["rid"]))

    @handles("extend")
    @_on_admitted
    def _op_extend(self, r, call: dict) -> dict:
        if r.rid in self.forward:
            self._close_batch()
            chunk = self._run_chunk(r)
            if not self.forward & {x.rid for x in self.running}:
                self._end_of_batch_result()
        else:
            self._next_chunk_iteration(r)
            chunk = r.chunks[-1]
        return self._progress(r, chunk)

    @handles("decode")
    @_on_admitted
    def _op_decode(self, r, call: dict) -> dict:
        for _ in range(call.get("n", 1)):
            if r.finished:
                break
            self._decode_step(r)
        return self._progress(r)

    @handles("finish")
    @_on_admitted
    def _op_finish(self, r, call: dict) -> dict:
        if self.released.get(r.rid) is r:
            raise InputError(f"rid: request {r.rid!r} was finished by an earlier finish call (a request is released "
                             "once)")  # fmt: skip
        self.released[r.rid] = r
        self._finish(r)
        return self._finished_fields(r)

    @handles("ack")
    def _op_ack(self, call: dict) -> dict:
        acked = self.copies.complete_writes(call.get("n"))
        self._poll()
        return {"acked": acked}

    @handles("complete_loads")
    def _op_complete_loads(self, call: dict) -> dict:
        completed = self.copies.complete_loads()
        self._poll()
        return {"completed": completed}

    @handles("step")
    def _op_step(self, call: dict) -> dict:
        self._poll()
        return {}

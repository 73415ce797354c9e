"""Drive the plain model's HiCache (:class:`sim.cache.hicache.HiCache`, the cache the engine and the replay use) with
the host-tier call format of ``shared/vectors/hicache`` and answer each call with the fields SGLang 0.5.23's
recorded answers use: matches, admission verdicts, load-backs, prefill chunks, pool usage, the write-through
window, and the host-tier decisions (``events``) in order.

The calls map onto SGLang's scheduler as that README describes (paths relative to ``sglang/srt/``):

- every scheduler iteration starts with ``check_hicache_events`` (``managers/scheduler.py:3889-3898``): queued
  backups are submitted, then completed write acks and load acks are reaped in FIFO order, each stopping at the
  first copy still in flight (``mem_cache/unified_radix_cache.py:3651-3707``);
- admission (``managers/schedule_policy.py:1395-1590``): the match with the key capped at ``len - 1``, the
  budget check with the device prefix locked (``mem_cache/prefill_budget.py:91-167``; a fixed-length request's
  output counts in full, ``schedule_policy.py:672-680``), the load-back of a host hit at or above
  ``load_back_threshold`` (``unified_radix_cache.py:1820-1937``), the first chunk (``schedule_policy.py:1660-1672``);
- the batch's queued loads start as one copy when the batch closes (``managers/scheduler.py:4351-4355``); each
  chunk and decode step allocates, evicting device leaves when short (``mem_cache/allocation.py:175-258``, ``:625``);
- after each batch's result, the backups its inserts queued are submitted as one merged copy
  (``managers/scheduler.py:5106``; ``managers/cache_controller.py:885-920``).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from sim.base.errors import InputError
from sim.cache.hicache import BackupOp, HiCache
from sim.cache.radix import Node, node_ref
from sim.model.pools import HitPolicy, ModelSpec, Pool
from sim.offline.calls import expand_tokens, host_runs

__all__ = ["PlainHostDriver", "host_pool_tokens"]

CLIP_MAX_NEW_TOKENS = 4096  # managers/schedule_policy.py


def host_pool_tokens(device_tokens: int, ratio: float, page: int) -> int:
    """``int(device tokens x hicache_ratio)`` rounded down to pages, plus one page
    (``mem_cache/pool_host/base.py:220-228``)."""
    return int(device_tokens * ratio) // page * page + page


@dataclass
class _Req:
    """One request's KV record (SGLang's ``Req.kv``), in tokens."""

    rid: str
    keys: list
    prompt_len: int
    output_len: int
    lookup: object
    matched: int
    host_hit: int
    best: Node | None
    lock: Node
    protected: int = 0  # tokens the tree owns (cache_protected_len)
    inserted: int = 0  # pages inserted so far (cache_inserted_len)
    allocated: int = 0
    prefilled: int = 0
    extend_end: int = 0
    emitted: int = 0
    decode_steps: int = 0
    loaded: int = 0
    chunks: list = field(default_factory=list)
    finished: bool = False
    admitted: bool = True
    refused: str | None = None
    pending_checkpoint: bool = False  # a middle chunk inserted at the start of the next iteration
    prefix_at_admit: int = 0
    evicted: int = 0

    @property
    def kv_len(self) -> int:
        return self.prefilled + max(0, self.emitted - 1)


@dataclass
class _Load:
    node: Node
    tokens: int


def _plain_model(page: int) -> ModelSpec:
    return ModelSpec(name="plain", page_size=page, pools=(Pool("kv", 1, "kv", HitPolicy.ALL_PAGES),))


class PlainHostDriver:
    """Applies host-tier calls to one :class:`HiCache`, rebuilt by each ``config`` call."""

    def __init__(self) -> None:
        self.cfg: dict = {}
        self.c: HiCache | None = None

    # ----- config -------------------------------------------------------------------------------
    def _op_config(self, call: dict) -> dict:
        for k, v in call.items():
            if k not in ("op", "id"):
                self.cfg[k] = v
        cfg = self.cfg
        page = cfg["page_size"]
        self.page = page
        self.host_tokens = host_pool_tokens(cfg["full_pages"] * page, cfg["hicache_ratio"], page)
        self.c = HiCache(_plain_model(page), l1_pages=cfg["full_pages"], l2_pages=self.host_tokens // page,
                         policy=cfg["write_policy"], load_back_threshold=cfg["load_back_threshold"],
                         page_tokens=page)  # fmt: skip
        if cfg.get("write_through_threshold") is not None:
            self.c.threshold = cfg["write_through_threshold"]
        self.c.events = self.events = []
        self._reset()
        out = dict(cfg)
        out["write_through_threshold"] = self.c.threshold if self.c.threshold is not None else 2
        out["host_pool_tokens"] = self.host_tokens
        return {"config": out}

    def _reset(self) -> None:
        self.reqs: dict[str, _Req] = {}
        self.running: list[_Req] = []  # admitted, not finished
        self.batch: list[_Req] | None = None  # the open batch's admissions
        self.batch_verdict_stop = False
        self.forward: set[str] = set()  # batch members whose forward has not run yet
        self.queued_writes: list[BackupOp] = []
        self.write_copies: deque[list] = deque()  # [ops, done]
        self.queued_loads: list[_Load] = []
        self.load_copies: deque[list] = deque()  # [loads, done]
        self.chunk_left = self.cfg["chunked_prefill_size"]
        self.swa_offset = 0

    # ----- the cache's side (V4's driver answers these from its cache) -----------------------------------
    def _evicted(self) -> tuple[int, int]:
        return self.c.stats.evicted_tokens, 0

    def _usage(self) -> dict:
        c = self.c
        return {"full_used": c.l1.kv_used * self.page, "full_evictable": c.tree.evictable_tokens,
                "full_protected": c.tree.protected_tokens, "host_used": c.l2.kv_used * self.page}  # fmt: skip

    def _ack_op(self, op) -> None:
        self.c.ack(op)

    def _load_done(self, load) -> None:
        self.c.load_done(load.node)

    def _new_backups(self) -> list:
        return []

    def _pending_writes(self) -> int:
        return len(self.c.pending)

    # ----- the call loop --------------------------------------------------------------------------
    def __call__(self, call: dict) -> dict:
        op = call.get("op")
        handler = getattr(self, f"_op_{op}", None)
        if handler is None:
            raise InputError(f"op: unknown host-tier op {op!r}")
        if op != "config" and self.c is None:
            raise InputError("op: a host-tier stream starts with a config call")
        if self.c is not None:
            self.events.clear()
            self.c.write_back_copies.clear()  # no clock: a write_back copy is waited for at once
            ev0 = self._evicted()
        if op not in ("admit", "match", "state", "evict", "evict_host", "config") and not (
                op == "extend" and call.get("rid") in self.forward):
            self._close_batch()
        out = {"op": op, **({"id": call["id"]} if "id" in call else {}), **({"rid": call["rid"]} if "rid" in call else {})}
        try:
            res = handler(call)
        except MemoryError as e:  # the request cannot go on: released uncached, as the answers' error/aborted
            res = {"error": str(e), "aborted": True}
            self._abort(call.get("rid") or call.get("id", "?"))
        if op in ("request", "admit", "extend", "decode", "finish", "evict") and "evicted_full" not in res:
            ev1 = self._evicted()
            res["evicted_full"] = ev1[0] - ev0[0]
            if self.cfg.get("model") == "v4":
                res["evicted_swa"] = ev1[1] - ev0[1]
        out.update(res)
        out["events"] = list(self.events)
        out.update(self._usage())
        out.update(pending_writes=self._pending_writes(), write_acks=len(self.write_copies),
                   pending_loads=sum(len(x[0]) for x in self.load_copies) + len(self.queued_loads),
                   load_acks=len(self.load_copies), running=len(self.running))  # fmt: skip
        return out

    # ----- scheduler iterations -------------------------------------------------------------------
    def _poll(self) -> None:
        """``check_hicache_events``: submit queued backups, reap completed write and load acks in order."""
        self._flush_writes()
        while self.write_copies and self.write_copies[0][1]:
            ops, _ = self.write_copies.popleft()
            for op in ops:
                self._ack_op(op)
        while self.load_copies and self.load_copies[0][1]:
            loads, _ = self.load_copies.popleft()
            for ld in loads:
                self._load_done(ld)

    def _flush_writes(self) -> None:
        self.queued_writes.extend(self._new_backups())
        if self.queued_writes:
            self.write_copies.append([self.queued_writes, False])
            self.queued_writes = []

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
        if self.queued_loads:
            self.events.append({"load_start": sum(ld.tokens for ld in self.queued_loads)})
            self.load_copies.append([self.queued_loads, False])
            self.queued_loads = []

    def _end_of_batch_result(self) -> None:
        """After the batch's result: the backups it queued go out as one merged copy."""
        if self.cfg["load_policy"] == "forward":
            for x in self.load_copies:
                x[1] = True
        self._flush_writes()

    # ----- admission --------------------------------------------------------------------------------
    def _reserved(self) -> int:
        """What the budget sets aside: every running request's remaining output, and each request admitted
        earlier in this batch (``prefill_budget.py:156-167``, ``schedule_policy.py:672-680``)."""
        p, out = self.page, 0
        for r in self.running:
            if r.prefilled >= r.prompt_len:
                out += min(r.output_len - r.emitted, CLIP_MAX_NEW_TOKENS)
        for r in self.batch or []:
            ext = r.extend_end - r.prefix_at_admit
            out += -(-ext // p) * p + p + (0 if r.extend_end < r.prompt_len else min(r.output_len, CLIP_MAX_NEW_TOKENS))
        return out

    def _admit(self, call: dict, rid: str) -> _Req:
        c, p = self.c, self.page
        prompt, output = expand_tokens(call["tokens"]), expand_tokens(call.get("output", []))
        keys = c.tree.page_keys(prompt + output)
        lk = c.lookup(keys, len(prompt))  # locks the device prefix and host-locks the best match
        matched = lk.device_pages * p
        host_hit = lk.host_pages * p
        r = _Req(rid, keys, len(prompt), len(output), lk, matched, host_hit,
                 lk.best_node if host_hit else None, lk.device_node)  # fmt: skip
        r.protected = r.allocated = r.prefilled = matched
        self.reqs[rid] = r
        # budget check, device prefix locked (by the lookup)
        total = len(prompt) - matched + min(len(output), CLIP_MAX_NEW_TOKENS) + p
        remaining = (c.l1.kv_cap * p - c.l1.kv_used * p) + c.tree.evictable_tokens - self._reserved()
        rem_chunk = self.chunk_left
        if not total < remaining:
            c.abandon(lk)
            r.admitted, r.refused = False, "no_token"
            self.batch_verdict_stop = True  # NO_TOKEN: the adder takes no more requests this round
            return r
        if host_hit:
            loaded = c.load_back(lk)
            if loaded:
                r.loaded = host_hit
                self.queued_loads.append(_Load(lk.best_node, loaded * p))
                r.protected = r.allocated = r.prefilled = matched + host_hit
                r.lock = lk.best_node
        prefix = r.prefilled
        r.prefix_at_admit = prefix
        ext = len(prompt) - prefix
        limit = min(rem_chunk, int(remaining))
        # a prompt longer than the chunk budget is chunked at a page (schedule_policy.py:1660-1672)
        end = (prefix + limit // p * p) // p * p if -(-ext // p) * p > limit else len(prompt)
        r.extend_end = end
        # the request's lock: its last node (the lookup's lock on the device prefix becomes it)
        c.tree.lock(r.lock)
        c.abandon(lk)
        self.chunk_left -= end - prefix
        self.running.append(r)
        self.batch.append(r)
        self.forward.add(rid)
        taken = -(-(end - prefix) // p) * p + p + (0 if end < len(prompt) else min(len(output), CLIP_MAX_NEW_TOKENS))
        self.batch_verdict_stop = self.chunk_left <= 0 or remaining - taken <= 0  # the adder's budget_state()
        return r

    def _open_batch(self) -> None:
        if self.batch is None or self.batch_verdict_stop:
            self._close_batch()
            self._start_iteration()
            self.batch = []
            self.chunk_left = self.cfg["chunked_prefill_size"]
            self.batch_verdict_stop = False

    # ----- forward ----------------------------------------------------------------------------------
    def _alloc(self, r: _Req, end: int, demand: int) -> None:
        """Allocate rows up to ``end``, evicting device leaves until ``demand`` tokens are free."""
        c, p = self.c, self.page
        c.ensure_device(-(-demand // p))
        new = -(-end // p) - -(-r.allocated // p)
        if new > 0 and not c.l1.alloc(new):
            raise MemoryError(f"no device room for {new} pages even after eviction")
        r.allocated = end

    def _run_chunk(self, r: _Req) -> tuple[int, int]:
        start, end = r.prefilled, r.extend_end
        p = self.page
        self._alloc(r, end, (end - start) + p if p > 1 else end - start)
        r.prefilled = end
        r.chunks.append([start, end])
        self.forward.discard(r.rid)
        if end < r.prompt_len:
            r.pending_checkpoint = True
        else:
            r.emitted = 1 if r.output_len else 0
            if r.output_len <= 1:
                self._release(r)
            else:
                self._checkpoint(r, end)
        return start, end

    def _decode_step(self, r: _Req) -> None:
        self._start_iteration()
        seqlen = r.prompt_len + r.emitted
        self._alloc(r, seqlen, self.page)
        r.decode_steps += 1
        r.emitted += 1
        if r.emitted >= r.output_len:
            self._release(r)
        self._end_of_batch_result()

    def _next_chunk_iteration(self, r: _Req) -> None:
        """A later chunk: its own iteration; ``min(rest, C)`` capped by the free token budget."""
        self._start_iteration()
        c, p = self.c, self.page
        rest = r.prompt_len - r.prefilled
        C = self.cfg["chunked_prefill_size"]
        remaining = (c.l1.kv_cap - c.l1.kv_used) * p + c.tree.evictable_tokens - self._reserved()
        avail = min(C, int(remaining)) if remaining > 0 else C
        n = min(rest, avail)
        end = r.prefilled + n
        if end < r.prompt_len:
            end = end // p * p
        r.extend_end = end
        self._run_chunk(r)
        self._end_of_batch_result()

    def _checkpoint(self, r: _Req, up_to: int) -> None:
        c, p = self.c, self.page
        pages = up_to // p
        keys = r.keys[:pages]
        if not keys:
            return
        before = len(c.pending)
        res = c.insert_request(keys, r.inserted, r.protected // p)
        r.inserted = max(r.inserted, pages)
        c.tree.unlock(r.lock)
        r.lock = res.path[-1]
        c.tree.lock(r.lock)
        r.protected = pages * p
        self.queued_writes.extend(list(c.pending.values())[before:])

    def _abort(self, rid: str) -> None:
        """Release a request that cannot go on without caching what it computed."""
        r = self.reqs.get(rid)
        if r is None or r.finished or r not in self.running:
            return
        c, p = self.c, self.page
        r.finished = True
        c.tree.unlock(r.lock)
        c.l1.kv_used -= -(-r.allocated // p) - r.protected // p
        r.allocated = r.protected
        self.running.remove(r)
        self.forward.discard(rid)

    def _release(self, r: _Req) -> None:
        c, p = self.c, self.page
        r.finished = True
        self._checkpoint(r, r.kv_len)
        c.tree.unlock(r.lock)
        held = -(-r.allocated // p) - r.protected // p
        c.l1.kv_used -= held
        r.allocated = r.protected
        self.running.remove(r)

    # ----- ops --------------------------------------------------------------------------------------
    def _match_fields(self, r: _Req) -> dict:
        best = node_ref(r.best, self.page) if r.best is not None else None
        return {"matched": r.matched, "host_hit": r.host_hit, "best_match": best}

    def _admission_fields(self, r: _Req) -> dict:
        out = {**self._match_fields(r), "admitted": r.admitted}
        if r.admitted:
            out["loaded"] = r.loaded
        else:
            out["refused"] = r.refused
        return out

    def _finished_fields(self, r: _Req) -> dict:
        return {**self._admission_fields(r), "chunks": [list(x) for x in r.chunks], "cached_len": r.protected}

    def _op_request(self, call: dict) -> dict:
        self._open_batch()
        r = self._admit(call, call.get("id", "?"))
        if not r.admitted:
            return self._admission_fields(r)
        self._close_batch()
        self._run_chunk(r)
        self._end_of_batch_result()
        self._finish(r)
        return self._finished_fields(r)

    def _finish(self, r: _Req) -> None:
        while not r.finished and r.prefilled < r.prompt_len:
            if r.rid in self.forward:
                self._run_chunk(r)
                self._end_of_batch_result()
            else:
                self._next_chunk_iteration(r)
        while not r.finished:
            self._decode_step(r)

    def _op_admit(self, call: dict) -> dict:
        self._open_batch()
        r = self._admit(call, call["rid"])
        return self._admission_fields(r)

    def _running_req(self, call: dict) -> _Req:
        try:
            return self.reqs[call["rid"]]
        except KeyError:
            raise InputError(f"rid: no request {call.get('rid')!r}") from None

    def _op_extend(self, call: dict) -> dict:
        r = self._running_req(call)
        if not r.admitted:
            return {"skipped": "not admitted"}
        if r.rid in self.forward:
            self._close_batch()
            chunk = self._run_chunk(r)
            if not self.forward & {x.rid for x in self.running}:
                self._end_of_batch_result()
        else:
            self._next_chunk_iteration(r)
            chunk = r.chunks[-1]
        out = {"chunk": list(chunk), "prefilled": r.prefilled >= r.prompt_len, "finished": r.finished}
        return {**out, **self._finished_fields(r)} if r.finished else out

    def _op_decode(self, call: dict) -> dict:
        r = self._running_req(call)
        if not r.admitted:
            return {"skipped": "not admitted"}
        for _ in range(call.get("n", 1)):
            if r.finished:
                break
            self._decode_step(r)
        out = {"steps": r.run.decode_steps if hasattr(r, "run") else r.decode_steps, "finished": r.finished}
        return {**out, **self._finished_fields(r)} if r.finished else out

    def _op_finish(self, call: dict) -> dict:
        r = self._running_req(call)
        if not r.admitted:
            return {"skipped": "not admitted"}
        self._finish(r)
        return self._finished_fields(r)

    def _op_match(self, call: dict) -> dict:
        c, p = self.c, self.page
        tokens = expand_tokens(call["tokens"])
        lk = c.lookup(c.tree.page_keys(tokens), len(tokens))
        c.abandon(lk)
        host = lk.host_pages * p
        return {"matched": lk.device_pages * p, "host_hit": host,
                "best_match": node_ref(lk.best_node, p) if host else None}  # fmt: skip

    def _op_ack(self, call: dict) -> dict:
        n = call.get("n")
        todo = [x for x in self.write_copies if not x[1]]
        if n is not None:
            todo = todo[:n]
        for x in todo:
            x[1] = True
        self._poll()
        return {"acked": len(todo)}

    def _op_complete_loads(self, call: dict) -> dict:
        todo = [x for x in self.load_copies if not x[1]]
        for x in todo:
            x[1] = True
        self._poll()
        return {"completed": len(todo)}

    def _op_step(self, call: dict) -> dict:
        self._poll()
        return {}

    def _op_evict_host(self, call: dict) -> dict:
        return {"evicted_host": self.c.evict_host(call["n"]) * self.page}

    def _op_evict(self, call: dict) -> dict:
        c = self.c
        before = c.stats.evicted_tokens
        c.evict_tokens(call["full"])
        return {"evicted_full": c.stats.evicted_tokens - before}

    def _op_state(self, call: dict) -> dict:
        tree, p = self.c.tree, self.page
        paths = []
        anchors = {id(ld.node) for loads, _ in self.load_copies for ld in loads} | {id(ld.node) for ld in self.queued_loads}

        def walk(node: Node, toks: list, nodes: list, pos: int) -> None:
            if not node.children and node is not tree.root:
                paths.append((toks, {"len": pos, "tokens": host_runs(toks), "nodes": nodes}))
                return
            for child in node.children.values():
                t = [x for k in child.key for x in ((k,) if p == 1 else k)]
                flag = ("B" if child.host else "D") if child.device else ("H" if child.host else "-")
                if child.pending is not None:
                    flag += "w"
                if id(child) in anchors:
                    flag += "l"
                end = pos + len(t)
                walk(child, toks + t, nodes + [[pos, end, flag]], end)

        walk(tree.root, [], [], 0)
        paths.sort(key=lambda x: x[0])
        return {"num_nodes": tree.num_nodes - 1, "paths": [x for _, x in paths]}

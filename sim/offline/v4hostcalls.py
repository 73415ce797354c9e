"""Drive DeepSeek V4's cache (:class:`sim.cache.v4.swacache.SWACache`, the one the engine and ``replay_v4`` use) with the
host-tier call format of ``shared/vectors/hicache``: the scheduler iterations of :mod:`sim.offline.hostcalls`, over the
FULL + SWA tree with its two host pools (paths relative to ``sglang/srt/``):

- the KV host pool holds ``int(device pages x hicache_ratio)`` pages and the SWA host pool
  ``int(SWA device pages x hicache_ratio)`` pages, with no padding page
  (``mem_cache/hybrid_cache/hybrid_pool_assembler.py:647-676``);
- admission adds the SWA estimate to the budget check: the request's sliding-window footprint must fit the
  SWA pool's free plus evictable tokens after what the batch already reserved (``mem_cache/prefill_budget.py:27-59,
  176-318``).
"""

from __future__ import annotations

from sim.cache.v4.swacache import Running, SWACache
from sim.offline.calls import expand_tokens, host_runs
from sim.offline.hostcalls import CLIP_MAX_NEW_TOKENS, PlainHostDriver

__all__ = ["V4HostDriver", "swa_estimate"]


def swa_estimate(extend: int, max_new: int, *, window: int, page: int, limit: int | None = None,
                 host_hit: int = 0) -> int:  # fmt: skip
    """SGLang's peak SWA reservation of one request (``estimate_swa_kv_tokens``, ``prefill_budget.py:27-59``)."""
    allocated = extend if limit is None else min(extend, limit)
    reserved = max(allocated - window, 0) + min(extend + max_new, window) + page
    if host_hit > 0:
        reserved += -(-host_hit // page) * page
    return reserved


class V4HostDriver(PlainHostDriver):
    """Host-tier calls on one :class:`SWACache`, rebuilt by each ``config`` call."""

    def _op_config(self, call: dict) -> dict:
        for k, v in call.items():
            if k not in ("op", "id"):
                self.cfg[k] = v
        cfg = self.cfg
        page = self.page = cfg["page_size"]
        ratio = cfg["hicache_ratio"]
        host_pages, swa_host_pages = int(cfg["full_pages"] * ratio), int(cfg["swa_pages"] * ratio)
        self.c = SWACache(page=page, window=cfg["window"], full_pages=cfg["full_pages"], swa_pages=cfg["swa_pages"],
                          chunked_prefill_size=cfg["chunked_prefill_size"], host_full_pages=host_pages,
                          host_swa_pages=swa_host_pages, write_policy=cfg["write_policy"],
                          load_back_threshold=cfg["load_back_threshold"])  # fmt: skip
        if cfg.get("write_through_threshold") is not None:
            self.c.threshold = cfg["write_through_threshold"]
        self.c.hold_loads = True
        self.c.tree.events = self.events = []
        self._reset()
        out = dict(cfg)
        out["write_through_threshold"] = self.c.threshold if self.c.threshold is not None else 2
        out.update(host_pool_tokens=host_pages * page, swa_host_pool_tokens=swa_host_pages * page)
        return {"config": out}

    # ----- the cache's usage -------------------------------------------------------------------------
    def _evicted(self) -> tuple[int, int]:
        s = self.c.stats
        return s["evicted_tokens"], s["swa_evicted_tokens"]

    def _usage(self) -> dict:
        c, t = self.c, self.c.tree
        return {"full_used": c.full_used, "full_evictable": t.full_evictable, "full_protected": t.full_protected,
                "swa_used": c.swa_used, "swa_evictable": t.swa.evictable, "swa_protected": t.swa.protected,
                "host_used": t.host_tokens, "swa_host_used": t.host_swa_tokens}  # fmt: skip

    def _ack_op(self, op) -> None:
        self.c.ack(op)

    def _load_done(self, load) -> None:
        self.c.load_done(load.load)

    def _new_backups(self) -> list:
        return self.c.take_new_backups()

    def _pending_writes(self) -> int:
        return len(self.c.pending)

    def _load_anchor(self, load):
        return load[0]

    # ----- admission ---------------------------------------------------------------------------------
    def _admit(self, call: dict, rid: str):
        c, p, w = self.c, self.page, self.cfg["window"]
        prompt, output = expand_tokens(call["tokens"]), expand_tokens(call.get("output", []))
        keys = c.tree.page_keys(prompt + output)
        m = c.lookup(keys, len(prompt))
        n_out = min(len(output), CLIP_MAX_NEW_TOKENS)
        host_hit = m.best_len - m.device if c.hicache else 0
        uuid = c.tree.lock(m.node)  # the budget check runs with the device prefix locked
        total = len(prompt) - m.device + n_out + p
        remaining = c.full_free() + c.tree.full_evictable - self._reserved()
        ext = len(prompt) - m.device - host_hit
        swa_need = swa_estimate(-(-ext // p) * p, n_out, window=w, page=p, limit=self.chunk_left,
                                host_hit=m.swa_host)  # fmt: skip
        swa_remaining = c.swa_free() + c.tree.swa.evictable - self.swa_offset
        c.tree.unlock(m.node, uuid)
        if not (total < remaining and swa_need < swa_remaining):
            rec = _V4Req(rid, None, m, len(prompt), len(output))
            rec.admitted, rec.refused = False, "no_token"
            self.reqs[rid] = rec
            self.batch_verdict_stop = True  # NO_TOKEN: the adder takes no more requests this round
            return rec
        loads_before = len(c.loads)
        r = c.admit(keys, len(prompt), len(output), match=m)
        rec = _V4Req(rid, r, m, len(prompt), len(output))
        self.reqs[rid] = rec
        if len(c.loads) > loads_before:
            load = c.loads.pop()
            self.queued_loads.append(_Load(load))
        prefix = r.prefilled
        rec.prefix_at_admit = prefix
        ext = len(prompt) - prefix
        if -(-ext // p) * p > self.chunk_left:
            end = (prefix + self.chunk_left // p * p) // p * p
        else:
            end = len(prompt)
        rec.extend_end = end
        self.chunk_left -= end - prefix
        self.swa_offset += swa_estimate(-(-(end - prefix) // p) * p, 0 if end < len(prompt) else n_out, window=w,
                                        page=p, limit=self.cfg["chunked_prefill_size"])  # fmt: skip
        self.running.append(rec)
        self.batch.append(rec)
        self.forward.add(rid)
        self.batch_verdict_stop = self.chunk_left <= 0
        return rec

    def _open_batch(self) -> None:
        fresh = self.batch is None or self.batch_verdict_stop
        super()._open_batch()
        if fresh:
            self.swa_offset = 0

    def _reserved(self) -> int:
        p, out = self.page, 0
        for x in self.running:
            r = x.run
            if r.prefilled >= r.prompt_len and x not in (self.batch or []):
                out += min(r.output_len - r.emitted, CLIP_MAX_NEW_TOKENS)
        for x in self.batch or []:
            ext = x.extend_end - x.prefix_at_admit
            out += -(-ext // p) * p + p + (0 if x.extend_end < x.prompt_len else min(x.output_len, CLIP_MAX_NEW_TOKENS))
        return out

    # ----- forward -----------------------------------------------------------------------------------
    def _run_chunk(self, x):
        r = x.run
        start = r.prefilled
        self.c.extend(r, x.extend_end - start, defer=True)
        x.pending_checkpoint = x.extend_end < r.prompt_len
        self.forward.discard(x.rid)
        self._after(x)
        return start, x.extend_end

    def _abort(self, rid: str) -> None:
        x = self.reqs.get(rid)
        if x is None or x.run is None or x.run.finished or x not in self.running:
            return
        self.c.abort(x.run)
        x.run.finished = True
        self.running.remove(x)
        self.forward.discard(rid)

    def _after(self, x) -> None:
        if x.run.finished and x in self.running:
            self.running.remove(x)

    def _decode_step(self, x) -> None:
        self._start_iteration()
        self.c.decode(x.run)
        self._after(x)
        self._end_of_batch_result()

    def _next_chunk_iteration(self, x) -> None:
        self._start_iteration()
        c, p, r = self.c, self.page, x.run
        rest = r.prompt_len - r.prefilled
        C = self.cfg["chunked_prefill_size"]
        remaining = c.full_free() + c.tree.full_evictable - self._reserved()
        avail = min(C, int(remaining), int(c.swa_free() + c.tree.swa.evictable) - p)
        n = min(rest, max(avail, 0))
        end = r.prefilled + n
        if end < r.prompt_len:
            end = end // p * p
        x.extend_end = end
        self._run_chunk(x)
        self._end_of_batch_result()

    def _start_iteration(self) -> None:
        self._poll()
        for x in self.running:
            if x.pending_checkpoint:
                x.pending_checkpoint = False
                self.c.checkpoint(x.run, x.run.prefilled)

    # ----- answers -----------------------------------------------------------------------------------
    def _match_fields(self, x) -> dict:
        m = x.match
        host = m.best_len - m.device
        return {"matched": m.device, "full_hit": m.full_hit, "swa_branching": m.branching, "host_hit": m.host,
                "swa_host_hit": m.swa_host,
                "best_match": self.c.tree.ref(m.best) if (host or m.swa_host) else None}  # fmt: skip

    def _admission_fields(self, x) -> dict:
        out = {**self._match_fields(x), "admitted": x.admitted}
        if x.admitted:
            r = x.run
            out["loaded"] = r.host_hit
        else:
            out["refused"] = x.refused
        return out

    def _finished_fields(self, x) -> dict:
        r = x.run
        return {**self._admission_fields(x), "chunks": [list(c) for c in r.chunks], "cached_len": r.protected,
                "swa_evicted_at_finish": r.evicted}  # fmt: skip

    def _op_match(self, call: dict) -> dict:
        tokens = expand_tokens(call["tokens"])
        c = self.c
        m = c.lookup(c.tree.page_keys(tokens), len(tokens))
        return self._match_fields(_V4Req("", None, m, len(tokens), 0))

    def _op_evict_host(self, call: dict) -> dict:
        return {"evicted_host": self.c.tree.evict_host(call["n"])}

    def _op_evict(self, call: dict) -> dict:
        c = self.c
        f, s = c.tree.evict(call["full"], call.get("swa", 0), c.full_free, c.swa_free)
        return {"evicted_full": f, "evicted_swa": s}

    def _op_state(self, call: dict) -> dict:
        tree = self.c.tree
        anchors = {id(ld.node) for loads, _ in self.load_copies for ld in loads} | {id(ld.node) for ld in self.queued_loads}
        paths = []
        for path in tree.paths():
            tokens = [t for node in path for key in node.key for t in key]
            nodes, pos = [], 0
            for node in path:
                flag = ("B" if node.host else "D") if node.full else ("H" if node.host else "-")
                flag += "S" if node.swa else ("h" if node.host_swa else "T")
                if node.pending is not None:
                    flag += "w"
                if id(node) in anchors:
                    flag += "l"
                nodes.append([pos, pos + node.tokens, flag])
                pos += node.tokens
            paths.append((tokens, {"len": pos, "tokens": host_runs(tokens), "nodes": nodes}))
        paths.sort(key=lambda p: p[0])
        return {"num_nodes": tree.num_nodes, "paths": [p for _, p in paths]}


class _Load:
    """A queued or in-flight load-back: the cache's record and the tokens it copies."""

    def __init__(self, load: tuple) -> None:
        self.load = load
        self.node = load[0]
        self.tokens = load[2]


class _V4Req:
    """The driver's view of one request: its cache record and admission outcome."""

    def __init__(self, rid: str, run: Running | None, match, prompt_len: int, output_len: int) -> None:
        self.rid, self.run, self.match = rid, run, match
        self.prompt_len, self.output_len = prompt_len, output_len
        self.admitted, self.refused = True, None
        self.prefix_at_admit = self.extend_end = 0
        self.pending_checkpoint = False

    @property
    def finished(self) -> bool:
        return self.run is not None and self.run.finished

    @property
    def prefilled(self) -> int:
        return self.run.prefilled if self.run is not None else 0

    @property
    def chunks(self) -> list:
        return self.run.chunks if self.run is not None else []

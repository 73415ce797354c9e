"""Drive DeepSeek V4's cache (:class:`sim.cache.v4.swacache.SWACache`, the one the engine and ``replay_v4`` use) with the
host-tier call format of ``shared/vectors/hicache``: the scheduler iterations of :mod:`sim.offline.hostsched`, over the
FULL + SWA tree with its two host pools (paths relative to ``sglang/srt/``):

- the KV host pool holds ``int(device pages x hicache_ratio)`` pages and the SWA host pool
  ``int(SWA device pages x hicache_ratio)`` pages, with no padding page
  (``mem_cache/hybrid_cache/hybrid_pool_assembler.py:647-676``);
- admission adds the SWA estimate to the budget check: the request's sliding-window footprint must fit the
  SWA pool's free plus evictable tokens after what the batch already reserved (``mem_cache/prefill_budget.py:27-59,
  176-318``).
"""

from __future__ import annotations

from sim.cache.budget import admission_demand, clip_output
from sim.cache.v4.budget import swa_chunk_limit, swa_estimate
from sim.cache.v4.running import Running
from sim.cache.v4.swacache import SWACache
from sim.cache.v4.unified import UNode
from sim.offline.calls import expand_tokens
from sim.offline.copies import Load
from sim.offline.driver import handles, page_tokens, swa_match_fields
from sim.offline.hostsched import HostScheduler, state_answer, tiers_flag

__all__ = ["V4HostDriver"]


def _of_run(name: str, default=None) -> property:
    """A field of the request's cache record (``default`` for a request that was never admitted)."""
    return property(lambda self: getattr(self.run, name) if self.run is not None else default)


class _V4Req:
    """The driver's view of one request: its cache record and admission outcome."""

    finished = _of_run("finished", False)
    prefilled = _of_run("prefilled", 0)
    chunks = _of_run("chunks", ())
    emitted = _of_run("emitted")
    decode_steps = _of_run("decode_steps")
    protected = _of_run("protected")
    evicted = _of_run("evicted")
    loaded = _of_run("host_hit")

    def __init__(self, rid: str, run: Running | None, match, prompt_len: int, output_len: int) -> None:
        self.rid, self.run, self.match = rid, run, match
        self.prompt_len, self.output_len = prompt_len, output_len
        self.admitted, self.refused = True, None
        self.prefix_at_admit = self.extend_end = 0
        self.pending_checkpoint = False


class V4HostDriver(HostScheduler):
    """Host-tier calls on one :class:`SWACache`, rebuilt by each ``config`` call."""

    window = True

    def _build(self, cfg: dict) -> tuple[SWACache, list, dict]:
        page, ratio = cfg["page_size"], cfg["hicache_ratio"]
        host_pages, swa_host_pages = int(cfg["full_pages"] * ratio), int(cfg["swa_pages"] * ratio)
        c = SWACache(page=page, window=cfg["window"], full_pages=cfg["full_pages"], swa_pages=cfg["swa_pages"],
                     chunked_prefill_size=self.chunk, host_full_pages=host_pages,
                     host_swa_pages=swa_host_pages, write_policy=cfg["write_policy"],
                     load_back_threshold=cfg["load_back_threshold"])  # fmt: skip
        c.hold_loads = True
        c.tree.events = []
        return c, c.tree.events, {"host_pool_tokens": host_pages * page, "swa_host_pool_tokens": swa_host_pages * page}

    # ----- the cache's side ------------------------------------------------------------------------
    def _evicted(self) -> dict:
        s = self.c.stats
        return {"evicted_full": s["evicted_tokens"], "evicted_swa": s["swa_evicted_tokens"]}

    def _usage(self) -> dict:
        c, t = self.c, self.c.tree
        return {"full_used": c.full_used, "full_evictable": t.full_evictable, "full_protected": t.full_protected,
                "swa_used": c.swa_used, "swa_evictable": t.swa.evictable, "swa_protected": t.swa.protected,
                "host_used": t.host_tokens, "swa_host_used": t.host_swa_tokens}  # fmt: skip

    def _new_backups(self) -> list:
        return self.c.take_new_backups()

    def _extend(self, x: _V4Req, end: int) -> None:
        self.c.extend(x.run, end - x.run.prefilled, defer=True)

    def _decode(self, x: _V4Req) -> None:
        self.c.decode(x.run)

    def _checkpoint(self, x: _V4Req, up_to: int) -> None:
        self.c.checkpoint(x.run, up_to)

    def _drop(self, x: _V4Req) -> None:
        self.c.abort(x.run)
        x.run.finished = True

    # ----- admission -------------------------------------------------------------------------------
    def _admit(self, call: dict, rid: str) -> _V4Req:
        c, p, w = self.c, self.page, self.cfg["window"]
        prompt, output = expand_tokens(call["tokens"]), expand_tokens(call.get("output", []))
        keys = c.tree.page_keys(prompt + output)
        m = c.lookup(keys, len(prompt))
        n_out = clip_output(len(output))
        host_hit = m.best_len - m.device if c.hicache else 0
        uuid = c.tree.lock(m.node)  # the budget check runs with the device prefix locked
        total = admission_demand(len(prompt), m.device, len(output), p)
        remaining = c.full_free() + c.tree.full_evictable - self._reserved()
        ext = len(prompt) - m.device - host_hit
        swa_remaining = c.swa_free() + c.tree.swa.evictable - self.batch.swa_reserved
        limit = swa_chunk_limit(-(-ext // p) * p, n_out, window=w, page=p, limit=self.batch.rem_chunk_tokens,
                                room=swa_remaining, size=c.swa_cap, host_hit=m.swa_host)  # fmt: skip
        c.tree.unlock(m.node, uuid)
        if not (total < remaining and limit is not None):
            rec = self.reqs[rid] = _V4Req(rid, None, m, len(prompt), len(output))
            rec.admitted, rec.refused = False, "no_token"
            self.batch.stop = True  # NO_TOKEN: the adder takes no more requests this round
            return rec
        loads_before = len(c.loads)
        rec = self.reqs[rid] = _V4Req(rid, c.admit(keys, len(prompt), len(output), match=m), m, len(prompt),
                                      len(output))  # fmt: skip
        if len(c.loads) > loads_before:
            load = c.loads.pop()
            self.copies.load_queue.append(Load(load[0], load[2], load))
        prefix = rec.prefilled
        end = self._join_batch(rec, limit)
        self.batch.swa_reserved += swa_estimate(-(-(end - prefix) // p) * p, 0 if end < len(prompt) else n_out, window=w,
                                              page=p, limit=self.chunk)  # fmt: skip
        self.batch.stop = self.batch.rem_chunk_tokens <= 0
        return rec

    def _chunk_room(self) -> int:
        c = self.c
        remaining = c.full_free() + c.tree.full_evictable - self._reserved()
        avail = min(self.chunk, int(remaining), int(c.swa_free() + c.tree.swa.evictable) - self.page)
        return max(avail, 0)

    # ----- answers ---------------------------------------------------------------------------------
    def _match_fields(self, x: _V4Req) -> dict:
        m = x.match
        host = m.best_len - m.device
        return {**swa_match_fields(m), "host_hit": m.host, "swa_host_hit": m.swa_host,
                "best_match": self.c.tree.ref(m.best) if (host or m.swa_host) else None}  # fmt: skip

    @handles("match")
    def _op_match(self, call: dict) -> dict:
        tokens = expand_tokens(call["tokens"])
        m = self.c.lookup(self.c.tree.page_keys(tokens), len(tokens))
        return self._match_fields(_V4Req("", None, m, len(tokens), 0))

    @handles("evict_host")
    def _op_evict_host(self, call: dict) -> dict:
        return {"evicted_host": self.c.tree.evict_host(call["n"])}

    @handles("evict")
    def _op_evict(self, call: dict) -> dict:
        c = self.c
        f, s = c.tree.evict(call["full"], call.get("swa", 0), c.full_free, c.swa_free)
        return {"evicted_full": f, "evicted_swa": s}

    @handles("state")
    def _op_state(self, call: dict) -> dict:
        tree = self.c.tree

        def tiers(node: UNode) -> str:
            return tiers_flag(node.full, node.host) + ("S" if node.swa else ("h" if node.host_swa else "T"))

        return state_answer(tree.paths(), tree.num_nodes, page_tokens, tiers, self.copies.loading())

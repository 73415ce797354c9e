"""Drive the plain model's HiCache (:class:`sim.cache.hicache.HiCache`, the cache the engine and the replay use) with
the host-tier call format of ``shared/vectors/hicache`` and answer each call with the fields SGLang 0.5.23's
recorded answers use: matches, admission verdicts, load-backs, prefill chunks, pool usage, the write-through
window, and the host-tier decisions (``events``) in order. The scheduler's side is :mod:`sim.offline.hostsched`;
this module sizes the pools and decides admission; each request's KV runs on the cache's own calls
(:class:`sim.cache.requests.RequestRows`), the ones the timed engine makes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from sim.cache.budget import admission_demand, chunk_reservation
from sim.cache.hicache import HiCache
from sim.cache.node import Node
from sim.cache.radix import node_ref
from sim.cache.requests import KVRecord
from sim.model.pools import HitPolicy, ModelSpec, Pool
from sim.offline.calls import expand_tokens
from sim.offline.copies import Load
from sim.offline.driver import handles, page_tokens
from sim.offline.hostsched import HostScheduler, state_answer, tiers_flag

__all__ = ["PlainHostDriver", "host_pool_tokens"]


def host_pool_tokens(device_tokens: int, ratio: float, page: int) -> int:
    """``int(device tokens x hicache_ratio)`` rounded down to pages, plus one page
    (``mem_cache/pool_host/base.py:220-228``)."""
    return int(device_tokens * ratio) // page * page + page


@dataclass
class _Req(KVRecord):
    """One request's KV record (:class:`sim.cache.requests.KVRecord`) and what the host-tier answers report."""

    rid: str = ""
    lookup: object = None
    matched: int = 0
    host_hit: int = 0
    best: Node | None = None
    extend_end: int = 0
    loaded: int = 0
    admitted: bool = True
    refused: str | None = None
    pending_checkpoint: bool = False  # a middle chunk inserted at the start of the next iteration
    prefix_at_admit: int = 0


def _plain_model(page: int) -> ModelSpec:
    return ModelSpec(name="plain", page_size=page, pools=(Pool("kv", 1, "kv", HitPolicy.ALL_PAGES),))


class PlainHostDriver(HostScheduler):
    """Host-tier calls on one :class:`HiCache`, rebuilt by each ``config`` call."""

    def _build(self, cfg: dict) -> tuple[HiCache, list, dict]:
        page = cfg["page_size"]
        host_tokens = host_pool_tokens(cfg["full_pages"] * page, cfg["hicache_ratio"], page)
        c = HiCache(_plain_model(page), l1_pages=cfg["full_pages"], l2_pages=host_tokens // page,
                    policy=cfg["write_policy"], load_back_threshold=cfg["load_back_threshold"],
                    page_tokens=page)  # fmt: skip
        c.events = []
        return c, c.events, {"host_pool_tokens": host_tokens}

    # ----- the cache's side ------------------------------------------------------------------------
    def _evicted(self) -> dict:
        return {"evicted_full": self.c.stats.evicted_tokens}

    def _usage(self) -> dict:
        c = self.c
        return {"full_used": c.l1.kv_used * self.page, "full_evictable": c.tree.evictable_tokens,
                "full_protected": c.tree.protected_tokens, "host_used": c.l2.kv_used * self.page}  # fmt: skip

    def _room(self) -> int:
        """Device tokens free or evictable, before what the budget reserves."""
        c = self.c
        return (c.l1.kv_cap - c.l1.kv_used) * self.page + c.tree.evictable_tokens

    def _new_backups(self) -> list:
        return self.c.take_new_backups()

    def _extend(self, r: _Req, end: int) -> None:
        if not self.c.extend_rows(r, end):
            raise MemoryError(f"no device room for the chunk to {end} even after eviction")

    def _decode(self, r: _Req) -> None:
        self.c.decode_row(r)

    def _checkpoint(self, r: _Req, up_to: int) -> None:
        self.c.checkpoint(r, up_to)

    def _drop(self, r: _Req) -> None:
        self.c.abort_rows(r)

    # ----- admission -------------------------------------------------------------------------------
    def _admit(self, call: dict, rid: str) -> _Req:
        c, p = self.c, self.page
        prompt, output = expand_tokens(call["tokens"]), expand_tokens(call.get("output", []))
        keys = c.tree.page_keys(prompt + output)
        lk = c.lookup(keys, len(prompt))  # locks the device prefix and host-locks the best match
        matched, host_hit = lk.device_pages * p, lk.host_pages * p
        r = _Req(keys, len(prompt), len(output), lk.device_node, rid=rid, lookup=lk, matched=matched,
                 host_hit=host_hit, best=lk.best_node if host_hit else None)  # fmt: skip
        r.protected = r.allocated = r.prefilled = matched
        self.reqs[rid] = r
        # budget check, device prefix locked (by the lookup)
        total = admission_demand(len(prompt), matched, len(output), p)
        remaining = self._room() - self._reserved()
        if not total < remaining:
            c.abandon(lk)
            r.admitted, r.refused = False, "no_token"
            self.batch.stop = True  # NO_TOKEN: the adder takes no more requests this round
            return r
        if host_hit and (loaded := c.load_back(lk)):
            r.loaded = host_hit
            self.copies.load_queue.append(Load(lk.best_node, loaded * p, lk.best_node))
            r.protected = r.allocated = r.prefilled = matched + host_hit
            r.lock = lk.best_node
        # the request's lock: its last node (the lookup's lock on the device prefix becomes it)
        c.tree.lock(r.lock)
        c.abandon(lk)
        prefix = r.prefilled
        end = self._join_batch(r, min(self.batch.rem_chunk_tokens, int(remaining)))
        taken = chunk_reservation(end - prefix, end >= len(prompt), len(output), p)
        self.batch.stop = self.batch.rem_chunk_tokens <= 0 or remaining - taken <= 0  # the adder's budget_state()
        return r

    def _chunk_room(self) -> int:
        C = self.chunk
        remaining = self._room() - self._reserved()
        return min(C, int(remaining)) if remaining > 0 else C

    # ----- answers ---------------------------------------------------------------------------------
    def _match_fields(self, r: _Req) -> dict:
        best = node_ref(r.best, self.page) if r.best is not None else None
        return {"matched": r.matched, "host_hit": r.host_hit, "best_match": best}

    @handles("match")
    def _op_match(self, call: dict) -> dict:
        c, p = self.c, self.page
        tokens = expand_tokens(call["tokens"])
        lk = c.lookup(c.tree.page_keys(tokens), len(tokens))
        c.abandon(lk)
        host = lk.host_pages * p
        return {"matched": lk.device_pages * p, "host_hit": host,
                "best_match": node_ref(lk.best_node, p) if host else None}  # fmt: skip

    @handles("evict_host")
    def _op_evict_host(self, call: dict) -> dict:
        return {"evicted_host": self.c.evict_host(call["n"]) * self.page}

    @handles("evict")
    def _op_evict(self, call: dict) -> dict:
        before = self.c.stats.evicted_tokens
        self.c.evict_tokens(call["full"])
        return {"evicted_full": self.c.stats.evicted_tokens - before}

    @handles("state")
    def _op_state(self, call: dict) -> dict:
        tree, p = self.c.tree, self.page

        def walk(node: Node, path: list[Node]) -> Iterator[list[Node]]:
            for child in node.children.values():
                yield from walk(child, path + [child]) if child.children else (path + [child],)

        tokens = (lambda n: list(n.key)) if p == 1 else page_tokens
        return state_answer(walk(tree.root, []), tree.num_nodes - 1, tokens, lambda n: tiers_flag(n.device, n.host),
                            self.copies.loading())  # fmt: skip

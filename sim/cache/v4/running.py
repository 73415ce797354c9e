"""A running request's KV record on DeepSeek V4's cache (SGLang's ``Req.kv``): what the pools
(:mod:`sim.cache.v4.pools`), the host controller (:mod:`sim.cache.v4.controller`) and the cache's calls
(:mod:`sim.cache.v4.swacache`) read and move; it lives below all three."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sim.cache.v4.node import Match, UNode

__all__ = ["Running"]


@dataclass(slots=True, init=False)  # its own __init__, compiled: see :mod:`sim.base.compiled`
class Running:
    """One request's KV record. ``keys``: page keys of its whole pages of prompt + output, so a checkpoint
    of the first ``n`` tokens inserts ``keys[: n // page]`` (token ids themselves are never needed)."""

    keys: Sequence
    prompt_len: int
    output_len: int
    match: Match
    lock_node: UNode
    lock_uuid: int | None
    protected: int  # tokens owned by the tree (cache_protected_len)
    branching: int | None
    evicted: int  # SWA-evicted boundary
    inserted: int  # cache_inserted_len
    allocated: int  # rows with KV slots
    prefilled: int  # extend_end
    emitted: int  # output tokens produced
    decode_steps: int
    chunks: list[tuple[int, int]]
    finished: bool
    host_hit: int  # tokens loaded back from host at admission
    load_full: int  # tokens of Full KV and of window state that admission loaded back
    load_swa: int
    evicted_full: int  # tree tokens evicted by this request's allocations (the caller resets them)
    evicted_swa: int
    held_full: int  # pages it holds outside the tree, as last accounted
    held_swa: int

    def __init__(self, keys: Sequence, prompt_len: int, output_len: int, match: Match, lock_node: UNode,
                 lock_uuid: int | None, protected: int, branching: int | None) -> None:  # fmt: skip
        self.keys, self.prompt_len, self.output_len, self.match = keys, prompt_len, output_len, match
        self.lock_node, self.lock_uuid, self.protected, self.branching = lock_node, lock_uuid, protected, branching
        self.chunks, self.finished = [], False
        self.evicted = self.inserted = self.allocated = self.prefilled = self.emitted = self.decode_steps = 0
        self.host_hit = self.load_full = self.load_swa = self.evicted_full = self.evicted_swa = 0
        self.held_full = self.held_swa = 0

    @property
    def kv_len(self) -> int:
        """Tokens whose KV is computed: the prompt part prefilled plus every output token but the newest."""
        return self.prefilled + max(0, self.emitted - 1)

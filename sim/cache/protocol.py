"""The one interface the timed engine drives a cache through: :class:`PrefixCache`.

Two caches implement it: :class:`sim.cache.hicache.HiCache` (one pool group, the radix tree with a host tier)
and :class:`sim.cache.v4.hicache.V4HiCache` (DeepSeek V4's FULL + SWA tree). Its members are what both have
in earnest: the request phases a scheduler calls (SGLang's ``match_prefix`` / ``cache_finished_req`` and
the cache controller's write, ack and prefetch, ``managers/cache_controller.py``), pool use for the
sampler, and the bytes of a copy for the links. State that only a sliding-window cache has sits behind one
capability, :attr:`PrefixCache.window`: None for a cache without a window pool, so no cache answers for a
pool it does not have. Calls that size a copy or a reservation name window pages explicitly
(``swa_pages``, ``window``); a cache without a window pool refuses a nonzero count.

A request goes through both the same way, as SGLang's scheduler drives its caches: admission against the
budget (:meth:`PrefixCache.try_admit`), one prefill chunk at a time (:meth:`PrefixCache.extend`), decode steps
brought up to date at the steps that allocate a page (:meth:`PrefixCache.steps_to_page`,
:meth:`PrefixCache.decode`), retraction when a step cannot allocate, release; rows are allocated as they are
computed, evicting when an allocation is short.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from sim.cache.ages import TierAges
from sim.model.pools import ModelSpec

__all__ = ["CacheTree", "PrefixCache", "SlidingWindow", "TierUse"]


@runtime_checkable
class TierUse(Protocol):
    """One tier's (L1 or L2) page use, in pages of the ``kv`` anchor."""

    @property
    def kv_used(self) -> int:
        """Pages in use (a host tier's: L3 reads' reservations included)."""

    def free(self, kv_pages: int, swa_pages: int = 0) -> None:
        """Give back a reservation (an L3 read that ended)."""


@runtime_checkable
class CacheTree(Protocol):
    """The tree calls the engine makes itself: a router's side-effect-free peek, the host lock an L3 read
    holds on the node it extends, and the evictable tokens the sampler records."""

    @property
    def evictable_tokens(self) -> int: ...

    def peek(self, keys: Sequence, max_pages: int | None = None) -> tuple[int, int]:
        """(device pages, device-or-host pages) of the prefix of ``keys``; nothing changes."""

    def host_lock(self, node: Any) -> None: ...

    def host_unlock(self, node: Any) -> None: ...


@runtime_checkable
class SlidingWindow(Protocol):
    """The sliding-window side of a cache (DeepSeek V4's SWA pools)."""

    @property
    def pages(self) -> int:
        """Pages of window state that a request's trailing window holds (what an L3 read brings along)."""

    @property
    def l1_used(self) -> int:
        """SWA pages in use on the device."""

    @property
    def l2_used(self) -> int:
        """SWA pages in use on the host, L3 reads' reservations included."""


@runtime_checkable
class PrefixCache(Protocol):
    """One instance's prefix cache as the engine, ``tree`` and the replay set-up see it.

    A lookup result has ``device_pages``, ``host_pages`` and ``best_node``; an admission ``device_tokens``,
    ``host_tokens``, ``computed_tokens`` and ``load_kv_pages``; a backup ``kv_pages``, ``nodes`` and
    ``storage_nodes``. With a window, admissions add ``load_swa_pages``, backups ``swa_pages`` and nodes
    ``host_swa``.
    """

    model: ModelSpec
    page_tokens: int
    load_back_threshold: int
    page_bytes: dict[str, int]  # bytes of one page, per pool (what a copy of a page moves in it)
    stats: Any  # the raw counters (kept across /flush_cache: the engine moves them to the new cache)

    @property
    def l1(self) -> TierUse: ...

    @property
    def l2(self) -> TierUse: ...

    @property
    def tree(self) -> CacheTree: ...

    @property
    def pending(self) -> dict:
        """Backups committed and not yet acknowledged (the write-through window)."""

    @property
    def write_back_copies(self) -> list:
        """write_back copies a device eviction waits for, batched per eviction."""

    @property
    def window(self) -> SlidingWindow | None:
        """The sliding-window pools, or None for a cache without one."""

    def lookup(self, keys: Sequence, input_tokens: int) -> Any:
        """Match a request (capped at ``input_tokens - 1``)."""

    def try_admit(self, req: Any, resumed: int = 0, chunk_limit: int | None = None) -> Any:
        """Admit a waiting request if the budget allows it now; None: not now (nothing held). ``resumed``:
        output tokens a retracted request made before; ``chunk_limit``: the tokens its first chunk may take in
        this pass."""

    def abandon(self, lk: Any) -> None:
        """Undo what a lookup holds, if anything (the request was not admitted)."""

    def start_iteration(self) -> None:
        """A scheduler iteration starts (after the write acks): what is due then is done."""

    def extend(self, adm: Any, tokens: int) -> int:
        """Run up to ``tokens`` more of the request's prompt; returns the tokens run (0: no room now)."""

    def steps_to_page(self, adm: Any) -> int:
        """Decode steps until the request next allocates a page (that step included)."""

    def decode(self, adm: Any, steps: int) -> None:
        """Bring a decoding request ``steps`` steps forward; :class:`MemoryError` if the pools run dry."""

    def retract(self, adm: Any, keep_free: int = 0) -> None:
        """Free a decoding request uncached, then evict until ``keep_free`` tokens are free."""

    def commit(self, adm: Any) -> list:
        """The backups the request's inserts started since the last call."""

    def release(self, adm: Any) -> None:
        """The request is done with the cache: what it computed goes to the tree."""

    def ack(self, op: Any) -> None:
        """A backup's D2H copy completed."""

    def serve(self, keys: Sequence, input_tokens: int) -> Any:
        """A whole request at once with no clock (a replay, or setting a cache up)."""

    def pool_bytes(self, kv_pages: int, swa_pages: int = 0) -> dict[str, int]:
        """Bytes per pool of a copy of ``kv_pages`` pages and ``swa_pages`` window pages."""

    def reserve_host(self, kv_pages: int, swa_pages: int, min_kv_pages: int) -> int:
        """Host room for an L3 read: all ``kv_pages`` (with ``swa_pages`` window pages), else as many as fit
        if at least ``min_kv_pages``, else none; returns the pages reserved."""

    def insert_host(self, keys: Sequence, n_pages: int, window: bool) -> int:
        """Place the first ``n_pages`` of ``keys``, read from L3, as host-only nodes (``window``: the read
        brought window state); returns the pages added."""

    def metrics(self) -> dict:
        """The counters under SGLang's metric names."""

    def record_ages(self, ages: TierAges) -> None:
        """From now on, stamp each node's last use from ``ages.clock`` and record its age at hits and evictions
        (:mod:`sim.cache.ages`); a cache never given one records nothing."""

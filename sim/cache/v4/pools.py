"""DeepSeek V4's paged Full and SWA pools on both tiers, as the cache sees them (``mem_cache/allocator/swa.py``,
``mem_cache/allocation.py``).

Usage is derived, not tracked row by row: the tree's ledgers plus the pages running requests hold outside it.
An allocation first asks the tree to evict what it is short of (``allocator/swa.py:203-214``), then fails
with :class:`OutOfMemory` if the pages are still not there. :class:`PagedPools` is a base of
:class:`~sim.cache.v4.swacache.SWACache` and works on its state.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from mypy_extensions import mypyc_attr, trait

from sim.cache.v4.unified import UnifiedTree

if TYPE_CHECKING:
    from sim.cache.v4.running import Running

__all__ = ["OutOfMemory", "PagedPools"]


@mypyc_attr(native_class=False)
class OutOfMemory(MemoryError):
    """An allocation failed even after eviction (SGLang raises; a scheduler would retract)."""


@trait
class PagedPools:
    """Capacities (tokens; ``inf``: unbounded), free and used tokens per pool, and the row allocation."""

    # Set by SWACache.__init__.
    page: int
    full_cap: int | float  # an int, or inf: kept as Python keeps it (a compiled float would change the sums)
    swa_cap: int | float
    host_full_cap: int | float
    host_swa_cap: int | float
    host_reserved: int
    host_swa_reserved: int
    tree: UnifiedTree
    stats: Counter
    _req_full: int  # pages held by running requests
    _req_swa: int

    @property
    def full_used(self) -> int:
        return self.tree.full_tokens + self._req_full * self.page

    @property
    def swa_used(self) -> int:
        return self.tree.swa_tokens + self._req_swa * self.page

    def full_free(self) -> int | float:
        t = self.tree
        return self.full_cap - t.full_evictable - t.full_protected - self._req_full * self.page

    def swa_free(self) -> int | float:
        swa = self.tree.swa
        return self.swa_cap - swa.evictable - swa.protected - self._req_swa * self.page

    def host_full_free(self) -> int | float:
        return self.host_full_cap - self.tree.host_tokens - self.host_reserved

    def host_swa_free(self) -> int | float:
        return self.host_swa_cap - self.tree.host_swa_tokens - self.host_swa_reserved

    def _account(self, r: Running) -> None:
        """Re-derive the pages ``r`` holds from its record."""
        p = self.page
        top = -(-r.allocated // p)
        protected = r.protected // p
        full = top - protected if top > protected else 0
        dead = (r.protected if r.protected > r.evicted else r.evicted) // p
        swa = top - dead if top > dead else 0
        self._req_full += full - r.held_full
        self._req_swa += swa - r.held_swa
        r.held_full, r.held_swa = full, swa

    def evict_to_free(self, full: int, swa: int) -> tuple[int, int]:
        """Evict from the tree until ``full`` Full and ``swa`` SWA tokens are free (``allocator/swa.py:203-214``);
        returns the (Full, SWA) tree tokens evicted."""
        full_short = max(0, full - self.full_free())
        swa_short = max(0, swa - self.swa_free())
        if not full_short and (not swa_short or not self.tree.swa.evictable):
            return 0, 0  # nothing short, or SWA only and all of the tree's held by locked nodes: nothing to evict
        f, s = self.tree.evict(int(full_short), int(swa_short), self.full_free, self.swa_free)
        self.stats["evicted_tokens"] += f
        self.stats["swa_evicted_tokens"] += s
        return f, s

    def _make_free(self, r: Running, tokens: int, *, full: int | None = None, swa: int | None = None) -> None:
        f, s = self.evict_to_free(tokens if full is None else full, tokens if swa is None else swa)
        r.evicted_full += f
        r.evicted_swa += s

    def _fits(self, r: Running, end: int) -> bool:
        """Whether both pools have the pages ``r`` needs to hold rows up to ``end``."""
        p = self.page
        new = (-(-end // p) - -(-r.allocated // p)) * p
        return new <= 0 or (new <= self.full_free() and new <= self.swa_free())

    def _alloc_rows(self, r: Running, end: int) -> None:
        if not self._fits(r, end):
            new_pages = -(-end // self.page) - -(-r.allocated // self.page)
            raise OutOfMemory(f"cannot allocate {new_pages} pages for tokens [{r.allocated}, {end})")
        r.allocated = end
        self._account(r)

"""L3: a content-addressed page store shared by every instance.

Page keys are prefix-unique (chained block hashes, or ``(conversation, page)`` ids), so a key names a
page's content and its whole prefix, as SGLang's chained page hashes do. Window state is stored only for
pages at which a sequence ended; a storage hit must end at such a page for models with a sliding window
(the TRAILING_PAGES rule, ``hicache_storage.py:124-137``). With a capacity, the least recently written
or read pages go first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from sim.cache.ages import TierAges

__all__ = ["Storage"]


class Storage:
    def __init__(self, capacity_pages: int | None = None, needs_window: bool = False) -> None:
        self.capacity_pages = capacity_pages
        self.needs_window = needs_window
        self._pages: OrderedDict = OrderedDict()  # key -> last written or read (simulated s; 0 unrecorded)
        self._window: set = set()  # keys of pages that hold window state
        self.evicted_pages = 0
        self.ages: TierAges | None = None
        self.page_tokens = 1

    def __len__(self) -> int:
        return len(self._pages)

    def record_ages(self, ages: TierAges, page_tokens: int) -> None:
        """Record pages' ages at L3 reads and evictions (:mod:`sim.cache.ages`, tier ``storage``); L3 keeps no
        hit count, so its evictions add no reuse count."""
        self.ages, self.page_tokens = ages, page_tokens

    def put(self, keys: Sequence, window_at_end: bool) -> None:
        pages, now = self._pages, self.ages.clock.now if self.ages is not None else 0.0
        for key in keys:
            if key in pages:
                pages.move_to_end(key)
            pages[key] = now
        if window_at_end and keys:
            self._window.add(keys[-1])
        if self.capacity_pages is not None:
            while len(pages) > self.capacity_pages:
                key, used = pages.popitem(last=False)
                self._window.discard(key)
                self.evicted_pages += 1
                if self.ages is not None:
                    self.ages.evicted("storage", used, self.page_tokens, None)

    def hit_pages(self, keys: Sequence, start: int, stop: int) -> int:
        """Pages of ``keys[start:stop]`` present as a leading run (cut back to a window page if needed)."""
        pages, window = self._pages, self._window
        run = last_window = 0
        for i in range(start, stop):
            key = keys[i]
            if key not in pages:
                break
            run += 1
            if key in window:
                last_window = run
        return last_window if self.needs_window else run

    def touch(self, keys: Sequence) -> None:
        """A read of ``keys``: most recently used, and (recording) a hit at each page's age."""
        pages, ages = self._pages, self.ages
        now = ages.clock.now if ages is not None else 0.0
        for key in keys:
            if key in pages:
                if ages is not None:
                    ages.hit_at("storage", pages[key], self.page_tokens, now)
                pages[key] = now
                pages.move_to_end(key)

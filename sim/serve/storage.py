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

__all__ = ["Storage"]


class Storage:
    def __init__(self, capacity_pages: int | None = None, needs_window: bool = False) -> None:
        self.capacity_pages = capacity_pages
        self.needs_window = needs_window
        self._pages: OrderedDict = OrderedDict()  # key -> holds window state
        self.evicted_pages = 0

    def __len__(self) -> int:
        return len(self._pages)

    def put(self, keys: Sequence, window_at_end: bool) -> None:
        pages = self._pages
        for key in keys:
            if key in pages:
                pages.move_to_end(key)
            else:
                pages[key] = False
        if window_at_end and keys:
            pages[keys[-1]] = True
        if self.capacity_pages is not None:
            while len(pages) > self.capacity_pages:
                pages.popitem(last=False)
                self.evicted_pages += 1

    def hit_pages(self, keys: Sequence, start: int, stop: int) -> int:
        """Pages of ``keys[start:stop]`` present as a leading run (cut back to a window page if needed)."""
        pages = self._pages
        run = last_window = 0
        for i in range(start, stop):
            flag = pages.get(keys[i])
            if flag is None:
                break
            run += 1
            if flag:
                last_window = run
        return last_window if self.needs_window else run

    def touch(self, keys: Sequence) -> None:
        for key in keys:
            if key in self._pages:
                self._pages.move_to_end(key)

"""CPython's cyclic garbage collector paused while a simulation or a replay plays.

Both allocate hundreds of small objects per request (tree nodes, heap entries, records) and free nearly all of
them by reference counting: a removed tree node is unlinked from its parent and its LRU lists, so no bundled run
leaves more than a few dozen objects of cyclic garbage. Meanwhile the collector's young collections walk tens of
thousands of live objects each (a third of a V4 replay's time, 15% of a synthetic run's). Pausing it cannot
change a result, as the collector only frees garbage; it is restored afterwards.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["cycle_gc_paused"]


@contextmanager
def cycle_gc_paused() -> Iterator[None]:
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()

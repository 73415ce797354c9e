"""The device-host copies of a host-tier call stream, queued and acknowledged as SGLang's ``HiCacheController``
keeps them (``managers/cache_controller.py:369-377``), with the driver deciding when a copy completes.

Backups wait in the write queue until the batch's result and go out as one merged copy (``start_writing``,
``:885-920``); load-backs wait in the load queue until the batch closes and start as one copy (``start_loading``,
``:1028``); completed copies are reaped in FIFO order, each queue stopping at the first copy still in flight
(``mem_cache/unified_radix_cache.py:3651-3707``).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["HostCopies", "Load"]


@dataclass
class Load:
    """A queued load-back: the node it brings back, its tokens, and the cache's record of it."""

    node: object
    tokens: int
    record: object


@dataclass
class _Copy:
    items: list
    done: bool = False


@dataclass
class HostCopies:
    """The copies in flight (``ack_write_queue``, ``ack_load_queue``) and the load-backs the open batch queued;
    the backups a batch queued are the cache's own (``take_new_backups``) until its result."""

    ack_write_queue: deque[_Copy] = field(default_factory=deque)
    load_queue: list[Load] = field(default_factory=list)  # load-backs waiting for the batch to close
    ack_load_queue: deque[_Copy] = field(default_factory=deque)

    def start_writing(self, backups: list) -> None:
        """The backups queued since the last copy go out as one merged copy."""
        if backups:
            self.ack_write_queue.append(_Copy(backups))

    def start_loading(self) -> int | None:
        """Start the queued load-backs as one copy; its tokens, or None when none were queued."""
        if not self.load_queue:
            return None
        tokens = sum(ld.tokens for ld in self.load_queue)
        self.ack_load_queue.append(_Copy(self.load_queue))
        self.load_queue = []
        return tokens

    def complete_writes(self, n: int | None = None) -> int:
        """The first ``n`` backup copies in flight (all with None) complete; how many did."""
        todo = [x for x in self.ack_write_queue if not x.done][:n]
        for x in todo:
            x.done = True
        return len(todo)

    def complete_loads(self) -> int:
        todo = [x for x in self.ack_load_queue if not x.done]
        for x in todo:
            x.done = True
        return len(todo)

    def reap(self, ack: Callable, load_done: Callable) -> None:
        """Acknowledge the completed copies at the head of each queue, in order."""
        while self.ack_write_queue and self.ack_write_queue[0].done:
            for op in self.ack_write_queue.popleft().items:
                ack(op)
        while self.ack_load_queue and self.ack_load_queue[0].done:
            for ld in self.ack_load_queue.popleft().items:
                load_done(ld.record)

    @property
    def pending_loads(self) -> int:
        return sum(len(x.items) for x in self.ack_load_queue) + len(self.load_queue)

    def loading(self) -> set[int]:
        """``id`` of every node a queued or in-flight load-back brings back."""
        return {id(ld.node) for x in self.ack_load_queue for ld in x.items} | {id(ld.node) for ld in self.load_queue}

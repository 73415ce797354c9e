"""A request's progress through one instance: the scheduler's side of SGLang's ``Req``
(``managers/schedule_batch.py:1033``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sim.workload.request import Request

if TYPE_CHECKING:
    from sim.serve.scheduler.prefetch import Prefetch


@dataclass(slots=True)
class Running:
    """A request's progress through one instance."""

    req: Request
    inst: int
    adm: Any = None  # the cache's admission (the PrefixCache's try_admit answer), once admitted
    admitted_s: float = 0.0
    prefill_left: int = 0
    prefill_pos: int = 0
    load_done_s: float = 0.0
    load_s: float = 0.0
    first_token_s: float = 0.0
    prefetched_pages: int = 0
    prefetch: Prefetch | None = None
    prefetch_attempts: int = 0  # L3 lookups re-issued (SGLang's storage_prefetch_retry_attempts)
    synced_step: int = 0  # the step a decoding request's cache state is current at
    decode_start: int = 0  # the step its decoding began at
    resumed: int = 0  # output tokens it had made before a retraction: they are prefilled again with the prompt
    # What the record reports (see Simulation.record): the first admission's cache hits (device, host, storage);
    # after a retraction, the re-prefills' computed and cached tokens, kept apart as SGLang's "reprocessed" counts.
    hits: tuple[int, int, int] | None = None
    retractions: int = 0
    reprocessed_computed: int = 0
    reprocessed_cached: int = 0
    lookup_done_s: float = 0.0  # a missed L3 lookup holds the request until it drains (Prefetcher.lookup_released)
    lookup_deadline: float | None = None  # under the timeout policy: the first poll + the base timeout
    queue_seq: int = 0  # its place in the waiting queue: numbered as queued, renumbered by an lpm reorder

"""A request's progress through one instance: the scheduler's side of SGLang's ``Req``
(``managers/schedule_batch.py:1033``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sim.workload.request import Request

if TYPE_CHECKING:
    from sim.serve.scheduler.l3read import Prefetch


@dataclass(slots=True, init=False)  # its own __init__, compiled: see :mod:`sim.base.compiled`
class Running:
    """A request's progress through one instance."""

    req: Request
    inst: int
    adm: Any  # the cache's admission (the PrefixCache's try_admit answer), once admitted
    admitted_s: float
    prefill_left: int
    prefill_pos: int
    load_done_s: float
    load_s: float
    first_token_s: float
    prefetched_pages: int
    prefetch: Prefetch | None
    prefetch_attempts: int  # L3 lookups re-issued (SGLang's storage_prefetch_retry_attempts)
    synced_step: int  # the step a decoding request's cache state is current at
    decode_start: int  # the step its decoding began at
    resumed: int  # output tokens it had made before a retraction: they are prefilled again with the prompt
    # What the record reports (see RunState.record, sim.serve.state): the first admission's cache hits (device, host, storage);
    # after a retraction, the re-prefills' computed and cached tokens, kept apart as SGLang's "reprocessed" counts.
    hits: tuple[int, int, int] | None
    retractions: int
    reprocessed_computed: int
    reprocessed_cached: int
    lookup_done_s: float  # a missed L3 lookup holds the request until it drains (Prefetcher.lookup_released)
    lookup_deadline: float | None  # under the timeout policy: the first poll + the base timeout
    queue_seq: int  # its place in the waiting queue: numbered as queued, renumbered by an lpm reorder

    def __init__(self, req: Request, inst: int, *, admitted_s: float = 0.0, load_s: float = 0.0,
                 first_token_s: float = 0.0, resumed: int = 0, hits: tuple[int, int, int] | None = None,
                 retractions: int = 0, reprocessed_computed: int = 0, reprocessed_cached: int = 0) -> None:
        """A request as it reaches the instance, or (the keywords) as a retraction queues it again."""
        self.req, self.inst, self.adm, self.prefetch, self.lookup_deadline = req, inst, None, None, None
        self.admitted_s, self.load_s, self.first_token_s, self.resumed = admitted_s, load_s, first_token_s, resumed
        self.hits, self.retractions = hits, retractions
        self.reprocessed_computed, self.reprocessed_cached = reprocessed_computed, reprocessed_cached
        self.load_done_s = self.lookup_done_s = 0.0
        self.prefill_left = self.prefill_pos = self.prefetched_pages = self.prefetch_attempts = 0
        self.synced_step = self.decode_start = self.queue_seq = 0

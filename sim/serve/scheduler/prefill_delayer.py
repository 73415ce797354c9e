"""SGLang's prefill delayer (``--enable-prefill-delayer``, ``managers/prefill_delayer.py``): before a pass admits
new requests, the ranks of a server agree whether to prefill at all, so that under DP attention the ranks'
prefills line up instead of one rank's prefill holding every other rank's decode pass.

Each pass every rank reports whether it could prefill, whether its KV usage is under the low watermark, its
running batch and its recent largest prefill batch; the ranks all-gather these (``_gather_info``,
``prefill_delayer.py:354-381``) and each takes the same decision (``_negotiate_should_allow_prefill_pure``,
:166-352):

- every rank could prefill: allowed, unless the running batch leaves fewer free request slots than the largest
  recent prefill batch (``max_running_requests - max running < max max_prefill_bs``, :274-277), then delayed,
  except the very first time that holds (``skip_first_delayer``, :282-284);
- no rank could: allowed (nothing to hold back), and any delay so far ends;
- some could, some not: delayed;
- a delay ends after ``max_delay_passes - 1`` delayed passes (:289-305, :333-350), or at once when a
  prefillable rank's KV usage is under ``--prefill-delayer-token-usage-low-watermark`` (:177-181, :233-240).

A delayed rank admits no new request that pass (``schedule_policy.py:1306-1315, 1446-1455``); a request it is
already prefilling in chunks goes on (:1159-1167). The largest recent prefill batch is the largest of the last
16 non-empty attempts (``RecentPrefillBatchSizeTracker``, :26-50): a pass's prefill batch size, or for a
delayed attempt the estimate ``min(max(queue, 1), max(free slots, 1))`` (:407-427, ``scheduler.py:4068-4075``).
A server without DP attention negotiates with itself alone.

Here a rank "could prefill" when it has a request mid-prefill, or a waiting request and a free request slot
(``scheduler.py:4111-4131``); SGLang asks further whether the queue's first candidate fits the KV pool and has
its L3 read done, which this check does not (a rank stalled there counts as prefillable). The queue-length
trigger (``--prefill-delayer-queue-min-ratio``, opt-in) is not modelled. A rank asleep (nothing to run) is not
prefillable, as its SGLang twin's empty queue is not; the ranks planning a pass at the same instant gather
before any of them admits.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import simpy

if TYPE_CHECKING:
    from sim.serve.scheduler.dp import DPGroup
    from sim.serve.scheduler.instance import Batch, Instance

PREFILL_BS_WINDOW = 16  # SGLANG_PREFILL_DELAYER_MAX_PREFILL_BS_WINDOW_SIZE's default (prefill_delayer.py:34)


class PrefillDelayer:
    """The delayer of one server: its ranks' negotiation state (identical on every rank in SGLang, as each
    decides from the same gathered values, so held once here) and each rank's recent prefill batch sizes."""

    def __init__(self, env: simpy.Environment, ranks: list[Instance], group: DPGroup | None, max_delay_passes: int,
                 low_watermark: float | None) -> None:  # fmt: skip
        self.env, self.ranks, self.group = env, ranks, group
        self.max_delay_passes, self.low_watermark = max_delay_passes, low_watermark
        self.pos = {inst.idx: k for k, inst in enumerate(ranks)}
        self.recent: list[deque[int]] = [deque(maxlen=PREFILL_BS_WINDOW) for _ in ranks]
        self.attempted = [0] * len(ranks)  # this pass's attempted size, for a delayed prefillable rank
        self.delayed: int | None = None  # prev_state.delayed_count; None: no delay under way
        self.skip_first = True
        self.gathered: list[Instance] = []
        self.done = env.event()
        self.verdict = True
        self.deciding = False
        if group is not None:
            group.on_leave = self._ready

    # ----- the negotiation --------------------------------------------------------------------
    def next_batch(self, inst: Instance) -> Generator[simpy.Event, Any, Batch | None]:
        """``inst``'s next batch, formed once the ranks have negotiated whether it may admit new requests; a pass
        that ``--prefill-decode-interval`` defers forms none and does not negotiate (``scheduler.py:3972-3977``)."""
        if inst._defer_prefill():
            return inst.get_next_batch_to_run(deferred=True)
        allow = yield from self.negotiate(inst)
        batch = inst.get_next_batch_to_run(allow, deferred=False)
        self.observe(inst, batch)
        return batch

    def negotiate(self, inst: Instance) -> Generator[simpy.Event, Any, bool]:
        """Whether ``inst`` may admit new requests this pass: at once without DP attention; with it, once every
        rank planning a pass at this instant has gathered."""
        if self.group is None:
            return self._decide([inst])
        self.gathered.append(inst)
        done = self.done
        self._ready()
        yield done
        return self.verdict

    def _ready(self) -> None:
        group = self.group
        if group is not None and self.gathered and len(self.gathered) >= group.active and not self.deciding:
            self.deciding = True
            self.env.timeout(0).callbacks.append(self._all_gathered)

    def _all_gathered(self, _event: simpy.Event) -> None:
        self.deciding = False
        group = self.group
        if group is None or len(self.gathered) < group.active:  # a rank woke at this instant: it gathers too
            return
        done, gathered = self.done, self.gathered
        self.done, self.gathered = self.env.event(), []
        self.verdict = self._decide(gathered)
        done.succeed()

    def _decide(self, gathered: list[Instance]) -> bool:
        """``_negotiate_should_allow_prefill_pure`` over every rank of the server (prefill_delayer.py:166-352)."""
        present = {inst.idx for inst in gathered}
        prefillable = [inst.idx in present and self._prefillable(inst) for inst in self.ranks]
        force = any(p and self._under_watermark(inst) for p, inst in zip(prefillable, self.ranks))
        for k, (p, inst) in enumerate(zip(prefillable, self.ranks)):
            self.attempted[k] = self._attempt_estimate(inst) if p else 0
        n = sum(prefillable)
        if n == 0 or force:
            return self._release()
        if n == len(self.ranks):
            cap = self.ranks[0].sim.cfg.max_running_requests
            running = max(len(inst.running_batch.decoding) for inst in self.ranks)
            largest = max(max(r, default=0) for r in self.recent)
            if cap - running >= largest:  # free slots for the largest recent prefill batch: no delay
                return self._release()
            if self.skip_first:
                self.skip_first = False
                return self._release()
        delayed = self.delayed or 0
        if delayed < self.max_delay_passes - 1:
            self.delayed = delayed + 1
            self.ranks[0].sim.rec.counters["prefill_delayed_passes"] += n
            return False
        return self._release()  # wait_timeout

    def idle(self) -> None:
        """A rank went to sleep: when no rank of the server is left planning, SGLang's idle loop negotiates
        with no rank prefillable, which ends any delay."""
        if self.group is None or not self.group.active:
            self.delayed = None

    def _release(self) -> bool:
        self.delayed = None
        return True

    def _prefillable(self, inst: Instance) -> bool:
        if inst.prefilling:
            return True
        running = len(inst.prefilling) + len(inst.running_batch.decoding)
        return bool(inst.waiting) and running < inst.sim.cfg.max_running_requests

    def _under_watermark(self, inst: Instance) -> bool:
        """KV usage below the low watermark: used tokens (neither free nor evictable) over the pool
        (``pool_stats_observer.py:95-102, 230-246``)."""
        if self.low_watermark is None:
            return False
        cache, cfg = inst.cache, inst.sim.cfg
        total = cfg.l1_pages * cfg.page_tokens
        used = cache.l1.kv_used * cfg.page_tokens - cache.tree.evictable_tokens
        return max(0, used) / total < self.low_watermark

    @staticmethod
    def _attempt_estimate(inst: Instance) -> int:
        """``_estimate_attempted_prefill_bs`` (prefill_delayer.py:407-427): the queue, within the free slots."""
        free = max(inst.sim.cfg.max_running_requests - len(inst.running_batch.decoding), 1)
        return min(max(len(inst.waiting), 1), free)

    # ----- after the pass is formed -------------------------------------------------------------
    def observe(self, inst: Instance, batch: Batch | None) -> None:
        """The rank's prefill batch size, or its attempted size when it was delayed, joins its window
        (``finalize``, prefill_delayer.py:395-405; ``scheduler.py:4068-4075``)."""
        k = self.pos[inst.idx]
        size = batch.chunks if batch is not None and batch.tokens else 0
        size = size or self.attempted[k]
        self.attempted[k] = 0
        if size > 0:
            self.recent[k].append(size)


def attach_delayers(env: simpy.Environment, instances: list[Instance], dp: int, max_delay_passes: int,
                    low_watermark: float | None) -> None:  # fmt: skip
    """A delayer per server: shared by its ``dp`` attention-DP ranks (a server's ranks are consecutive), or an
    instance's own without DP attention."""
    for s in range(0, len(instances), dp):
        ranks = instances[s : s + dp]
        delayer = PrefillDelayer(env, ranks, ranks[0].group, max_delay_passes, low_watermark)
        for inst in ranks:
            inst.delayer = delayer

"""The decoding requests: SGLang's ``running_batch`` (``ScheduleBatch``, ``managers/schedule_batch.py:2456``) and
its ``retract_decode`` (:3451).

``step`` counts decode passes: decoding requests are keyed by the decode pass they finish at, so a prefill-only
pass moves none of them. With speculative decoding (:mod:`sim.model.speculative`) a decode pass is one
draft-verify iteration: ``step`` still counts passes, and a request's tokens after ``p`` of them are
``floor(p x accept_length)``. A request's cache state is brought up to date lazily, at the step its next page
is due (``page_due``): the steps between allocate nothing.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING

from sim.serve.scheduler.req import Running

if TYPE_CHECKING:
    from sim.serve.scheduler.instance_state import InstanceState

RETRACT_DECODE_STEPS = 20  # SGLANG_RETRACT_DECODE_STEPS (environ.py:649)


class RunningBatch:
    """The decoding requests of one instance by the pass they finish at, and the KV tokens they hold."""

    def __init__(self, inst: InstanceState, finish: Callable[[Running], None],
                 submit: Callable[[Running], None]) -> None:  # fmt: skip
        """``finish`` and ``submit``: the instance's, for a request done decoding and for one retracted."""
        self.inst, self.spec, self.finish, self.submit = inst, inst.spec, finish, submit
        self.accept: int | float = self.spec.accept_length if self.spec else 1  # context tokens a decode pass adds per request
        # (finish step, join order, request): requests finishing in one pass are released in batch.reqs order, the
        # order they joined (batch_result_processor.py:1006, 1466; merge_batch appends, schedule_batch.py:3977)
        self.decoding: list[tuple[int, int, Running]] = []
        self.joined = 0
        self.page_due: list[tuple[int, int, Running]] = []  # decodes by the step of their next page
        self.decode_ctx: int | float = 0  # a float under speculative decoding (accept_length)
        self.step = 0  # decode passes run: a prefill-only pass advances no decoding request

    def add(self, run: Running) -> None:
        """A request whose prefill ended starts decoding (its prefill made its first token)."""
        run.decode_start = self.step
        self.joined += 1
        heapq.heappush(self.decoding, (self.pass_at(run, run.req.output_len - run.resumed - 1), self.joined, run))
        self.decode_ctx += run.req.input_len + run.resumed
        run.synced_step = self.step
        heapq.heappush(self.page_due, (self.pass_at(run, self.inst.cache.steps_to_page(run.adm)), run.req.rid, run))

    def advance(self, rows: int, steps: int) -> None:
        """``steps`` decode passes over ``rows`` requests ran: their contexts grow by the tokens they made."""
        self.decode_ctx += rows * steps * self.accept
        self.step += steps

    def pass_at(self, run: Running, tokens: int) -> int:
        """The decode pass (``step``) by which ``run`` has made ``tokens`` tokens after its prefill."""
        return run.decode_start + (tokens if self.spec is None else self.spec.passes_for(tokens))

    def made(self, run: Running, step: int) -> int:
        """Tokens ``run`` has made after its prefill by decode pass ``step``."""
        passes = step - run.decode_start
        return passes if self.spec is None else self.spec.tokens_after(passes)

    def outputs(self, run: Running) -> int:
        """Output tokens a decoding request has made by now (its prefill made the first)."""
        return run.resumed + 1 + self.made(run, self.step)

    def finish_due(self) -> None:
        """Finish the requests whose last token the passes run so far made."""
        self._sync_due()
        while self.decoding and self.decoding[0][0] <= self.step:
            key, _, run = heapq.heappop(self.decoding)
            if not self._sync(run, run.req.output_len):
                continue
            self.decode_ctx -= run.req.input_len + run.resumed + (key - run.decode_start) * self.accept
            self.finish(run)

    def _sync_due(self) -> None:
        """Bring every decoding request whose next page falls in the steps just run up to date. One whose last
        token these steps made is left to :meth:`finish_due`, which releases the pass's finished requests in
        ``batch.reqs`` order."""
        due, cache = self.page_due, self.inst.cache
        while due and due[0][0] <= self.step:
            _, rid, run = heapq.heappop(due)
            if run.adm.run.finished or self.pass_at(run, run.req.output_len - run.resumed - 1) <= self.step:
                continue
            if self._sync(run, self.made(run, self.step) - self.made(run, run.synced_step)) and not run.adm.run.finished:
                made = self.made(run, self.step)
                heapq.heappush(due, (self.pass_at(run, made + cache.steps_to_page(run.adm)), rid, run))

    def _sync(self, run: Running, steps: int) -> bool:
        """Run ``steps`` decode tokens of a request in the cache; False if it was retracted.

        When a pool runs dry even after eviction, SGLang retracts decoding requests, fewest output tokens
        first and then the longest prompt, until the step fits, always keeping one
        (``managers/schedule_batch.py:3451-3580``). Here the step that did not fit is this request's, so
        victims go until it fits or it is the victim itself. The other requests' progress is read from the
        decode steps run, as their cache state is brought up to date lazily."""
        r, cache, sim = run.adm.run, self.inst.cache, self.inst.sim
        target = r.emitted + steps
        while True:
            try:
                cache.decode(run.adm, target - r.emitted)
            except MemoryError:
                live = [x for _, _, x in self.decoding]
                if all(x is not run for x in live):  # the caller took it off the heap
                    live.append(run)
                if len(live) <= 1:  # nothing left to retract: SGLang aborts it (schedule_batch.py:3508-3530)
                    self.retract(run, requeue=False)
                    sim.rec.dropped["out_of_memory"] += 1
                    sim.finished_one(run.req)
                    return False
                victim = min(live, key=lambda x: (self.outputs(x), -x.req.input_len))
                live = [x for x in live if x is not victim]
                self.retract(victim, keep_free=len(live) * RETRACT_DECODE_STEPS)
                if victim is run:
                    return False
                continue
            run.synced_step = self.step
            return True

    def retract(self, run: Running, requeue: bool = True, keep_free: int = 0) -> None:
        """Free a decoding request's KV uncached (and ``keep_free`` tokens for the requests that stay) and queue
        it again at the back, to prefill its prompt and the outputs it made so far (``scheduler.py:4536-4537``,
        ``schedule_batch.py:2049-2089, 2388-2392``)."""
        self.inst.cache.retract(run.adm, keep_free)
        for heap in (self.decoding, self.page_due):  # in place: the callers' loops hold these lists
            heap[:] = [e for e in heap if e[2] is not run]
            heapq.heapify(heap)
        self.decode_ctx -= run.req.input_len + run.resumed + (self.step - run.decode_start) * self.accept
        if requeue:
            made = min(self.outputs(run), run.req.output_len - 1)
            counters = self.inst.sim.rec.counters  # SGLang's retraction counters (scheduler.py:4502-4512)
            counters["num_retracted_requests_total"] += 1
            counters["num_retracted_input_tokens_total"] += run.req.input_len
            counters["num_retracted_output_tokens_total"] += made
            self.submit(Running(run.req, run.inst, admitted_s=run.admitted_s, load_s=run.load_s,
                                     first_token_s=run.first_token_s, resumed=made, hits=run.hits,
                                     retractions=run.retractions + 1, reprocessed_computed=run.reprocessed_computed,
                                     reprocessed_cached=run.reprocessed_cached))  # fmt: skip

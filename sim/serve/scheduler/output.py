"""When a pass's results reach the client: SGLang's ``stream_output``
(``managers/scheduler_components/output_streamer.py:135``).

SGLang's overlap scheduler (on by default) processes a pass's results after launching the next pass
(``event_loop_overlap``, ``scheduler.py:2061-2120``), and with HiCache on the scheduler's stream is fenced
behind the whole of a prefill forward, not just its metadata reads (``runner_utils/shared_read_event.py:35-41``;
the fence is ``scheduler.py:2013-2023``). The first tokens of a prefill pass then reach the client when the
next prefill pass ends, if one was launched; without HiCache, or with ``overlap_schedule`` off, at their own
pass's end. SGLang knows the cost: ``SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP`` turns the overlap off
between two prefill batches for the first one's TTFT (``scheduler.py:2139-2156``, off by default). Measured on
DeepSeek-V4-Flash (``measurements.md`` M1-A): with the cache on, a wave's first tokens bunch at its end (TTFT
mean / p99 0.94 at concurrency 8, against 0.76 off).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.serve.scheduler.req import Running

if TYPE_CHECKING:
    from sim.serve.state import RunState


class OutputStreamer:
    """First tokens and finishes, streamed at once or, while ``deferring``, held until the next prefill forward
    ends (``late_stream``: HiCache on under the overlap scheduler)."""

    def __init__(self, sim: RunState) -> None:
        self.sim, self.env = sim, sim.env
        cfg = sim.cfg
        self.late_stream = (cfg.overlap_schedule and not cfg.disable_consecutive_prefill_overlap
                            and cfg.l2_pages > 0)  # fmt: skip
        self.deferring = False
        self.unstreamed: list[tuple[Running, bool]] = []  # results of the last prefill pass not yet streamed

    def emit(self, run: Running, finished: bool) -> None:
        """Stream a request's first token (a retracted request keeps its own) or its finish, now or, while
        ``deferring``, when the next prefill forward ends."""
        if self.deferring:
            self.unstreamed.append((run, finished))
            return
        run.first_token_s = run.first_token_s or self.env.now
        if finished:
            self.sim.record(run, self.env.now)

    def stream_out(self) -> None:
        """The held results reach the client now."""
        pending, self.unstreamed = self.unstreamed, []
        for run, finished in pending:
            self.emit(run, finished)

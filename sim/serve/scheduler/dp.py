"""DP attention: the ranks of one server step together (:class:`DPGroup`) and its DP controller places each
request on a rank (:class:`DPController`)."""

from __future__ import annotations

import math
from collections.abc import Callable

import simpy

from sim.workload.request import Request

DP_LOAD_REFRESH_S = 0.02  # the DP controller re-reads the ranks' loads at most every 20 ms (data_parallel_controller.py:346-361)


class DPGroup:
    """The attention-DP ranks of one server, stepping together.

    With DP attention every forward is a collective over the ranks: each rank forms its own batch (prefill or
    decode), the ranks all-gather their token counts, and a rank with nothing to run joins with an IDLE batch
    whenever any rank has work (``managers/scheduler_components/dp_attn.py:518-676``), because the MoE layers
    run over the gathered tokens of all ranks. So a pass starts when every rank that has work has planned it,
    and lasts as long as the slowest rank's, where each rank's time is its own pass plus the MLP/MoE work of the
    other ranks' tokens (``mlp_share`` of their linear-layer cost, priced by the step-time backend as prefill
    tokens); a rank that wakes mid-pass waits for it to end. With two-batch overlap a prefill rank plans its
    pass with it and without it (:mod:`sim.model.tbo`): it runs only when every rank with work prefills, as the
    ranks agree on it from their gathered forward modes, IDLE ones aside (``two_batch_overlap.py:455-500``). ``active`` counts the ranks that are planning a
    pass (not asleep, not yet joined). The pass starts once the current instant's other events have run, so
    ranks woken at the same time (a burst dispatched at once) share it. ``passes`` numbers the group's passes
    and ``extend_at`` is the last one in which any rank prefilled: the gathered ``is_extend_in_batch``
    (``dp_attn.py:291``) arms every rank's ``--prefill-decode-interval`` (``managers/scheduler.py:1413-1426``).
    """

    def __init__(self, env: simpy.Environment, backend, mlp_share: float, interval: int = 0, min_bs: int = 0) -> None:
        self.env, self.backend, self.mlp_share = env, backend, mlp_share
        self.interval, self.min_bs = interval, min_bs  # --prefill-decode-interval and its -min-bs (0: SGLang's)
        self.active = 0
        self.joined = 0
        self.plans: list[tuple[float, int]] = []  # (seconds on its own, tokens through the MLP) per joined rank
        self.plain: list[float | None] = []  # per joined rank: its prefill's seconds without two-batch overlap
        self.tbo_passes = 0  # passes two-batch overlap ran, and the seconds it took off them
        self.tbo_saved_s = 0.0
        self.go = env.event()
        self.busy_until = 0.0
        self.starting = False
        self.on_leave: Callable[[], None] | None = None  # the prefill delayer's gather waits on the ranks planning
        self.passes = 0
        self.extend_at = -math.inf
        self.extending = False  # a rank joined the pass being planned with an extend
        self.waived: set[int] = set()  # ranks whose interval since extend_at --prefill-decode-interval-min-bs waived

    def enter(self):
        """A rank woke: it plans with the others, after any pass in flight."""
        self.active += 1
        if self.busy_until > self.env.now:
            yield self.env.timeout(self.busy_until - self.env.now)

    def leave(self) -> None:
        """A rank sleeps (nothing to run): the others do not wait for it."""
        self.active -= 1
        if not self.active and not self.joined:  # every rank idle: SGLang's idle loop turns run the interval out
            self.extend_at = -math.inf
        self._ready()
        if self.on_leave is not None:
            self.on_leave()

    def join(self, seconds: float, tokens: int, plain: float | None = None, extend: bool = False) -> simpy.Event:
        """A rank planned a pass of ``seconds`` on its own over ``tokens`` tokens (``plain``: a prefill's
        seconds without two-batch overlap, when it is on; ``extend``: it prefills); the event fires when the
        group's pass ends."""
        self.extending = self.extending or extend
        self.joined += 1
        self.active -= 1
        self.plans.append((seconds, tokens))
        self.plain.append(plain)
        go = self.go
        self._ready()
        if self.on_leave is not None:  # it planned: a delayer's gather still under way no longer waits on it
            self.on_leave()
        return go

    def defers(self, rank: int, decoding: int) -> bool:
        """Whether ``rank`` (``decoding`` requests running) defers its prefill this pass under
        ``--prefill-decode-interval``. SGLang arms it on every rank when any rank's pass extends (the gathered
        ``is_extend_in_batch``, ``managers/scheduler.py:1413-1426``) and counts it down a pass at a time on every
        rank (``_should_defer_prefill``, :1400-1411), so the ranks defer together and next prefill in the same
        pass; a rank with nothing to decode defers too (it joins the others' decode passes with an IDLE batch),
        unless its running batch is under ``--prefill-decode-interval-min-bs``, which waives the rest of its
        interval."""
        if self.passes - self.extend_at >= self.interval or rank in self.waived:
            return False
        if decoding < self.min_bs:
            self.waived.add(rank)
            return False
        return True

    def _ready(self) -> None:
        if not self.active and self.joined and not self.starting:
            self.starting = True
            self.env.timeout(0).callbacks.append(self._start)

    def _start(self, _event) -> None:
        self.starting = False
        if self.active or not self.joined:  # a rank woke at this instant and is still planning
            return
        go, seconds = self.go, self._overlapped()
        self.passes += 1
        if self.extending:
            self.extend_at, self.extending = self.passes, False
            self.waived.clear()
        self.busy_until = self.env.now + seconds
        self.active, self.joined, self.plans, self.plain = self.joined, 0, [], []  # they all plan again when it ends
        self.go = self.env.event()
        self.env.timeout(seconds).callbacks.append(lambda _e: go.succeed())

    def _overlapped(self) -> float:
        """The pass's seconds: with two-batch overlap where every rank prefills, else without it."""
        plain = self.plain
        if all(p is None for p in plain):  # two-batch overlap off, or no rank prefills
            return self._seconds(self.plans)
        without = self._seconds([(s if p is None else p, t) for (s, t), p in zip(self.plans, plain, strict=True)])
        if any(p is None for p in plain):  # a rank decodes: the forward modes disagree
            return without
        seconds = self._seconds(self.plans)
        self.tbo_passes += 1
        self.tbo_saved_s += without - seconds
        return seconds

    def _seconds(self, plans: list[tuple[float, int]]) -> float:
        if not self.mlp_share or len(plans) == 1:
            return max(s for s, _ in plans)
        total, backend = sum(t for _, t in plans), self.backend
        overhead = getattr(backend, "overhead_s", 0.0)
        return max(s + self.mlp_share * (backend.step_seconds(total - t, 0.0, 0, 0.0) - overhead) if total > t else s
                   for s, t in plans)  # fmt: skip


class DPController:
    """SGLang's DP controller for one server: places each request on an attention-DP rank
    (``managers/data_parallel_controller.py:105-145, 880-925``).

    round_robin cycles the ranks; total_requests and total_tokens pick the rank with the fewest running + waiting
    requests (or tokens, requests breaking ties) and add the request to its count, re-reading the ranks' loads
    at most every 20 ms, so a burst spreads on the counts; follow_bootstrap_room takes the request's bootstrap
    room modulo the ranks (PD prefill; the request id stands in for the room). A rank's tokens are its running
    requests' KV and its queue's prompts (``load_inquirer.py:141-147``).
    """

    def __init__(self, method: str, ranks: list) -> None:
        self.method, self.ranks = method, ranks
        self.counter = 0
        self.requests = [0] * len(ranks)
        self.tokens = [0.0] * len(ranks)
        self.refreshed = -math.inf

    def pick(self, req: Request, now: float):
        n = len(self.ranks)
        if self.method == "round_robin":
            i = self.counter % n
            self.counter += 1
        elif self.method == "follow_bootstrap_room":
            i = req.rid % n
        else:
            if now - self.refreshed >= DP_LOAD_REFRESH_S:
                self.refreshed = now
                self.requests = [r.load for r in self.ranks]
                self.tokens = [r.load_tokens for r in self.ranks]
            if self.method == "total_requests":
                i = self.requests.index(min(self.requests))
            else:
                i = min(range(n), key=lambda k: (self.tokens[k], self.requests[k]))
                self.tokens[i] += req.input_len
            self.requests[i] += 1
        return self.ranks[i]

"""The attention-DP ranks' shared pass (:class:`sim.serve.scheduler.dp.DPGroup`)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import simpy

from sim.serve.scheduler.dp import DPGroup


def pass_end(plans: list[tuple[float, float | None]]) -> tuple[float, DPGroup]:
    """When the group's pass ends with each rank's (seconds, seconds without two-batch overlap) planned."""
    env = simpy.Environment()
    group = DPGroup(env, backend=None, mlp_share=0.0)
    group.active = len(plans)
    ends = [group.join(s, 100, plain) for s, plain in plans]
    env.run()
    assert all(e.triggered for e in ends)
    return env.now, group


class TestTwoBatchOverlap:
    """The ranks agree to run two-batch overlap from their gathered forward modes: only when every rank with
    work runs an extend (``batch_overlap/two_batch_overlap.py:455-500``)."""

    def test_every_rank_prefilling_runs_it(self):
        now, group = pass_end([(0.8, 1.0), (0.6, 0.7)])
        assert now == 0.8
        assert (group.tbo_passes, group.tbo_saved_s) == (1, pytest.approx(0.2))

    def test_a_rank_decoding_keeps_every_rank_without_it(self):
        now, group = pass_end([(0.8, 1.0), (0.3, None)])
        assert now == 1.0
        assert group.tbo_passes == 0

    def test_with_it_off_the_slowest_rank_sets_the_pass(self):
        now, group = pass_end([(0.8, None), (0.3, None)])
        assert now == 0.8 and group.tbo_passes == 0


def test_a_rank_that_gathers_for_the_prefill_delayer_after_the_others_planned_is_not_left_waiting():
    """Found by two-batch overlap's shifted pass times on a 64-lane AgentX run: a rank woke in the instant
    after the others had gathered and was left waiting on them while they waited on it to plan the pass."""
    from sim.serve.scheduler.prefill_delayer import PrefillDelayer

    env = simpy.Environment()
    group = DPGroup(env, backend=None, mlp_share=0.0)
    delayer = PrefillDelayer(env, [], group, 30, None)
    group.active = 2
    verdicts = []

    def late_rank():
        verdicts.append((yield from delayer.negotiate(SimpleNamespace(idx=0))))
        yield group.join(0.3, 1)

    env.process(late_rank())
    env.run()
    assert not verdicts  # the other rank is still planning
    group.join(0.5, 1)
    env.run()
    assert verdicts == [True] and env.now == 0.5

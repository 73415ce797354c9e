"""``--prefill-decode-interval`` under DP attention, as SGLang 0.5.23 synchronises it: any rank's extend arms every
rank's interval (the gathered ``is_extend_in_batch``, ``managers/scheduler.py:1413-1426``,
``scheduler_components/dp_attn.py:291``) and every rank counts it down a pass at a time (``_should_defer_prefill``,
:1400-1411), so the ranks defer together and prefill in the same pass (:class:`sim.serve.scheduler.dp.DPGroup`)."""

from __future__ import annotations

import pytest
import simpy

from sim.serve.scheduler.dp import DPGroup

INTERVAL = 3  # --prefill-decode-interval; --prefill-decode-interval-min-bs 0 unless a test says


def one_pass(group: DPGroup, env: simpy.Environment, extends: tuple[bool, ...]) -> None:
    """A pass of the group's ranks, rank k extending if ``extends[k]``."""
    group.active = len(extends)
    for extend in extends:
        group.join(0.1, 10, extend=extend)
    env.run()


def deferred_passes(group: DPGroup, env: simpy.Environment, rank: int, decoding: int) -> int:
    """Passes (of two decoding ranks) that ``rank`` defers before it may prefill again."""
    n = 0
    while group.defers(rank, decoding):
        n += 1
        one_pass(group, env, (False, False))
        assert n <= 100
    return n


class TestTheGroupArmsEveryRank:
    def test_one_ranks_extend_defers_every_rank_for_the_interval(self):
        env = simpy.Environment()
        group = DPGroup(env, backend=None, mlp_share=0.0, interval=INTERVAL)
        one_pass(group, env, (True, False))  # rank 0 prefills, rank 1 decodes
        assert group.defers(0, 4) and group.defers(1, 4)
        assert deferred_passes(group, env, 1, 4) == 3
        assert not group.defers(0, 4)  # both come out in the same pass

    def test_a_rank_with_nothing_to_decode_defers_too(self):
        env = simpy.Environment()
        group = DPGroup(env, backend=None, mlp_share=0.0, interval=INTERVAL)
        one_pass(group, env, (True, False))
        assert deferred_passes(group, env, 0, 0) == 3  # min_bs 0: batch_size() < 0 is never true

    def test_min_bs_waives_a_ranks_interval_until_the_next_extend(self):
        env = simpy.Environment()
        group = DPGroup(env, backend=None, mlp_share=0.0, interval=INTERVAL, min_bs=2)
        one_pass(group, env, (True, False))
        assert not group.defers(0, 1)  # one running: waived
        assert not group.defers(0, 5)  # and stays waived for this interval, whatever it runs now
        assert group.defers(1, 5)  # the other rank's own count goes on
        one_pass(group, env, (False, True))
        assert group.defers(0, 5)  # the next extend arms it again

    def test_no_extend_no_deferral_and_every_rank_idle_runs_the_interval_out(self):
        env = simpy.Environment()
        group = DPGroup(env, backend=None, mlp_share=0.0, interval=INTERVAL)
        one_pass(group, env, (False, False))
        assert not group.defers(0, 4)
        one_pass(group, env, (True, False))
        group.active = 2
        group.leave()
        assert group.defers(1, 4)  # one rank still planning
        group.leave()
        assert not group.defers(1, 4)  # SGLang's idle loop turns count it down at once


@pytest.mark.slow
def test_the_published_agentx_warm_up_ends_inside_aiperfs_grace_period_on_measured_tables():
    """InferenceX #2718's c128 run as published (its B200 launcher with DP attention: ``--prefill-decode-interval
    24``, 6,144-token chunks a rank, HiCache at ratio 8; its aiperf command: the start ratios 0.25-0.75, a primer and
    10 one-token calls a lane, ``--warmup-grace-period 1800``) on B200's measured kernels. When only the rank that
    prefilled owed the interval, its 24 passes were the other ranks' prefill chunks: the node prefilled about 1.2K
    tokens/s a rank and the warm-up was cut at 1,800 s."""
    pytest.importorskip("aiconfigurator_core")
    from sim.app.run import run_scenario
    from sim.interop.fromsglang import from_sglang
    from sim.scenario.load import scenario_from_dict

    launch = ("SGLANG_SIMULATE_ACC_LEN=2.49 python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Pro "
              "--tp 8 --dp 8 --enable-dp-attention --ep-size 8 --moe-a2a-backend megamoe --load-balance-method "
              "total_requests --prefill-decode-interval 24 --enable-deepseek-v4-fp4-indexer --mem-fraction-static 0.90 "
              "--swa-full-tokens-ratio 0.02 --max-running-requests 256 --chunked-prefill-size 49152 "
              "--speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 "
              "--speculative-num-draft-tokens 4 --enable-hierarchical-cache --hicache-ratio 8 "
              "--hicache-write-policy write_through")  # fmt: skip
    aiperf = ("aiperf profile --scenario inferencex-agentx-mvp --streaming --concurrency 128 --benchmark-duration 1 "
              "--trajectory-start-min-ratio 0.25 --trajectory-start-max-ratio 0.75 --warmup-requests-per-lane 10 "
              "--trace-idle-gap-cap-seconds 300 --warmup-grace-period 1800 --num-dataset-entries 393 --random-seed 1 "
              "--unsafe-override --public-dataset semianalysis_cc_traces_weka_062126")  # fmt: skip
    router = ("python -m sglang_router.launch_router --worker-urls http://localhost:8889 --policy cache_aware "
              "--request-id-headers x-correlation-id --dp-aware")  # fmt: skip
    sc = from_sglang(launch, [aiperf, router], gpu="B200").scenario
    client = run_scenario(scenario_from_dict(sc, source="test")).summary["client"]
    assert not client.get("warmup_failed")
    assert 0 < client["measured_from_s"] < 1800

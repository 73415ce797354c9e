"""Lane replay as aiperf plays AgentX: pacing, the idle cap, subagent fan-out and join, churn, tier accounting."""

import json
import weakref
from pathlib import Path

import pytest

from sim.app.run import run_scenario
from sim.scenario.load import scenario_from_dict
from sim.serve.lanes import format_agentx_report

DATA = Path(__file__).resolve().parents[3] / "data" / "agentic"
PAGE_BYTES = 256 * 1000  # the generic model below: 1,000 B per token


def call(t, n_in, ids, out=2, api=1.0):
    return {"t": t, "type": "n", "model": "m", "in": n_in, "out": out, "hash_ids": ids, "api_time": api}


def group(t, calls, duration_ms):
    return {"t": t, "type": "subagent", "agent_id": "g", "duration_ms": duration_ms, "requests": calls}


def run_lanes(tmp_path, trajs, *, l1_pages=400, hicache=False, **workload):
    path = tmp_path / "w.jsonl"
    path.write_text("".join(json.dumps({"id": str(i), "block_size": 64, "hash_id_scope": "local", "requests": r}) + "\n"
                            for i, r in enumerate(trajs)))  # fmt: skip
    w = {"kind": "lanes", "path": str(path), "lanes": 1, "trajectory_start_min_ratio": 0.0,
         "trajectory_start_max_ratio": 0.0, "warmup_requests_per_lane": 0, "idle_gap_cap_s": None,
         "benchmark_duration_s": 100.0, **workload}  # fmt: skip
    sc = scenario_from_dict({
        "name": "lanes", "seed": 3, "model": {"name": "generic", "generic_bytes_per_token": 1000},
        "hardware": {"kv_mem_gb": l1_pages * PAGE_BYTES / 1e9},
        "hicache": {"enabled": hicache, "hicache_ratio": 4.0}, "workload": w,
    }, source="test")  # fmt: skip
    result = run_scenario(sc)
    return result, result.requests.sort_values("rid").reset_index(drop=True)


def first_session(df):
    """The lane's first trajectory (the lane replays the dataset again and again until the duration ends)."""
    return df[df["session"] == df["session"].iloc[-1 if df["round"].iloc[0] < 0 else 0]].reset_index(drop=True)


class TestPacing:
    def test_a_call_goes_out_its_end_to_start_gap_after_the_previous_call_finished(self, tmp_path):
        # Recorded: 0 s (1 s of api time), 11 s (1 s), 20 s -> idle gaps 10 s and 8 s.
        _, df = run_lanes(tmp_path, [[call(0, 256, [1]), call(11, 256, [1]), call(20, 256, [1])]])
        df = first_session(df)
        gaps = df["arrival_s"].to_numpy()[1:] - df["finish_s"].to_numpy()[:-1]
        assert gaps == pytest.approx([10.0, 8.0])

    def test_the_idle_gap_cap_compresses_long_start_to_start_gaps_as_aiperf_does(self, tmp_path):
        # Starts 0, 2, 500 s: the 498 s gap keeps 30 s (aiperf's _IdleGapTimeWarp), so the third call starts 32 s
        # in, and its end-to-start gap is 32 - 2 - 1 s of api time = 29 s; the short gap is untouched.
        result, df = run_lanes(tmp_path, [[call(0, 256, [1]), call(2, 256, [1]), call(500, 256, [1])]],
                               idle_gap_cap_s=30)  # fmt: skip
        df = first_session(df)
        gaps = df["arrival_s"].to_numpy()[1:] - df["finish_s"].to_numpy()[:-1]
        assert gaps == pytest.approx([1.0, 29.0])
        assert result.summary["client"]["idle_gap_s"]["cap_s"] == 30

    def test_a_groups_spawn_and_end_move_with_the_capped_timeline(self, tmp_path):
        # Starts 0 (parent), 100 (the group's call, 1 s), 400 (parent): cap 10 s -> 0, 10, 20. The group spawns
        # 10 - 1 = 9 s after the first call's end; its end (101 s, inside the cut tail) lands at 11 s, 9 s before
        # the joining parent, which goes out 20 - 1 = 19 s after the first call's end (uncapped: 399 s).
        trajs = [[call(0, 256, [1]), group(100.0, [call(100.0, 256, [9])], 1000), call(400, 512, [1, 2, 3, 4])]]
        _, df = run_lanes(tmp_path, trajs, idle_gap_cap_s=10)
        df = first_session(df)
        assert df["arrival_s"].iloc[1] - df["finish_s"].iloc[0] == pytest.approx(9.0)
        assert df["arrival_s"].iloc[2] - df["finish_s"].iloc[0] == pytest.approx(19.0)
        assert df["arrival_s"].iloc[2] - df["finish_s"].iloc[1] >= 9.0

    def test_the_start_point_skips_the_calls_before_it_and_warms_with_the_last_of_them(self, tmp_path):
        calls = [call(10.0 * k, 256 * (k + 1), list(range(4 * (k + 1)))) for k in range(10)]
        result, df = run_lanes(tmp_path, [calls], trajectory_start_min_ratio=0.5, trajectory_start_max_ratio=0.5,
                               benchmark_duration_s=60.0)  # fmt: skip
        df = df[df["session"] == df["session"].iloc[0]].reset_index(drop=True)  # warm-up and t* share a session
        # t* = 45 s: call 4 (40 s) primes with one output token, calls 5.. are measured; the first waits t5 - t* = 5 s.
        assert list(df["input_tokens"]) == [256 * k for k in range(5, 11)]
        assert df["round"].iloc[0] == -1 and df["arrival_s"].iloc[0] == 0.0 and df["output_tokens"].iloc[0] == 1
        assert df["arrival_s"].iloc[1] - df["finish_s"].iloc[0] == pytest.approx(5.0)
        report = result.summary["client"]
        assert report["requests"] == len(result.requests) - 1 and report["measured_from_s"] == df["finish_s"].iloc[0]
        assert df["device_hit_tokens"].iloc[1] == 1280  # the warm-up's five pages

    def test_more_warm_up_calls_carry_the_trajectory_past_its_start_point_back_to_back(self, tmp_path):
        calls = [call(10.0 * k, 256 * (k + 1), list(range(4 * (k + 1))), out=50) for k in range(10)]
        _, df = run_lanes(tmp_path, [calls], trajectory_start_min_ratio=0.5, trajectory_start_max_ratio=0.5,
                          warmup_requests_per_lane=2, benchmark_duration_s=60.0)  # fmt: skip
        df = df[df["session"] == df["session"].iloc[0]].reset_index(drop=True)
        # The primer (call 4), then calls 5 and 6, each the moment the one before ends, one output token each;
        # measured from call 7, the recorded gap after call 6 later: 70 - 60 - 1 = 9 s.
        warm, measured = df[df["round"] == -1], df[df["round"] >= 0]
        assert list(warm["input_tokens"]) == [256 * k for k in (5, 6, 7)] and set(warm["output_tokens"]) == {1}
        assert list(warm["arrival_s"].iloc[1:]) == pytest.approx(list(warm["finish_s"].iloc[:-1]))
        assert measured["input_tokens"].iloc[0] == 256 * 8 and set(measured["output_tokens"]) == {50}
        assert measured["arrival_s"].iloc[0] - warm["finish_s"].iloc[-1] == pytest.approx(9.0)

    def test_the_primers_are_spread_so_every_lanes_start_point_lands_at_once(self, tmp_path):
        # t* = 45 s on both: lane 0's primer (40 s) leads it by 5 s, lane 1's (30 s) by 15; so lane 1's goes first
        # and lane 0's 15 - 5 = 10 s later.
        lane0 = [call(10.0 * k, 256 * (k + 1), list(range(4 * (k + 1)))) for k in range(10)]
        lane1 = [call(30.0 * k, 256 * (k + 1), list(range(4 * (k + 1)))) for k in range(4)]
        _, df = run_lanes(tmp_path, [lane0, lane1], lanes=2, trajectory_start_min_ratio=0.5,
                          trajectory_start_max_ratio=0.5)  # fmt: skip
        primers = df[df["round"] == -1].set_index("input_tokens")["arrival_s"]
        assert primers[256 * 5] == pytest.approx(10.0) and primers[256 * 2] == 0.0

    def test_the_warm_up_leaves_one_parent_call_to_measure(self, tmp_path):
        calls = [call(10.0 * k, 256 * (k + 1), list(range(4 * (k + 1)))) for k in range(4)]
        _, df = run_lanes(tmp_path, [calls], trajectory_start_min_ratio=0.5, trajectory_start_max_ratio=0.5,
                          warmup_requests_per_lane=10, benchmark_duration_s=60.0)  # fmt: skip
        # t* = 15 s: call 1 primes, call 2 warms, call 3 (the last) is measured.
        assert list(df["round"].iloc[:3]) == [-1, -1, 3] and df["input_tokens"].iloc[2] == 1024


class TestSubagents:
    def test_groups_fan_out_together_and_the_parent_waits_for_both(self, tmp_path):
        parent0 = call(0, 256, [1, 2, 3, 4])
        g1 = group(2.0, [call(2.0, 256, [10]), call(4.0, 256, [10])], 3000)  # ends at 5 s
        g2 = group(2.0, [call(2.0, 256, [20], out=400)], 1000)  # ends at 3 s
        parent1 = call(6.0, 512, [1, 2, 3, 4, 5, 6, 7, 8])
        _, df = run_lanes(tmp_path, [[parent0, g1, g2, parent1]])
        df = first_session(df)
        p0, a1, b1, a2, p1 = (df.iloc[i] for i in range(5))
        assert a1["input_tokens"] == b1["input_tokens"] == 256 and p1["input_tokens"] == 512
        assert a1["arrival_s"] == pytest.approx(p0["finish_s"] + 1.0) == b1["arrival_s"]  # spawn gap 2 - 0 - 1
        assert a2["arrival_s"] == pytest.approx(a1["finish_s"] + 1.0)  # the chain's own gap, 4 - 2 - 1
        assert b1["finish_s"] > a1["finish_s"]  # 400 output tokens: the groups overlap in time
        joined = max(a2["finish_s"], b1["finish_s"])
        assert p1["arrival_s"] == pytest.approx(max(joined + 1.0, p0["finish_s"] + 5.0))  # 6 - 5 after the join
        assert p1["device_hit_tokens"] == 256  # its own prefix; the subagents' contexts are their own

    def test_a_background_group_does_not_hold_the_parent_but_holds_the_lane(self, tmp_path):
        slow = group(1.0, [call(1.0, 256, [10]), call(100.0, 256, [10])], 200_000)
        first = [call(0, 256, [1]), slow, call(3.0, 256, [1])]
        _, df = run_lanes(tmp_path, [first, [call(0, 256, [7])]])
        p0, s1, p1, s2, nxt = (df.iloc[i] for i in range(5))
        assert p1["arrival_s"] < s2["arrival_s"]  # the parent went on while the group ran
        assert nxt["session"] != p0["session"] and nxt["arrival_s"] == pytest.approx(s2["finish_s"])


class TestChurn:
    def test_a_lane_replays_the_dataset_in_order_each_time_as_a_new_session(self, tmp_path):
        a = [call(0, 512, list(range(8))), call(5, 768, list(range(12)))]
        b = [call(0, 256, [50, 51, 52, 53])]
        result, df = run_lanes(tmp_path, [a, b], benchmark_duration_s=40.0)
        inputs = list(df["input_tokens"])
        assert inputs[:5] == [512, 768, 256, 512, 768]
        assert df["arrival_s"].iloc[2] == pytest.approx(df["finish_s"].iloc[1])  # the next tree starts at once
        assert df["session"].iloc[3] != df["session"].iloc[0]
        assert df["device_hit_tokens"].iloc[3] == 0  # a new session shares nothing with an earlier one
        assert df["device_hit_tokens"].iloc[4] == 512  # ... but its own calls share their prefix
        assert result.summary["client"]["sessions_started"] >= 4

    def test_the_replay_holds_the_trajectories_its_lanes_play_not_the_corpus(self, tmp_path, monkeypatch):
        """The corpus is read again trajectory by trajectory (``WekaCorpus``): with 2 lanes cycling through 30
        trajectories, no more than 2 are alive when a call is sent."""
        from sim.serve.lanes import LanePlayer
        from sim.workload.trajectory import WekaCorpus

        drawn, most = [], 0
        read, send = WekaCorpus.__getitem__, LanePlayer._send

        def reading(self, k):
            traj = read(self, k)
            drawn.append(weakref.ref(traj))
            return traj

        def sending(self, *args):
            nonlocal most
            most = max(most, sum(ref() is not None for ref in drawn))
            return send(self, *args)

        monkeypatch.setattr(WekaCorpus, "__getitem__", reading)
        monkeypatch.setattr(LanePlayer, "_send", sending)
        trajs = [[call(0, 256, [i]), call(2, 512, [i, i + 1])] for i in range(30)]
        result, _ = run_lanes(tmp_path, trajs, lanes=2, benchmark_duration_s=200.0)
        assert result.summary["client"]["sessions_started"] > 30 and len(drawn) > 30
        assert most == 2

    def test_no_call_is_sent_after_the_duration(self, tmp_path):
        a = [call(0, 256, [1]), call(5, 256, [1])]
        _, df = run_lanes(tmp_path, [a], benchmark_duration_s=12.0)
        assert df["arrival_s"].max() < 12.0 < df["finish_s"].max() + 5

    @pytest.mark.parametrize("steps, sent", [
        ([call(0, 256, [1]), call(40, 256, [1])], 1),  # the parent's next call is due after the end
        ([call(0, 256, [1]), group(5, [call(5, 256, [2]), call(40, 256, [2, 3])], 36_000), call(45, 256, [1])],
         2),  # the group's second call is due after the end, so the parent's call that joins it never goes
    ], ids=["parent", "subagent"])  # fmt: skip
    def test_a_run_ends_with_its_last_call_not_with_an_idle_gap_past_the_end(self, tmp_path, steps, sent):
        result, df = run_lanes(tmp_path, [steps], benchmark_duration_s=20.0, benchmark_grace_period_s=5.0)
        assert len(df) == sent and df["arrival_s"].max() < 20.0
        assert result.summary["simulated_s"] == pytest.approx(df["finish_s"].max(), abs=1e-3)
        assert df["finish_s"].max() < 20.0


class TestTierAccounting:
    def test_device_and_host_hits_against_a_hand_computed_case(self, tmp_path):
        """L1 = 15 pages, write_through. A1 (4 pages) is cached and backed up; X's chunk (13 pages, evicting for
        them and one page more: 14) leaves no room for A1's, so A1's pages are demoted to host (at 14 pages,
        X's prompt, output and a page would not fit the admission budget); A2 repeats A1's 16 blocks: 1,024 host-hit
        tokens; A3 repeats A2's 32 blocks while A2 is on device: 2,048 device-hit tokens."""
        a1 = call(0, 1024, list(range(16)))
        x = call(2, 3328, list(range(100, 152)))
        a2 = call(4, 2048, list(range(32)))
        a3 = call(6, 2304, list(range(32)) + [200, 201, 202, 203])
        result, all_calls = run_lanes(tmp_path, [[a1, x, a2, a3]], l1_pages=15, hicache=True, benchmark_duration_s=20.0)
        df = first_session(all_calls)
        assert len(df) == 4
        assert result.summary["capacity_pages"]["l1"] == 15
        assert list(df["device_hit_tokens"]) == [0, 0, 0, 2048]
        assert list(df["host_hit_tokens"]) == [0, 0, 1024, 0]
        inputs = 1024 + 3328 + 2048 + 2304
        assert df["computed_tokens"].sum() == inputs - 3072
        # Every later session repeats the first, in a namespace of its own: the same split each time.
        whole = [g for _, g in all_calls.groupby("session") if len(g) == 4]
        assert len(whole) >= 2 and all(list(g["host_hit_tokens"]) == [0, 0, 1024, 0] for g in whole)
        n_in = all_calls["input_tokens"].sum()
        hits, report = result.summary["hit_rate"], result.summary["client"]
        assert hits["host"] == pytest.approx(all_calls["host_hit_tokens"].sum() / n_in) == report["cpu_hit"]
        assert hits["device"] == pytest.approx(all_calls["device_hit_tokens"].sum() / n_in) == report["gpu_hit"]


class TestReport:
    def test_agentx_figures_over_the_measured_calls(self, tmp_path):
        result, df = run_lanes(tmp_path, [[call(0, 512, list(range(8)), out=50), call(3, 768, list(range(12)), out=20)]],
                               benchmark_duration_s=20.0)  # fmt: skip
        r = result.summary["client"]
        assert r["requests"] == len(df) >= 4
        duration = df["finish_s"].max() - df["arrival_s"].min()
        tokens = df["input_tokens"].sum() + df["output_tokens"].sum()
        assert r["tok_per_s_per_gpu"] == pytest.approx(tokens / duration)
        itl = sorted(((df["e2e_s"] - df["ttft_s"]) / (df["output_tokens"] - 1)).to_numpy())
        k = 0.9 * (len(itl) - 1)  # InferenceX's percentile: linear between the closest ranks
        assert r["itl_s"]["p90"] == pytest.approx(itl[int(k)] + (k - int(k)) * (itl[int(k) + 1] - itl[int(k)]))
        assert r["ttft_s"]["mean"] == pytest.approx(df["ttft_s"].mean())
        assert r["running_req"]["p90"] <= 1 and r["queue_req"]["p50"] == 0

    def test_the_traffic_the_lanes_offered(self, tmp_path):
        # Gaps: 3 - 0 - 1 = 2 s within a session; a new session's first call follows no gap of its own.
        calls = [call(0, 512, list(range(8)), out=50), call(3, 768, list(range(12)), out=20)]
        result, df = run_lanes(tmp_path, [calls], benchmark_duration_s=30.0, lanes=2)
        r = result.summary["client"]
        duration = df["finish_s"].max() - df["arrival_s"].min()
        assert r["calls_per_lane_hour"] == pytest.approx(len(df) / (2 * duration / 3600))
        assert r["isl"] == {"mean": pytest.approx(df["input_tokens"].mean()), "p50": df["input_tokens"].median()}
        assert r["osl"]["mean"] == pytest.approx(df["output_tokens"].mean()) and r["osl"]["p50"] in (20, 35, 50)
        gaps = r["idle_gap_s"]
        assert gaps["gaps"] == (df["round"] % 2 == 1).sum() and gaps["mean"] == gaps["p50"] == pytest.approx(2.0)
        assert r["warmup_end_s"] == r["measured_from_s"] == 0.0
        text = format_agentx_report(r)
        assert f"{r['calls_per_lane_hour']:,.1f} calls a lane-hour" in text and "idle gap mean 2.00 s" in text

    @pytest.mark.parametrize("instances", [1, 2])
    def test_under_dp_attention_a_node_is_its_tp_gpus_not_tp_times_ranks(self, instances):
        # A TP8 DP8 V4 node: eight attention-DP ranks on the same eight GPUs (sglang/srt/arg_groups/
        # parallel_hook.py:39-61), so tok/s/GPU divides by 8 a node, as InferenceX divides by TP.
        sc = scenario_from_dict({
            "name": "dp8", "seed": 1, "model": "deepseek-v4-flash",
            "hardware": {"kv_mem_gb": 1.0, "tp_size": 8, "dp_size": 8, "enable_dp_attention": True},
            "cluster": {"instances": instances}, "hicache": {"enabled": False},
            "workload": {"kind": "lanes", "path": str(DATA / "weka_synthetic.jsonl"), "lanes": 8,
                         "benchmark_duration_s": 20},
        }, source="test")  # fmt: skip
        result = run_scenario(sc)
        r, df = result.summary["client"], result.requests
        assert df["instance"].nunique() > 1  # the ranks served, each its own scheduler
        assert r["gpus"] == 8 * instances
        m = df[df["arrival_s"] >= r["measured_from_s"]]
        tokens = m["input_tokens"].sum() + m["output_tokens"].sum()
        assert r["tok_per_s_per_gpu"] == pytest.approx(tokens / r["duration_s"] / (8 * instances))


def test_the_bundled_weka_file_replays_through_lanes_on_v4():
    sc = scenario_from_dict({
        "name": "bundled", "seed": 1, "model": "deepseek-v4-flash", "hardware": {"kv_mem_gb": 1.0},
        "hicache": {"enabled": True, "hicache_ratio": 4.0},
        "workload": {"kind": "lanes", "path": str(DATA / "weka_synthetic.jsonl"), "lanes": 4, "benchmark_duration_s": 60},
    }, source="test")  # fmt: skip
    result = run_scenario(sc)
    r = result.summary["client"]
    assert r["requests"] > 20 and 0 < r["prefix_hit"] < 1 and r["sessions_started"] >= 4
    assert result.summary["requests"]["unfinished"] == 0


def test_a_bad_trajectory_stops_the_run_before_it_starts_with_one_line(tmp_path, capsys):
    from sim.app.cli import main

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"id": "a", "block_size": 64, "requests": [{"t": 0, "type": "n", "in": 10}]}) + "\n")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(f"name: s\nworkload:\n  kind: lanes\n  path: {bad}\n")
    assert main(["run", str(scenario), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"hicache-sim: error: {bad}:1: requests[0].out: missing" and not (tmp_path / "out").exists()


def test_a_prompt_the_kv_pool_cannot_hold_is_refused_and_the_lane_goes_on(tmp_path):
    """SGLang refuses a prompt of pool tokens - 6 or more before queueing it (tp_worker.py:568-572)."""
    big = call(2, 14 * 256 - 6, list(range(56)))  # L1 = 14 pages
    result, df = run_lanes(tmp_path, [[call(0, 256, [1]), big, call(4, 512, [1, 2, 3, 4, 5, 6, 7, 8])]], l1_pages=14,
                           benchmark_duration_s=3.0)  # fmt: skip
    assert result.summary["requests"]["dropped"] == {"exceeds_kv_capacity": 1}
    assert list(df["input_tokens"][:2]) == [256, 512]


def test_calls_in_flight_get_the_grace_period_and_the_run_ends_after_it(tmp_path):
    long = [call(0, 256, [1]), call(3, 256, [1], out=5000)]  # 5,000 decode passes: longer than the grace
    result, df = run_lanes(tmp_path, [long], benchmark_duration_s=5.0, benchmark_grace_period_s=1.0)
    s = result.summary
    assert s["requests"]["unfinished"] == 1 and s["client"]["requests"] == len(df) == 1
    assert s["simulated_s"] == pytest.approx(6.0, abs=1e-6)
    waited = run_lanes(tmp_path, [long], benchmark_duration_s=5.0, benchmark_grace_period_s=None)[0].summary
    assert waited["requests"]["unfinished"] == 0 and waited["client"]["requests"] == 2


class TestWarmupGrace:
    """aiperf 0.13.0 cancels warm-up calls still in flight at the warm-up grace period and aborts the run
    (timing/phase/runner.py:1157-1175, credit/callback_handler.py:334-351)."""

    calls = [call(10.0 * k, 256 * (k + 1) * 40, list(range(4 * (k + 1) * 40))) for k in range(10)]

    def test_a_warm_up_past_its_grace_period_aborts_the_run_there(self, tmp_path):
        kw = dict(l1_pages=4000, trajectory_start_min_ratio=0.9, trajectory_start_max_ratio=0.9,
                  warmup_requests_per_lane=1, benchmark_duration_s=60.0)  # fmt: skip
        result, df = run_lanes(tmp_path, [self.calls], **kw)
        warm = df[df["round"] == -1]
        took = float(warm["finish_s"].max())
        assert took > 0 and result.summary["client"]["requests"] > 0  # without a grace: waits, then measures
        result, df = run_lanes(tmp_path, [self.calls], warmup_grace_period_s=took / 2, **kw)
        r = result.summary["client"]
        assert r["warmup_failed"] == 1 and r["requests"] == 0 and r["warmup_cut_s"] == pytest.approx(took / 2)
        assert result.summary["requests"]["finished"] == 0 and result.summary["requests"]["unfinished"] == 1
        assert "aborts the run" in format_agentx_report(r)

    def test_a_warm_up_within_its_grace_period_changes_nothing(self, tmp_path):
        kw = dict(l1_pages=4000, trajectory_start_min_ratio=0.9, trajectory_start_max_ratio=0.9,
                  warmup_requests_per_lane=1, benchmark_duration_s=60.0)  # fmt: skip
        _, base = run_lanes(tmp_path, [self.calls], **kw)
        _, graced = run_lanes(tmp_path, [self.calls], warmup_grace_period_s=1e6, **kw)
        assert base.equals(graced)

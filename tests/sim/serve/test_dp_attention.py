"""DP attention: one scheduler, KV pool, radix tree and host pool per rank; ranks step together; the DP
controller places requests.

SGLang 0.5.23: arg_groups/parallel_hook.py:39-61 (--dp-size N --enable-dp-attention is N attention-DP ranks),
:326-335 (chunked prefill split over the ranks), mem_cache/kv_cache_configurator.py:3119-3132 (running cap per
rank), arg_groups/memory_hook.py:370-378 (the DP reserve), managers/scheduler_components/dp_attn.py:518-676
(the ranks all-gather and idle ranks join every pass), managers/data_parallel_controller.py (dispatch).
"""

import json

import pytest

from sim.app.run import build, run_scenario
from sim.base.errors import InputError
from sim.model import hardware
from sim.model.modelcfg import derive, load_config
from sim.scenario.load import build_model_spec, scenario_from_dict
from sim.scenario.resolve import device_pools, dp_mlp_share


def dp_scenario(dp: int = 4, method: str = "round_robin", workload: dict | None = None, **hw):
    return scenario_from_dict({
        "name": "dp", "model": "deepseek-v4-flash",
        "hardware": {"kv_mem_gb": 0.5, "tp_size": 4, "dp_size": dp, "enable_dp_attention": dp > 1, **hw},
        "hicache": {"enabled": True, "hicache_ratio": 2.0},
        "scheduler": {"max_running_requests": 64, "chunked_prefill_size": 8192, "load_balance_method": method},
        "workload": workload or {"kind": "synthetic", "num_requests": 12, "rate": 1000.0, "input_length": 1024,
                                 "output_length": 8},
    }, source="test")  # fmt: skip


def placements(sc) -> list[int]:
    df = run_scenario(sc).requests.sort_values("rid")
    return df["instance"].tolist()


class TestPerRankState:
    def test_a_dp4_server_has_four_caches_each_sized_as_sglang_sizes_a_rank(self):
        sc = dp_scenario(4)
        sim, _, _ = build(sc)
        l1, _ = device_pools(sc, build_model_spec(sc))
        assert len(sim.instances) == 4
        assert len({id(i.cache) for i in sim.instances}) == 4  # own pools and tree each
        assert {i.cache.c.full_cap for i in sim.instances} == {l1 * 256}  # each rank's GPUs hold a whole pool
        assert sim.cfg.l2_pages == 2 * l1  # and its own host pool
        assert sim.cfg.max_running_requests == 64 // 4
        assert sim.cfg.chunked_prefill_size == 8192 // 4

    def test_a_rank_caches_only_what_it_served(self):
        sc = dp_scenario(2, workload={"kind": "synthetic", "num_requests": 2, "rate": 1000.0, "input_length": 1024,
                                      "output_length": 4, "shared_prefix_length": 1024})  # fmt: skip
        df = run_scenario(sc).requests.sort_values("rid")
        # the same prompt twice, round robin: the second lands on the other rank's empty tree
        assert df["instance"].tolist() == [0, 1]
        assert df["device_hit_tokens"].tolist() == [0, 0]

    def test_attention_weights_replicate_over_the_ranks_so_each_gpu_has_less_kv(self):
        def v4(dp: int):
            return scenario_from_dict({"name": "w", "model": {"name": "f", "config": "deepseek-v4-flash"},
                                       "hardware": {"gpu": "H200", "tp_size": 8, "dp_size": dp,
                                                    "enable_dp_attention": dp > 1},
                                       "hicache": {"enabled": False}}, source="test")  # fmt: skip

        cfg, _ = load_config("deepseek-v4-flash")
        w1 = derive(cfg, tp_size=8).weight_bytes_per_rank
        w8 = derive(cfg, tp_size=8, attn_dp_size=8).weight_bytes_per_rank
        gpu = hardware.get_gpu("H200")
        chunk = v4(1).scheduler.chunked_prefill_size
        mfs1 = hardware.default_mem_fraction_static(gpu, tp_size=8, chunked_prefill_size=chunk)
        mfs8 = hardware.default_mem_fraction_static(gpu, tp_size=8, chunked_prefill_size=chunk, attn_dp_size=8)
        assert w8 > w1 and mfs8 < mfs1
        assert v4(8).hardware.kv_mem_gb == round(hardware.kv_budget_bytes(gpu, mfs8, w8) / 1e9, 3)
        assert v4(8).hardware.kv_mem_gb < v4(1).hardware.kv_mem_gb


class TestDispatch:
    def test_round_robin_cycles_the_ranks(self):
        assert placements(dp_scenario(4)) == [0, 1, 2, 3] * 3

    def test_servers_take_turns_and_each_controller_picks_among_its_own_ranks(self):
        sc = scenario_from_dict({**dp_scenario(2).model_dump(mode="json"), "cluster": {"instances": 2}}, source="t")
        # ranks 0-1 are server 0's, 2-3 server 1's
        assert placements(sc)[:4] == [0, 2, 1, 3]

    def test_follow_bootstrap_room_takes_the_room_modulo_the_ranks(self):
        assert placements(dp_scenario(4, "follow_bootstrap_room")) == [rid % 4 for rid in range(12)]

    def test_total_requests_spreads_a_burst_on_its_own_counts(self):
        # all 12 arrive within 20 ms: the loads are read once, then each pick adds one to its rank
        assert sorted(placements(dp_scenario(4, "total_requests"))) == sorted([0, 1, 2, 3] * 3)

    def test_total_tokens_sends_the_next_request_to_the_lightest_rank(self, tmp_path):
        # a long prompt, then short ones 1 s later: rank 0 still holds the long one
        trace = tmp_path / "t.jsonl"
        rows = [{"timestamp": 0, "input_length": 8192, "output_length": 4000, "hash_ids": list(range(16))}]
        rows += [{"timestamp": 1000, "input_length": 512, "output_length": 4, "hash_ids": [100 + i]} for i in range(3)]
        trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
        sc = dp_scenario(2, "total_tokens", workload={"kind": "trace", "path": str(trace)})
        assert placements(sc) == [0, 1, 1, 1]

    def test_a_ranks_token_load_is_its_running_kv_plus_its_queued_prompts_throughout_a_run(self):
        """total_tokens reads a running total kept at enqueue and prefill end: it is the queue's sum at every
        instant (load_inquirer.py:141-147)."""
        sim, arrivals, _ = build(dp_scenario(2, "total_tokens", workload={
            "kind": "synthetic", "num_requests": 40, "rate": 50.0, "input_length": 2048, "output_length": 64}))
        seen = []

        def check():
            while True:
                yield sim.env.timeout(0.005)
                for r in sim.instances:
                    queued = sum(x.req.input_len for x in r.waiting) + sum(x.req.input_len for x in r.prefilling)
                    seen.append(queued > 0)
                    assert r.load_tokens == r.running_batch.decode_ctx + queued

        sim.env.process(check())
        sim.run(arrivals)
        assert any(seen) and not all(seen)  # it saw queues, and emptied ones


class TestLockstep:
    def trace(self, tmp_path):
        trace = tmp_path / "t.jsonl"
        rows = [{"timestamp": 0, "input_length": 8192, "output_length": 2, "hash_ids": list(range(16))},
                {"timestamp": 0, "input_length": 512, "output_length": 2, "hash_ids": [100]}]  # fmt: skip
        trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return {"kind": "trace", "path": str(trace)}

    def run(self, tmp_path, dp: int):
        sc = dp_scenario(dp, workload=self.trace(tmp_path), kv_mem_gb=2.0)
        if dp == 1:  # two independent instances instead of two ranks
            sc = scenario_from_dict({**sc.model_dump(mode="json"), "cluster": {"instances": 2}}, source="test")
        return run_scenario(sc).requests.sort_values("rid").set_index("rid")

    def test_a_ranks_pass_lasts_as_long_as_the_slowest_ranks(self, tmp_path):
        alone, dp = self.run(tmp_path, 1), self.run(tmp_path, 2)
        assert dp["instance"].tolist() == [0, 1]
        # the 512-token prompt's pass (rank 1) runs beside the first 4,096-token chunk of the long one (rank 0)
        assert dp.loc[1, "ttft_s"] > 5 * alone.loc[1, "ttft_s"]
        # and its one decode pass beside the long prompt's second chunk: both end when that chunk does
        assert dp.loc[1, "finish_s"] == pytest.approx(dp.loc[0, "first_token_s"])

    def test_the_moe_runs_over_every_ranks_tokens(self, tmp_path):
        # two equal prompts on two ranks: each pass carries the other's tokens through the MoE layers
        def ttft(n: int) -> float:
            trace = tmp_path / f"eq{n}.jsonl"
            trace.write_text("".join(json.dumps({"timestamp": 0, "input_length": 2048, "output_length": 2,
                                                 "hash_ids": [10 * i, 10 * i + 1, 10 * i + 2, 10 * i + 3]}) + "\n"
                                     for i in range(n)))  # fmt: skip
            sc = dp_scenario(2, workload={"kind": "trace", "path": str(trace)}, kv_mem_gb=2.0)
            return run_scenario(sc).requests["ttft_s"].max()

        assert dp_mlp_share(dp_scenario(2)) > 0
        assert ttft(2) > ttft(1) * 1.05

    def test_independent_instances_do_not_wait_for_each_other(self, tmp_path):
        alone = self.run(tmp_path, 1)
        assert alone.loc[1, "ttft_s"] < alone.loc[0, "ttft_s"] / 10


class TestScenario:
    def test_dp_size_without_dp_attention_is_refused_with_the_alternative(self):
        with pytest.raises(InputError, match="cluster.instances"):
            dp_scenario(2, enable_dp_attention=False)

    def test_dp_size_must_divide_tp_size(self):
        with pytest.raises(InputError, match="hardware.dp_size: 3 does not divide tp_size 4"):
            dp_scenario(3)


def test_the_ranks_of_a_server_share_its_tokenizer_workers():
    # SGLang's tokenizer manager encodes a prompt before the DP controller places it (one per server)
    sim, _, _ = build(dp_scenario(4))
    assert len({id(i.tokenizers) for i in sim.instances}) == 1

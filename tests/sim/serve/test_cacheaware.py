"""sglang_router --policy cache_aware as sglang-router 0.3.2 decides (``src/policies/cache_aware.rs``,
``tree.rs``): the router's own tree and in-flight counts, the load rule before the prefix rule, the match's
threshold, the periodic trim of each worker's share of the tree."""

from __future__ import annotations

import json
import random

import pytest

from sim.app.run import run_scenario
from sim.base.errors import InputError
from sim.scenario.load import scenario_from_dict
from sim.scenario.resolve import resolve
from sim.scenario.validate import validate_file
from sim.serve.cacheaware import CacheAwareOptions, CacheAwareRouter, RouterTree


def router(workers: int = 3, **opts) -> CacheAwareRouter:
    return CacheAwareRouter(CacheAwareOptions(**opts), workers, page_tokens=1)


def busy(r: CacheAwareRouter, loads: list[int]) -> None:
    r.loads[:] = loads  # requests in flight, as dispatches not yet finished leave them


class TestRules:
    def test_imbalanced_load_sends_to_the_least_loaded_even_past_a_full_match(self):
        r = router(balance_abs_threshold=2, balance_rel_threshold=1.5)
        assert r.pick([1, 2, 3, 4], 4, 0.0) == 0
        busy(r, [6, 3, 1])  # 6 - 1 > 2 and 6 > 1 x 1.5
        assert r.pick([1, 2, 3, 4], 4, 0.0) == 2
        assert r.loads == [6, 3, 2]

    def test_both_thresholds_must_be_passed_to_count_as_imbalanced(self):
        r = router(balance_abs_threshold=2, balance_rel_threshold=1.5)
        r.pick([1, 2, 3, 4], 4, 0.0)
        busy(r, [9, 7, 7])  # the gap passes the absolute threshold, 9 <= 7 x 1.5 does not pass the relative one
        assert r.pick([1, 2, 3, 4], 4, 0.0) == 0
        busy(r, [3, 1, 1])  # 3 > 1 x 1.5, the gap of 2 is not over 2
        assert r.pick([1, 2, 3, 4], 4, 0.0) == 0

    def test_a_match_above_the_threshold_goes_to_its_worker_even_if_busier(self):
        r = router(cache_threshold=0.5)
        assert r.pick([1, 2, 3, 4, 5, 6], 6, 0.0) == 0
        busy(r, [30, 0, 0])  # balanced: the gap is under 64
        assert r.pick([1, 2, 3, 4, 9, 9], 6, 0.0) == 0  # 4 of 6 matched > 0.5

    def test_a_match_at_or_below_the_threshold_goes_to_the_least_loaded(self):
        r = router(cache_threshold=0.5)
        r.pick([1, 2, 3, 4, 5, 6], 6, 0.0)  # worker 0's share of the tree: 6 pages
        r.pick([7, 8], 2, 0.0)  # worker 1's: 2 (the smallest tree is worker 2's, empty)
        busy(r, [5, 4, 9])
        assert r.pick([1, 2, 3, 9, 9, 9], 6, 0.0) == 1  # 3 of 6 is not over 0.5: least loaded, not smallest tree

    def test_the_rate_is_over_the_input_tokens_partial_page_included(self):
        r = CacheAwareRouter(CacheAwareOptions(cache_threshold=0.5), 2, page_tokens=4)
        r.pick([1, 2], 8, 0.0)
        busy(r, [3, 0])
        assert r.pick([1, 2], 17, 0.0) == 1  # 8 of 17 tokens: under half
        assert r.pick([1, 2], 15, 0.0) == 0  # 8 of 15: over

    def test_every_pick_is_counted_in_flight_until_done(self):
        r = router(balance_abs_threshold=1, balance_rel_threshold=1.0)
        picks = [r.pick([k], 1, 0.0) for k in range(6)]
        assert sorted(picks) == [0, 0, 1, 1, 2, 2] and r.loads == [2, 2, 2]
        r.done(picks[0])
        assert r.loads.count(1) == 1


def common(a: list, b: list) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


class TestTree:
    def test_the_match_picks_the_worker_that_created_the_node_not_the_last_to_send(self):
        t = RouterTree(2)
        t.insert([1, 2, 3], 0)
        t.insert([1, 2, 3], 1)  # an imbalanced pick sent the same text to worker 1
        assert t.match([1, 2, 3, 4]) == (3, 0)
        assert t.size == [3, 3]

    def test_a_split_keeps_the_tenants_and_counts_a_newcomer_once(self):
        t = RouterTree(2)
        t.insert([1, 2, 3, 4], 0)
        t.insert([1, 2, 7], 1)
        assert t.match([1, 2, 3, 4]) == (4, 0) and t.match([1, 2, 7]) == (3, 1)
        assert t.match([1, 2]) == (2, 0)  # the split node was worker 0's first
        assert t.size == [4, 3]

    def test_a_partial_match_counts_the_shared_pages_of_the_last_node(self):
        t = RouterTree(1)
        t.insert([1, 2, 3, 4], 0)
        assert t.match([1, 2, 9]) == (2, 0)


    def test_random_inserts_match_the_longest_prefix_and_count_each_workers_distinct_prefixes(self):
        rng = random.Random(7)
        t, sent = RouterTree(3), {0: [], 1: [], 2: []}
        for _ in range(300):
            keys = [rng.randrange(3) for _ in range(rng.randrange(1, 9))]
            w = rng.randrange(3)
            t.insert(keys, w)
            sent[w].append(keys)
        for w, seqs in sent.items():  # a worker's share: the distinct prefixes of what it was sent
            assert t.size[w] == len({tuple(k[:i]) for k in seqs for i in range(1, len(k) + 1)})
        for _ in range(200):
            keys = [rng.randrange(3) for _ in range(rng.randrange(1, 9))]
            pages, w = t.match(keys)
            assert pages == max(common(k, keys) for seqs in sent.values() for k in seqs)
            assert pages == 0 or max(common(k, keys) for k in sent[w]) >= pages


class TestEviction:
    def test_a_tick_trims_each_worker_to_the_cap_oldest_leaves_first(self):
        r = router(workers=2, eviction_interval_s=60, max_tree_size=6, balance_abs_threshold=100)
        for keys in ([1, 2, 3, 4], [5, 6, 7, 8], [9, 10, 11, 12]):
            busy(r, [0, 5])
            r.pick(keys, 4, 1.0)  # no match: the least loaded, worker 0
        assert r.tree.size == [12, 0]
        busy(r, [0, 5])
        r.pick([13], 1, 59.0)  # before the tick: nothing trimmed
        assert r.tree.size == [13, 0]
        r.pick([14], 1, 61.0)  # the tick at 60 s ran first
        assert r.tree.size == [5 + 1, 0]  # 13 - 4 - 4 pages, then the new request's
        assert r.tree.match([1, 2, 3, 4])[0] == 0 and r.tree.match([5, 6, 7, 8])[0] == 0  # the oldest went
        assert r.tree.match([9, 10, 11, 12])[0] == 4

    def test_no_trim_under_the_cap_or_with_the_interval_zero(self):
        for opts in ({"max_tree_size": 100}, {"max_tree_size": 1, "eviction_interval_s": 0}):
            r = router(workers=1, **opts)
            r.pick([1, 2, 3], 3, 0.0)
            r.pick([4], 1, 1000.0)
            assert r.tree.size == [4]

    def test_random_trims_leave_every_worker_under_the_cap_and_the_tree_consistent(self):
        rng = random.Random(11)
        t = RouterTree(3)
        for round_ in range(6):
            for _ in range(80):
                t.insert([rng.randrange(4) for _ in range(rng.randrange(1, 10))], rng.randrange(3))
                if rng.random() < 0.3:
                    t.match([rng.randrange(4) for _ in range(5)])
            cap = 40 - 5 * round_
            assert max(t.size) > cap  # there is something to trim
            t.evict(cap)
            held, stack = [0, 0, 0], [(c, t.root) for c in t.root.children.values()]
            while stack:
                node, parent = stack.pop()
                assert node.tenants and node.parent is parent
                assert parent is t.root or set(node.tenants) <= set(parent.tenants)  # a worker holds its path
                for w in node.tenants:
                    held[w] += len(node.key)
                stack += [(c, node) for c in node.children.values()]
            assert held == t.size and max(t.size) <= cap

    def test_a_trimmed_worker_leaves_the_nodes_it_shared(self):
        t = RouterTree(2)
        t.insert([1, 2, 3], 0)
        t.insert([1, 2, 3, 4, 5], 1)
        t.evict(0)
        assert t.size == [0, 0] and not t.root.children


def dp_multiturn(**cluster):
    return scenario_from_dict({
        "name": "ca", "model": "deepseek-v4-flash",
        "hardware": {"kv_mem_gb": 0.5, "tp_size": 4, "dp_size": 4, "enable_dp_attention": True},
        "hicache": {"enabled": True, "hicache_ratio": 2.0},
        "cluster": {"router": "cache_aware", **cluster},
        "workload": {"kind": "multi_turn", "num_clients": 8, "max_parallel": 8, "request_length": 512,
                     "output_length": 4, "num_rounds": 3},
    }, source="test")  # fmt: skip


class TestInTheEngine:
    def test_a_sessions_calls_stay_on_one_rank_when_balanced_and_every_count_returns_to_zero(self):
        run = run_scenario(dp_multiturn())
        ranks = run.requests.groupby("session")["instance"].nunique()
        assert (ranks == 1).all() and run.requests["instance"].nunique() > 1
        assert run.sim.cache_aware.loads == [0, 0, 0, 0] and not run.sim.routed

    def test_a_zero_balance_threshold_spreads_a_session_by_load(self):
        run = run_scenario(dp_multiturn(router_balance_abs_threshold=0, router_balance_rel_threshold=0.0,
                                        router_cache_threshold=1.0))  # fmt: skip
        assert (run.requests.groupby("session")["instance"].nunique() > 1).any()

    def test_the_same_scenario_places_every_request_the_same(self):
        a, b = (run_scenario(dp_multiturn()).requests.sort_values("rid") for _ in range(2))
        assert a["instance"].tolist() == b["instance"].tolist()


def two_instances(tmp_path, rows: list[dict]):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return scenario_from_dict({
        "name": "ca2", "model": "deepseek-v4-flash", "hardware": {"kv_mem_gb": 0.5},
        "hicache": {"enabled": True, "hicache_ratio": 2.0}, "cluster": {"instances": 2, "router": "cache_aware"},
        "workload": {"kind": "trace", "path": str(trace)},
    }, source="test")  # fmt: skip


def test_a_short_shared_prefix_goes_to_the_least_loaded_instance_not_the_one_caching_it(tmp_path):
    """A holds 10 blocks on instance 0 and is still decoding; B shares 2 of its 10 blocks with A (20%, not over
    0.3): the router sends it to the idle instance 1, where the longest cached prefix (the old pick) was 0's.
    C shares 6 of 10 (60%): instance 0, though busier."""
    rows = [{"timestamp": 0, "input_length": 5120, "output_length": 2000, "hash_ids": list(range(10))},
            {"timestamp": 1000, "input_length": 5120, "output_length": 4, "hash_ids": [0, 1, *range(50, 58)]},
            {"timestamp": 1000, "input_length": 5120, "output_length": 4, "hash_ids": [*range(6), *range(60, 64)]}]
    requests = run_scenario(two_instances(tmp_path, rows)).requests.sort_values("rid")
    assert requests["instance"].tolist() == [0, 1, 0]


@pytest.mark.parametrize("field", ["router_cache_threshold", "router_max_tree_size"])
def test_an_option_out_of_bounds_is_refused_by_its_field(field):
    with pytest.raises(InputError, match=f"cluster.{field}"):
        dp_multiturn(**{field: -1})


def test_validate_names_the_router_options_and_the_engine_gets_them(tmp_path):
    sc = dp_multiturn(router_cache_threshold=0.5, router_eviction_interval_s=0)
    assert resolve(sc).engine.cache_aware == CacheAwareOptions(0.5, 64, 1.5, 0, 2**26)
    (tmp_path / "s.yaml").write_text(
        "name: s\nmodel: deepseek-v4-flash\ncluster: {instances: 2, router: cache_aware, router_cache_threshold: 0.5,"
        " router_eviction_interval_s: 0}\n")
    line = next(x for x in validate_file(tmp_path / "s.yaml").splitlines() if x.lstrip().startswith("cluster"))
    assert "cache_aware (match > 0.5; imbalanced past 64 and x1.5; no trim)" in line

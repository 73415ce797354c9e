"""HiCache residency policies, as a specification.

Keys are page ids (one int per page). Unless a test says otherwise the model is single-pool with
one-token pages, so token counts equal page counts.
"""

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.base.errors import InputError
from sim.cache.hicache import HiCache
from sim.model.pools import get_model, model_from_dict

GENERIC = get_model("generic", page_size=1, bytes_per_token=100)
# No window, several pools: an anchor that holds no bytes and two sidecars on its indices.
SIDECARS = model_from_dict({"name": "sidecars", "page_size": 4, "pools": [
    {"name": "kv", "bytes_per_page": 0}, {"name": "c4", "bytes_per_page": 400},
    {"name": "c4_indexer", "bytes_per_page": 100}]})  # fmt: skip


def cache(l1=None, l2=None, policy="write_through", model=GENERIC, load_back_threshold=1, **kw):
    return HiCache(model, l1_pages=l1, l2_pages=l2, policy=policy, load_back_threshold=load_back_threshold, **kw)


def serve(c, keys, input_len=None):
    return c.serve(list(keys), input_len if input_len is not None else len(keys) * c.page_tokens + 1)


def req(keys, output_len=1, final_keys=None, page=1):
    """A request as the engine hands it to the cache: page keys of its prompt (and of prompt + output)."""
    keys = list(keys)
    return SimpleNamespace(keys=keys, final_keys=list(final_keys) if final_keys else None,
                           input_len=len(keys) * page, output_len=output_len)  # fmt: skip


def run(c, request):
    """Run an admitted request through the engine's calls (its prompt in one chunk, every decode step, the
    release); returns its admission and the backups it started."""
    adm = c.try_admit(request)
    assert adm is not None
    start = adm.run.prefilled  # past the device prefix and a loaded host hit
    assert c.extend(adm, request.input_len) == request.input_len - start
    c.start_iteration()
    if not adm.run.finished:
        c.decode(adm, request.output_len)
    c.release(adm)
    return adm, c.commit(adm)


class TestMatching:
    def test_a_repeated_request_hits_its_whole_prefix_on_device(self):
        c = cache(l1=100)
        serve(c, range(10))
        adm = serve(c, range(10))
        assert adm.device_tokens == 10 and adm.computed_tokens == 1

    def test_a_match_is_capped_at_input_len_minus_one(self):
        c = cache(l1=100)
        serve(c, range(10), input_len=10)
        adm = serve(c, range(10), input_len=10)
        assert adm.device_tokens == 9 and adm.computed_tokens == 1

    def test_every_input_token_is_counted_once(self):
        c = cache(l1=8, l2=8)
        for start in (0, 3, 0, 5, 1, 0):
            serve(c, range(start, start + 6))
        s = c.stats
        assert s.cached_tokens["device"] + s.cached_tokens["host"] + s.computed_tokens == s.input_tokens

    def test_a_shared_prefix_hits_where_no_request_ended(self):
        c = cache(l1=100)
        serve(c, range(6))
        assert serve(c, [0, 1, 2, 40]).device_tokens == 3


class TestWriteThrough:
    def test_every_inserted_leaf_is_backed_up_and_acked_at_the_end_of_the_step(self):
        c = cache(l1=100, l2=100)
        serve(c, range(5))
        (node,) = c.tree.root.children.values()
        assert node.host and node.pending is None and node.lock_ref == 0
        assert c.stats.backup_kv_pages == 5

    def test_an_evicted_backed_up_leaf_is_demoted_and_hits_from_host(self):
        c = cache(l1=5, l2=100)
        serve(c, range(5))
        serve(c, range(100, 105))  # evicts the first request's pages to host
        assert c.stats.demotions == 1
        adm = serve(c, range(5))
        assert adm.host_tokens == 5 and adm.device_tokens == 0
        assert c.metrics()["load_back_tokens_total"]["kv"] == 5

    def test_a_host_hit_below_the_load_back_threshold_is_recomputed(self):
        c = cache(l1=5, l2=100, load_back_threshold=10)
        serve(c, range(5))
        serve(c, range(100, 105))
        adm = serve(c, range(5))
        assert adm.host_tokens == 0 and adm.computed_tokens == 6
        assert c.stats.load_back_skipped_tokens == 5

    def test_an_unbacked_eviction_is_counted_as_dropped(self):
        c = cache(l1=5, l2=3)  # host too small for a 5-page backup
        serve(c, range(5))
        serve(c, range(100, 105))
        dropped = c.metrics()["hicache_dropped_tokens_total"]
        assert dropped == {"write_through_unbacked_eviction": {"kv": 5}, "host_pressure": {"kv": 0}}

    def test_host_copies_stay_prefix_closed(self):
        c = cache(l1=100, l2=100, policy="write_through_selective")
        serve(c, range(6))
        serve(c, [0, 1, 2, 50, 51])  # splits at 3; the shared prefix has now been hit twice
        for node in c.tree.nodes():
            if node.host:
                assert node.parent is c.tree.root or node.parent.host

    def test_host_eviction_frees_the_least_recently_used_host_leaf(self):
        c = cache(l1=4, l2=8)
        serve(c, range(4))
        serve(c, range(10, 14))  # host is full: [0..3] (demoted) and [10..13]
        serve(c, range(20, 24))  # backing [20..23] up needs room: [0..3], the older, goes
        assert c.stats.host_evictions == 1
        assert sorted(c.tree.root.children) == [10, 20]


class TestSelective:
    def test_a_leaf_is_backed_up_only_on_its_second_hit(self):
        c = cache(l1=100, l2=100, policy="write_through_selective")
        serve(c, range(5))
        assert c.stats.backup_kv_pages == 0
        serve(c, range(5))
        assert c.stats.backup_kv_pages == 5

    def test_a_request_that_inserts_its_prompt_then_its_output_counts_one_hit(self):
        """SGLang's cache_inserted_len: the second insert counts only the nodes past the first one."""
        c = cache(l1=100, l2=100, policy="write_through_selective")
        run(c, req(range(5), output_len=4, final_keys=range(8)))  # the prompt at prefill, 8 pages at release
        c.ack_all()
        prompt = c.tree.root.children[0]
        assert prompt.hit_count == 1 and not prompt.host
        assert c.stats.backup_kv_pages == 0
        serve(c, range(5))  # a second request hits the prompt: now it is backed up
        assert prompt.hit_count == 2 and prompt.host

    def test_a_node_split_from_an_inserted_one_keeps_its_count(self):
        c = cache(l1=100, l2=100, policy="write_through_selective")
        c.insert_request(list(range(6)), 0, 0)
        c.insert_request([0, 1, 2, 7, 8], 6, 6)  # diverges inside what it inserted: the shared half is not recounted
        assert c.tree.root.children[0].hit_count == 1

    def test_an_unbacked_eviction_is_not_counted_as_dropped(self):
        """SGLang tracks write_through_unbacked_eviction under write_through only."""
        c = cache(l1=5, l2=100, policy="write_through_selective")
        serve(c, range(5))
        serve(c, range(100, 105))  # deletes the unbacked first request
        assert c.stats.evictions == 1
        assert c.metrics()["hicache_dropped_tokens_total"] == {"host_pressure": {"kv": 0}}


class TestWriteBack:
    def test_nothing_is_backed_up_until_eviction(self):
        c = cache(l1=5, l2=100, policy="write_back")
        serve(c, range(5))
        assert c.stats.backup_kv_pages == 0
        serve(c, range(100, 105))
        assert c.stats.backup_kv_pages == 5 and c.stats.demotions == 1

    def test_a_full_host_drops_the_subtree_under_host_pressure(self):
        c = cache(l1=5, l2=2, policy="write_back")
        serve(c, range(5))
        serve(c, range(100, 105))
        assert c.metrics()["hicache_dropped_tokens_total"] == {"host_pressure": {"kv": 5}}

    def test_each_evicted_node_is_backed_up_alone_and_waited_for(self):
        c = cache(l1=9, l2=100, policy="write_back")
        run(c, req(range(3), output_len=4, final_keys=range(6)))  # two nodes: the prompt and the output
        assert c.ensure_device(9)  # evicts the leaf, then the prompt
        # SGLang backs up a write_back victim alone, not its unbacked parent (unified_tree_core.py:2622-2644;
        # hicache vectors p1.4): the leaf's copy, then the parent's once it is the next victim.
        assert [[op.kv_pages for op in copy] for copy in c.write_back_copies] == [[3], [3]]
        assert not c.pending  # acked at once: nothing is left in the write-through window
        assert all(n.host and not n.device for n in c.tree.nodes())

    def test_a_victims_host_copy_keeps_its_place_among_duplicates_from_its_backup(self):
        # SGLang registers a write_back victim as a duplicate at its backup's ack, before the demotion
        # (finish_write_through, unified_tree_core.py:2840-2848); the stale entry keeps its place in the dict,
        # so nodes loaded back later are reclaimed in the order they were backed up, not loaded (vectors
        # p207.124, p237.56, p240.30).
        c = cache(l1=12, l2=100, policy="write_back")
        run(c, req(range(3)))
        run(c, req(range(10, 13)))
        assert c.ensure_device(12)  # backs up and demotes A, then B
        a, b = c.tree.root.children[0], c.tree.root.children[10]
        run(c, req([10, 11, 12, 13]))  # loads B back
        run(c, req([0, 1, 2, 3]))  # then A
        c.start_iteration()
        assert a.device and a.host and b.device and b.host
        assert c.evict_host(1) == 3
        assert not a.host and b.host

    def test_hit_counts_never_rise(self):
        c = cache(l1=100, l2=100, policy="write_back")
        serve(c, range(5))
        serve(c, range(5))
        assert c.tree.root.children[0].hit_count == 0


class TestWriteThroughWindow:
    def test_a_pending_backup_is_locked_until_acked(self):
        c = cache(l1=8, l2=100)
        _, (op,) = run(c, req(range(5)))
        node = op.nodes[0]
        assert node.pending is op and node.lock_ref == 1
        # Another request's 5 tokens, its output and a page need 7 of L1's 8: the pending node's 5 cannot be
        # evicted before its ack, so the budget refuses it.
        assert c.try_admit(req([9, 8, 7, 6, 5])) is None
        c.ack(op)
        assert node.pending is None and node.lock_ref == 0
        assert c.try_admit(req([9, 8, 7, 6, 5])) is not None

    def test_splitting_a_pending_node_keeps_both_halves_pending(self):
        c = cache(l1=100, l2=100)
        _, (op,) = run(c, req(range(6)))
        c.tree.match([0, 1, 2, 99])  # splits the pending node after 3 pages
        assert len(op.nodes) == 2 and all(n.pending is op for n in op.nodes)
        c.ack(op)
        assert all(n.pending is None and n.lock_ref == 0 for n in op.nodes)


class TestMultiPool:
    def test_backup_bytes_are_pages_times_each_pools_bytes(self):
        c = cache(l1=100, l2=100, model=SIDECARS, page_tokens=4)
        serve(c, range(3))
        m = c.metrics()
        assert m["sim_hicache_backup_bytes_by_pool"] == {"c4": 3 * 400, "c4_indexer": 3 * 100}  # not the anchor
        assert m["hicache_backup_bytes_total"] == 3 * 500

    def test_pool_bytes_scale_with_the_tree_page(self):
        """A trace's block of 8 tokens holds two of the model's 4-token pages."""
        c = cache(l1=100, l2=100, model=SIDECARS, page_tokens=8)
        serve(c, range(3))
        assert c.metrics()["sim_hicache_backup_bytes_by_pool"] == {"c4": 3 * 800, "c4_indexer": 3 * 200}

    def test_token_counters_are_labelled_by_the_kv_anchor_only(self):
        """Sidecars ride on their anchor's indices: SGLang counts tokens per index-owning pool
        (hybrid_cache_controller.py:953-963); only the bytes counter includes every pool."""
        c = cache(l1=3, l2=100, model=SIDECARS, page_tokens=4)
        serve(c, range(3))
        serve(c, range(10, 13))  # demotes the first request
        serve(c, range(3))  # and loads it back
        m = c.metrics()
        assert m["hicache_backup_tokens_total"] == {"kv": 6 * 4}
        assert m["load_back_tokens_total"] == {"kv": 3 * 4}
        assert m["load_back_bytes_total"] == 3 * 500

    def test_counters_sglang_does_not_export_say_so(self):
        sglang = {"cached_tokens_total", "evicted_tokens_total", "hicache_dropped_tokens_total",
                  "hicache_backup_tokens_total", "hicache_backup_bytes_total", "load_back_tokens_total",
                  "load_back_bytes_total", "hicache_host_used_tokens", "hicache_host_total_tokens"}  # fmt: skip
        names = set(cache(l1=10, l2=10).metrics())
        assert sglang <= names and all(n.startswith("sim_") for n in names - sglang)
        assert set(cache(l1=10, l2=10).metrics()["cached_tokens_total"]) == {"device", "host"}


class TestBadInput:
    @pytest.mark.parametrize("kw", [{"l1": 0}, {"l1": -5}, {"l1": 10, "l2": -1}, {"l1": 10, "load_back_threshold": -1}])
    def test_bad_capacities_are_rejected(self, kw):
        l1 = kw.pop("l1")
        with pytest.raises(InputError):
            cache(l1=l1, **kw)

    def test_an_unknown_policy_is_rejected(self):
        with pytest.raises(InputError, match="unknown write policy"):
            cache(l1=10, policy="write_sideways")

    def test_a_model_with_sliding_window_pools_is_refused_for_v4s_cache(self):
        """V4's pools are SGLang's FULL + SWA tree (sim.cache.v4.swacache); this cache models one pool group."""
        with pytest.raises(ValueError, match=r"deepseek-v4-flash has sliding-window pools.*V4HiCache"):
            cache(l1=10, model=get_model("deepseek-v4-flash"), page_tokens=256)


# ----- properties over random operation sequences -------------------------------------------------
def check_invariants(c: HiCache) -> None:
    tree = c.tree
    dev = host = 0
    for node in tree.nodes():
        # Atomic across pools: all ALL_PAGES pools or none, on each tier.
        assert node.host_mask in (0, c.all_pages_mask) and bool(node.host_mask) == node.host
        assert node.dev_mask in (0, c.all_pages_mask) and bool(node.dev_mask) == node.device
        assert node.device or node.host, "a dead node stayed in the tree"
        if node.device:
            dev += len(node.key)
            assert node.parent is tree.root or node.parent.device, "device residency is prefix-closed"
        if node.host:
            host += len(node.key)
            if c.policy.value != "write_back":
                assert node.parent is tree.root or node.parent.host, "host copies are prefix-closed"
    for tier, pages in ((c.l1, dev), (c.l2, host)):
        assert tier.kv_used == pages <= tier.kv_cap
    s = c.stats
    assert s.cached_tokens["device"] + s.cached_tokens["host"] + s.computed_tokens == s.input_tokens


def guard_locked_evictions(c: HiCache) -> None:
    """Fail on any attempt to evict a locked or pending node."""
    evict = c._evict_device

    def guarded(node):
        assert node.lock_ref == 0 and node.pending is None, f"evicted a locked node {node!r}"
        evict(node)

    c._evict_device = guarded


request = st.lists(st.integers(0, 7), min_size=1, max_size=6).map(lambda k: [(k[0], i, v) for i, v in enumerate(k)])
ops = st.lists(st.tuples(st.sampled_from(["start", "commit", "finish", "ack"]), request), min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(
    ops=ops,
    l1=st.integers(3, 20),
    l2=st.sampled_from([0, 4, 12, 40]),
    policy=st.sampled_from(["write_through", "write_through_selective", "write_back"]),
    model=st.sampled_from([GENERIC, SIDECARS]),
)
def test_invariants_hold_after_every_operation(ops, l1, l2, policy, model):
    """Several requests in flight through the engine's calls, backups acked in any order; invariants checked
    after each step."""
    c = HiCache(model, l1_pages=l1, l2_pages=l2, policy=policy, page_tokens=model.page_size)
    guard_locked_evictions(c)
    admitted, prefilled = [], []
    for op, keys in ops:
        if op == "start":
            adm = c.try_admit(req(keys, output_len=3, page=c.page_tokens))
            if adm is not None:
                admitted.append(adm)
        elif op == "commit" and admitted:
            adm = admitted[0]
            if c.extend(adm, adm.computed_tokens):
                prefilled.append(admitted.pop(0))
            c.start_iteration()
        elif op == "finish" and prefilled:
            adm = prefilled.pop(0)
            try:
                c.decode(adm, adm.run.output_len)
                c.release(adm)
            except MemoryError:
                c.retract(adm)
        elif op == "ack" and c.pending:
            c.ack(next(iter(c.pending.values())))
        check_invariants(c)
    for adm in admitted + prefilled:
        c.retract(adm)
    c.start_iteration()
    c.ack_all()
    check_invariants(c)
    assert c.tree.protected_tokens == 0 and c.l1.kv_used == sum(len(n.key) for n in c.tree.nodes() if n.device)
    assert not c.prefilling and c.decode_left == 0

"""DeepSeek V4's prefix cache: per-page sliding-window state as SGLang keeps it (``sim.cache.v4.swacache``)."""

import pytest

from sim.cache.v4.swa import out_of_window_boundary
from sim.cache.v4.swacache import OutOfMemory, SWACache


def cache(**kw) -> SWACache:
    return SWACache(page=256, window=128, full_pages=None, swa_pages=None, **kw)


def admit(c: SWACache, prompt, output):
    return c.admit(c.tree.page_keys(list(prompt) + list(output)), len(prompt), len(output))


def serve(c: SWACache, prompt, output):
    r = admit(c, prompt, output)
    c.finish(r)
    return r


def lookup(c: SWACache, tokens):
    return c.lookup(c.tree.page_keys(tokens), len(tokens))


def test_a_shared_system_prompt_becomes_a_valid_match_end_at_the_second_request():
    c = cache()
    system = list(range(2048))
    hits = [serve(c, system + list(range(10_000 * i, 10_000 * i + 300)), [7] * 20).match.device for i in range(1, 6)]
    # The first leaves SWA only near its end; the second hits the Full KV but no window (a branching point), and
    # its insert stops there and rebuilds the window, so every later request hits the whole system prompt.
    assert hits == [0, 0, 2048, 2048, 2048]


def test_the_second_request_records_the_branching_point():
    c = cache()
    system = list(range(2048))
    serve(c, system + list(range(50_000, 50_300)), [7] * 20)
    r = admit(c, system + list(range(60_000, 60_300)), [7] * 20)
    assert (r.match.device, r.match.full_hit, r.match.branching) == (0, 2048, 2048)


def test_a_request_that_finishes_in_its_prefill_keeps_swa_on_every_page():
    c = cache()
    serve(c, list(range(1000)), [1])
    assert [n.swa for path in c.tree.paths() for n in path] == [True, True]
    assert c.swa_used == c.full_used == 768


def test_a_decoding_request_keeps_only_the_last_page_of_swa():
    c = cache()
    r = serve(c, list(range(1000)), list(range(5000, 5020)))
    assert r.protected == 768  # prompt + output - 1 = 1019 tokens, page-aligned
    assert c.full_used == 768 and c.swa_used == 256


def test_chunked_prefill_leaves_a_window_at_every_chunk_edge():
    c = cache(chunked_prefill_size=2048)
    r = serve(c, list(range(7000)), [1])
    assert r.chunks == [(0, 2048), (2048, 4096), (4096, 6144), (6144, 7000)]
    for end in (2048, 4096, 6144):
        assert lookup(c, list(range(end + 1))).device == end


def test_swa_pool_pressure_evicts_whole_lru_leaves_with_their_full_kv():
    c = SWACache(page=256, window=128, full_pages=64, swa_pages=4)
    for i in range(6):
        serve(c, list(range(i * 10_000, i * 10_000 + 300)), [1])
    assert c.swa_used <= 4 * 256 and c.full_used == c.swa_used  # leaves went whole, Full with SWA
    assert lookup(c, list(range(300))).device == 0  # the oldest prompt is gone
    assert lookup(c, list(range(50_000, 50_300))).device == 256


def test_out_of_window_free_keeps_max_window_page_rounded_up_behind_the_end():
    assert out_of_window_boundary(0, 999, 0, 128, 256) == 512
    assert out_of_window_boundary(512, 1018, 768, 128, 256) == 768  # never below the tree-owned prefix
    assert out_of_window_boundary(0, 100, 0, 128, 256) == 0  # not yet a window behind


def hicache(l1=16, l2=64, policy="write_through", **kw) -> SWACache:
    return SWACache(page=256, window=128, full_pages=l1, swa_pages=l1, host_full_pages=l2, host_swa_pages=l2,
                    write_policy=policy, **kw)


def test_write_through_backs_up_on_first_insert_and_locks_until_the_ack():
    c = hicache()
    r = serve(c, list(range(1000)), [1])
    assert c.tree.host_tokens == 768 and c.tree.host_swa_tokens == 768  # Full and its window, per page
    assert len(c.pending) == 2 and c.tree.full_protected == 768  # both leaves locked while in flight
    c.ack_all()
    assert c.tree.full_protected == 0 and c.stats["backup_full_tokens"] == 768
    assert r.protected == 768


def test_acking_everything_at_once_leaves_no_copy_for_a_clocked_caller():
    """A replay acks each request's backups at its end and never takes them to time their copies: kept, they
    grew by every backup and held each backed-up node alive."""
    c = hicache()
    serve(c, list(range(1000)), [1])
    c.ack_all()
    assert not c.pending and c.take_new_backups() == []


def test_evicted_backed_up_pages_load_back_with_their_window():
    c = hicache(l1=8)
    serve(c, list(range(1000)), [1])
    c.ack_all()
    for i in range(1, 4):  # push the first prompt out of L1
        serve(c, list(range(i * 10_000, i * 10_000 + 1000)), [1])
        c.ack_all()
    assert lookup(c, list(range(1000))).device == 0
    r = admit(c, list(range(1000)) + [5], [1])
    assert (r.match.device, r.host_hit) == (0, 768)  # a host hit, loaded back with its SWA
    assert r.load_full == 768 and r.load_swa > 0


def test_the_load_back_threshold_does_not_stop_a_load_whose_window_is_on_host():
    # SGLang skips a load below the threshold only when no component (the window state) must come from
    # host too (unified_radix_cache.py:1878-1884): for V4 an evicted prefix always brings its window.
    c = hicache(l1=8, load_back_threshold=1024)
    serve(c, list(range(1000)), [1])
    c.ack_all()
    for i in range(1, 4):
        serve(c, list(range(i * 10_000, i * 10_000 + 1000)), [1])
        c.ack_all()
    r = admit(c, list(range(1000)) + [5], [1])
    assert (r.host_hit, r.load_full, r.load_swa) == (768, 768, 256)


def test_write_back_copies_only_at_eviction_and_never_drops_with_room_on_host():
    c = hicache(l1=8, policy="write_back")
    for i in range(4):
        serve(c, list(range(i * 10_000, i * 10_000 + 1000)), [1])
    assert not c.pending and c.stats["backup_full_tokens"] > 0
    assert not c.dropped and c.stats["demoted_tokens"] > 0


def test_write_through_without_room_on_host_drops_and_counts_it():
    c = hicache(l1=8, l2=1)
    for i in range(4):
        serve(c, list(range(i * 10_000, i * 10_000 + 1000)), [1])
        c.ack_all()
    assert c.dropped["write_through_unbacked_eviction"] > 0


def test_splitting_a_host_only_node_keeps_both_halves_host_only():
    c = hicache(l1=8)
    serve(c, list(range(1000)), [1])
    c.ack_all()
    for i in range(1, 4):
        serve(c, list(range(i * 10_000, i * 10_000 + 1000)), [1])
        c.ack_all()
    device_before = c.tree.full_tokens
    m = lookup(c, list(range(300)) + [99_999] * 300)  # diverges inside the first (host-only) node
    assert m.device == 0 and c.tree.full_tokens == device_before
    assert all(not n.full and n.host for path in c.tree.paths() for n in path if n.key[0][0] == 0)


def test_write_back_backs_up_a_shared_prefix_before_tombstoning_its_window():
    # components/swa.py:795-813: the SWA walk copies an unbacked internal node and its window to host
    # first, so the prefix it shares stays a host hit with its window.
    c = hicache(l1=64, policy="write_back")
    base = list(range(2000))
    for tail in ([], list(range(50_000, 50_600)), list(range(60_000, 60_600))):
        serve(c, base[:1024] + tail if tail else base, [1])
    shared = c.tree.root.children[c.tree.page_keys(base)[0]]
    assert shared.children and shared.swa and not shared.host
    c.tree.evict(0, c.swa_used, c.full_free, c.swa_free)
    assert not shared.swa and shared.full  # tombstoned, Full KV still on device
    assert shared.host and shared.host_swa  # ... after its copy to host
    r = admit(c, base[:1024] + [7], [1])
    assert r.match.device + r.host_hit == 1024 and r.load_swa > 0


def test_write_back_reserves_swa_host_room_for_a_window_before_its_kv_backup():
    # unified_radix_cache.py:899-907, components/swa.py:797-813: before the SWA walk backs up a window, SGLang
    # frees SWA host room for all of it. The oldest host window is a host leaf, which goes whole (its KV too), so
    # the KV pool is no longer short and the duplicate a KV reclaim would have taken first keeps its host copy
    # (vector hicache_v4_seed13 v13.33).
    c = SWACache(page=256, window=128, full_pages=64, swa_pages=64, host_full_pages=4, host_swa_pages=4,
                 write_policy="write_back")  # fmt: skip
    c.tree.events = []
    serve(c, range(90_000, 90_500), [1])
    c.tree.evict(256, 0, c.full_free, c.swa_free)  # backed up and demoted: a host leaf, KV and window on host
    base = list(range(2000))
    for tail in ([], list(range(50_000, 50_600)), list(range(60_000, 60_600))):
        serve(c, base[:1024] + tail if tail else base, [1])
    c.tree.events.clear()
    c.tree.evict(0, 1024, c.full_free, c.swa_free)
    ev = c.tree.events
    window = ev.index({"backup": [1024, 1280, 50255], "tokens": 256, "swa": 256})
    assert {"backup": [1024, 1536, 1535], "tokens": 512, "swa": 512} in ev[:window]  # the duplicate, made first
    assert ev[window - 1] == {"host_evict": 256, "got": 256, "pool": "swa"}  # the host leaf, whole
    assert not any("nodes" in e for e in ev)  # no KV host reclaim: the duplicate kept its copy
    assert lookup(c, list(range(90_000, 90_500))).best_len == 0


def test_write_back_loads_no_window_that_another_load_back_in_flight_pins():
    # write_back pins the nodes a load-back brings in until its ack (commit_load_back,
    # unified_tree_core.py:2703-2715); a second load-back that would claim one of them, here for its window,
    # gets an empty transfer and recomputes (build_load_back_spec, :2597-2610; unified_radix_cache.py:1879-1884).
    c = SWACache(page=128, window=128, full_pages=40, swa_pages=40, host_full_pages=80, host_swa_pages=80,
                 write_policy="write_back")  # fmt: skip
    c.hold_loads = True
    serve(c, range(1000, 1512), [1])  # [0, 512) keeps its window at [384, 512)
    serve(c, range(1000, 2024), [1])
    c.tree.evict(40 * 128, 40 * 128, c.full_free, c.swa_free)  # both on host only, with their windows
    first = admit(c, list(range(1000, 2024)) + [7000], [1])
    assert (first.load_full, first.load_swa) == (1024, 128)  # [0, 512)'s Full KV back too, its window not
    (load,) = c.loads
    second = admit(c, list(range(1000, 1512)) + [7100], [1])
    assert second.match.best_len == 512  # a host hit whose window node the first pins: recomputed
    assert (second.load_full, second.load_swa, second.prefilled) == (0, 0, 0)
    c.load_done(load)
    third = admit(c, list(range(1000, 1512)) + [7200], [1])
    assert (third.load_full, third.load_swa, third.prefilled) == (0, 128, 512)  # acked: the window loads


def test_evict_to_free_evicts_lru_leaves_until_both_pools_have_room():
    # what a retraction asks for the requests that stay (schedule_batch.py:2388-2392)
    c = SWACache(page=256, window=128, full_pages=16, swa_pages=16)
    for i in range(4):
        serve(c, list(range(i * 10_000, i * 10_000 + 1000)), [1])
    assert c.full_free() < 8 * 256
    full, _ = c.evict_to_free(8 * 256, 8 * 256)
    assert full > 0 and c.full_free() >= 8 * 256 and c.swa_free() >= 8 * 256
    assert lookup(c, list(range(1000))).device == 0  # the least recently used prompt went first
    assert c.evict_to_free(8 * 256, 8 * 256) == (0, 0)  # already free: nothing more goes


def test_a_chunk_the_pools_cannot_take_while_every_window_is_locked_changes_nothing():
    # The SWA-starved engine's failed attempt: every node holding SWA is locked by a running request, so the
    # eviction has nothing to walk and the allocation fails; try_extend says so without raising.
    c = SWACache(page=256, window=128, full_pages=64, swa_pages=5)
    running = admit(c, range(1000), range(5000, 5020))
    assert c.try_extend(running, 1000) and c.tree.swa.evictable == 0 < c.tree.swa.protected
    waiting = admit(c, range(20_000, 21_000), [1])
    before = (c.full_used, c.swa_used, waiting.allocated, waiting.prefilled, c.stats["swa_evicted_tokens"])
    assert not c.try_extend(waiting, 1000)
    assert (c.full_used, c.swa_used, waiting.allocated, waiting.prefilled, c.stats["swa_evicted_tokens"]) == before
    with pytest.raises(OutOfMemory):
        c.extend(waiting, 1000)

"""L3: a content-addressed page store shared by instances."""

from sim.serve.storage import Storage


def test_a_hit_is_the_leading_run_of_present_pages():
    s = Storage()
    s.put(["a", "b", "c"], window_at_end=True)
    assert s.hit_pages(["a", "b", "x", "c"], 0, 4) == 2
    assert s.hit_pages(["a", "b", "c"], 1, 3) == 2
    assert s.hit_pages(["x", "a"], 0, 2) == 0


def test_with_a_sliding_window_a_hit_ends_where_window_state_was_stored():
    s = Storage(needs_window=True)
    s.put(["a", "b", "c", "d"], window_at_end=False)
    assert s.hit_pages(["a", "b", "c", "d"], 0, 4) == 0
    s.put(["a", "b"], window_at_end=True)  # a request that ended at page 2 left its window there
    assert s.hit_pages(["a", "b", "c", "d"], 0, 4) == 2


def test_a_bounded_store_drops_the_least_recently_used_pages():
    s = Storage(capacity_pages=3)
    s.put(["a", "b", "c"], window_at_end=False)
    s.touch(["a"])
    s.put(["d"], window_at_end=False)
    assert s.hit_pages(["a"], 0, 1) == 1 and s.hit_pages(["b"], 0, 1) == 0
    assert len(s) == 3 and s.evicted_pages == 1


def test_recorded_l3_ages_run_from_the_last_write_or_read_and_evictions_carry_no_reuse_count():
    from sim.cache.ages import TierAges

    class Clock:
        now = 0.0

    clock = Clock()
    ages = TierAges(clock)
    s = Storage(capacity_pages=2)
    s.record_ages(ages, page_tokens=64)
    s.put(["a", "b"], window_at_end=False)
    clock.now = 3.0
    s.touch(["a"])  # a read at 3 s: a hit 3 s old, and "a" is now the most recent
    clock.now = 10.0
    s.put(["c"], window_at_end=False)  # over capacity: "b", last written at 0, leaves 10 s old
    m = ages.metrics()
    assert m["kv_age_tokens_total"]["hit"] == {"storage": {"3.162": 64}}
    assert m["kv_age_tokens_total"]["evict"] == {"storage": {"10": 64}}
    assert m["kv_reuses"] == {} and s.hit_pages(["a", "c"], 0, 2) == 2 and s.evicted_pages == 1

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

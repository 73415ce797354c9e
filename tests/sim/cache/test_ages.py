"""Page ages per tier (``sim.cache.ages``): fixed buckets, quantiles read from them, and the verdict on which
tier is too small for which reuse window."""

import math

import pytest

from sim.cache.ages import EDGES, TierAges, median, quantile, verdicts


class Clock:
    now = 0.0


def ages_at(now: float) -> tuple[TierAges, Clock]:
    clock = Clock()
    clock.now = now
    return TierAges(clock), clock


class TestBuckets:
    def test_an_age_lands_in_the_bucket_whose_upper_edge_bounds_it(self):
        ages, _ = ages_at(10.0)
        ages.hit_at("device", 9.0, 32, 10.0)  # 1 s: exactly an edge, counted at that edge
        ages.evicted("host", 0.0, 64, 3)  # 10 s
        m = ages.metrics()
        assert m["kv_age_tokens_total"]["hit"] == {"device": {"1": 32}}
        assert m["kv_age_tokens_total"]["evict"] == {"host": {"10": 64}}
        assert m["kv_age_seconds"]["evict"]["host"] == {"count": 64, "sum": 640.0}
        assert m["kv_reuses"] == {"host": {"3": 64}}

    def test_ages_past_the_last_edge_go_to_the_unbounded_bucket(self):
        ages, _ = ages_at(1e7)
        ages.evicted("storage", 0.0, 5, None)
        m = ages.metrics()
        assert m["kv_age_tokens_total"]["evict"]["storage"] == {"+Inf": 5}
        assert "storage" not in m["kv_reuses"]  # L3 keeps no hit count
        assert median(ages.evict["storage"]) == math.inf

    def test_the_metrics_read_back_to_the_same_histograms(self):
        ages, clock = ages_at(0.0)
        for i, tier in enumerate(("device", "host", "storage")):
            clock.now = 3.0**i
            ages.evicted(tier, 0.0, 10 * (i + 1), i)
            ages.hit_at(tier, 0.0, 7, 0.01 * (i + 1))
        back = TierAges.from_metrics(ages.metrics())
        assert (back.hit, back.evict, back.reuses, back.age_sum) == (ages.hit, ages.evict, ages.reuses, ages.age_sum)

    def test_merging_adds_bucket_by_bucket(self):
        a, _ = ages_at(2.0)
        b, _ = ages_at(2.0)
        a.evicted("device", 0.0, 3, 0)
        b.evicted("device", 0.0, 4, 0)
        a.merge(b)
        assert sum(a.evict["device"]) == 7 and a.reuses["device"][0] == 7


class TestQuantiles:
    def test_a_quantile_is_interpolated_within_its_bucket_on_a_log_scale(self):
        hist = [0] * (len(EDGES) + 1)
        i = EDGES.index(1.0)
        hist[i] = 10  # all in (EDGES[i-1], 1]
        assert EDGES[i - 1] < median(hist) < 1.0
        assert quantile(hist, 1.0) == pytest.approx(1.0)
        assert median(hist) == pytest.approx(math.sqrt(EDGES[i - 1] * 1.0))

    def test_an_empty_histogram_has_no_quantile(self):
        assert median([0] * (len(EDGES) + 1)) is None


class TestVerdicts:
    def test_l1_evicting_younger_than_l2_serves_is_too_small_for_the_reuse_window(self):
        ages, clock = ages_at(1.0)
        ages.evicted("device", 0.5, 100, 1)  # L1 lets pages go after 0.5 s
        clock.now = 20.0
        ages.hit_at("host", 10.0, 100, 20.0)  # L2 serves them 10 s after last use
        lines = verdicts(ages)
        assert lines[0].startswith("L1 is too small for the reuse window")

    def test_l1_evicting_older_than_any_reuse_holds_it(self):
        ages, clock = ages_at(100.0)
        ages.evicted("device", 0.0, 100, 1)
        ages.hit_at("host", 99.0, 100, 100.0)
        lines = verdicts(ages)
        assert len(lines) == 1 and lines[0].startswith("L1 holds the reuse window")

    def test_the_last_tier_that_evicts_is_held_to_the_sessions_reuse(self):
        ages, clock = ages_at(2.0)
        ages.evicted("host", 0.0, 100, 0)  # L2 drops pages after 2 s
        ages.hit_at("device", 0.0, 100, 30.0)  # while the traffic comes back after 30 s
        assert verdicts(ages)[0].startswith("L2 is too small for the session")

    def test_no_evictions_and_tiny_evictions_are_said_so(self):
        ages, _ = ages_at(1.0)
        assert verdicts(ages) == ["no tier evicted: each holds its reuse window"]
        ages.hit_at("device", 0.0, 10_000, 1.0)
        ages.evicted("device", 0.9, 5, 0)
        assert verdicts(ages) == ["L1 evicts little (5 tokens): not judged"]

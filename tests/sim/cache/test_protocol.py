"""Both caches are driven through one interface, and only a cache with a window pool answers for one."""

import inspect

import pytest

from sim.cache.hicache import HiCache
from sim.cache.protocol import CacheTree, PrefixCache, SlidingWindow, TierUse
from sim.cache.v4.hicache import V4HiCache
from sim.model.pools import get_model
from sim.workload.request import Request

V4 = get_model("deepseek-v4-flash")


def plain() -> HiCache:
    return HiCache(get_model("generic", page_size=16, bytes_per_token=100), l1_pages=64, l2_pages=128)


def v4() -> V4HiCache:
    return V4HiCache(V4, l1_pages=64, l2_pages=128, policy="write_through", load_back_threshold=10,
                     page_tokens=V4.page_size, swa_full_tokens_ratio=0.5, chunked_prefill_size=8192)  # fmt: skip


CACHES = {"HiCache": plain, "V4HiCache": v4}


def _methods(proto: type) -> list[str]:
    return [n for n, v in vars(proto).items() if inspect.isfunction(v) and not n.startswith("_")]


def _accepts(impl, spec) -> bool:
    """``impl`` can be called every way ``spec`` can: the same positional parameters in order (names and
    defaults), and any extra ones optional."""
    want = list(inspect.signature(spec).parameters.values())[1:]  # without self
    have = list(inspect.signature(impl).parameters.values())
    if len(have) < len(want):
        return False
    for w, h in zip(want, have):
        if (w.name, w.kind) != (h.name, h.kind) or (w.default is not w.empty and h.default is h.empty):
            return False
    return all(h.default is not h.empty for h in have[len(want):])


@pytest.mark.parametrize("make", CACHES.values(), ids=CACHES.keys())
class TestBothCaches:
    def test_satisfy_the_protocol_and_its_parts(self, make):
        c = make()
        assert isinstance(c, PrefixCache)
        assert isinstance(c.l1, TierUse) and isinstance(c.l2, TierUse)
        assert isinstance(c.tree, CacheTree)

    @pytest.mark.parametrize("proto", [PrefixCache, TierUse, CacheTree], ids=lambda p: p.__name__)
    def test_methods_take_the_protocols_arguments(self, make, proto):
        c = make()
        obj = {PrefixCache: c, TierUse: c.l2, CacheTree: c.tree}[proto]
        bad = [n for n in _methods(proto) if not _accepts(getattr(obj, n), getattr(proto, n))]
        assert not bad, f"{type(obj).__name__} differs from {proto.__name__} in {bad}"

    def test_a_request_through_the_interface(self, make):
        c = make()
        keys = [("k", i) for i in range(4)]
        c.serve(keys, len(keys) * c.page_tokens + 1)
        lk = c.lookup(keys, len(keys) * c.page_tokens + 1)
        c.abandon(lk)
        assert lk.device_pages == 4 and c.tree.peek(keys) == (4, 4)
        assert c.metrics()["cached_tokens_total"]["device"] == 0  # the lookup alone counts no hit

    def test_admission_is_one_call_that_admits_what_fits_and_holds_nothing_otherwise(self, make):
        c = make()
        pt = c.page_tokens
        fits = Request(0, 0.0, 4 * pt + 1, 8, [("a", i) for i in range(4)])
        adm = c.try_admit(fits)
        assert adm is not None and adm.computed_tokens == fits.input_len
        huge = Request(1, 0.0, 500 * pt + 1, 8, [("b", i) for i in range(500)])
        evictable = c.tree.evictable_tokens
        assert c.try_admit(huge) is None
        assert c.tree.evictable_tokens == evictable and c.l1.kv_used <= 64


def test_the_single_pool_cache_has_no_window_and_refuses_window_pages():
    c = plain()
    assert c.window is None
    for attr in ("swa_used", "window_pages"):
        assert not hasattr(c.l1, attr) and not hasattr(c, attr)
    with pytest.raises(ValueError, match="without a sliding-window pool"):
        c.pool_bytes(1, 1)
    with pytest.raises(ValueError, match="without a sliding-window pool"):
        c.reserve_host(2, 1, 1)
    with pytest.raises(ValueError, match="without a sliding-window pool"):
        c.l2.free(0, 1)
    with pytest.raises(ValueError, match="without a sliding-window pool"):
        c.insert_host([("k", 0)], 1, window=True)
    assert c.pool_bytes(2) == {"kv": 2 * 16 * 100}


def test_v4s_window_reports_its_pools():
    c = v4()
    assert isinstance(c.window, SlidingWindow)
    assert c.window.pages == -(-V4.sliding_window // V4.page_size)
    assert (c.window.l1_used, c.window.l2_used) == (0, 0)
    assert c.reserve_host(4, c.window.pages, 1) == 4
    assert (c.l2.kv_used, c.window.l2_used) == (4, c.window.pages)  # the read's room for its window state
    c.l2.free(4, c.window.pages)
    assert (c.l2.kv_used, c.window.l2_used) == (0, 0)

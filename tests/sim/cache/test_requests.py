"""A running request's rows on the single-pool cache, as a specification: SGLang's admission budget, allocation per
chunk and decode step with eviction only when short, and decode steps in bulk equal to one at a time."""

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st

from sim.cache.hicache import HiCache
from sim.model.pools import get_model

PAGE = 4
MODEL = get_model("generic", page_size=PAGE, bytes_per_token=100)


def cache(l1: int, **kw) -> HiCache:
    return HiCache(MODEL, l1_pages=l1, l2_pages=0, page_tokens=PAGE, **kw)


def req(keys, output_len=1, input_len=None):
    keys = list(keys)
    return SimpleNamespace(keys=keys, final_keys=None, input_len=len(keys) * PAGE if input_len is None else input_len,
                           output_len=output_len)  # fmt: skip


class TestAdmissionBudget:
    def test_a_request_is_admitted_while_its_prompt_output_and_a_page_stay_below_the_room(self):
        """5 pages of prompt (20 tokens), 7 output tokens and a 4-token page: 31 tokens, below 32 but not below 31."""
        assert cache(l1=8).try_admit(req(range(5), output_len=7)) is not None
        assert cache(l1=8).try_admit(req(range(5), output_len=8)) is None

    def test_admission_evicts_nothing(self):
        c = cache(l1=8)
        for start in (0, 10):
            adm = c.try_admit(req(range(start, start + 3), output_len=1))
            c.extend(adm, adm.computed_tokens)
            c.release(adm)
        evicted = c.stats.evicted_tokens
        assert c.try_admit(req(range(20, 23), output_len=1)) is not None
        assert c.stats.evicted_tokens == evicted  # the room counts the evictable pages; none went yet

    def test_a_decoding_requests_remaining_output_is_set_aside(self):
        c = cache(l1=16)
        a = c.try_admit(req(range(2), output_len=20))
        c.extend(a, a.computed_tokens)
        assert c.decode_left == 19  # the prefill made the first token
        # 16 pages = 64 tokens: 2 pages held + 19 owed leave 37, so 5 pages + 16 outputs + a page (40) wait.
        assert c.try_admit(req(range(10, 15), output_len=16)) is None
        assert c.try_admit(req(range(10, 15), output_len=12)) is not None

    def test_a_first_chunk_past_the_chunk_budget_is_cut_at_a_page_and_an_empty_one_is_not_admitted(self):
        c = cache(l1=100)
        adm = c.try_admit(req(range(5), output_len=2, input_len=18), chunk_limit=10)
        assert c.extend(adm, 10) == 8  # 18 tokens (20 paged) do not fit 10: two pages
        assert c.try_admit(req(range(50, 55)), chunk_limit=3) is None  # under a page of chunk left


class TestAllocation:
    def test_a_chunk_evicts_for_its_tokens_and_a_page_when_short(self):
        c = cache(l1=8)
        first = c.try_admit(req(range(4), output_len=1))
        c.extend(first, first.computed_tokens)  # 4 pages, cached and released
        c.release(first)
        adm = c.try_admit(req(range(10, 14), output_len=1))
        assert c.stats.evicted_tokens == 0
        c.extend(adm, adm.computed_tokens)  # 4 pages and a page > 4 free: the cached 4 go
        assert c.stats.evicted_tokens == 16

    def test_a_decode_step_that_finds_no_page_raises(self):
        c = cache(l1=6)
        adm = c.try_admit(req(range(2), output_len=7))
        c.extend(adm, adm.computed_tokens)
        # 4 free pages (16 tokens) less the 6 outputs owed: 8 + 1 + 4 tokens do not fit
        assert c.try_admit(req(range(10, 12), output_len=1)) is None
        c.l1.kv_used = c.l1.kv_cap  # the pool taken from under it
        try:
            c.decode(adm, 1)
        except MemoryError:
            pass
        else:
            raise AssertionError("a decode step with no free page went on")


@settings(max_examples=120, deadline=None)
@given(prompt=st.integers(1, 30), output=st.integers(2, 60), l1=st.integers(6, 40), steps=st.integers(1, 80),
       cached=st.lists(st.integers(1, 6), max_size=4), ahead=st.integers(0, 3))  # fmt: skip
def test_decode_steps_in_bulk_leave_the_state_of_one_step_at_a_time(prompt, output, l1, steps, cached, ahead):
    def run(bulk: bool):
        c = cache(l1=l1, decode_lookahead=ahead)
        for i, pages in enumerate(cached):  # cached requests the steps may evict
            a = c.try_admit(req(range(100 * (i + 1), 100 * (i + 1) + pages)))
            if a is not None and c.extend(a, a.computed_tokens):
                c.release(a)
        adm = c.try_admit(req(range(prompt), output_len=output, input_len=prompt * PAGE - 1))
        if adm is None or not c.extend(adm, adm.computed_tokens):
            return None
        r, made = adm.run, 0
        try:
            if bulk:
                c.decode(adm, steps)
            else:
                while made < steps and not r.finished:
                    c.decode(adm, 1)
                    made += 1
        except MemoryError:
            return "dry"
        return (r.emitted, r.allocated, r.finished, c.l1.kv_used, c.stats.evicted_tokens, c.decode_left)

    assert run(bulk=True) == run(bulk=False)

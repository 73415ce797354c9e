"""The plain (single-pool) twin of :mod:`tests.sim.offline.test_host_ordering`: a timed run of the engine on a
single-pool model and a ``hicache-sim tree`` stream of the same calls, through the plain driver
(:mod:`sim.offline.hostcalls`, the one that answers SGLang's recorded vectors), take the same host-tier
decisions (backups, demotes, deletes, drops, host evictions, loads) in the same order.

Without L1 pressure they do: backups, their acks and host evictions follow SGLang's order, requests finishing
in one decode pass released in ``batch.reqs`` order and each caching the KV it computed.

Under L1 pressure too: the engine checks SGLang's budget at admission without evicting
(``mem_cache/prefill_budget.py:91-167``) and allocates per chunk (``mem_cache/allocation.py:374``) and per decode
step (``:625``), evicting device leaves only when an allocation is short, as the driver does, through the same
calls on the cache (:class:`sim.cache.requests.RequestRows`).
"""

import pytest

from sim.app.run import build
from sim.offline.hostcalls import PlainHostDriver
from sim.serve.scheduler import schedule_policy
from tests.sim.offline.twin import ack_logger, acked_copies, decisions, token_runs
from tests.sim.serve.test_engine import scenario


def _record(inst, monkeypatch) -> list[dict]:
    """Log the calls instance ``inst``'s scheduler makes on its cache as host-tier calls: an admission (its
    match, its prompt and output as token runs, one run of ``page`` tokens per page key), a prefill chunk, the
    decode passes in running-batch order, a release, and an ack as the number of backups acknowledged so far
    (the stream turns it into the driver's copies). A refused admission and the lpm order's matches are
    ``match`` calls (they refresh the matched path, as SGLang's do)."""
    cache, rb, adder = inst.cache, inst.running_batch, inst.adder
    page, calls, rids, held, joined, base = inst.cache.page_tokens, [], {}, [], {}, {}

    def runs(req) -> tuple[list, list]:
        return token_runs(req.final_keys or req.keys, req.input_len, req.output_len, page, base,
                          10**9 + req.rid * 10**5)  # fmt: skip

    try_admit, lpm_order = cache.try_admit, schedule_policy.lpm_order

    def try_admit_(req, *args):
        adm = try_admit(req, *args)
        prompt, output = runs(req)
        if adm is None:
            calls.append({"op": "match", "tokens": prompt})
        else:
            held.append(adm)  # keeps id(adm) unique for the run
            rids[id(adm)] = rid = f"r{len(rids)}"
            calls.append({"op": "admit", "rid": rid, "tokens": prompt, "output": output})
        return adm

    def lpm_order_(c, waiting, page_tokens):
        calls.extend({"op": "match", "tokens": runs(run.req)[0]} for run in waiting)
        return lpm_order(c, waiting, page_tokens)

    monkeypatch.setattr(cache, "try_admit", try_admit_)
    monkeypatch.setattr(schedule_policy, "lpm_order", lpm_order_)
    plan_prefill, add, advance, release, ack = (
        adder.plan_prefill,
        rb.add,
        rb.advance,
        cache.release,
        cache.ack,
    )

    def plan_prefill_():
        left = {id(r): r.prefill_left for r in inst.prefilling}
        out = plan_prefill()
        calls.extend({"op": "extend", "rid": rids[id(r.adm)]} for r in inst.prefilling + out[4]
                     if r.prefill_left < left.pop(id(r), r.prefill_left))  # fmt: skip
        return out

    def add_(run):
        joined[id(run)] = len(joined)
        add(run)

    def advance_(
        rows, steps
    ):  # SGLang runs a decode batch in batch.reqs order (batch_result_processor.py:1006)
        for _, _, run in sorted(rb.decoding, key=lambda e: joined[id(e[2])]):
            calls.append({"op": "decode", "rid": rids[id(run.adm)], "n": steps})
        advance(rows, steps)

    def release_(adm):
        calls.append({"op": "finish", "rid": rids[id(adm)]})
        release(adm)

    ack_ = ack_logger(calls, ack)

    adder.plan_prefill, rb.add, rb.advance, cache.release, cache.ack = (
        plan_prefill_,
        add_,
        advance_,
        release_,
        ack_,
    )
    return calls


def _stream(calls: list[dict], cache, cfg) -> tuple[list[dict], list[str]]:
    """The calls through a plain driver sized as ``cache``; its events, and what it refused or aborted (the
    stream stops there)."""
    driver = PlainHostDriver()
    driver({"op": "config", "model": "plain", "page_size": cache.page_tokens, "full_pages": int(cache.l1.kv_cap),
            "chunked_prefill_size": cfg.chunked_prefill_size, "max_prefill_tokens": cfg.max_prefill_tokens,
            "hicache_ratio": cache.l2.kv_cap / cache.l1.kv_cap, "write_policy": cache.policy.value,
            "write_through_threshold": None, "load_back_threshold": cache.load_back_threshold,
            "load_policy": "forward"})  # fmt: skip
    driver.c.l2.kv_cap = cache.l2.kv_cap  # the engine's host pool, not the driver's rounding of the ratio
    events, acked = [], 0
    for call in calls:
        if call["op"] == "ack":  # the driver's copies in flight that the engine's acknowledged backups cover
            n, acked = acked_copies(driver, call["backups"], acked)
            call = {"op": "ack", "n": n}
        answer = driver(call)
        events += answer.get("events", [])
        if answer.get("admitted") is False or "error" in answer:
            return events, [f"{call['op']} {call.get('rid')}: {answer.get('refused') or answer.get('error')}"]
    return events, []


def _twin(hicache: dict, kv_mem_gb: float, monkeypatch, request_length: int = 700) -> tuple[list, list, list]:
    """(timed decisions, streamed decisions, what the stream refused) of a small multi-turn run of a generic
    single-pool model, 64-token pages, 40 output tokens a round."""
    sc = scenario(model={"name": "generic", "generic_bytes_per_token": 35136}, hardware={"kv_mem_gb": kv_mem_gb},
                  hicache={"page_size": 64, **hicache},
                  workload={"num_clients": 8, "max_parallel": 4, "num_rounds": 3, "request_length": request_length,
                            "output_length": 40})  # fmt: skip
    sim, arrivals, _ = build(sc)
    inst = sim.instances[0]
    calls = _record(inst, monkeypatch)
    inst.cache.events = timed = []
    sim.run(arrivals)
    streamed, refused = _stream(calls, inst.cache, sim.cfg)
    return decisions(timed), decisions(streamed), refused


@pytest.mark.parametrize(("policy", "request_length"), [("write_through", 700), ("write_through_selective", 700),
                                                      ("write_through_selective", 728)])  # fmt: skip
def test_without_l1_pressure_the_run_and_its_stream_back_up_and_evict_host_leaves_alike(policy, request_length,
                                                                                        monkeypatch):  # fmt: skip
    """A request of 728 prompt and 40 output tokens ends on a page boundary (12 pages of 64)."""
    timed, streamed, refused = _twin(
        {"hicache_ratio": 0.2, "write_policy": policy}, 1.0, monkeypatch, request_length
    )
    assert {"backup", "host_evict"} <= {k for k, _ in timed}
    assert streamed == timed and not refused


# (the host tier's set-up, the decisions the run must take for the case to say anything)
L1_PRESSURE = {
    "write_through": ({"hicache_ratio": 2.0}, {"backup", "demote", "load"}),
    "write_back": ({"hicache_ratio": 2.0, "write_policy": "write_back"}, {"backup", "demote", "load"}),
    # a host pool too small to keep a round for the next: host leaves evicted, unbacked victims dropped
    "small_host_pool": ({"hicache_ratio": 0.5}, {"backup", "demote", "host_evict", "drop"}),
}


@pytest.mark.parametrize("name", L1_PRESSURE)
def test_under_l1_pressure_the_run_and_its_stream_make_the_same_host_tierdecisions(name, monkeypatch):
    hicache, exercised = L1_PRESSURE[name]
    timed, streamed, refused = _twin(hicache, 0.3, monkeypatch)
    assert exercised <= {k for k, _ in timed}
    assert streamed == timed
    assert not refused

"""A timed run and a ``hicache-sim tree`` stream of the same calls take the same host-tier decisions: the engine
drives V4's cache in SGLang's scheduler order (acks reaped at the start of a step, the budget check before the
load-back at admission, backups flushed after the batch), so replaying the calls it made, in the host-tier call
format, through the driver that answers SGLang's recordings backs up, demotes, evicts and loads the same nodes in
the same order.
"""

from sim.app.run import build
from sim.offline.v4hostcalls import V4HostDriver
from tests.sim.serve.test_engine import scenario

DECISIONS = ("backup", "demote", "delete", "drop", "host_evict", "load")


def _record(inst):
    """Wrap instance ``inst``'s cache so it logs its calls as host-tier calls (page keys as token runs)."""
    cache, calls, ids = inst.cache, [], {}
    page = cache.page_tokens
    tokens_of = {}

    def tokens(keys, n):
        out = []
        for k in keys:
            if k not in tokens_of:
                tokens_of[k] = len(tokens_of) * page + 10_000
            out.append([tokens_of[k], page])
        tail = n - len(keys) * page  # a partial last page: tokens no other request has
        if tail > 0:
            out.append([10**9 + len(calls) * page, tail])
        return out

    admit, extend, decode, release, ack = cache.admit_request, cache.extend, cache.decode, cache.release, cache.ack

    def admit_request(keys, input_len, output_len):
        adm = admit(keys, input_len, output_len)
        if adm is not None:
            ids[id(adm)] = rid = f"r{len(ids)}"
            full = input_len // page
            calls.append({"op": "admit", "rid": rid, "tokens": tokens(keys[:full], input_len),
                          "output": tokens(keys[full:], output_len)})  # fmt: skip
        return adm

    def extend_(adm, n):
        done = extend(adm, n)
        if done:
            calls.append({"op": "extend", "rid": ids[id(adm)]})
        return done

    def decode_(adm, steps):
        calls.append({"op": "decode", "rid": ids[id(adm)], "n": steps})
        decode(adm, steps)

    def release_(adm):
        calls.append({"op": "finish", "rid": ids[id(adm)]})
        release(adm)

    def ack_(op):
        if not calls or calls[-1]["op"] != "ack":
            calls.append({"op": "ack"})
        ack(op)

    cache.admit_request, cache.extend, cache.decode, cache.release, cache.ack = (
        admit_request, extend_, decode_, release_, ack_)  # fmt: skip
    return calls


def _decisions(events):
    return [(k, e[k][:2] if isinstance(e[k], list) else e[k]) for e in events for k in DECISIONS if k in e]


def test_a_timed_run_and_its_call_stream_make_the_same_host_tier_decisions():
    sc = scenario(hardware={"kv_mem_gb": 0.15}, hicache={"hicache_ratio": 1.5},
                  workload={"num_clients": 6, "max_parallel": 1, "num_rounds": 3, "request_length": 700,
                            "output_length": 40})  # fmt: skip
    sim, arrivals, _ = build(sc)
    inst = sim.instances[0]
    calls = _record(inst)
    c = inst.cache.c
    c.tree.events = timed = []
    sim.run(arrivals)

    m = inst.cache.model
    driver = V4HostDriver()
    driver({"op": "config", "model": "v4", "page_size": c.page, "window": c.window,
            "full_pages": int(c.full_cap // c.page), "swa_pages": int(c.swa_cap // c.page),
            "chunked_prefill_size": c.chunked_prefill_size, "max_prefill_tokens": 16384,
            "hicache_ratio": c.host_full_cap / c.full_cap, "write_policy": c.write_policy,
            "write_through_threshold": None, "load_back_threshold": inst.cache.load_back_threshold,
            "load_policy": "forward"})  # fmt: skip
    assert driver.cfg["window"] == m.sliding_window
    streamed = []
    for call in calls:
        answer = driver(call)
        assert answer.get("admitted", True), call
        streamed += answer["events"]
    kinds = {k for k, _ in _decisions(timed)}
    assert {"backup", "demote", "load"} <= kinds  # the run exercised the host tier
    assert _decisions(streamed) == _decisions(timed)

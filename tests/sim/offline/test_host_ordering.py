"""A timed run and a ``hicache-sim tree`` stream of the same calls take the same host-tier decisions: the engine
drives V4's cache in SGLang's scheduler order (write acks reaped at the start of a step, then the load acks and
the middle chunks' checkpoints; SGLang's budget, Full and SWA, before the load-back at admission; later chunks
sized by the room left; backups flushed after the batch), so replaying the calls it made, in the host-tier call
format, through the driver that answers SGLang's recordings backs up, demotes, evicts and loads the same nodes in
the same order, one request at a time or four in flight, chunked or not, write-through or write_back.
"""

import pytest

from sim.app.run import build
from sim.offline.v4hostcalls import V4HostDriver
from tests.sim.offline.twin import ack_logger, acked_copies, decisions, token_runs
from tests.sim.serve.test_engine import scenario


def _record(inst):
    """Wrap instance ``inst``'s cache so it logs its calls as host-tier calls (page keys as token runs)."""
    cache, calls, ids, held = inst.cache, [], {}, []
    page = cache.page_tokens
    tokens_of = {}

    admit, extend, decode, release, ack = cache.admit_request, cache.extend, cache.decode, cache.release, cache.ack

    def admit_request(keys, input_len, output_len, chunk_limit=None):
        adm = admit(keys, input_len, output_len, chunk_limit)
        prompt, output = token_runs(keys, input_len, output_len, page, tokens_of, 10**9 + len(calls) * page)
        if adm is None:  # a refused admission's match refreshes the matched path, as SGLang's does
            calls.append({"op": "match", "tokens": prompt})
        else:
            held.append(adm)  # keeps id(adm) unique for the run
            ids[id(adm)] = rid = f"r{len(ids)}"
            calls.append({"op": "admit", "rid": rid, "tokens": prompt, "output": output})
        return adm

    def extend_(adm, n):
        done = extend(adm, n)
        if done:
            calls.append({"op": "extend", "rid": ids[id(adm)]})
        return done

    def decode_(adm, steps):
        calls.append({"op": "decode", "rid": ids[id(adm)], "n": steps})
        try:
            decode(adm, steps)
        except MemoryError:  # the pools ran dry: the engine retracts, which the call format has no call for
            calls.append({"op": "dry", "events": len(cache.c.tree.events)})
            raise

    def release_(adm):
        calls.append({"op": "finish", "rid": ids[id(adm)]})
        release(adm)

    ack_ = ack_logger(calls, ack)

    cache.admit_request, cache.extend, cache.decode, cache.release, cache.ack = (
        admit_request, extend_, decode_, release_, ack_)  # fmt: skip
    return calls


def _twin(hardware: dict, hicache: dict, workload: dict, scheduler: dict | None = None) -> tuple[list, list, list]:
    """(timed decisions, streamed decisions, what the stream refused or aborted) of a V4-Flash multi-turn run."""
    sc = scenario(hardware=hardware, hicache=hicache, workload=workload, scheduler=scheduler or {})
    sim, arrivals, _ = build(sc)
    inst = sim.instances[0]
    calls = _record(inst)
    c = inst.cache.c
    c.tree.events = timed = []
    sim.run(arrivals)

    driver = V4HostDriver()
    driver({"op": "config", "model": "v4", "page_size": c.page, "window": c.window,
            "full_pages": int(c.full_cap // c.page), "swa_pages": int(c.swa_cap // c.page),
            "chunked_prefill_size": c.chunked_prefill_size, "max_prefill_tokens": sim.cfg.max_prefill_tokens,
            "hicache_ratio": sc.hicache.hicache_ratio, "write_policy": c.write_policy,
            "write_through_threshold": None, "load_back_threshold": inst.cache.load_back_threshold,
            "load_policy": "forward"})  # fmt: skip
    assert driver.cfg["window"] == inst.cache.model.sliding_window
    assert (driver.c.host_full_cap, driver.c.host_swa_cap) == (c.host_full_cap, c.host_swa_cap)  # SGLang's sizes
    streamed, acked, dry = [], 0, False
    for call in calls:
        if call["op"] == "dry":  # the run retracted at the call before: the stream must have run dry there too
            return decisions(timed[: call["events"]]), decisions(streamed), [] if dry else ["the stream went on"]
        if dry:
            return decisions(timed), decisions(streamed), ["the stream ran dry where the run did not"]
        if call["op"] == "ack":  # the driver's copies in flight that the engine's acknowledged backups cover
            n, acked = acked_copies(driver, call["backups"], acked)
            call = {"op": "ack", "n": n}
        answer = driver(call)
        streamed += answer.get("events", [])
        dry = call["op"] == "decode" and answer.get("aborted", False)
        if answer.get("admitted") is False or ("error" in answer and not dry):
            return decisions(timed), decisions(streamed), [f"{call['op']} {call.get('rid')}: {answer}"]
    return decisions(timed), decisions(streamed), []


ROUNDS = {"num_clients": 6, "max_parallel": 1, "num_rounds": 3, "request_length": 700, "output_length": 40}
FOUR = {**ROUNDS, "num_clients": 8, "max_parallel": 4}
CHUNKED = ({**FOUR, "request_length": 1500}, {"chunked_prefill_size": 512})
HOST_TIER = {"backup", "demote", "load"}
CASES = {  # (hardware, hicache, workload, scheduler, the decisions the run must take for the case to say anything)
    "one at a time": ({"kv_mem_gb": 0.15}, {"hicache_ratio": 1.5}, ROUNDS, None, HOST_TIER),
    "four in flight": ({"kv_mem_gb": 0.15}, {"hicache_ratio": 1.5}, FOUR, None, HOST_TIER),
    "four in flight, roomier L1": ({"kv_mem_gb": 0.3}, {"hicache_ratio": 1.5}, FOUR, None, HOST_TIER),
    "write_back": ({"kv_mem_gb": 0.15}, {"hicache_ratio": 1.5, "write_policy": "write_back"}, FOUR, None, HOST_TIER),
    "chunked prompts": ({"kv_mem_gb": 0.2}, {"hicache_ratio": 1.5}, *CHUNKED, HOST_TIER | {"host_evict"}),
    "chunked prompts, a larger SWA share": ({"kv_mem_gb": 0.15}, {"hicache_ratio": 3.0, "swa_full_tokens_ratio": 0.3},
                                            *CHUNKED, HOST_TIER | {"host_evict"}),  # fmt: skip
    # the SWA pool runs dry in a decode step: both stop there (the engine retracts; the call format has no call for
    # it), with the same decisions before
    "the pools run dry": ({"kv_mem_gb": 0.15}, {"hicache_ratio": 1.5}, *CHUNKED, {"backup", "host_evict"}),
}


@pytest.mark.parametrize("name", CASES)
def test_a_timed_run_and_its_call_stream_make_the_same_host_tierdecisions(name):
    *case, exercised = CASES[name]
    timed, streamed, refused = _twin(*case)
    assert exercised <= {k for k, _ in timed}
    assert streamed == timed
    assert not refused

"""The units of work a plan runs in worker processes: top-level functions of plain arguments (picklable),
each returning plain data. A timed run returns more than a sweep row: dropped tokens by reason, bytes per
link, TPOT, L3 prefetch counters."""

from __future__ import annotations

from collections.abc import Sequence

from sim.scenario.load import Scenario
from sim.workload.request import Request

Order = list[tuple[int, int]]  # (session, round) per request, in the order a replay serves them

__all__ = ["clairvoyant_hits", "decode_row", "mrc_curve", "replay_single", "replay_swa", "served_requests", "timed_run",
           "workload_requests", "admission_order"]


def timed_run(sc: Scenario) -> dict:
    """One timed run: the sweep's flat metrics plus what the plan's sections read."""
    from sim.app.run import run_scenario
    from sim.app.sweep import flat_metrics
    from sim.serve.metrics import dropped_by_reason, percentiles

    result = run_scenario(sc, keep_requests=False)
    s = result.summary
    if s.get("role") in ("decode", "colocated"):  # a decode timeline (HiSparse colocated too)
        return decode_row(s)
    row = flat_metrics(s)
    m = s.get("metrics", {})
    row.update({f"dropped_{k}": v for k, v in dropped_by_reason(m).items()})
    if result.sim is not None:
        tpot = percentiles(result.sim.rec.tpot)
        row.update(tpot_mean_s=tpot["mean"], tpot_p90_s=tpot["p90"])
        row.update({f"link_bytes_{k}": v for k, v in s["link_bytes"].items()})
        row["retractions"] = m.get("num_retracted_requests_total", 0)
        row["storage_prefetches"] = m.get("sim_prefetches_total", 0)
        row["storage_prefetch_requested_tokens"] = m.get("sim_prefetch_requested_tokens_total", 0)
        row.update({f"storage_unfulfilled_{k}": v
                    for k, v in m.get("storage_prefetch_unfulfilled_tokens_total", {}).items()})  # fmt: skip
        row["input_tokens"] = s["tokens"]["input_tokens"]
        row["storage_written_tokens"] = m.get("backuped_tokens_total", 0)
        row["ages"] = {k: m[k] for k in ("kv_age_seconds", "kv_age_tokens_total", "kv_reuses") if k in m}
    return row


def decode_row(s: dict) -> dict:
    """A decode instance's summary as one row: throughput, TPOT and the hot buffer's figures."""
    return {"output_tokens_per_s": s["throughput"]["output_tokens_per_s"], "tpot_mean_s": s["tpot_s"]["mean"],
            "tpot_p90_s": s["tpot_s"]["p90"], **{f"hisparse_{k}": v for k, v in s["hisparse"].items()
                                                 if isinstance(v, (int, float, str, bool)) or v is None}}  # fmt: skip


def admission_order(sc: Scenario) -> Order:
    """(session, round) of every request in the order a timed run of ``sc`` first admitted them (ties by request
    id): the order the server's cache meets a closed-loop workload's rounds in, which a replay must follow to
    size the cache as the server uses it. Round by round, clients in turn, is LRU's worst case instead."""
    from sim.app.run import run_scenario

    records = run_scenario(sc, keep_requests=True).requests
    if records is None or not len(records):
        return []
    records = records.sort_values(["admitted_s", "rid"], kind="stable")
    return [(int(s), int(r)) for s, r in zip(records["session"], records["round"])]


def workload_requests(sc: Scenario, order: Order | None = None) -> list[Request]:
    """The scenario's requests in the order a request-order replay serves them. A multi-turn workload follows
    ``order`` (:func:`admission_order`; requests it lacks come after, round by round), else round by round,
    clients in order: bench_multiturn's cyclic order."""
    import numpy as np

    from sim.app.run import open_loop_requests
    from sim.workload.synthetic import multi_turn_sessions, random_ids_requests

    w, page = sc.workload, sc.hicache.page_size
    if w.kind == "multi_turn":
        sessions = multi_turn_sessions(w.num_clients, w.num_rounds, w.request_length, w.output_length, page,
                                       system_prompt_length=w.system_prompt_length,
                                       sub_question_length=w.sub_question_input_length)  # fmt: skip
        cyclic = [(c, r) for r in range(w.num_rounds) for c, s in enumerate(sessions) if r < len(s)]
        valid = set(cyclic)
        first = [cr for cr in dict.fromkeys(order or []) if cr in valid]
        seen = set(first)
        return [sessions[c][r] for c, r in first + [cr for cr in cyclic if cr not in seen]]
    if w.kind == "bench_serving":
        out, rid = [], 0
        for i, st in enumerate(w.steps):
            reqs = random_ids_requests(st.num_prompts, st.random_input_len, st.random_output_len,
                                       st.random_range_ratio, st.seed, page, step=i, first_rid=rid)  # fmt: skip
            rid += len(reqs)
            out += reqs
        return out
    return open_loop_requests(sc, page, np.random.default_rng(sc.seed))


def served_requests(sc: Scenario, order: Order | None = None) -> list[Request]:
    """The requests with the keys a server caches: the prompt's pages and then the output's
    (:func:`sim.cache.v4.hicache.request_keys`), so a multi-turn round can hit the answer before it; hits still stop
    at the prompt (the match cap of ``input_len``)."""
    from dataclasses import replace

    from sim.cache.v4.hicache import request_keys

    page = sc.hicache.page_size
    return [replace(r, keys=request_keys(r, page)) for r in workload_requests(sc, order)]


def replay_swa(sc: Scenario, l1_pages: int, l2_pages: int, swa_ratio: float, policy: str,
               order: Order | None = None) -> dict:  # fmt: skip
    """DeepSeek-V4's FULL + SWA cache, replayed in request order (``order``: see :func:`workload_requests`)."""
    from sim.cache.v4.swacache import v4_cache
    from sim.offline.replay import replay_v4
    from sim.scenario.load import build_model_spec

    model = build_model_spec(sc)
    cache = v4_cache(model, l1_pages=l1_pages, l2_pages=l2_pages, policy=policy, page=sc.hicache.page_size,
                     load_back_threshold=sc.hicache.load_back_threshold, swa_ratio=swa_ratio,
                     chunked_prefill_size=sc.scheduler.chunked_prefill_size or 8192)  # fmt: skip
    s = replay_v4(cache, model, workload_requests(sc, order)).summary()
    return {"l1_hit": s["l1_hit_tokens"], "l1l2_hit": s["l1l2_hit_tokens"], "swa_evicted_tokens":
            s["metrics"].get("sim_swa_evicted_tokens_total", 0)}  # fmt: skip


def replay_single(sc: Scenario, l1_pages: int | None, l2_pages: int, policy: str = "write_through",
                  order: Order | None = None) -> dict:  # fmt: skip
    """The same requests on one pool group without a window (the single-pool tree): what the keys would hit
    if no SWA state were needed."""
    from sim.cache.hicache import HiCache
    from sim.model.pools import get_model

    page = sc.hicache.page_size
    cache = HiCache(get_model("generic", page_size=page), l1_pages=l1_pages, l2_pages=l2_pages, policy=policy,
                    page_tokens=page, load_back_threshold=sc.hicache.load_back_threshold)  # fmt: skip
    for r in served_requests(sc, order):
        cache.serve(r.keys, r.input_len)
    s = cache.stats
    return {"l1_hit": s.hit_rate(("device",)), "l1l2_hit": s.hit_rate(("device", "host"))}


def clairvoyant_hits(sc: Scenario, capacities: Sequence[int | None], order: Order | None = None) -> list[float]:
    """Belady's bound (hit rate by tokens) at each capacity in pages: no eviction policy does better."""
    from sim.cache.clairvoyant import PageTrace

    trace = PageTrace(served_requests(sc, order), sc.hicache.page_size)
    return [trace.bound(c).hit_rate() for c in capacities]


def mrc_curve(sc: Scenario, capacities: Sequence[int], dense: Sequence[int] = (), order: Order | None = None) -> dict:
    """The one-pass LRU curve (single-pool models only) at each capacity, and at every ``dense`` one."""
    from sim.cache.mrc import miss_ratio_curve

    curve = miss_ratio_curve(served_requests(sc, order), sc.hicache.page_size)
    return {"hit": [float(v) for v in curve.curve(capacities)], "dense": [float(v) for v in curve.curve(dense)],
            "distinct_pages": curve.distinct_pages}

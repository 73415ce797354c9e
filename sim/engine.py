"""The timed model: SimPy processes that turn residency decisions into TTFT, throughput and queueing.

One arrival process feeds requests to instances through a router. Each instance runs one scheduler
process: continuous batching in steps, chunked prefill within a token budget, decode for every running
request. Step time comes from the roofline (:mod:`sim.compute`); copies are timed from the cost table
(:mod:`sim.costs`) on FIFO links (H2D, D2H, and the L3 read and write links). A link is a one-server FIFO
queue computed in closed form (a copy starts at max(now, when the link frees)) whose completions are SimPy
timeouts: the timeline of a capacity-1 ``simpy.Resource`` with one process per copy, at one event per copy
instead of four, and with the end known when the copy is queued, which the load-back overlap needs.

Timeline of a write-through backup (DESIGN.md 1.4): *t1* the request's prefill ends and its pages are
inserted and committed as backed up (pending, device-locked); *t2* the end of that scheduler step flushes
every queued backup as one merged D2H op; *t3* the copy completes and the ack is processed at the next
scheduler step, releasing the lock (and, with L3 on, queueing TP0's write to storage).

Load-back overlaps the prefill layer by layer: a step that carries a request's load cannot end before
the load's last layer lands plus one layer of compute.

Same-time ordering: SimPy breaks ties FIFO by scheduling order; the arrival process is started before the
scheduler processes, so an arrival at a step boundary is seen by that boundary's admission.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import simpy

from sim.compute import Roofline, attention_pairs
from sim.costs import CostTable
from sim.hicache import Admission, BackupOp, HiCache
from sim.metrics import Recorder
from sim.pools import ModelSpec
from sim.storage import Storage
from sim.workload import Request

__all__ = ["EngineConfig", "Simulation"]

MAX_JUMP_STEPS = 256  # decode-only steps simulated in one timeout when nothing else can happen
LPM_MAX_QUEUE = 128  # SGLang falls back from lpm to fcfs above this queue length (schedule_policy.py)


@dataclass(frozen=True)
class EngineConfig:
    """Everything the engine needs, decoupled from the YAML schema (see ``sim.run.build``)."""

    model: ModelSpec
    instances: int = 1
    router: str = "round_robin"
    l1_pages: int = 1000
    l2_pages: int = 0  # 0: HiCache off (L1 only)
    write_policy: str = "write_through"
    eviction_policy: str = "lru"  # SGLang's --radix-eviction-policy (sim/eviction.py)
    eviction_config: dict | None = None  # and its --radix-eviction-policy-config
    load_back_threshold: int = 10
    page_tokens: int = 256
    swa_full_tokens_ratio: float = 0.1
    io_backend: str = "kernel"  # cost-table backend
    host_layout: str = "page_first"
    max_running_requests: int = 256
    schedule_policy: str = "fcfs"  # or "lpm": longest device prefix first
    chunked_prefill_size: int = 8192
    max_prefill_tokens: int = 16384
    l3_enabled: bool = False
    l3_read_Bps: float = 0.57e9
    l3_write_Bps: float = 0.16e9
    l3_latency_s: float = 1e-3
    l3_capacity_pages: int | None = None
    l3_io_batch_pages: int = 128
    prefetch_threshold: int = 256
    prefetch_policy: str = "timeout"
    prefetch_timeout_base_s: float = 1.0
    prefetch_timeout_per_ki_token_s: float = 0.25
    duration_s: float | None = None
    sample_interval_s: float = 1.0
    record_requests: bool = True


@dataclass(slots=True)
class _Running:
    """A request's progress through one instance."""

    req: Request
    inst: int
    adm: Admission | None = None
    admitted_s: float = 0.0
    prefill_left: int = 0
    prefill_pos: int = 0
    load_done_s: float = 0.0
    load_s: float = 0.0
    first_token_s: float = 0.0
    prefetched_pages: int = 0
    prefetch_tried: bool = False


@dataclass
class _Link:
    """A FIFO copy stream: transfers run one after another; ``free_at`` is when the last one ends."""

    name: str
    free_at: float = 0.0
    intervals: list = field(default_factory=list)

    def submit(self, now: float, seconds: float) -> tuple[float, float]:
        start = max(now, self.free_at)
        self.free_at = start + seconds
        return start, self.free_at


class Instance:
    """One serving instance: a HiCache, a waiting queue, running requests and its copy links."""

    def __init__(self, sim: Simulation, idx: int) -> None:
        cfg = sim.cfg
        self.sim, self.idx, self.env = sim, idx, sim.env
        self.cache = HiCache(cfg.model, l1_pages=cfg.l1_pages, l2_pages=cfg.l2_pages, policy=cfg.write_policy,
                             load_back_threshold=cfg.load_back_threshold, page_tokens=cfg.page_tokens,
                             swa_full_tokens_ratio=cfg.swa_full_tokens_ratio,
                             eviction_policy=cfg.eviction_policy, eviction_config=cfg.eviction_config)  # fmt: skip
        self.waiting: deque[_Running] = deque()
        self.prefilling: list[_Running] = []
        self.decoding: list[tuple[int, int, _Running]] = []  # (finish step, rid, request)
        self.decode_ctx = 0
        self.step = 0
        self.to_flush: list[BackupOp] = []
        self.acked: list[BackupOp] = []
        self.links = {name: _Link(name) for name in ("h2d", "d2h", "l3_read", "l3_write")}
        self.wake = self.env.event()
        self.idle = False
        self.blocked_s = 0.0

    # ----- wiring -----------------------------------------------------------------------------
    def notify(self) -> None:
        if not self.wake.triggered:
            self.wake.succeed()

    def submit(self, run: _Running) -> None:
        self.waiting.append(run)
        self.notify()

    @property
    def load(self) -> int:
        return len(self.waiting) + len(self.prefilling) + len(self.decoding)

    # ----- the scheduler ----------------------------------------------------------------------
    def run(self):
        env, sim, cfg = self.env, self.sim, self.sim.cfg
        roofline = sim.roofline
        layers = max(1, cfg.model.layers)
        while True:
            if not (self.waiting or self.prefilling or self.decoding or self.acked or self.to_flush):
                self.idle = True
                yield self.wake
                self.wake = env.event()
                self.idle = False
                continue
            if self.wake.triggered:
                self.wake = env.event()
            t0 = env.now
            self._process_acks()
            blocked = self._admit()
            tokens, pairs, loads_end, done = self._plan_prefill()
            dt = roofline.step_seconds(tokens, pairs, len(self.decoding), self.decode_ctx)
            end = max(t0 + dt, loads_end + dt / layers) if loads_end else t0 + dt
            steps = 1
            jump = not (self.waiting or self.prefilling or tokens or self.acked or self.to_flush)
            if jump and self.decoding:
                steps = min(MAX_JUMP_STEPS, max(1, self.decoding[0][0] - self.step))
            if steps > 1:
                yield env.timeout(steps * dt) | self.wake
                steps = min(steps, max(1, math.ceil((env.now - t0) / dt - 1e-9)))
                if t0 + steps * dt > env.now:
                    yield env.timeout(t0 + steps * dt - env.now)
            else:
                yield env.timeout(end - t0)
            if blocked:
                self.blocked_s += env.now - t0
            sim.rec.counters["steps"] += steps
            self.decode_ctx += len(self.decoding) * steps
            self.step += steps
            self._finish_decodes()
            for run in done:
                self._prefill_done(run)
            self._flush()

    def _process_acks(self) -> None:
        if not self.acked:
            return
        ops, self.acked = self.acked, []
        for op in ops:
            self.cache.ack(op)
            if self.sim.storage is not None:
                self._write_storage(op)

    def _admit(self) -> bool:
        """Admit waiting requests in order while L1, the token budget and the running cap allow."""
        cfg, cache, sim = self.sim.cfg, self.cache, self.sim
        budget = cfg.max_prefill_tokens
        running = len(self.prefilling) + len(self.decoding)
        if cfg.schedule_policy == "lpm" and 1 < len(self.waiting) <= LPM_MAX_QUEUE:
            pt = cfg.page_tokens
            self.waiting = deque(sorted(self.waiting, key=lambda r: -cache.tree.peek(
                r.req.keys, (r.req.input_len - 1) // pt)[0]))  # fmt: skip
        while self.waiting and running < cfg.max_running_requests and budget > 0:
            run = self.waiting[0]
            req = run.req
            lk = cache.lookup(req.keys, req.input_len)
            if sim.storage is not None and not run.prefetch_tried and self._maybe_prefetch(run, lk):
                cache.abandon(lk)
                self.waiting.popleft()
                continue
            extra = len(req.final_keys) - len(req.keys) if req.final_keys else 0
            adm = cache.admit(lk, extra_pages=max(0, extra))
            if adm is None:
                cache.abandon(lk)
                if running == 0 and not cache.pending and not self.acked:
                    self.waiting.popleft()  # nothing will ever free room for it
                    sim.rec.dropped["exceeds_kv_capacity"] += 1
                    sim.finished_one(req)
                    continue
                sim.rec.counters["admission_stalls"] += 1
                return True
            self.waiting.popleft()
            run.adm = adm
            run.admitted_s = self.env.now
            run.prefill_left = adm.computed_tokens
            run.prefill_pos = adm.device_tokens + adm.host_tokens
            if adm.load_kv_pages or adm.load_swa_pages:
                seconds = sim.transfer_seconds("h2d", adm.load_kv_pages, adm.load_swa_pages, cache)
                start, end = self.links["h2d"].submit(self.env.now, seconds)
                sim.rec.transfer(self.idx, "h2d", start, end,
                                 sum(cache.pool_bytes(adm.load_kv_pages, adm.load_swa_pages).values()))  # fmt: skip
                run.load_done_s, run.load_s = end, end - self.env.now
            self.prefilling.append(run)
            budget -= adm.computed_tokens
            running += 1
        return False

    def _plan_prefill(self) -> tuple[int, float, float, list[_Running]]:
        """Chunks of this step: (tokens, attention pairs, latest load end among them, finishing)."""
        budget = self.sim.cfg.chunked_prefill_size
        tokens, pairs, loads_end, done = 0, 0.0, 0.0, []
        for run in self.prefilling:
            if tokens >= budget:
                break
            chunk = min(run.prefill_left, budget - tokens)
            pairs += attention_pairs(chunk, run.prefill_pos)
            tokens += chunk
            run.prefill_left -= chunk
            run.prefill_pos += chunk
            if run.load_done_s > self.env.now:
                loads_end = max(loads_end, run.load_done_s)
            if run.prefill_left == 0:
                done.append(run)
        return tokens, pairs, loads_end, done

    def _prefill_done(self, run: _Running) -> None:
        self.prefilling.remove(run)
        self.to_flush.extend(self.cache.commit(run.adm))
        run.first_token_s = self.env.now
        if run.req.output_len <= 1:
            self._finish(run)
        else:
            heapq.heappush(self.decoding, (self.step + run.req.output_len - 1, run.req.rid, run))
            self.decode_ctx += run.req.input_len

    def _finish_decodes(self) -> None:
        while self.decoding and self.decoding[0][0] <= self.step:
            _, _, run = heapq.heappop(self.decoding)
            self.decode_ctx -= run.req.input_len + run.req.output_len - 1
            self._finish(run)

    def _finish(self, run: _Running) -> None:
        if run.req.final_keys:
            self.to_flush.extend(self.cache.commit(run.adm, run.req.final_keys))
        self.cache.release(run.adm)
        self.sim.record(run, self.env.now)

    def _flush(self) -> None:
        """End of a scheduler step: one merged D2H op for every backup queued during it (t2)."""
        if not self.to_flush:
            return
        ops, self.to_flush = self.to_flush, []
        kv = sum(op.kv_pages for op in ops)
        swa = sum(op.swa_pages for op in ops)
        sim = self.sim
        seconds = sim.transfer_seconds("d2h", kv, swa, self.cache)
        start, end = self.links["d2h"].submit(self.env.now, seconds)
        sim.rec.transfer(self.idx, "d2h", start, end, sum(self.cache.pool_bytes(kv, swa).values()))
        sim.rec.counters["backup_flushes"] += 1

        def acked(_event, ops=ops) -> None:
            self.acked.extend(ops)
            self.notify()

        self.env.timeout(end - self.env.now).callbacks.append(acked)

    # ----- L3 ---------------------------------------------------------------------------------
    def _write_storage(self, op: BackupOp) -> None:
        """After the ack, TP0 writes the pages to storage; they are readable once the write lands."""
        keys = [k for n in op.nodes for k in n.key]
        if not keys:
            return
        window = any(n.host_swa for n in op.nodes)
        sim, cfg = self.sim, self.sim.cfg
        nbytes = sum(self.cache.pool_bytes(len(keys), op.swa_pages).values())
        seconds = nbytes / cfg.l3_write_Bps + cfg.l3_latency_s * math.ceil(len(keys) / cfg.l3_io_batch_pages)
        start, end = self.links["l3_write"].submit(self.env.now, seconds)
        sim.rec.transfer(self.idx, "l3_write", start, end, nbytes)
        self.env.timeout(end - self.env.now).callbacks.append(lambda _e: sim.storage.put(keys, window))

    def _maybe_prefetch(self, run: _Running, lk) -> bool:
        """Start an L3 prefetch if storage holds at least ``prefetch_threshold`` tokens beyond L1/L2."""
        sim, cfg, cache = self.sim, self.sim.cfg, self.cache
        run.prefetch_tried = True
        start = lk.device_pages + lk.host_pages
        stop = max(0, (run.req.input_len - 1) // cfg.page_tokens)
        hit = sim.storage.hit_pages(run.req.keys, start, stop)
        if hit * cfg.page_tokens < cfg.prefetch_threshold or hit == 0:
            return False
        sim.storage.touch(run.req.keys[start : start + hit])  # read: most recently used
        swa = cache.window_pages
        nbytes = sum(cache.pool_bytes(hit, swa).values())
        total = nbytes / cfg.l3_read_Bps + cfg.l3_latency_s * math.ceil(hit / cfg.l3_io_batch_pages)
        t_start, t_end = self.links["l3_read"].submit(self.env.now, total)
        policy = cfg.prefetch_policy
        if policy == "wait_complete":
            stop_at = t_end
        elif policy == "timeout":
            timeout = cfg.prefetch_timeout_base_s + cfg.prefetch_timeout_per_ki_token_s * hit * cfg.page_tokens / 1024
            stop_at = min(t_end, self.env.now + timeout)
        else:  # best_effort: stop as soon as the request could run, at the next scheduler step
            stop_at = min(t_end, self.env.now + sim.roofline.overhead_s)
        if stop_at >= t_end:
            done = hit
        else:  # terminated early: what has landed is used, the rest of the read is cancelled
            done = int(hit * max(0.0, stop_at - t_start) / total)
            t_end = max(t_start, stop_at)
            self.links["l3_read"].free_at = t_end
        sim.rec.transfer(self.idx, "l3_read", t_start, t_end, nbytes * done // hit)
        sim.rec.counters["prefetches"] += 1
        sim.rec.counters["prefetch_requested_tokens"] += hit * cfg.page_tokens
        keys = run.req.keys

        def landed(_event) -> None:
            pages = cache.insert_host(keys, start + done, window=done == hit) if done else 0
            run.prefetched_pages = min(done, pages) if pages else 0
            sim.rec.counters["prefetched_tokens_total"] += run.prefetched_pages * cfg.page_tokens
            self.waiting.appendleft(run)
            self.notify()

        self.env.timeout(max(0.0, stop_at - self.env.now)).callbacks.append(landed)
        return True


class Simulation:
    """Builds the SimPy environment, instances and the arrival process; :meth:`run` plays it out."""

    def __init__(self, cfg: EngineConfig, costs: CostTable, roofline: Roofline, rng: np.random.Generator) -> None:
        self.cfg, self.costs, self.roofline, self.rng = cfg, costs, roofline, rng
        self.env = simpy.Environment()
        self.rec = Recorder(record_requests=cfg.record_requests)
        needs_window = cfg.model.has_swa
        self.storage = Storage(cfg.l3_capacity_pages, needs_window) if cfg.l3_enabled else None
        self.instances = [Instance(self, i) for i in range(cfg.instances)]
        self._rr = 0
        self.arrived = 0
        self.on_finish: Callable[[Request], None] | None = None
        self.end_s = 0.0
        # Pools that hold bytes, with their anchor: a copy moves kv-anchored pages and window pages.
        self._pool_items = [(p.name, p.anchor) for p in cfg.model.pools if p.bytes_per_page]

    def transfer_seconds(self, op: str, kv_pages: int, swa_pages: int, cache: HiCache) -> float:
        """One merged copy of ``kv_pages`` pages (and window pages) in every pool, one call per pool."""
        backend, total = self.cfg.io_backend, 0.0
        layers = self.cfg.model.layers if self.cfg.host_layout == "layer_first" else 1
        for name, anchor in self._pool_items:
            pages = kv_pages if anchor == "kv" else swa_pages
            if pages:
                item = cache.page_bytes[name]
                total += self.costs.transfer_seconds(op, backend, pages * layers, max(1, item // layers))
        return total

    # ----- routing and arrivals ---------------------------------------------------------------
    def route(self, req: Request) -> Instance:
        insts = self.instances
        if len(insts) == 1:
            return insts[0]
        if self.cfg.router == "cache_aware":
            pt = self.cfg.page_tokens
            best = max(range(len(insts)), key=lambda i: (insts[i].cache.tree.peek(req.keys, (req.input_len - 1) // pt)[1],
                                                         -insts[i].load, -i))  # fmt: skip
            return insts[best]
        inst = insts[self._rr % len(insts)]
        self._rr += 1
        return inst

    def dispatch(self, req: Request) -> None:
        self.arrived += 1
        inst = self.route(req)
        inst.submit(_Running(req, inst.idx))

    def trace_arrivals(self, requests: list[Request]):
        env = self.env
        for req in requests:
            if req.arrival_s > env.now:
                yield env.timeout(req.arrival_s - env.now)
            self.dispatch(req)

    def closed_loop(self, sessions: list[list[Request]], max_parallel: int, rate: float | None,
                    distribution: str = "poisson"):  # fmt: skip
        """SGLang bench_multiturn: at most ``max_parallel`` requests in flight; a client's next round
        is ready once its previous round finished; ready clients are picked at random (seeded)."""
        env, rng = self.env, self.rng
        order = rng.permutation(len(sessions))
        ready: list[int] = [int(i) for i in order]
        next_round = [0] * len(sessions)
        in_flight = 0
        wake = env.event()

        def finished(req: Request) -> None:
            nonlocal in_flight, wake
            in_flight -= 1
            if req.session >= 0 and next_round[req.session] < len(sessions[req.session]):
                ready.append(req.session)
            if not wake.triggered:
                wake.succeed()

        self.on_finish = finished
        while True:
            if not ready or in_flight >= max_parallel:
                if in_flight == 0 and not ready:
                    return
                yield wake
                wake = env.event()
                continue
            if rate:
                gap = rng.exponential(1.0 / rate) if distribution == "poisson" else rng.uniform(0, 2.0 / rate)
                yield env.timeout(gap)
            pick = int(rng.integers(len(ready)))
            client = ready.pop(pick)
            req = sessions[client][next_round[client]]
            next_round[client] += 1
            req.arrival_s = env.now
            in_flight += 1
            self.dispatch(req)

    def record(self, run: _Running, now: float) -> None:
        req, adm = run.req, run.adm
        storage_t = min(run.prefetched_pages * self.cfg.page_tokens, adm.host_tokens)
        self.rec.request((
            req.rid, run.inst, req.session, req.round, req.arrival_s, run.admitted_s, run.first_token_s, now,
            req.input_len, req.output_len, adm.device_tokens, adm.host_tokens - storage_t, storage_t,
            adm.computed_tokens, run.load_s, run.admitted_s - req.arrival_s, run.first_token_s - req.arrival_s,
            now - req.arrival_s,
        ))  # fmt: skip
        self.finished_one(req)

    def finished_one(self, req: Request) -> None:
        """A request left the system (finished or dropped): the closed loop may send the next round."""
        self.end_s = max(self.end_s, self.env.now)
        if self.on_finish is not None:
            self.on_finish(req)

    def sampler(self, progress=None):
        env, interval = self.env, self.cfg.sample_interval_s
        while True:
            yield env.timeout(interval)
            for inst in self.instances:
                c = inst.cache
                row = {
                    "time_s": env.now, "instance": inst.idx, "waiting": len(inst.waiting),
                    "running": len(inst.prefilling) + len(inst.decoding),
                    "l1_kv_pages": c.l1.kv_used, "l1_swa_pages": c.l1.swa_used,
                    "l2_kv_pages": c.l2.kv_used, "l2_swa_pages": c.l2.swa_used,
                    "pending_backups": len(c.pending), "evictable_tokens": c.tree.evictable_tokens,
                }  # fmt: skip
                for name, nbytes in c.pool_bytes(c.l1.kv_used, c.l1.swa_used).items():
                    row[f"l1_bytes_{name}"] = nbytes
                for name, nbytes in c.pool_bytes(c.l2.kv_used, c.l2.swa_used).items():
                    row[f"l2_bytes_{name}"] = nbytes
                self.rec.samples.append(row)
            if progress is not None:
                progress.update(interval)

    def run(self, arrivals, progress=None) -> None:
        """Play the arrival process out; stop at ``duration_s`` if set, else when all work is done."""
        env = self.env
        done = env.process(arrivals)
        for inst in self.instances:
            env.process(inst.run())
        env.process(self.sampler(progress))
        if self.cfg.duration_s is not None:
            env.run(until=self.cfg.duration_s)
            return
        env.run(until=done)
        while any(i.load or i.cache.pending or i.acked or i.to_flush for i in self.instances):
            env.run(until=env.now + self.cfg.sample_interval_s)
        self.end_s = max(self.end_s, max((lk.free_at for i in self.instances for lk in i.links.values()), default=0))

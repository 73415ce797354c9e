"""A PD decode instance in time, with HiSparse on or off (DESIGN.md 1.6).

Requests arrive already prefilled. The instance admits them while its GPU KV budget holds their state at
their final length (all of it without HiSparse; the C4 hot buffer instead of the C4 KV with it) and
runs decode steps over the batch. A step costs the roofline's weights-plus-KV read and, with HiSparse,
one swap-in kernel per C4 layer for the batch's misses, priced by the cost table.

Misses come from :func:`sim.hisparse.simulate_hisparse` run on a few sample requests (the access model and
policy of the scenario); a running request at decode step *j* contributes the sampled mean misses at *j*
(interpolated between simulated windows). KV read per request is affine in the sequence length for long
sequences, so a batch's read is computed from the sum of its lengths.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import simpy

from sim.compute import Roofline
from sim.costs import CostTable
from sim.errors import InputError
from sim.hisparse import DecodeModelShape, HbmBudget, HiSparseConfig, HiSparseResult, simulate_hisparse
from sim.metrics import Recorder, percentiles
from sim.topk import ParametricAccess, ParametricAccessParams, TraceAccess, load_topk_trace
from sim.workload import Request

__all__ = ["DecodeRun", "decode_shape", "run_decode"]

_SHAPES = {"deepseek-v4-flash": DecodeModelShape(), "deepseek-v4-pro": DecodeModelShape.v4_pro()}


def decode_shape(model_name: str, weight_bytes: float) -> DecodeModelShape:
    if model_name not in _SHAPES:
        raise InputError(f"model: HiSparse decode is modelled for {', '.join(_SHAPES)}, not {model_name!r}")
    return replace(_SHAPES[model_name], weight_bytes_per_gpu=weight_bytes)


@dataclass
class DecodeRun:
    summary: dict
    rec: Recorder
    misses: pd.DataFrame


class _Decoder:
    """The decode scheduler: admission by memory, one step per batch, finishes by step count."""

    def __init__(self, env: simpy.Environment, sc, shape: DecodeModelShape, hs: HiSparseResult | None,
                 costs: CostTable, roofline: Roofline, rec: Recorder) -> None:  # fmt: skip
        self.env, self.sc, self.shape, self.hs, self.costs, self.roofline, self.rec = (
            env, sc, shape, hs, costs, roofline, rec)  # fmt: skip
        self.enabled = sc.hisparse.enabled
        self.k = sc.hisparse_top_k or shape.index_topk
        self.budget = sc.hardware.kv_mem_gb * 1e9
        self.used = 0.0
        self.waiting: deque[Request] = deque()
        self.running: list[tuple[int, int, Request, float, int]] = []  # (finish step, rid, req, admitted, start)
        self.step_ends: list[float] = []  # when each step ended: a request's first token is its first step
        self.step = 0
        self.seq_sum = 0
        self.wake = env.event()
        self.max_batch_seen = 0
        self.expected = 0
        self.all_done = env.event()  # fires when every expected request has finished or been dropped
        self.swap_s = 0.0
        self.busy_s = 0.0
        if hs is not None and hs.steps.size:
            per_step = hs.misses_per_step  # per (request, layer)
            self.miss_steps, self.miss_means = hs.steps.astype(float), per_step
        else:
            self.miss_steps, self.miss_means = np.zeros(1), np.zeros(1)
        s0 = 1 << 16
        self.read0 = shape.kv_read_bytes(s0, self.k)
        self.read_slope = (shape.kv_read_bytes(s0 + 4096, self.k) - self.read0) / 4096
        self.s0 = s0

    def request_bytes(self, req: Request) -> int:
        final = req.input_len + req.output_len
        return self.shape.request_bytes(final, self.sc.hisparse.device_buffer_size if self.enabled else None)

    def submit(self, req: Request) -> None:
        self.waiting.append(req)
        if not self.wake.triggered:
            self.wake.succeed()

    def run(self):
        env, cfg = self.env, self.sc.scheduler
        while True:
            self._admit(cfg.max_running_requests)
            if not self.running:
                yield self.wake
                self.wake = env.event()
                continue
            n = len(self.running)
            read = n * self.read0 + self.read_slope * (self.seq_sum - n * self.s0)
            dt = self.roofline.overhead_s + (self.shape.weight_bytes_per_gpu + read) / (
                self.roofline.hbm_Bps * self.roofline.mbu)
            if self.enabled:
                swap = self._swap_in_seconds()
                self.swap_s += swap
                dt += swap
            yield env.timeout(dt)
            self.busy_s += dt
            self.step_ends.append(env.now)
            self.step += 1
            self.seq_sum += n
            self.rec.counters["steps"] += 1
            while self.running and self.running[0][0] <= self.step:
                _, _, req, admitted, start = heapq.heappop(self.running)
                self.seq_sum -= req.input_len + (self.step - start)
                self.used -= self.request_bytes(req)
                self._record(req, admitted, self.step_ends[start], env.now)

    def _admit(self, max_running: int) -> None:
        while self.waiting and len(self.running) < max_running:
            req = self.waiting[0]
            need = self.request_bytes(req)
            if need > self.budget:
                self.waiting.popleft()
                self.rec.dropped["exceeds_kv_capacity"] += 1
                self._check_done()
                continue
            if self.used + need > self.budget:
                self.rec.counters["admission_stalls"] += 1
                return
            self.waiting.popleft()
            self.used += need
            heapq.heappush(self.running, (self.step + max(1, req.output_len), req.rid, req, self.env.now, self.step))
            self.seq_sum += req.input_len
        self.max_batch_seen = max(self.max_batch_seen, len(self.running))

    def _swap_in_seconds(self) -> float:
        """The batch's misses in one C4 layer at this step, priced per layer, times the C4 layers."""
        offsets = np.fromiter((self.step - e[4] for e in self.running), dtype=float, count=len(self.running))
        misses = float(np.interp(offsets, self.miss_steps, self.miss_means).sum())
        n = len(self.running)
        per_layer = self.costs.swap_in_seconds(n, self.k, min(int(round(misses)), n * self.k),
                                               self.shape.kv_row_bytes)  # fmt: skip
        return per_layer * self.shape.n_c4_layers

    def _record(self, req: Request, admitted: float, first: float, now: float) -> None:
        self.rec.request((
            req.rid, 0, req.session, req.round, req.arrival_s, admitted, first, now,
            req.input_len, req.output_len, 0, 0, 0, 0, 0.0, admitted - req.arrival_s,
            first - req.arrival_s, now - req.arrival_s,
        ))  # fmt: skip
        self._check_done()

    def _check_done(self) -> None:
        if self.rec.n_finished + sum(self.rec.dropped.values()) >= self.expected and not self.all_done.triggered:
            self.all_done.succeed()

    def sampler(self, interval: float):
        while True:
            yield self.env.timeout(interval)
            self.rec.samples.append({"time_s": self.env.now, "instance": 0, "waiting": len(self.waiting),
                                     "running": len(self.running), "kv_used_bytes": self.used})  # fmt: skip


def _access_model(sc):
    a = sc.hisparse.access
    if a.kind == "trace":
        return TraceAccess(load_topk_trace(a.trace_path))
    return ParametricAccess(ParametricAccessParams(a.sink_tokens, a.recent_fraction, a.overlap, a.zipf_alpha))


def run_decode(sc, requests: list[Request], costs: CostTable, rng: np.random.Generator,
               progress=None, rec: Recorder | None = None) -> DecodeRun:  # fmt: skip
    """Play a decode instance over ``requests``; with HiSparse, simulate misses on sample requests first.
    ``rec`` is the recorder to fill (one with a sink streams per-request records)."""
    roofline = Roofline.from_scenario(sc)
    shape = decode_shape(sc.model.name, sc.compute.decode_bytes_per_step)
    h = sc.hisparse
    hs_cfg = HiSparseConfig(device_buffer_size=h.device_buffer_size, top_k=sc.hisparse_top_k, policy=h.policy,
                            io_backend=sc.hicache.cost_backend, layers_simulated=h.access.layers_simulated,
                            step_windows=h.step_windows, window_steps=h.window_steps)  # fmt: skip
    input_len = int(np.median([r.input_len for r in requests]))
    output_len = int(np.median([r.output_len for r in requests]))
    budget = HbmBudget(hbm_bytes=sc.hardware.kv_mem_gb * 1e9, hbm_bandwidth=roofline.hbm_Bps * roofline.mbu,
                       mem_fraction_static=1.0, weight_bytes=0.0)  # fmt: skip
    hs = simulate_hisparse(hs_cfg, shape, _access_model(sc), h.sample_requests, input_len, output_len, costs,
                           rng, budget)  # fmt: skip
    env = simpy.Environment()
    rec = rec if rec is not None else Recorder(record_requests=sc.output.record_requests)
    dec = _Decoder(env, sc, shape, hs if h.enabled else None, costs, roofline, rec)

    def arrivals():
        for req in requests:
            if req.arrival_s > env.now:
                yield env.timeout(req.arrival_s - env.now)
            dec.submit(req)

    dec.expected = len(requests)
    env.process(arrivals())
    env.process(dec.run())
    env.process(dec.sampler(sc.output.timeseries_interval_s))
    env.run(until=sc.duration_s if sc.duration_s is not None else dec.all_done)
    if progress is not None:
        progress.update(env.now)
    return DecodeRun(_summary(sc, dec, hs, env.now, len(requests)), rec, _misses_frame(hs, hs_cfg))


def _misses_frame(hs: HiSparseResult, cfg: HiSparseConfig) -> pd.DataFrame:
    r, layers, steps = hs.misses.shape
    idx = np.indices((r, layers, steps)).reshape(3, -1)
    return pd.DataFrame({
        "step": hs.steps[idx[2]].astype(np.int64), "request": idx[0], "layer": idx[1],
        "misses": hs.misses.reshape(-1), "accesses": hs.accesses.reshape(-1),
        "policy": cfg.policy, "device_buffer_size": cfg.device_buffer_size,
    })  # fmt: skip


def _summary(sc, dec: _Decoder, hs: HiSparseResult, horizon: float, arrived: int) -> dict:
    rec = dec.rec
    out_tokens = rec.token_totals()["output_tokens"]
    cap = hs.capacity
    dropped = dict(rec.dropped)
    return {
        "scenario": sc.name,
        "seed": sc.seed,
        "model": sc.model.name,
        "role": "decode",
        "simulated_s": horizon,
        "requests": {"arrived": arrived, "finished": rec.n_finished, "dropped": dropped,
                     "unfinished": arrived - rec.n_finished - sum(dropped.values())},  # fmt: skip
        "throughput": {
            "requests_per_s": rec.n_finished / horizon if horizon else 0.0,
            "input_tokens_per_s": 0.0,
            "output_tokens_per_s": out_tokens / horizon if horizon else 0.0,
        },
        "ttft_s": percentiles(rec.ttft),
        "e2e_s": percentiles(rec.e2e),
        "tpot_s": percentiles(rec.tpot),
        "queue_wait_s": percentiles(rec.queue_wait),
        "engine": {"steps": rec.counters["steps"], "admission_stalls": rec.counters["admission_stalls"],
                   "busy_s": dec.busy_s},  # fmt: skip
        "hisparse": {
            "enabled": sc.hisparse.enabled,
            "policy": sc.hisparse.policy,
            "device_buffer_size": sc.hisparse.device_buffer_size,
            "top_k": dec.k,
            "bytes_per_request": cap.bytes_per_request_hisparse if sc.hisparse.enabled else cap.bytes_per_request_baseline,
            "bytes_per_request_baseline": cap.bytes_per_request_baseline,
            "bytes_per_request_hisparse": cap.bytes_per_request_hisparse,
            "max_batch": cap.max_batch_hisparse if sc.hisparse.enabled else cap.max_batch_baseline,
            "max_batch_baseline": cap.max_batch_baseline,
            "max_batch_hisparse": cap.max_batch_hisparse,
            "batch_gain": cap.batch_gain,
            "peak_batch": dec.max_batch_seen,
            "misses_per_step": float(hs.misses.mean()) if hs.misses.size else 0.0,
            "miss_rate": hs.miss_rate,
            "swap_in_share": dec.swap_s / dec.busy_s if dec.busy_s else 0.0,
            "d2h_backup_bytes_sampled": hs.d2h_backup_bytes,
        },
    }

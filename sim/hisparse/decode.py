"""A PD decode instance in time, with HiSparse on or off (DESIGN.md 1.6); for a DSA model (DeepSeek V3.2, GLM-5.x:
:mod:`sim.hisparse.dsadecode`) its colocated HiSparse instance too, whose prompts are prefilled in passes that
stall decode, and DP-attention ranks alike (one simulated). A bench_serving client is a closed loop.

Requests arrive already prefilled. The GPU's KV memory is cut into SGLang's pools (full tokens, SWA, and
with HiSparse a C4 pool of full / (4 x host_to_device_ratio) slots: :func:`sim.hisparse.buffer.size_pools`); a
request is admitted while the pools hold its final length in full tokens, its SWA tail and, with HiSparse,
its hot buffer plus one page. A step costs the roofline's weights-plus-KV read (with a model config, the routed
experts the batch touches at their stored dtype too) and, with HiSparse, one
swap-in kernel per C4 layer for the batch's misses, priced by the cost table; with ``compute.backend:
aiconfigurator`` the step's forward is aiconfigurator-core's measured decode pass instead (its V4 sparse
attention module reads the top-k rows, wherever HiSparse keeps them), plus the same swap-ins. The scheduler's own time
(``compute.step_overhead_ms``) overlaps the previous step's GPU work, as SGLang's overlap event loop for
decode instances does (disaggregation/decode.py:3165-3260), so a step lasts the longer of the two.

Misses come from :func:`sim.hisparse.buffer.sample_misses` run on a few sample requests (the access model and
policy of the scenario, C4 rows for V4, raw positions for DSA); a running request at decode step *j* contributes the sampled mean misses at *j*
(interpolated between simulated windows). KV read per request is affine in the sequence length for long
sequences, so a batch's read is computed from the sum of its lengths. Steps between two decisions (a finish, the
step an arrival joins at) are priced together and run as one event, each step's time as it would be alone.
"""

from __future__ import annotations

import heapq
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import simpy

from sim.base.errors import InputError
from sim.base.progress import advance_to
from sim.hisparse.buffer import (
    FP4_INDEXER_ROW_BYTES,
    DecodeModelShape,
    DecodePools,
    HbmBudget,
    HiSparseConfig,
    HiSparseResult,
    _ceil_to,
    simulate_hisparse,
)
from sim.hisparse.coordinator import DSA, V4, Family
from sim.hisparse.dsa import swap_in_step_seconds
from sim.hisparse.dsadecode import DsaDecode, dsa_decode, dsa_layout_of
from sim.hisparse.topk import ParametricAccess, ParametricAccessParams, TraceAccess, load_topk_trace
from sim.model.compute import Roofline
from sim.model.costs import CostTable
from sim.model.pricing import step_model
from sim.serve.metrics import Recorder, percentiles
from sim.workload.request import Request

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["DecodeRun", "decode_shape", "run_decode"]

MAX_BLOCK_CELLS = 1 << 20  # steps x running requests one block prices at once (its misses table, 8 MB)
_SHAPES = {"deepseek-v4-flash": DecodeModelShape(), "deepseek-v4-pro": DecodeModelShape.v4_pro()}


def decode_shape(model_name: str, weight_bytes: float, fp4_indexer: bool = False,
                 fp4_sized: bool = False) -> DecodeModelShape:  # fmt: skip
    """The decode GPU's shape; with the fp4 indexer its keys are read at 68 B each, and the pools are sized at
    that only where SGLang sizes them so (``fp4_sized``: ROCm, ``pool_configurator.py:1109-1114``). The name is
    matched as the catalog matches it, in any case (``DeepSeek-V4-Flash``, as a model path names it)."""
    base = _SHAPES.get(model_name.lower())
    if base is None:
        raise InputError(f"model: HiSparse decode is modelled for {', '.join(_SHAPES)}, not {model_name!r}")
    shape = replace(base, weight_bytes_per_gpu=weight_bytes)
    if fp4_indexer:
        shape = replace(shape, c4_indexer_row_bytes=FP4_INDEXER_ROW_BYTES,
                        c4_indexer_sizing_bytes=None if fp4_sized else shape.c4_indexer_row_bytes)  # fmt: skip
    return shape


@dataclass
class DecodeRun:
    summary: dict
    rec: Recorder
    misses: pd.DataFrame


class _Decoder:
    """The decode scheduler: admission by memory, one step per batch, finishes by step count."""

    def __init__(self, env: simpy.Environment, sc, shape: DecodeModelShape, hs: HiSparseResult,
                 costs: CostTable, roofline: Roofline, rec: Recorder, steps=None) -> None:  # fmt: skip
        self.env, self.sc, self.shape, self.hs, self.costs, self.roofline, self.rec = (
            env, sc, shape, hs, costs, roofline, rec)  # fmt: skip
        self.steps = steps if steps is not None and steps.name != "roofline" else None  # measured kernels
        self.enabled = sc.hisparse.enabled
        # DSA: the config's index_topk, whatever --hisparse-config says (model_runner.py:1038-1041)
        self.k = shape.index_topk if isinstance(hs, DsaDecode) else sc.hisparse_top_k or shape.index_topk
        self.pools, self.c4_need = _pools_and_need(sc, shape, hs, self.enabled)
        self.swa_need = shape.swa_tokens_per_request()
        self.colocated = sc.cluster.role != "decode"  # HiSparse on a DSA model's colocated instance
        # a DSA model's DP-attention ranks: one simulated, the others alike (V4 decode instances have none)
        self.dp = sc.hardware.attn_dp_size if isinstance(hs, DsaDecode) else 1
        self.chunk = max(1, sc.scheduler.chunked_prefill_size // self.dp)  # a rank's chunk (parallel_hook.py:326-335)
        self.prefill: list[Request] = []  # admitted, waiting for their prefill pass
        self.done = 0  # finished or dropped
        self.on_tick: Callable[[], None] | None = None  # at each sampler tick (a progress bar)
        self.freed = env.event()  # fires at each finish or drop: a closed-loop client sends its next request
        self.closed = False  # a closed-loop client: its next request arrives at a finish
        self.used_full = self.used_swa = self.used_c4 = 0
        self.waiting: deque[Request] = deque()
        self.running: list[tuple[int, int, Request, float, int]] = []  # (finish step, rid, req, admitted, start)
        self.step_ends: list[float] = []  # when each step ended: a request's first token is its first step
        self.step = 0
        self.now = 0.0  # when the last step ended, or the arrival that woke an idle decoder (env.now, exactly)
        self.seq_sum = 0
        self.wake = env.event()
        self.max_batch_seen = 0
        self.expected = 0
        self.all_done = env.event()  # fires when every expected request has finished or been dropped
        self.swap_s = 0.0
        self.busy_s = 0.0
        # Mean misses per (request, layer) at each decode step offset, interpolated between simulated windows
        # and held at the last value past them; indexed by the running requests' offsets every step.
        if self.enabled and hs.steps.size:
            self.miss_table = np.interp(np.arange(int(hs.steps.max()) + 1), hs.steps, hs.misses_per_step)
        else:
            self.miss_table = np.zeros(1)
        self.starts: list[int] = []  # decode step each running request started at
        self.arrivals: list[float] = []  # when each request is submitted, in order; ``arrived`` of them so far
        self.arrived = 0
        self.horizon: float | None = None  # sc.duration_s: the run stops there
        s0 = 1 << 16
        self.read0 = shape.kv_read_bytes(s0, self.k)
        self.read_slope = (shape.kv_read_bytes(s0 + 4096, self.k) - self.read0) / 4096
        self.s0 = s0

    def full_tokens(self, req: Request) -> int:
        """Full tokens admission reserves: prompt + max new tokens, page-aligned (disaggregation/decode.py:508-517)."""
        page = self.shape.page_size
        return -(-(req.input_len + req.output_len) // page) * page

    def submit(self, req: Request) -> None:
        self.waiting.append(req)
        self.arrived += 1
        if not self.wake.triggered:
            self.wake.succeed()

    def run(self):
        """Steps in blocks: one event for the steps up to the next decision (a finish, the step an arrival can
        join at, the horizon), priced together as the steps would be one by one."""
        env, max_running = self.env, max(1, self.sc.scheduler.max_running_requests // self.dp)
        while True:
            self._admit(max_running)
            if self.prefill:
                yield from self._prefill_pass()
                continue
            if not self.running:
                yield self.wake
                self.wake = env.event()
                self.now = env.now
                continue
            n = len(self.running)
            k = min(self.running[0][0] - self.step, max(1, MAX_BLOCK_CELLS // n))
            dt, swap = self._step_seconds(n, k)
            ends = np.cumsum(np.concatenate(([self.now], dt)))[1:]  # as the clock advances step by step
            k = self._decision_within(ends, k)
            stalled = bool(self.waiting) and n < max_running  # each step's admission attempt stalls again
            end = float(ends[k - 1])
            if self.closed:  # a closed-loop client's next send is not known ahead: it cuts the block short
                k = yield from self._until_step_or_send(ends, k)
                end = float(ends[k - 1])
            else:
                yield env.timeout(end - env.now)
            self.now = end
            self.busy_s = float(np.cumsum(np.concatenate(([self.busy_s], dt[:k])))[-1])
            self.swap_s = float(np.cumsum(np.concatenate(([self.swap_s], swap[:k])))[-1])
            self.step_ends.extend(ends[:k].tolist())
            self.step += k
            self.seq_sum += n * k
            self.rec.counters["steps"] += k
            self.rec.counters["admission_stalls"] += (k - 1) * stalled
            while self.running and self.running[0][0] <= self.step:
                _, _, req, admitted, start = heapq.heappop(self.running)
                self.seq_sum -= req.input_len + (self.step - start)
                self.starts.remove(start)
                self.used_full -= self.full_tokens(req)
                self.used_swa -= self.swa_need
                self.used_c4 -= self.c4_need
                self._record(req, admitted, self.step_ends[start], end)
            if self.closed:
                yield env.timeout(0)  # the client sends its next requests before the next admission

    def _until_step_or_send(self, ends: np.ndarray, k: int):
        """Wait out the block's ``k`` steps, or until the client sends a request, then to the end of the step
        under way (it joins the next one); the steps run."""
        if self.wake.triggered:
            self.wake = self.env.event()
        yield self.env.timeout(float(ends[k - 1]) - self.env.now) | self.wake
        if self.env.now < float(ends[k - 1]):
            k = min(k, int(np.searchsorted(ends[:k], self.env.now, side="left")) + 1)
            yield self.env.timeout(float(ends[k - 1]) - self.env.now)
        return k

    def _step_seconds(self, n: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The next ``k`` steps of this batch of ``n``: each one's duration and its swap-in share."""
        j = np.arange(k, dtype=np.int64)
        seq = self.seq_sum + n * j  # the batch's context grows by n a step
        if self.steps is not None:
            gpu = np.array([self.steps.decode_seconds(n, int(s)) for s in seq])
        else:
            read = n * self.read0 + self.read_slope * (seq - n * self.s0)
            # with DP attention the MoE layers run every rank's tokens (alike ranks: n each)
            experts = self.roofline.expert_bytes * self.roofline.experts_touched(n * self.dp)
            weights = self.shape.weight_bytes_per_gpu + experts
            gpu = (weights + read) / (self.roofline.hbm_Bps * self.roofline.mbu)
        swap = self._swap_in_seconds(n, j, np.broadcast_to(gpu, (k,))) if self.enabled else np.zeros(k)
        return np.maximum((self.steps or self.roofline).overhead_s, gpu + swap), swap

    def _swap_in_seconds(self, n: int, j: np.ndarray, gpu: np.ndarray) -> np.ndarray:
        """Each step's swap-ins: the batch's misses in one layer (the running requests' sampled means at their
        decode offsets), priced by the cost table: V4 one kernel per C4 layer; DSA one per anchor layer, its
        skip layers' copies beyond a layer's compute (:func:`sim.hisparse.dsa.swap_in_step_seconds`)."""
        offsets = (self.step + j)[:, None] - np.array(self.starts, dtype=np.int64)[None, :]
        np.minimum(offsets, self.miss_table.size - 1, out=offsets)
        misses = np.minimum(np.rint(self.miss_table[offsets].sum(axis=1)).astype(np.int64), n * self.k)
        if isinstance(self.hs, DsaDecode):
            lay = self.hs.shape.layout
            return swap_in_step_seconds(lay, self.costs, n, misses, gpu / lay.layers)
        distinct, index = np.unique(misses, return_inverse=True)
        per_layer = np.array([self.costs.swap_in_seconds(n, self.k, int(m), self.shape.kv_row_bytes) for m in distinct])
        return per_layer[index] * self.shape.n_c4_layers

    def _decision_within(self, ends: np.ndarray, k: int) -> int:
        """How many of the priced steps run before a decision: up to the step an arrival joins at (the first to end
        at or after it, when nothing waits; a waiting request blocks every later one until a finish), and those
        that end before the horizon (the step across it never ends)."""
        if not self.waiting and self.arrived < len(self.arrivals):
            k = min(k, int(np.searchsorted(ends[:k], self.arrivals[self.arrived], side="left")) + 1)
        if self.horizon is not None:
            k = min(k, max(int(np.searchsorted(ends[:k], self.horizon, side="left")), 1))
        return k

    def _admit(self, max_running: int) -> None:
        """Admit by memory; colocated, into one prefill pass of up to a chunk of prompt tokens, each prompt landing
        in device slots before it is staged to the host (``admit_request_into_staging``,
        hisparse_coordinator.py:838-876), so the device pool bounds the prefill in flight."""
        while self.waiting and len(self.running) + len(self.prefill) < max_running:
            req = self.waiting[0]
            need, dev = self.full_tokens(req), self._device_need(req)
            p = self.pools
            if need > p.full_tokens or self.swa_need > p.swa_tokens or dev > p.c4_device_slots:
                self.waiting.popleft()
                self.rec.dropped["exceeds_kv_capacity"] += 1
                self._check_done()
                continue
            if (self.used_full + need > p.full_tokens or self.used_swa + self.swa_need > p.swa_tokens
                    or self.used_c4 + dev > p.c4_device_slots):
                self.rec.counters["admission_stalls"] += 1
                return
            if self.prefill and sum(r.input_len for r in self.prefill) + req.input_len > self.chunk:
                return  # the next pass takes it
            self.waiting.popleft()
            self.used_full += need
            self.used_swa += self.swa_need
            self.used_c4 += dev
            if self.colocated:
                self.prefill.append(req)
            else:
                self._join(req)

    def _device_need(self, req: Request) -> int:
        if not self.colocated:
            return self.c4_need
        return max(self.c4_need, _ceil_to(req.input_len, self.shape.page_size))

    def _join(self, req: Request, admitted: float | None = None) -> None:
        admitted = self.now if admitted is None else admitted
        heapq.heappush(self.running, (self.step + max(1, req.output_len), req.rid, req, admitted, self.step))
        self.starts.append(self.step)
        self.seq_sum += req.input_len
        self.max_batch_seen = max(self.max_batch_seen, len(self.running))

    def _prefill_pass(self):
        """One colocated prefill pass over the admitted prompts (decode waits: no mixed chunk under HiSparse,
        hisparse_hook.py:83-88), priced by the roofline; then each keeps only its device buffer."""
        reqs, self.prefill, admitted = self.prefill, [], self.env.now
        tokens = sum(r.input_len for r in reqs)
        dt = self.roofline.prefill_seconds(tokens, sum(r.input_len ** 2 / 2 for r in reqs))
        yield self.env.timeout(dt)
        self.now = self.env.now
        self.busy_s += dt
        self.rec.counters["prefill_passes"] += 1
        for req in reqs:
            self.used_c4 -= self._device_need(req) - self.c4_need
            self._join(req, admitted)

    def _record(self, req: Request, admitted: float, first: float, now: float) -> None:
        self.rec.request((
            req.rid, 0, req.session, req.round, req.arrival_s, admitted, first, now,
            req.input_len, req.output_len, 0, 0, 0, 0, 0.0, admitted - req.arrival_s,
            first - req.arrival_s, now - req.arrival_s, 0, 0, 0,
        ))  # fmt: skip
        self._check_done()

    def _check_done(self) -> None:
        self.done += 1
        if not self.freed.triggered:
            self.freed.succeed()
            self.freed = self.env.event()
        if self.rec.n_finished + sum(self.rec.dropped.values()) >= self.expected and not self.all_done.triggered:
            self.all_done.succeed()

    def sampler(self, interval: float):
        while True:
            yield self.env.timeout(interval)
            if self.on_tick is not None:
                self.on_tick()
            self.rec.samples.append({"time_s": self.env.now, "instance": 0, "waiting": len(self.waiting),
                                     "running": len(self.running),
                                     "kv_used_bytes": self.used_full * self.pools.bytes_per_full_token})  # fmt: skip


def _pools_and_need(sc, shape, hs, enabled: bool) -> tuple[DecodePools, int]:
    """The pools the decoder admits into, and the hot-buffer slots a request takes in the third (V4: the C4
    pool, its buffer plus one C4 page; DSA: the physical latent pool, its padded buffer and spec scratch)."""
    if isinstance(hs, DsaDecode):
        return hs.pools(enabled), hs.sizing.per_request_device if enabled else 0
    cap = hs.capacity
    if not enabled:
        return cap.pools_baseline, 0
    return cap.pools_hisparse, sc.hisparse.device_buffer_size + shape.c4_page_slots


def decode_swa_ratio(sc) -> float:
    """The decode instance's SWA share: SGLang's decode role sizes cap mode differently (extra slots for
    transfers, ``pool_configurator.py:957-961``), which is not modelled, so a number is required."""
    ratio = sc.hicache.swa_full_tokens_ratio
    if ratio == "cap":
        raise InputError("hicache.swa_full_tokens_ratio: cap mode is modelled for serving instances only; give a "
                         "decode instance a ratio")  # fmt: skip
    return ratio


def _access_model(sc, family: Family = V4):
    """The scenario's access model, its ids kernel tokens of ``family`` (V4: C4 rows; DSA: raw positions)."""
    a = sc.hisparse.access
    if a.kind == "trace":  # C4 rows: refused for a DSA model (sim.scenario.schema.checks)
        return TraceAccess(load_topk_trace(a.trace_path))
    params = ParametricAccessParams(a.sink_tokens, a.recent_fraction, a.overlap, a.zipf_alpha)
    return ParametricAccess(params, ratio=family.ratio)


def run_decode(sc, requests: list[Request], costs: CostTable, rng: np.random.Generator,
               progress=None, rec: Recorder | None = None, expert_dtype: str | None = None,
               limits: list[tuple[int, float | None]] | None = None) -> DecodeRun:  # fmt: skip
    """Play a decode instance over ``requests``; with HiSparse, simulate misses on sample requests first.
    ``rec`` is the recorder to fill (one with a sink streams per-request records); ``expert_dtype``: the routed
    experts' dtype the step-time backend prices (:func:`sim.model.pricing.step_model`); ``limits``: a closed-loop
    client's (concurrency cap, request rate) for each request (bench_serving's ``--max-concurrency`` and
    ``--request-rate``), None for open loop; ``progress``: a bar (:func:`sim.base.progress.progress_bar`) given the
    requests this rank serves as its total, advanced at the sampler's ticks."""
    steps = step_model(sc, costs.compute_params, expert_dtype)
    roofline = Roofline.from_scenario(sc, costs.compute_params, why=steps.why)
    input_len = int(np.median([r.input_len for r in requests]))
    output_len = int(np.median([r.output_len for r in requests]))
    lay = dsa_layout_of(sc)
    dp = sc.hardware.attn_dp_size if lay is not None else 1
    if dp > 1:  # round robin over the DP ranks (serving_hook.py:217-236): rank 0's share, its clients' share
        requests = requests[::dp]
        limits = [(max(1, n // dp), r and r / dp) for n, r in limits[::dp]] if limits is not None else None
    if lay is not None:
        hs = dsa_decode(sc, lay, sc.compute.decode_bytes_per_step, _access_model(sc, DSA), costs, roofline,
                        input_len, output_len, rng)  # fmt: skip
        return _play(sc, requests, hs.shape, hs, costs, roofline, rec, steps, progress, limits, rng)
    shape = decode_shape(sc.model.name, sc.compute.decode_bytes_per_step, sc.model.fp4_indexer, sc.fp4_indexer_sized)
    h = sc.hisparse
    hs_cfg = HiSparseConfig(device_buffer_size=h.device_buffer_size, top_k=sc.hisparse_top_k, policy=h.policy,
                            initial_fill=h.initial_fill, host_to_device_ratio=h.host_to_device_ratio,
                            io_backend=sc.hicache.cost_backend, layers_simulated=h.access.layers_simulated,
                            step_windows=h.step_windows, window_steps=h.window_steps)  # fmt: skip
    budget = HbmBudget(hbm_bytes=sc.hardware.kv_mem_gb * 1e9, hbm_bandwidth=roofline.hbm_Bps * roofline.mbu,
                       mem_fraction_static=1.0, weight_bytes=0.0)  # fmt: skip
    hs = simulate_hisparse(hs_cfg, shape, _access_model(sc), h.sample_requests, input_len, output_len, costs,
                           rng, budget, decode_swa_ratio(sc),
                           sc.scheduler.max_running_requests)  # fmt: skip
    return _play(sc, requests, shape, hs, costs, roofline, rec, steps, progress, limits, rng)


def _play(sc, requests: list[Request], shape, hs, costs: CostTable, roofline: Roofline, rec: Recorder | None,
          steps, progress, limits: list[tuple[int, float | None]] | None = None,
          rng: np.random.Generator | None = None) -> DecodeRun:  # fmt: skip
    """The decode instance in time over ``requests``, its pools and misses decided; ``limits``: each request's
    client (concurrency cap, request rate): a closed loop sends it when fewer are in flight, at that rate; None:
    each is sent at its arrival."""
    env = simpy.Environment()
    rec = rec if rec is not None else Recorder(record_requests=sc.output.record_requests)
    dec = _Decoder(env, sc, shape, hs, costs, roofline, rec, steps)

    def arrivals():
        for i, req in enumerate(requests):
            limit, rate = limits[i] if limits is not None else (None, None)
            if limit is None and req.arrival_s > env.now:
                yield env.timeout(req.arrival_s - env.now)
            if limit is not None and i and req.round != requests[i - 1].round:
                limit = 1  # bench_serving's next step starts when the last one has finished
            while limit is not None and dec.arrived - dec.done >= limit:  # bench_serving's --max-concurrency
                yield dec.freed
            if limit is not None:
                req.arrival_s = env.now
            dec.submit(req)
            if rate:  # --request-rate: Poisson gaps between sends (bench_serving's get_request)
                yield env.timeout(float(rng.exponential(1.0 / rate)))

    dec.expected = len(requests)
    dec.closed = limits is not None
    dec.arrivals = [] if dec.closed else (np.maximum.accumulate([r.arrival_s for r in requests]).tolist()
                                          if requests else [])  # fmt: skip
    dec.horizon = sc.duration_s
    env.process(arrivals())
    env.process(dec.run())
    if progress is not None:  # the requests this rank serves, counted at the sampler's ticks, not per request
        advance_to(progress, 0, len(requests))
        dec.on_tick = lambda: advance_to(progress, dec.done)
    env.process(dec.sampler(sc.output.timeseries_interval_s))
    env.run(until=sc.duration_s if sc.duration_s is not None else dec.all_done)
    if progress is not None:
        advance_to(progress, dec.done)
    return DecodeRun(_summary(sc, dec, hs, env.now, len(requests)), rec, _misses_frame(sc, hs))


def _misses_frame(sc, hs) -> pd.DataFrame:
    import pandas as pd

    r, layers, steps = hs.misses.shape
    idx = np.indices((r, layers, steps)).reshape(3, -1)
    return pd.DataFrame({
        "step": hs.steps[idx[2]].astype(np.int64), "request": idx[0], "layer": idx[1],
        "misses": hs.misses.reshape(-1), "accesses": hs.accesses.reshape(-1),
        "policy": sc.hisparse.policy, "device_buffer_size": sc.hisparse.device_buffer_size,
    })  # fmt: skip


def _capacity(sc, hs) -> dict:
    """Both instances' bytes a request, max batch and what caps it, the batch HiSparse pays from; for a DSA model
    also the logical-token gain, the per-rank host pool and the anchor/skip layers."""
    if not isinstance(hs, DsaDecode):
        c = hs.capacity
        return {"bytes_per_request_baseline": c.bytes_per_request_baseline,
                "bytes_per_request_hisparse": c.bytes_per_request_hisparse, "max_batch_baseline": c.max_batch_baseline,
                "max_batch_hisparse": c.max_batch_hisparse, "batch_gain": c.batch_gain, "limit_baseline": c.limit_baseline,
                "limit_hisparse": c.limit_hisparse, "break_even_batch": c.break_even_batch}  # fmt: skip
    z, lay = hs.sizing, hs.shape.layout
    final = -(-(hs.final_len) // hs.shape.page_size) * hs.shape.page_size
    return {"family": "dsa", "bytes_per_request_baseline": final * z.baseline.bytes_per_token,
            "bytes_per_request_hisparse": lay.layers * (final * lay.indexer_row_bytes
                                                         + z.per_request_device * lay.kv_row_bytes),
            "max_batch_baseline": z.max_batch_baseline, "max_batch_hisparse": z.max_batch_hisparse,
            "batch_gain": z.batch_gain, "limit_baseline": z.limit_baseline, "limit_hisparse": z.limit_hisparse,
            "break_even_batch": hs.crossover_batch, "capacity_gain": z.capacity_gain,
            "logical_tokens": {"baseline": z.baseline.logical_tokens, "hisparse": z.hisparse.logical_tokens},
            "device_slots_hisparse": z.hisparse.device_slots, "per_request_device_slots": z.per_request_device,
            "host_pool_tokens_per_rank": z.hisparse.host_tokens, "host_pool_bytes_per_rank": z.hisparse.host_bytes,
            "kv_dtype": lay.kv_dtype, "anchor_layers": lay.anchors, "skip_layers": lay.skip_layers}  # fmt: skip


def _summary(sc, dec: _Decoder, hs: HiSparseResult, horizon: float, arrived: int) -> dict:
    rec = dec.rec
    out_tokens = rec.token_totals()["output_tokens"]
    cap = _capacity(sc, hs)
    on = sc.hisparse.enabled
    dropped = dict(rec.dropped)
    return {
        "scenario": sc.name,
        "seed": sc.seed,
        "model": sc.model.name,
        "role": sc.cluster.role,
        "dp_ranks": dec.dp,  # one simulated; throughput is the instance's, the ranks alike
        "compute": dec.steps.describe() if dec.steps is not None else {
            "backend": "roofline", "mbu": dec.roofline.mbu, "step_overhead_ms": dec.roofline.overhead_s * 1e3,
            "chosen": dec.roofline.why},
        "simulated_s": horizon,
        "requests": {"arrived": arrived, "finished": rec.n_finished, "dropped": dropped,
                     "unfinished": arrived - rec.n_finished - sum(dropped.values())},  # fmt: skip
        "throughput": {
            "requests_per_s": dec.dp * rec.n_finished / horizon if horizon else 0.0,
            "input_tokens_per_s": 0.0,
            "output_tokens_per_s": dec.dp * out_tokens / horizon if horizon else 0.0,
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
            "bytes_per_request": cap["bytes_per_request_hisparse" if on else "bytes_per_request_baseline"],
            "max_batch": cap["max_batch_hisparse" if on else "max_batch_baseline"],
            "batch_limit": cap["limit_hisparse" if on else "limit_baseline"],
            **{k: v for k, v in cap.items() if not k.startswith("limit_")},
            "host_to_device_ratio": sc.hisparse.host_to_device_ratio,
            "initial_fill": sc.hisparse.initial_fill,
            "pools": {"full_tokens": dec.pools.full_tokens, "swa_tokens": dec.pools.swa_tokens,
                      "c4_device_slots": dec.pools.c4_device_slots,
                      "bytes_per_full_token": dec.pools.bytes_per_full_token,
                      "fixed_bytes": dec.pools.fixed_bytes},  # fmt: skip
            "peak_batch": dec.max_batch_seen,
            **({"misses_per_step": float(hs.misses.mean()) if hs.misses.size else 0.0,
                "miss_rate": hs.miss_rate,
                "swap_in_share": dec.swap_s / dec.busy_s if dec.busy_s else 0.0,
                "d2h_backup_bytes_sampled": hs.d2h_backup_bytes,
                } if on else {}),  # off: no hot buffer
        },
    }

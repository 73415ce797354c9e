"""HiSparse decode capacity: the decode GPU's pools as SGLang sizes them with and without HiSparse, the max decode
batch they admit, a roofline decode throughput, and the per-step misses of sample requests that price the swap-in
(each request's hot buffers: :mod:`sim.hisparse.coordinator` and :mod:`sim.hisparse.hot`). Everything here is
numpy; no clock, no SimPy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np

from sim.cache.v4.swa import swa_tokens_per_request
from sim.hisparse.coordinator import V4, Family, eager_backups, run_stream
from sim.hisparse.hot import INITIAL_FILLS, POLICIES, InitialFill, Policy
from sim.hisparse.topk import C4_RATIO, AccessModel, TraceAccess

if TYPE_CHECKING:
    import pandas as pd

FP4_INDEXER_ROW_BYTES = 128 // 2 + 128 // 32  # fp4 payload + scales (deepseek_v4_memory_pool.py:53-57)


class SwapInCost(Protocol):
    """The part of ``sim.model.costs`` cost tables this module uses."""

    def swap_in_seconds(self, n_requests: int, top_k: int, n_misses: int, row_bytes: int) -> float: ...

    def transfer_seconds(self, op: str, backend: str, n_items: int, item_bytes: int) -> float: ...


# --------------------------------------------------------------------------------------------------
# Memory, batch and throughput
# --------------------------------------------------------------------------------------------------

# Paths below are SGLang 0.5.23, relative to sglang/srt/.


def _ceil_to(n: int, unit: int) -> int:
    return -(-n // unit) * unit


@dataclass(frozen=True)
class DecodeModelShape:
    """What a decode GPU holds and reads. Defaults: DeepSeek-V4-Flash, ``v4`` layout (DESIGN.md 1.1).

    Per-token bytes are the page-padded ones SGLang sizes its pools with (pool_configurator.py:1353-1388):
    a 256-slot SWA page is 149,760 B, a 64-slot C4 page 37,440 B, a 2-slot C128 page 1,728 B per layer.
    """

    name: str = "DeepSeek-V4-Flash"
    n_layers: int = 43
    n_c4_layers: int = 21
    n_c128_layers: int = 20
    index_topk: int = 512
    kv_row_bytes: int = 584  # one C4 row as read and swapped in: 576 data + 8 scale
    c4_indexer_row_bytes: int = 132  # fp8 128 + 4 scale (deepseek_v4_memory_pool.py:53-57); fp4: 68
    c4_indexer_sizing_bytes: int | None = None  # what the pools are sized with, if not the row (fp4 on NVIDIA)
    swa_window: int = 128
    page_size: int = 256  # full/SWA page (kv_cache_configurator.py:2068-2070)
    c4_page_slots: int = 64  # a C4 page: 256 tokens / 4; HiSparse's extra page (hisparse_coordinator.py:644)
    swa_token_bytes: float = 149_760 / 256
    c4_token_bytes: float = 37_440 / 64
    c128_token_bytes: float = 1_728 / 2
    c4_ring_rows: int = 8  # C4 compressor ring per SWA page (deepseek_v4_memory_pool.py:60-79)
    c4_state_row_bytes: int = 2 * 2 * 512 * 4 + 2 * 2 * 128 * 4  # C4 + C4-indexer state row, fp32, per layer
    c128_ring_rows: int = 128
    c128_state_row_bytes: int = 2 * 512 * 4
    # Weights read per decode step per GPU. Assumption: ~284e9 params, FP4 experts + FP8 rest
    # (~0.56 B/param), sharded over 8 GPUs, all experts touched at large batch.
    weight_bytes_per_gpu: float = 20e9

    @classmethod
    def v4_pro(cls) -> DecodeModelShape:
        """V4-Pro: 61 layers, 30 C4, 31 C128, top-k 1024. Weights: assumption, ~1.6e12 params / 8 GPUs."""
        return cls(name="DeepSeek-V4-Pro", n_layers=61, n_c4_layers=30, n_c128_layers=31, index_topk=1024,
                   weight_bytes_per_gpu=110e9)

    def c4_bytes(self, seq_len: int) -> int:
        """C4 KV of one request, all C4 layers: what HiSparse moves to host memory."""
        return self.n_c4_layers * (seq_len // C4_RATIO) * self.kv_row_bytes

    def swa_bytes_per_token(self) -> float:
        """One SWA slot over all layers, plus the C4 compressor state priced per SWA slot
        (pool_configurator.py:1372-1388)."""
        state = self.c4_ring_rows / self.page_size * self.c4_state_row_bytes * self.n_c4_layers
        return self.swa_token_bytes * self.n_layers + state

    def full_bytes_per_token(self, swa_full_tokens_ratio: float, host_to_device_ratio: int = 1) -> float:
        """GPU bytes one full token costs (pool_configurator.py:1390-1446): its share of the SWA pool, C4 KV
        shrunk by HiSparse's ``host_to_device_ratio`` (:1397-1402, the ratio read at :1153), the C4
        indexer (never offloaded), and C128."""
        indexer = self.c4_indexer_sizing_bytes or self.c4_indexer_row_bytes
        c4 = self.c4_token_bytes / (C4_RATIO * host_to_device_ratio) + indexer / C4_RATIO
        return (swa_full_tokens_ratio * self.swa_bytes_per_token() + self.n_c4_layers * c4
                + self.n_c128_layers * self.c128_token_bytes / 128)

    def c128_state_bytes(self, max_running_requests: int) -> int:
        """C128 compressor rings, fixed per request slot (pool_configurator.py:1504-1531; decode role:
        max_running_requests + 1 slots, no extra slots)."""
        rows = (max_running_requests + 1) * self.c128_ring_rows + self.c128_ring_rows + 1
        return _ceil_to(rows, 128) * self.c128_state_row_bytes * self.n_c128_layers

    def swa_tokens_per_request(self) -> int:
        """SWA slots a decoding request holds at worst (:func:`sim.cache.v4.swa.swa_tokens_per_request`)."""
        return swa_tokens_per_request(self.swa_window, self.page_size)

    def kv_read_bytes(self, seq_len: int, top_k: int | None = None) -> int:
        """KV bytes one decode step reads for one request: the top-k C4 rows, every C4 indexer key (the
        indexer scores all compressed tokens: deep_gemm fp8_paged_mqa_logits over compressed_seq_lens,
        layers/attention/dsv4/indexer.py:880, 1074-1098), dense C128 and the SWA window."""
        k = min(top_k or self.index_topk, seq_len // C4_RATIO)
        return (self.n_c4_layers * (k * self.kv_row_bytes + (seq_len // C4_RATIO) * self.c4_indexer_row_bytes)
                + self.n_c128_layers * (seq_len // 128) * self.kv_row_bytes
                + self.n_layers * min(seq_len, self.swa_window) * self.kv_row_bytes)

    def indexer_read_bytes(self, seq_len: int) -> int:
        """The indexer's share of :meth:`kv_read_bytes`."""
        return self.n_c4_layers * (seq_len // C4_RATIO) * self.c4_indexer_row_bytes


@dataclass(frozen=True)
class DecodePools:
    """A decode GPU's pools as SGLang sizes them from its KV memory (pool_configurator.py:1638-1703)."""

    full_tokens: int  # logical full-token pool; C4 indexer and C128 scale with it
    swa_tokens: int
    c4_device_slots: int  # C4 KV slots on the GPU (with HiSparse: the hot buffers' pool)
    bytes_per_full_token: float
    fixed_bytes: int  # C128 state rings, per request slot

    def max_batch(self, shape: DecodeModelShape, final_len: int, max_running_requests: int,
                  device_buffer_size: int | None = None) -> tuple[int, str]:
        """Requests decoding at once, and the pool that caps them (``full``, ``swa``, ``c4_buffer``,
        ``max_running``). A request is admitted for prompt + max_new_tokens full tokens, page-aligned
        (disaggregation/decode.py:508-517); with HiSparse each needs device_buffer_size + one 64-slot page
        of the C4 pool (hisparse_coordinator.py:644-646, disaggregation/decode.py:1418-1430)."""
        bounds = {"full": self.full_tokens // _ceil_to(max(final_len, 1), shape.page_size),
                  "swa": self.swa_tokens // shape.swa_tokens_per_request(),
                  "max_running": max_running_requests}
        if device_buffer_size is not None:
            bounds["c4_buffer"] = self.c4_device_slots // (device_buffer_size + shape.c4_page_slots)
        limit = min(bounds, key=bounds.__getitem__)
        return max(bounds[limit], 0), limit


def size_pools(shape: DecodeModelShape, kv_bytes: float, swa_full_tokens_ratio: float,
               max_running_requests: int, host_to_device_ratio: int | None = None) -> DecodePools:
    """SGLang's DSV4 pool sizes for ``kv_bytes`` of GPU KV memory; ``host_to_device_ratio`` None: no HiSparse.

    Full tokens = (KV bytes - C128 state) / bytes per full token, page-aligned (pool_configurator.py:1668-1669);
    the device C4 pool = full // (4 x host_to_device_ratio) (:1492). Ratio mode for SWA (the pool is
    ``swa_full_tokens_ratio`` x full tokens, :1457-1461).
    SGLang switches to its cap mode (SWA sized from max_running_requests) when the ratio is left at its
    default and --max-running-requests is given (:1328-1351); a decode instance's cap adds transfer slots
    (:957-961) and is not modelled here (serving instances have it: :func:`sim.cache.v4.swa.swa_cap_tokens`).
    """
    r = host_to_device_ratio or 1
    if r < 1:
        raise ValueError(f"host_to_device_ratio must be >= 1, got {r}")
    fixed = shape.c128_state_bytes(max_running_requests)
    per_token = shape.full_bytes_per_token(swa_full_tokens_ratio, r)
    full = int(max(kv_bytes - fixed, 0) / per_token) // shape.page_size * shape.page_size
    swa = int(full * swa_full_tokens_ratio) // shape.page_size * shape.page_size
    return DecodePools(full, swa, full // (C4_RATIO * r), per_token, fixed)


@dataclass(frozen=True)
class HbmBudget:
    """KV budget of one decode GPU. Defaults: an H200 (141 GB, 4.8 TB/s); the rest are assumptions."""

    hbm_bytes: float = 141e9
    hbm_bandwidth: float = 4.8e12
    mem_fraction_static: float = 0.88  # SGLang-style static fraction for weights + KV pools (assumption)
    weight_bytes: float = 20e9  # per GPU; see DecodeModelShape.weight_bytes_per_gpu
    host_bytes: float | None = None  # host memory for the C4 mirror per GPU; None: not a limit

    @property
    def kv_bytes(self) -> float:
        return self.hbm_bytes * self.mem_fraction_static - self.weight_bytes


@dataclass(frozen=True)
class DecodeCapacity:
    """Pools, max batch and roofline step time, with and without HiSparse, at one final length."""

    pools_baseline: DecodePools
    pools_hisparse: DecodePools
    bytes_per_request_baseline: int  # pool bytes one request's full tokens take
    bytes_per_request_hisparse: int
    max_batch_baseline: int
    max_batch_hisparse: int
    limit_baseline: str
    limit_hisparse: str
    step_seconds_baseline: float
    step_seconds_hisparse: float
    swap_in_seconds_per_step: float
    break_even_batch: int | None = None  # the least HiSparse batch that matches the baseline's tokens/s

    @property
    def batch_gain(self) -> float:
        return self.max_batch_hisparse / self.max_batch_baseline if self.max_batch_baseline else float("inf")

    @property
    def tokens_per_s_baseline(self) -> float:
        return self.max_batch_baseline / self.step_seconds_baseline if self.max_batch_baseline else 0.0

    @property
    def tokens_per_s_hisparse(self) -> float:
        return self.max_batch_hisparse / self.step_seconds_hisparse if self.max_batch_hisparse else 0.0


def decode_capacity(shape: DecodeModelShape, budget: HbmBudget, seq_len: int, device_buffer_size: int,
                    misses_per_layer_step: float = 0.0, cost_table: SwapInCost | None = None,
                    top_k: int | None = None, swa_full_tokens_ratio: float = 0.1,
                    host_to_device_ratio: int = 2, max_running_requests: int = 256) -> DecodeCapacity:
    """Pools and max batch within ``budget.kv_bytes`` at ``seq_len`` (a request's final length), and step time.

    Roofline, one GPU's view: step = (weights + batch x KV read) / HBM bandwidth, plus for HiSparse one
    swap-in kernel per C4 layer over the batch (``n_misses`` = the batch's misses in that layer). V4 swaps in
    synchronously inside each C4 layer: its shared-index prefetch, which overlaps IO with compute, is only
    for DSA-architecture models (hisparse_coordinator.py:90-91, 1599-1605), so the swap-in adds to the step.
    KV read is the same with and without HiSparse (the same rows are read, from the hot buffer).
    """
    k = top_k or shape.index_topk
    base = size_pools(shape, budget.kv_bytes, swa_full_tokens_ratio, max_running_requests)
    hs = size_pools(shape, budget.kv_bytes, swa_full_tokens_ratio, max_running_requests, host_to_device_ratio)
    nb, lb = base.max_batch(shape, seq_len, max_running_requests)
    nh, lh = hs.max_batch(shape, seq_len, max_running_requests, device_buffer_size)
    if budget.host_bytes is not None:
        host_cap = int(budget.host_bytes // max(shape.c4_bytes(seq_len), 1))
        if host_cap < nh:
            nh, lh = host_cap, "host"
    read = shape.kv_read_bytes(seq_len, k)

    def roofline(batch: int) -> float:
        return (shape.weight_bytes_per_gpu + batch * read) / budget.hbm_bandwidth

    def swap_in(batch: int) -> float:  # one kernel per C4 layer over the batch's misses in that layer
        if cost_table is None or not batch or misses_per_layer_step <= 0:
            return 0.0
        misses = min(int(round(misses_per_layer_step * batch)), batch * k)
        return shape.n_c4_layers * cost_table.swap_in_seconds(batch, k, misses, shape.kv_row_bytes)

    swap = swap_in(nh)
    aligned = _ceil_to(seq_len, shape.page_size)
    return DecodeCapacity(base, hs, int(aligned * base.bytes_per_full_token), int(aligned * hs.bytes_per_full_token),
                          nb, nh, lb, lh, roofline(nb), roofline(nh) + swap, swap,
                          _break_even(nh, nb / roofline(nb) if nb else 0.0, lambda b: roofline(b) + swap_in(b)))


def _break_even(max_batch: int, baseline_tokens_per_s: float, step_seconds) -> int | None:
    """The least batch up to ``max_batch`` whose tokens/s (batch / step) reach the baseline's; None if none does.
    Below it HiSparse costs more than it saves: its swap-ins slow every step and its larger batch is not there
    yet. Tokens/s grows with the batch (a step is a fixed part, weights and launches, plus a part per request),
    so a bisection finds it."""
    if not max_batch or max_batch / step_seconds(max_batch) < baseline_tokens_per_s:
        return None
    lo, hi = 1, max_batch
    while lo < hi:
        mid = (lo + hi) // 2
        if mid / step_seconds(mid) >= baseline_tokens_per_s:
            hi = mid
        else:
            lo = mid + 1
    return lo


# --------------------------------------------------------------------------------------------------
# Whole-instance simulation
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class HiSparseConfig:
    """HiSparse settings (``--hisparse-config``) and how much of the decode to simulate.

    Sampling (an approximation; defaults simulate everything but 2 of the C4 layers): ``layers_simulated``
    C4 layers per request, each with its own access stream, stand for all C4 layers (misses scale by
    n_c4_layers / layers_simulated). With ``step_windows`` set, only that many windows of ``window_steps``
    steps, evenly spread over the output, are counted, each after ``warmup_steps`` uncounted steps that
    start from an empty buffer; totals scale by output_len / counted steps. Replayed traces always run whole.
    """

    device_buffer_size: int = 4096
    top_k: int | None = None  # None: the model's index_topk (SGLang overrides the config's 2048)
    policy: Policy = "lru"
    initial_fill: InitialFill = "direct"
    host_to_device_ratio: int = 2
    io_backend: str = "kernel"
    layers_simulated: int = 2
    step_windows: int | None = None
    window_steps: int = 256
    warmup_steps: int = 128
    family: Family = V4  # the kernel's layout; DSA: raw-position streams (ParametricAccess(ratio=1)), a backup a step

    def __post_init__(self) -> None:
        if self.device_buffer_size < 1 or self.layers_simulated < 1:
            raise ValueError("device_buffer_size and layers_simulated must be >= 1")
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}; expected one of {', '.join(POLICIES)}")
        if self.initial_fill not in INITIAL_FILLS:
            raise ValueError(f"unknown initial_fill {self.initial_fill!r}; expected one of {', '.join(INITIAL_FILLS)}")
        if self.host_to_device_ratio < 1:
            raise ValueError("host_to_device_ratio must be >= 1")


@dataclass(frozen=True)
class HiSparseResult:
    """Per-step misses of the simulated streams, and the decode capacity they imply."""

    steps: np.ndarray  # decode step index of each counted step
    misses: np.ndarray  # (n_requests, layers_simulated, n_counted_steps)
    accesses: np.ndarray  # same shape: distinct non-newest ids selected
    swap_in_seconds: np.ndarray  # per counted step, all C4 layers, the simulated requests as one batch
    d2h_backup_bytes: int  # eager backups of new C4 tokens, all C4 layers, simulated requests, whole decode
    d2h_backup_seconds: float  # same, on the side stream (overlapped, not added to step time)
    capacity: DecodeCapacity

    @property
    def misses_per_step(self) -> np.ndarray:
        """Mean misses per (request, layer) at each counted step."""
        return self.misses.mean(axis=(0, 1)) if self.misses.size else np.zeros(0)

    @property
    def total_misses(self) -> int:
        return int(self.misses.sum())

    @property
    def miss_rate(self) -> float:
        total = int(self.accesses.sum())
        return self.total_misses / total if total else 0.0


@dataclass(frozen=True)
class SampledMisses:
    """The coordinator's misses on sample streams at each counted step, and the eager backups their requests make
    over the whole decode (kernel tokens a layer: :func:`sim.hisparse.coordinator.eager_backups`)."""

    steps: np.ndarray  # decode step index of each counted step
    misses: np.ndarray  # (n_requests, layers_simulated, n_counted_steps)
    accesses: np.ndarray  # same shape: distinct non-newest ids selected
    backups: int


def sample_misses(config: HiSparseConfig, access: AccessModel, n_requests: int, input_len: int, output_len: int,
                  top_k: int, rng: np.random.Generator) -> SampledMisses:  # fmt: skip
    """Replay ``n_requests`` x ``config.layers_simulated`` streams of ``access`` through the coordinator of
    ``config.family`` (its ids kernel tokens of that family: C4 rows for V4, raw positions for DSA), window by
    window (:func:`_windows`), each window a fresh admission at the length it starts from."""
    plan = _windows(config, output_len, isinstance(access, TraceAccess))
    misses = np.zeros((n_requests, config.layers_simulated, sum(c for _, _, c in plan)), dtype=np.int64)
    accesses = np.zeros_like(misses)
    for r in range(n_requests):
        for layer in range(config.layers_simulated):
            at = 0
            for start, warm, count in plan:
                st = access.stream(r, layer, input_len + start - warm, warm + count, top_k, rng)
                res = run_stream(st, config.device_buffer_size, config.policy, config.initial_fill, config.family)
                misses[r, layer, at:at + count] = res.misses[warm:]
                accesses[r, layer, at:at + count] = res.accesses[warm:]
                at += count
    steps = np.concatenate([np.arange(s, s + c) for s, _, c in plan]) if plan else np.zeros(0, dtype=np.int64)
    return SampledMisses(steps, misses, accesses, n_requests * eager_backups(input_len, output_len, config.family.ratio))


def simulate_hisparse(config: HiSparseConfig, shape: DecodeModelShape, access: AccessModel,
                      n_requests: int, input_len: int, output_len: int, cost_table: SwapInCost | None,
                      rng: np.random.Generator, budget: HbmBudget | None = None,
                      swa_full_tokens_ratio: float = 0.1, max_running_requests: int = 256) -> HiSparseResult:
    """Simulate ``n_requests`` identical-length decodes and size the instance around them."""
    budget = budget or HbmBudget(weight_bytes=shape.weight_bytes_per_gpu)
    k = config.top_k or shape.index_topk
    sampled = sample_misses(config, access, n_requests, input_len, output_len, k, rng)
    misses, steps = sampled.misses, sampled.steps
    swap = np.zeros(steps.size)
    if cost_table is not None:
        for j in range(steps.size):
            per_layer = [cost_table.swap_in_seconds(n_requests, k, int(misses[:, li, j].sum()), shape.kv_row_bytes)
                         for li in range(config.layers_simulated)]
            swap[j] = float(np.mean(per_layer)) * shape.n_c4_layers
    d2h_rows = sampled.backups * shape.n_c4_layers
    d2h_bytes = d2h_rows * shape.kv_row_bytes
    d2h_s = (cost_table.transfer_seconds("d2h", config.io_backend, d2h_rows, shape.kv_row_bytes)
             if cost_table is not None and d2h_rows else 0.0)
    mean_layer_step = float(misses.mean()) if misses.size else 0.0
    cap = decode_capacity(shape, budget, input_len + output_len, config.device_buffer_size,
                          mean_layer_step, cost_table, k, swa_full_tokens_ratio, config.host_to_device_ratio,
                          max_running_requests)
    return HiSparseResult(steps, misses, sampled.accesses, swap, d2h_bytes, d2h_s, cap)


def _windows(config: HiSparseConfig, output_len: int, recorded: bool) -> list[tuple[int, int, int]]:
    """(first counted step, warm-up steps, counted steps) of each simulated window."""
    if recorded or config.step_windows is None or config.step_windows * config.window_steps >= output_len:
        return [(0, 0, output_len)] if output_len > 0 else []
    n = config.step_windows
    starts = np.linspace(0, output_len - config.window_steps, n).astype(int)
    return [(int(s), min(config.warmup_steps, int(s)), config.window_steps) for s in starts]


def miss_curve(buffer_sizes: list[int], policies: list[Policy], access: AccessModel, input_len: int,
               n_steps: int, top_k: int, n_streams: int, rng: np.random.Generator,
               per_step: bool = False, initial_fill: InitialFill = "direct") -> pd.DataFrame:
    """Misses against buffer size and policy, every pair replaying the same ``n_streams`` streams.

    ``per_step=False``: one row per (policy, buffer_size) with mean/p50/p99 misses per (stream, step) and
    the miss rate. ``per_step=True``: one row per (policy, buffer_size, step) with the mean over streams.
    """
    import pandas as pd

    streams = [access.stream(i, 0, input_len, n_steps, top_k, rng) for i in range(n_streams)]
    rows = []
    for policy in policies:
        for size in buffer_sizes:
            results = [run_stream(st, size, policy, initial_fill) for st in streams]
            m = np.array([r.misses for r in results])
            a = np.array([r.accesses for r in results])
            if per_step:
                mean = m.mean(axis=0)
                rows += [{"policy": policy, "buffer_size": size, "step": s, "mean_misses": float(mean[s])}
                         for s in range(mean.size)]
            else:
                rows.append({"policy": policy, "buffer_size": size,
                             "mean_misses": float(m.mean()), "p50_misses": float(np.percentile(m, 50)),
                             "p99_misses": float(np.percentile(m, 99)),
                             "miss_rate": float(m.sum() / max(a.sum(), 1))})
    return pd.DataFrame(rows)


__all__ = [
    "FP4_INDEXER_ROW_BYTES", "INITIAL_FILLS", "POLICIES", "DecodeCapacity", "DecodeModelShape", "DecodePools",
    "HbmBudget", "HiSparseConfig", "HiSparseResult", "InitialFill", "Policy", "SampledMisses", "SwapInCost",
    "decode_capacity", "miss_curve", "sample_misses", "simulate_hisparse", "size_pools",
]

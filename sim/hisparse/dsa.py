"""HiSparse on DSA models (DeepSeek V3.2, GLM-5.x): the decode GPU's pools as SGLang 0.5.23 sizes them with and
without HiSparse, the batch they admit, the host pool each rank pins, and the swap-ins a decode step pays.

Paths are SGLang 0.5.23, relative to ``sglang/srt/``. Every layer's latent lives in one physical pool of
``max_total_num_tokens`` slots, ``available // cell_size`` page-aligned (model_executor/pool_configurator.py:
637-647); with HiSparse the allocator hands out ``host_to_device_ratio`` times as many logical ids
(mem_cache/allocator/hisparse.py:33-34) while the indexer keys of every logical id stay on the GPU
(mem_cache/hisparse_memory_pool.py:72), which is why the cell is sized with the indexer times the ratio
(pool_configurator.py:582-595, 633-635): the indexer, not the latent, caps the capacity gain. The host pool mirrors
the latent of every logical id on each rank (MLA KV is replicated: ``MLATokenToKVPoolHost`` sized ``device x ratio``
plus a padding page, mem_cache/pool_host/base.py:225-229, bytes ``kv_cache_dim x layers``, pool_host/mla.py:195-197).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sim.hisparse.buffer import _ceil_to
from sim.model.dsa import PAGE_SIZE, DsaLayout

if TYPE_CHECKING:
    from sim.hisparse.buffer import SwapInCost

__all__ = ["DsaPools", "DsaSizing", "dsa_pools", "dsa_sizing", "spec_scratch_slots", "swap_in_step_seconds"]

MIN_SCRATCH = 1024  # HiSparseSpecSwapManager.MIN_SCRATCH_CAPACITY (managers/hisparse_coordinator.py:146)


@dataclass(frozen=True)
class DsaPools:
    """One rank's pools: logical ids a request's length is charged to, physical latent slots, host mirror."""

    logical_tokens: int
    device_slots: int
    bytes_per_token: int  # the cell SGLang divides the KV memory by
    host_tokens: int  # 0 without HiSparse
    host_bytes: int


def dsa_pools(lay: DsaLayout, kv_bytes: float, ratio: int | None = None, page: int = PAGE_SIZE) -> DsaPools:
    """The pools ``kv_bytes`` of one rank's KV memory hold; ``ratio`` None: HiSparse off."""
    cell = lay.bytes_per_token(ratio)
    device = int(max(kv_bytes, 0) // cell) // page * page
    if ratio is None:
        return DsaPools(device, device, cell, 0, 0)
    host = (device * ratio // page + 1) * page  # pool_host/base.py:225-229: one padding page
    return DsaPools(device * ratio, device, cell, host, host * lay.layers * lay.kv_row_bytes)


def spec_scratch_slots(draft_tokens: int, top_k: int, buffer: int) -> int:
    """Device slots a request's speculative swap scratch takes: none without drafts, else ``min(d x k,
    max(1024, d x k - buffer))`` (hisparse_coordinator.py:190-196; 2-4 drafts and top_k >= 1024, :177-183)."""
    if draft_tokens <= 0:
        return 0
    work = draft_tokens * top_k
    return min(work, max(MIN_SCRATCH, work - buffer))


@dataclass(frozen=True)
class DsaSizing:
    """Pools and batch bounds with HiSparse off and on, at one request length."""

    baseline: DsaPools
    hisparse: DsaPools
    per_request_device: int  # padded buffer + spec scratch (disaggregation/decode.py:1414-1431)
    max_batch_baseline: int
    max_batch_hisparse: int
    limit_baseline: str
    limit_hisparse: str

    @property
    def capacity_gain(self) -> float:
        """Logical tokens with HiSparse over the baseline's tokens: what a long request is admitted against."""
        return self.hisparse.logical_tokens / self.baseline.logical_tokens if self.baseline.logical_tokens else 0.0

    @property
    def batch_gain(self) -> float:
        return self.max_batch_hisparse / self.max_batch_baseline if self.max_batch_baseline else float("inf")


def dsa_sizing(lay: DsaLayout, kv_bytes: float, final_len: int, ratio: int, buffer: int,
               max_running: int, draft_tokens: int = 0, page: int = PAGE_SIZE) -> DsaSizing:  # fmt: skip
    """Both pools and the batch each admits for requests of ``final_len`` tokens (prompt + max new tokens,
    page-aligned, charged at admission: disaggregation/decode.py:508-517). With HiSparse a request also holds its
    device buffer padded by one page (hisparse_coordinator.py:644-646) and its speculative scratch in the physical
    pool; admission is the lesser of the two allocators (allocator/hisparse.py:113-117)."""
    base, hs = dsa_pools(lay, kv_bytes, None, page), dsa_pools(lay, kv_bytes, ratio, page)
    need = _ceil_to(max(final_len, 1), page)
    per_dev = buffer + page + spec_scratch_slots(draft_tokens, lay.index_topk, buffer)
    b_bounds = {"kv_pool": base.logical_tokens // need, "max_running": max_running}
    h_bounds = {"logical": hs.logical_tokens // need, "device_buffer": hs.device_slots // per_dev,
                "max_running": max_running}  # fmt: skip
    lb, lh = min(b_bounds, key=b_bounds.__getitem__), min(h_bounds, key=h_bounds.__getitem__)
    return DsaSizing(base, hs, per_dev, b_bounds[lb], h_bounds[lh], lb, lh)


def swap_in_step_seconds(lay: DsaLayout, costs: SwapInCost, n: int, misses, layer_compute_s,
                         backend: str = "kernel"):  # fmt: skip
    """What one decode step's swap-ins add to it, for ``n`` requests with ``misses`` rows missed a layer (a number,
    or an array of steps with ``layer_compute_s`` each: the answer has its shape).

    An anchor layer runs the swap-in kernel synchronously (one launch over the batch, priced by the cost table's
    swap-in fit); an IndexShare skip layer replays its anchor's miss plan, IO only (``copy_cache_planned_mla``),
    on the prefetch stream right after the anchor (hisparse_coordinator.py:1571-1637), so a skip layer waits
    only for what its copy takes beyond one layer's compute. Without shared layers every layer is an anchor."""
    k, row = lay.index_topk, lay.kv_row_bytes
    m = np.clip(np.asarray(misses, dtype=np.int64), 0, max(n, 0) * k)
    if n <= 0:
        return 0.0 if m.ndim == 0 else np.zeros(m.shape)
    distinct, index = np.unique(m, return_inverse=True)
    out = lay.anchors * np.array([costs.swap_in_seconds(n, k, int(x), row) for x in distinct])[index].reshape(m.shape)
    if lay.skip_layers:
        copy = np.array([costs.transfer_seconds("h2d", backend, int(x), row) for x in distinct])[index]
        out = out + lay.skip_layers * np.maximum(0.0, copy.reshape(m.shape) - np.asarray(layer_compute_s))
    return float(out) if out.ndim == 0 else out

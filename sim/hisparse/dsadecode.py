"""The DSA side of a HiSparse decode instance (DeepSeek V3.2, GLM-5.x): its shape, pools, sampled misses and
per-step swap-in price, in the form :mod:`sim.hisparse.decode` runs in time.

Differences from V4 that move the figures (SGLang 0.5.23, relative to ``sglang/srt/``): every layer holds the
whole latent of a token (no compression, no SWA); HiSparse sizes the device cell with the indexer times the host
ratio (:mod:`sim.hisparse.dsa`); a request holds ``device_buffer_size + page`` slots plus its speculative scratch
(disaggregation/decode.py:1414-1431); anchors swap in synchronously and IndexShare's skip layers replay the
anchor's plan on the prefetch stream (managers/hisparse_coordinator.py:1571-1637).

Misses: the scenario's parametric indexer over raw token positions (``ParametricAccess(ratio=1)``: a DSA indexer
scores every token, no C4 compression, ``layers/attention/dsa/dsa_topk_backend.py:272-309``), replayed through the
coordinator's DSA family as SGLang's DSA branch drives it (:data:`sim.hisparse.coordinator.DSA`): the kernel sees
``seq_len`` itself (``layers/attention/dsa_backend.py:2623-2628``), the previous token is backed up every step
(hisparse_coordinator.py:1168-1263 with ``compress_ratio`` 1) and the buffer grows page by page (:987-1058).
Sampled on a few requests and anchor layers in ``step_windows`` windows spread over the output, as for V4
(:func:`sim.hisparse.buffer.sample_misses`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from sim.hisparse.buffer import DecodePools, HiSparseConfig, _break_even, sample_misses
from sim.hisparse.coordinator import DSA
from sim.hisparse.dsa import DsaSizing, dsa_sizing, swap_in_step_seconds
from sim.model.dsa import PAGE_SIZE, DsaLayout, dsa_layout, is_dsa

if TYPE_CHECKING:
    from sim.hisparse.buffer import SwapInCost
    from sim.hisparse.topk import AccessModel

__all__ = ["DsaDecode", "DsaDecodeShape", "dsa_decode", "dsa_layout_of"]


def dsa_layout_of(sc) -> DsaLayout | None:
    """The scenario model's DSA layout, None for another model (one without a DSA config.json)."""
    ref = sc.model.config
    if ref is None:
        return None
    from sim.model.modelcfg import load_config

    cfg, _ = load_config(ref)
    return dsa_layout(cfg, sc.model.kv_dtype) if is_dsa(cfg) else None


@dataclass(frozen=True)
class DsaDecodeShape:
    """What the decode loop reads of a DSA model: page, reads a step, weights, and no SWA."""

    layout: DsaLayout
    weight_bytes_per_gpu: float
    page_size: int = PAGE_SIZE

    @property
    def index_topk(self) -> int:
        return self.layout.index_topk

    @property
    def kv_row_bytes(self) -> int:
        return self.layout.kv_row_bytes

    def swa_tokens_per_request(self) -> int:
        return 0

    def kv_read_bytes(self, seq_len: int, top_k: int | None = None) -> int:
        """One request's decode read: the top-k latent rows of every layer and every indexer key of the anchor
        layers (the indexer scores every token; shared layers reuse the anchor's top-k)."""
        lay = self.layout
        k = min(top_k or lay.index_topk, seq_len)
        return lay.layers * k * lay.kv_row_bytes + lay.anchors * seq_len * lay.indexer_row_bytes


@dataclass(frozen=True)
class DsaDecode:
    """A DSA decode instance's sizing and sampled misses (per request and anchor layer, at each counted step)."""

    shape: DsaDecodeShape
    sizing: DsaSizing
    steps: np.ndarray
    misses: np.ndarray  # (requests, layers simulated, counted steps)
    accesses: np.ndarray
    crossover_batch: int | None
    final_len: int  # the requests' prompt + max new tokens the sizing is for
    d2h_backup_bytes: int  # the sampled requests' eager backups over the whole decode, every layer's latent row

    @property
    def misses_per_step(self) -> np.ndarray:
        return self.misses.mean(axis=(0, 1)) if self.misses.size else np.zeros(0)

    @property
    def miss_rate(self) -> float:
        total = int(self.accesses.sum())
        return int(self.misses.sum()) / total if total else 0.0

    def pools(self, enabled: bool) -> DecodePools:
        """The pools in the decode loop's terms: full = logical ids, the C4 slots = the physical latent pool."""
        p = self.sizing.hisparse if enabled else self.sizing.baseline
        return DecodePools(p.logical_tokens, 0, p.device_slots, float(p.bytes_per_token), 0)  # no SWA


def dsa_decode(sc, lay: DsaLayout, weight_bytes: float, access: AccessModel, costs: SwapInCost, roofline,
               input_len: int, output_len: int, rng) -> DsaDecode:  # fmt: skip
    """Size the instance for requests of ``input_len + output_len`` and sample the misses of ``access``, an
    indexer over raw positions, in ``hisparse.step_windows`` windows of ``window_steps`` (every step without)."""
    h = sc.hisparse
    draft = sc.speculative.draft_tokens if sc.speculative.enabled else 0  # its scratch (verify steps: not modelled)
    shape = DsaDecodeShape(lay, weight_bytes)
    kv_bytes = sc.hardware.kv_mem_gb * 1e9
    dp = sc.hardware.attn_dp_size  # DP attention: one rank's pools and share of the batch cap
    sizing = dsa_sizing(lay, kv_bytes, input_len + output_len, h.host_to_device_ratio, h.device_buffer_size,
                        max(1, sc.scheduler.max_running_requests // dp), draft)  # fmt: skip
    # colocated, a prompt is staged from this GPU: its buffer starts with its oldest tokens resident
    # (collect_ready_reqs -> alloc_device_buffer, hisparse_coordinator.py:976-980, 1063-1090)
    fill = h.initial_fill if sc.cluster.role == "decode" else "staging"
    cfg = HiSparseConfig(h.device_buffer_size, lay.index_topk, h.policy, fill, h.host_to_device_ratio,
                         layers_simulated=h.access.layers_simulated, step_windows=h.step_windows,
                         window_steps=h.window_steps, family=DSA)  # fmt: skip
    sampled = sample_misses(cfg, access, h.sample_requests, input_len, output_len, lay.index_topk, rng)
    misses = sampled.misses
    mean = float(misses.mean()) if misses.size else 0.0
    seq = input_len + output_len // 2

    def step(batch: int, swap: bool) -> float:
        gpu = (weight_bytes + roofline.expert_bytes * roofline.experts_touched(batch * dp)
               + batch * shape.kv_read_bytes(seq)) / (roofline.hbm_Bps * roofline.mbu)  # fmt: skip
        extra = swap_in_step_seconds(lay, costs, batch, round(mean * batch), gpu / lay.layers) if swap else 0.0
        return max(roofline.overhead_s, gpu + extra)

    nb = sizing.max_batch_baseline
    cross = _break_even(sizing.max_batch_hisparse, nb / step(nb, False) if nb else 0.0, lambda b: step(b, True))
    backup_bytes = sampled.backups * lay.layers * lay.kv_row_bytes  # every layer's row (backup_from_device_all_layer, :1248)
    return DsaDecode(shape, sizing, sampled.steps, misses, sampled.accesses, cross, input_len + output_len,
                     backup_bytes)

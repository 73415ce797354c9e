"""DeepSeek Sparse Attention (DSA) models: DeepSeek V3.2, GLM-5.x. What SGLang 0.5.23 stores per token.

Every layer keeps one MLA latent row a token (replicated on every attention-TP rank) and one indexer key row; the
indexer scores every token and attention reads the top ``index_topk`` rows. IndexShare models (GLM-5.2's
``indexer_types``) compute top-k on anchor layers only and replay it on the "shared" layers. Paths below are
SGLang 0.5.23, relative to ``sglang/srt/``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sim.base.errors import InputError

__all__ = ["DSA_ARCHITECTURES", "DsaLayout", "dsa_layout", "is_dsa", "kv_row_bytes", "skips_topk"]

# configs/model_config.py:191-212: these architectures with an index_topk are DSA models.
DSA_ARCHITECTURES = frozenset({
    "DeepseekV3ForCausalLM", "DeepseekV32ForCausalLM", "DeepseekV3ForCausalLMNextN", "MistralLarge3ForCausalLM",
    "PixtralForConditionalGeneration", "GlmMoeDsaForCausalLM", "GlmMoeDsaForCausalLMNextN",
    "Glm5NextForConditionalGenerationNextN", "Glm5NextForConditionalGeneration", "LongcatFlashForCausalLM",
    "LongcatFlashForCausalLMNextN", "Dots3NoteForCausalLM", "Dots3NoteForCausalLMNextN", "HYV4ForCausalLM",
    "HYV4ForCausalLMNextN",
})  # fmt: skip
QUANT_BLOCK = 128  # DSATokenToKVPool.quant_block_size (mem_cache/memory_pool.py:5280)
PAGE_SIZE = 64  # 64 x index_kpool on CUDA (arg_groups/model_overrides/deepseek_v2.py:163-173)
# KV dtypes DSA takes (arg_groups/overrides.py:539-544), by the scenario's spelling.
FP8, BF16 = ("fp8_e4m3", "fp8"), ("bf16", "bfloat16", "auto")


def is_dsa(cfg: dict[str, Any]) -> bool:
    """``is_deepseek_dsa`` (configs/model_config.py:191-212): the first architecture and an ``index_topk``."""
    archs = cfg.get("architectures")
    first = archs[0] if isinstance(archs, list) and archs else None
    return first in DSA_ARCHITECTURES and cfg.get("index_topk") is not None


def skips_topk(cfg: Mapping[str, Any], layer: int) -> bool:
    """Whether ``layer`` replays the previous layer's top-k (``dsa_layer_skips_topk``, model_config.py:488-522)."""
    types = cfg.get("indexer_types")
    if types is not None:
        return 0 <= layer < len(types) and types[layer] == "shared"
    cli = cfg.get("cli_factor") or 1
    if cli > 1:
        return layer % cli != 0
    pattern = cfg.get("index_topk_pattern")
    if pattern is not None:
        return layer < len(pattern) and pattern[layer] == "S"
    freq = cfg.get("index_topk_freq") or 1
    offset = cfg.get("index_skip_topk_offset")
    if offset is not None:
        return max(layer - offset + 1, 0) % freq != 0
    return max(layer - 1, 0) % freq != 0


def kv_row_bytes(cfg: dict[str, Any], kv_dtype: str, raw_fp8: bool = False) -> int:
    """One token's latent row in one layer (``calculate_mla_kv_cache_dim``, mem_cache/kv_cache_configurator.py:
    3412-3475): bf16 is (kv_lora_rank + rope) x 2; fp8 on the scaled layout (flashmla_kv, flashinfer_sparse_mla) is
    the fp8 latent, a 4-byte scale per 128 and the rope kept in bf16; ``raw_fp8`` (trtllm, TileLang) is 1 B each."""
    lora, rope = int(cfg["kv_lora_rank"]), int(cfg["qk_rope_head_dim"])
    if kv_dtype in BF16:
        return (lora + rope) * 2
    if kv_dtype not in FP8:
        raise InputError(f"model.kv_dtype: DSA models store bf16 or fp8_e4m3 KV (arg_groups/overrides.py:539-544), "
                         f"got {kv_dtype!r}")  # fmt: skip
    return lora + rope if raw_fp8 else lora + lora // QUANT_BLOCK * 4 + rope * 2


@dataclass(frozen=True)
class DsaLayout:
    """A DSA model's per-token device rows and its anchor layers."""

    layers: int
    kv_row_bytes: int  # one latent row, one layer
    indexer_row_bytes: int  # one indexer key with its scales, one layer
    index_topk: int
    anchors: int  # layers that run the indexer's top-k (all but IndexShare's shared layers)
    kv_dtype: str

    @property
    def skip_layers(self) -> int:
        return self.layers - self.anchors

    def bytes_per_token(self, hisparse_ratio: int | None = None) -> int:
        """Device bytes a pool token costs (``_compute_cell_size`` + ``_compute_dsa_indexer_cell_size``,
        model_executor/pool_configurator.py:376-408, 560-635). Without HiSparse the shared layers' indexer keys
        are elided (:594-633, ``_should_elide_dsa_index_k``, kv_cache_configurator.py:131-145); with HiSparse
        every layer keeps them, sized times the host ratio (:582-595), since the indexer buffer holds every
        logical token (mem_cache/hisparse_memory_pool.py:72)."""
        if hisparse_ratio is None:
            return self.layers * self.kv_row_bytes + self.anchors * self.indexer_row_bytes
        return self.layers * (self.kv_row_bytes + self.indexer_row_bytes * hisparse_ratio)


def dsa_layout(cfg: dict[str, Any], kv_dtype: str = "auto", raw_fp8: bool = False) -> DsaLayout:
    """The :class:`DsaLayout` of a DSA config; ``kv_dtype`` ``auto`` is bf16, as SGLang picks it on Hopper
    (arg_groups/overrides.py:532-535: fp8 from SM100 on)."""
    layers = int(cfg["num_hidden_layers"])
    ihd = int(cfg.get("index_head_dim") or 128)
    kpool = int(cfg.get("index_kpool") or 1)
    indexer = -(-(ihd + ihd // QUANT_BLOCK * 4) // kpool)  # fp8 key + fp32 scale per 128, uint8 (:566-573)
    anchors = sum(not skips_topk(cfg, i) for i in range(layers))
    return DsaLayout(layers, kv_row_bytes(cfg, kv_dtype, raw_fp8), indexer, int(cfg["index_topk"]), anchors,
                     "fp8_e4m3" if kv_dtype in FP8 else "bfloat16")  # fmt: skip

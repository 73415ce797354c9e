"""A model from its Hugging Face ``config.json``: KV bytes per rank, parameters, and the compute shape.

Three families are told apart by their fields: MHA/GQA (Qwen3, Llama: ``num_key_value_heads`` x
``head_dim`` per layer, sharded over TP), MLA (DeepSeek V2/V3/R1: ``kv_lora_rank + qk_rope_head_dim`` per
layer, replicated on every rank, SGLang ``cache_controller.py:771-802``), and DeepSeek V4/V4.1
(``compress_ratios``: mapped to the multi-pool catalog of :mod:`sim.model.pools`). Parameters are counted from the
layer shapes (norms and biases left out), so that weights per rank, FLOPs per token and, for MoE, the
experts a decode step touches follow from the config alone. Bundled configs live in ``sim/data/models/``;
a Hugging Face id (``deepseek-ai/DeepSeek-V4-Pro``) names the config aiconfigurator-core ships, when that
extra is installed (:func:`sim.model.aic.shipped_models`). A V4 config's layer structure must be the one its
catalog pools are built from (the same formulas, :mod:`sim.model.pools`), else it is refused.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from sim.base.errors import InputError
from sim.base.inputs import file_stamp, parse_json, read_text
from sim.model.dsa import dsa_layout, is_dsa
from sim.model.moeweights import MoeLayout

__all__ = ["EXPERT_DTYPE_BYTES", "KV_DTYPE_BYTES", "ModelShape", "attention_family", "bundled_configs", "derive",
           "expert_dtype_of", "is_named", "load_config", "model_spec"]

# SGLang --kv-cache-dtype values and their bytes per element; "auto" is the model's dtype.
KV_DTYPE_BYTES = {"auto": None, "bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1,
                  "fp8": 1, "fp4_e2m1": 0.5}  # fmt: skip
_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# Bytes per routed-expert weight by model.expert_dtype. MXFP4 (DeepSeek V4's FP4 experts): two e2m1 values per
# byte (layers/quantization/fp8.py:1603-1621) and one e8m0 scale per 32 weights (fp8.py:1694-1716, the
# checkpoint's uint8 scales, models/deepseek_v4.py:5783). FP8: one byte (128 x 128 block scales are noise).
EXPERT_DTYPE_BYTES = {"bf16": 2.0, "fp8": 1.0, "fp4": 0.5 + 1 / 32}


@dataclass(frozen=True)
class ModelShape:
    """What the cache and the step-time model need from a config, per TP rank where it says so."""

    name: str
    family: str  # "mha", "mla", "dsa" (DeepSeek V3.2, GLM-5.x) or "dsv4"
    layers: int
    params: float
    active_params: float
    weight_bytes_per_rank: float
    kv_bytes_per_token: float  # per rank (MHA: this rank's heads; MLA/V4: the replicated whole)
    # Step-time model inputs, per rank:
    flops_per_token: float  # linear layers (2 x active params) plus per-token attention constants
    attn_flops_per_pair: float  # per (query, context token) pair
    dense_weight_bytes: float  # weights every decode step reads (all but the routed experts)
    expert_bytes: float  # one routed expert over all MoE layers
    n_experts: int
    experts_per_token: int
    kv_read_bytes_per_token: float  # decode: bytes read per context token
    kv_read_bytes_per_request: float  # decode: bytes read per request whatever its length (windows, top-k)
    compute_dtype: str
    catalog: str | None = None  # DeepSeek V4: the catalog entry holding the pools
    fp4_indexer: bool = False  # DeepSeek V4: C4 indexer keys in fp4 (--enable-deepseek-v4-fp4-indexer)
    mlp_flops_per_token: float = 0.0  # per GPU: the MLP/MoE share of flops_per_token (DP attention gathers it)
    expert_dtype: str = ""  # the routed experts' dtype as resolved (expert_dtype_of); "" without experts
    index_topk: int = 0  # DSA: the indexer's top-k, what HiSparse swaps in (model_runner.py:1038-1041)
    moe_layout: MoeLayout | None = None  # what an MoE all-to-all backend's resident bytes follow (sim.model.moeweights)


def bundled_configs() -> list[str]:
    return sorted(p.name[:-5] for p in resources.files("sim").joinpath("data", "models").iterdir()
                  if p.name.endswith(".json"))  # fmt: skip


# Every config.json field the derivation reads, with the least value it may take (all are integers, at most
# MAX_CONFIG_INT): checked where the file is read, so an error names the file and the field, not what follows.
MAX_CONFIG_INT = 10**9
CONFIG_INTS = {
    "num_hidden_layers": 1, "hidden_size": 1, "num_attention_heads": 1, "vocab_size": 1, "intermediate_size": 0,
    "num_key_value_heads": 1, "head_dim": 1, "kv_lora_rank": 1, "qk_rope_head_dim": 0, "qk_nope_head_dim": 0,
    "v_head_dim": 1, "q_lora_rank": 0, "o_lora_rank": 0, "o_groups": 0, "moe_intermediate_size": 1,
    "num_experts_per_tok": 1, "n_routed_experts": 0, "num_experts": 0, "n_shared_experts": 0,
    "first_k_dense_replace": 0, "sliding_window": 0, "index_topk": 0, "index_n_heads": 0, "index_head_dim": 0,
}  # fmt: skip


def is_named(ref: str) -> bool:
    """Whether ``ref`` names a config (bundled, or a Hugging Face id aiconfigurator-core ships) rather
    than a file."""
    from sim.model.aic import model_config_path

    return _bundled_name(ref) in bundled_configs() or model_config_path(ref) is not None


def _bundled_name(ref: str) -> str:
    """The bundled config a name means: ``zai-org/GLM-5.1-FP8`` is ``glm-5.1-fp8`` (its Hugging Face id)."""
    return ref.rsplit("/", 1)[-1].lower() if ref.count("/") == 1 else ref.lower()


_LOADED: dict[tuple[str, str], tuple[tuple | None, dict[str, Any], str]] = {}
"""(ref, the file it names) -> (the file's stamp, config, name): a conversion and a scenario's checks ask for one
config several times, and it is read again only once its file changed (:func:`load_config`)."""


def load_config(ref: str) -> tuple[dict[str, Any], str]:
    """A config by path (a ``config.json`` or a folder holding one), by bundled name, or by a Hugging Face id
    aiconfigurator-core ships; (config, name). Read once while its file keeps its size and modification time;
    each call gets a dict of its own (the values in it are shared: replace them, never change them in place)."""
    from sim.model.aic import model_config_path

    path = Path(ref).expanduser()
    if path.is_dir():
        if not os.path.lexists(path / "config.json"):
            raise InputError(f"model config {ref!r}: a folder without a config.json")
        path = path / "config.json"
    shipped = model_config_path(ref)
    file = shipped if shipped is not None else path if os.path.lexists(path) else None
    key = (ref, os.path.abspath(file) if file is not None else "")  # "": the bundled config (package data)
    stamp = file_stamp(file) if file is not None else ()
    loaded = _LOADED.get(key)
    if loaded is None or loaded[0] != stamp or stamp is None:
        loaded = _LOADED[key] = (stamp, *_read_config(ref, file, shipped is not None))
    return dict(loaded[1]), loaded[2]


def _read_config(ref: str, file: Path | None, shipped: bool) -> tuple[dict[str, Any], str]:
    """:func:`load_config`'s config read from ``file`` (None: the bundled one ``ref`` names), checked."""
    if file is not None:  # a path the user gave, whatever it is: the input rules say what it may be
        source = str(file)
        data = parse_json(read_text(file, "model config.json"), source, what="model config")
        name = ref if shipped else file.parent.name if file.name == "config.json" else file.stem
    else:
        bundled = resources.files("sim").joinpath("data", "models", f"{_bundled_name(ref)}.json")
        if not bundled.is_file():
            extra = " (a Hugging Face id needs aiconfigurator-core, installed with hicache-sim on Python 3.11-3.13)" if "/" in ref else ""
            raise InputError(f"model config {ref!r}: no such file, and not a bundled config "
                             f"(bundled: {', '.join(bundled_configs())}){extra}")  # fmt: skip
        data, name, source = json.loads(bundled.read_text()), _bundled_name(ref), ref
    if not isinstance(data, dict):
        raise InputError("model config: expected a JSON object", source=source)
    if "num_hidden_layers" not in data and "text_config" in data:
        data = data["text_config"]
        if not isinstance(data, dict):
            raise InputError("text_config: expected a JSON object", source=source)
    check_config(data, source)
    try:  # derived once where it is read, so a field the derivation misses is named with the file
        derive(data, name=name)
    except InputError as exc:
        raise InputError(str(exc), source=source) from None
    return data, name


def check_config(cfg: dict[str, Any], source: str) -> None:
    """Refuse a config whose fields the derivation reads are of the wrong kind or out of range."""
    for key, least in CONFIG_INTS.items():
        value = cfg.get(key)
        if value is None:
            continue
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= MAX_CONFIG_INT:
            raise InputError(f"{key}: must be an integer from {least} to {MAX_CONFIG_INT:.0e}, got {value!r}",
                             source=source)  # fmt: skip
    ratios = cfg.get("compress_ratios")
    if ratios is not None and not (isinstance(ratios, list) and all(
            isinstance(r, int) and not isinstance(r, bool) and 0 <= r <= MAX_CONFIG_INT for r in ratios)):  # fmt: skip
        raise InputError("compress_ratios: must be a list of non-negative integers", source=source)
    if not isinstance(cfg.get("quantization_config") or {}, dict):
        raise InputError("quantization_config: expected a JSON object", source=source)
    heads, hidden = cfg.get("num_attention_heads"), cfg.get("hidden_size")
    if "head_dim" not in cfg and isinstance(heads, int) and isinstance(hidden, int) and heads > hidden:
        raise InputError(f"num_attention_heads: {heads} heads of a {hidden}-wide hidden state leave no head_dim "
                         "(give head_dim)", source=source)  # fmt: skip
    kv_heads = cfg.get("num_key_value_heads")
    if isinstance(heads, int) and isinstance(kv_heads, int) and heads >= 1 and kv_heads >= 1 and heads % kv_heads:
        # each KV head serves a whole group of query heads: SGLang's attention takes the group as num_heads //
        # num_kv_heads (layers/attention/triton_backend.py:317), none at all with more KV heads than heads
        raise InputError(f"num_key_value_heads: {kv_heads} KV heads do not divide the {heads} attention heads into "
                         "whole groups", source=source)  # fmt: skip


# The architectures SGLang builds as DeepSeek V4 (configs/model_config.py:395-400), and V4's model_type.
V4_ARCHITECTURES = frozenset({"DeepseekV4ForCausalLM", "DeepseekV4ForCausalLMNextN", "DeepseekV4ForCausalLMDSpark"})


def _names_v4(cfg: dict) -> bool:
    archs = cfg.get("architectures")
    return cfg.get("model_type") == "deepseek_v4" or (isinstance(archs, list) and any(
        a in V4_ARCHITECTURES for a in archs if isinstance(a, str)))  # fmt: skip


def _need(cfg: dict, key: str, name: str) -> Any:
    if key not in cfg or cfg[key] is None:
        raise InputError(f"{key}: required field missing (model {name!r})")
    return cfg[key]


def _moe(cfg: dict, name: str, hidden: int, layers: int) -> tuple[float, float, float, int, int]:
    """(all MLP params, active MLP params, one routed expert's params over MoE layers, experts, top-k)."""
    n_exp = int(cfg.get("n_routed_experts") or cfg.get("num_experts") or 0)
    inter = int(cfg.get("intermediate_size") or 0)
    if not n_exp:
        dense = 3 * hidden * _need(cfg, "intermediate_size", name)
        return layers * dense, layers * dense, 0.0, 0, 0
    moe_inter = _need(cfg, "moe_intermediate_size", name)
    k = int(_need(cfg, "num_experts_per_tok", name))
    shared = int(cfg.get("n_shared_experts") or 0)
    dense_layers = int(cfg.get("first_k_dense_replace") or 0)
    moe_layers = layers - dense_layers
    expert = 3 * hidden * moe_inter
    dense_part = dense_layers * 3 * hidden * inter
    total = dense_part + moe_layers * (n_exp + shared) * expert + moe_layers * hidden * n_exp  # + router
    active = dense_part + moe_layers * (k + shared) * expert + moe_layers * hidden * n_exp
    return total, active, moe_layers * expert, n_exp, k


def expert_dtype_of(cfg: dict[str, Any], expert_dtype: str = "auto") -> str:
    """The routed experts' dtype: as given, else the checkpoint's: fp4 when its quantization_config marks the
    routed experts mxfp4 (SGLang ``configs/model_config.py:722-733``) or its config declares them so (DeepSeek
    V4's ``expert_dtype``, the key SGLang writes for it too, ``model_loader/expert_pack_runtime.py:275``), else
    its weights' dtype. Memory sizing and every step-time backend read this one answer."""
    if expert_dtype != "auto":
        if expert_dtype not in EXPERT_DTYPE_BYTES:
            raise InputError(f"expert_dtype: unknown {expert_dtype!r} (known: auto, {', '.join(EXPERT_DTYPE_BYTES)})")
        return expert_dtype
    quant = cfg.get("quantization_config") or {}
    if quant.get("routed_experts_quant_method") == "mxfp4" or cfg.get("expert_dtype") == "fp4":
        return "fp4"
    return "fp8" if quant.get("quant_method") in ("fp8", "deepseek_v4_fp8") else "bf16"


@dataclass(frozen=True)
class _Bytes:
    """Bytes per element: the checkpoint's dtype, the dense weights (fp8 when quantized), routed experts, KV."""

    model: float
    weight: float
    expert: float
    kv: float


@dataclass(frozen=True)
class _Attention:
    """One attention family's share of the shape: per-layer params, KV bytes and FLOPs before the TP split."""

    family: str
    params: int  # per layer
    kv_bytes_per_token: float
    kv_read_bytes_per_token: float
    flops_per_pair: float  # per (query token, context token) pair, whole model
    flops_per_token: float = 0.0  # independent of context (windows, top-k), whole model
    kv_read_bytes_per_request: float = 0.0
    catalog: str | None = None


def attention_family(cfg: dict[str, Any]) -> str:
    """``dsv4``, ``dsa``, ``mla`` or ``mha``: the attention the config's fields name, :func:`derive`'s
    ``family``, told without deriving the rest."""
    if "compress_ratios" in cfg:
        return "dsv4"
    if "kv_lora_rank" in cfg:
        return "dsa" if is_dsa(cfg) else "mla"
    return "mha"


def derive(cfg: dict[str, Any], *, tp_size: int = 1, kv_dtype: str = "auto", name: str = "model",
           expert_dtype: str = "auto", fp4_indexer: bool = False, attn_dp_size: int = 1) -> ModelShape:  # fmt: skip
    """The :class:`ModelShape` of a config at ``tp_size`` ranks with KV stored as ``kv_dtype``.

    With ``attn_dp_size`` attention-DP ranks (SGLang's DP attention) the attention weights are sharded over
    ``tp_size / attn_dp_size`` GPUs (the attention TP group, ``arg_groups/fields/parallel.py:81-90, 316-320``)
    and replicated across the DP ranks, while the MLP/MoE and embeddings stay sharded over all ``tp_size``.
    """
    _check_parallel(tp_size, kv_dtype, attn_dp_size)
    attn_tp = tp_size // attn_dp_size
    layers = int(_need(cfg, "num_hidden_layers", name))
    hidden = int(_need(cfg, "hidden_size", name))
    heads = int(_need(cfg, "num_attention_heads", name))
    _check_heads(cfg, heads, attn_tp, name)
    vocab = int(_need(cfg, "vocab_size", name))
    b = _dtype_bytes(cfg, kv_dtype, expert_dtype)
    embed = vocab * hidden * (1 if cfg.get("tie_word_embeddings") else 2)
    mlp, mlp_active, expert, n_exp, k = _moe(cfg, name, hidden, layers)
    if _names_v4(cfg) and "compress_ratios" not in cfg:  # SGLang would build V4's model and fail on it
        raise InputError(f"compress_ratios: required field missing (model {name!r}: its architectures or model_type "
                         "name DeepSeek V4, whose model SGLang builds from compress_ratios, models/deepseek_v4.py:1047)")
    family = attention_family(cfg)
    if family == "dsv4":  # DeepSeek V4 / V4.1: multi-pool, mapped to the catalog
        att = _v4_attention(cfg, name, hidden, heads, layers, fp4_indexer)
    elif family == "dsa":
        att = _dsa_attention(cfg, name, hidden, heads, layers, kv_dtype)
    elif family == "mla":
        att = _mla_attention(cfg, name, hidden, heads, layers, b.kv)
    else:
        att = _mha_attention(cfg, hidden, heads, layers, b.kv, attn_tp)
    attn, per_tok_attn = att.params, att.flops_per_token
    params = embed + layers * attn + mlp
    active = embed + layers * attn + mlp_active
    routed = n_exp * expert  # routed-expert params over all MoE layers, stored as b.expert each
    weight_bytes = (params - embed) * b.weight + embed * b.model + routed * (b.expert - b.weight)
    # DP attention: attention weights and FLOPs are split over attn_tp GPUs only (0 extra when attn_tp == tp).
    attn_extra = 1 / attn_tp - 1 / tp_size
    dense_bytes = (weight_bytes - routed * b.expert) / tp_size + layers * attn * b.weight * attn_extra
    return ModelShape(
        name=name, family=att.family, layers=layers, params=params, active_params=active,
        weight_bytes_per_rank=weight_bytes / tp_size + layers * attn * b.weight * attn_extra, kv_bytes_per_token=att.kv_bytes_per_token,
        flops_per_token=(2 * (active - embed) + per_tok_attn) / tp_size  # embeddings: a lookup, and logits only for the last token
        + (2 * layers * attn + per_tok_attn) * attn_extra,
        attn_flops_per_pair=att.flops_per_pair / attn_tp,
        dense_weight_bytes=dense_bytes, expert_bytes=expert * b.expert / tp_size,
        n_experts=n_exp, experts_per_token=k, kv_read_bytes_per_token=att.kv_read_bytes_per_token,
        kv_read_bytes_per_request=att.kv_read_bytes_per_request, compute_dtype="fp8" if b.weight == 1 else "bf16",
        catalog=att.catalog, fp4_indexer=fp4_indexer and att.catalog is not None, mlp_flops_per_token=2 * mlp_active / tp_size,
        expert_dtype=expert_dtype_of(cfg, expert_dtype) if n_exp else "",
        index_topk=int(cfg.get("index_topk") or 0) if att.family == "dsa" else 0,
        moe_layout=_moe_layout(cfg, hidden, layers, n_exp, b.weight) if n_exp else None,
    )  # fmt: skip


def _moe_layout(cfg: dict[str, Any], hidden: int, layers: int, n_exp: int, dense_bytes: float) -> MoeLayout:
    quant = cfg.get("quantization_config") or {}
    block = quant.get("weight_block_size") or ()
    archs = " ".join(cfg.get("architectures") or ()) + " " + str(cfg.get("model_type") or "")
    return MoeLayout(
        moe_layers=layers - int(cfg.get("first_k_dense_replace") or 0), hidden=hidden,
        moe_intermediate=int(cfg["moe_intermediate_size"]), n_routed=n_exp,
        n_shared=int(cfg.get("n_shared_experts") or 0), deepseek_moe="deepseek" in archs.lower(),
        deepseek_v4="compress_ratios" in cfg,
        shared_fp8_block32=dense_bytes == 1 and len(block) == 2 and int(block[1]) % 32 == 0,
        dense_weight_bytes=dense_bytes,
    )  # fmt: skip


def _check_parallel(tp_size: int, kv_dtype: str, attn_dp_size: int) -> None:
    if isinstance(tp_size, bool) or not isinstance(tp_size, int) or tp_size < 1:
        raise InputError(f"tp_size: must be an integer >= 1, got {tp_size!r}")
    if not isinstance(kv_dtype, str) or kv_dtype not in KV_DTYPE_BYTES:
        raise InputError(f"kv_dtype: unknown {kv_dtype!r} (known: {', '.join(KV_DTYPE_BYTES)})")
    if attn_dp_size < 1 or tp_size % attn_dp_size:
        raise InputError(f"attn_dp_size {attn_dp_size} does not divide tp_size {tp_size}")


def _check_heads(cfg: dict[str, Any], heads: int, attn_tp: int, name: str) -> None:
    """SGLang's split of the attention heads over the attention TP group: whole for MHA/GQA and MLA
    (``assert num_heads % attn_tp_size == 0``, ``models/qwen3.py:166``, ``llama.py:183``, ``deepseek_v2.py:2057``),
    and at least one a rank for DeepSeek V4 (``n_heads // attn_tp_size``, ``models/deepseek_v4.py:1035``)."""
    who = "the model" if name == "model" else name
    if "compress_ratios" in cfg:
        if attn_tp > heads:
            raise InputError(f"tp_size: an attention TP group of {attn_tp} ranks leaves no head of {who}'s {heads} on a "
                             "rank (SGLang: n_heads // attn_tp_size, models/deepseek_v4.py:1035)")  # fmt: skip
    elif heads % attn_tp:
        raise InputError(f"tp_size: {who}'s {heads} attention heads do not split over an attention TP group of "
                         f"{attn_tp} ranks (SGLang asserts num_heads % attn_tp_size == 0, models/qwen3.py:166, "
                         "llama.py:183, deepseek_v2.py:2057)")  # fmt: skip


def _dtype_bytes(cfg: dict[str, Any], kv_dtype: str, expert_dtype: str) -> _Bytes:
    model_bytes = _DTYPE_BYTES.get(str(cfg.get("torch_dtype", "bfloat16")), 2)
    quant = (cfg.get("quantization_config") or {}).get("quant_method")
    weight_b = 1 if quant in ("fp8", "deepseek_v4_fp8") else model_bytes
    experts = expert_dtype_of(cfg, expert_dtype)
    own = expert_dtype == "auto" and experts != "fp4"  # stored like the other weights
    expert_b = weight_b if own else EXPERT_DTYPE_BYTES[experts]
    return _Bytes(model_bytes, weight_b, expert_b, KV_DTYPE_BYTES[kv_dtype] or model_bytes)


def _v4_attention(cfg: dict, name: str, hidden: int, heads: int, layers: int, fp4_indexer: bool) -> _Attention:
    """DeepSeek V4 / V4.1: KV bytes from the catalog's pools; every layer attends its SWA window, C4 layers
    their indexer's top-k rows too."""
    from sim.model.pools import get_model

    hd, q_lora = int(_need(cfg, "head_dim", name)), int(_need(cfg, "q_lora_rank", name))
    o_lora = int(cfg.get("o_lora_rank") or q_lora)
    attn = hidden * q_lora + q_lora * heads * hd + hidden * hd + heads * hd * o_lora + int(cfg.get("o_groups") or 1) * o_lora * hidden
    ratios = [int(r) for r in cfg["compress_ratios"][:layers]]
    window, topk = int(cfg.get("sliding_window") or 128), int(cfg.get("index_topk") or 512)
    ih, ihd = int(cfg.get("index_n_heads") or 64), int(cfg.get("index_head_dim") or 128)
    pair = per_tok_attn = 0.0
    for r in ratios:
        per_tok_attn += 4 * heads * hd * window
        if r == 4:
            pair += 2 * ih * ihd / 4
            per_tok_attn += 4 * heads * hd * topk
        elif r > 4:
            pair += 4 * heads * hd / r
    catalog = "deepseek-v4.1-flash" if "kv_source_layer_ids" in cfg else (
        "deepseek-v4-flash" if layers <= 43 else "deepseek-v4-pro")  # fmt: skip
    spec = get_model(catalog, fp4_indexer=fp4_indexer)
    if catalog != "deepseek-v4.1-flash":
        _check_v4_layout(spec, name, layers, ratios.count(4), ratios.count(128), window, topk, fp4_indexer)
    read_tok = sum(p.bytes_per_page for p in spec.pools if p.name in ("c4_indexer", "c128")) / spec.page_size
    kv_req = ratios.count(4) * topk * 584 + layers * window * 584  # top-k C4 rows and the SWA window, v4 layout rows
    return _Attention("dsv4", attn, spec.bytes_per_page / spec.page_size, read_tok, pair, per_tok_attn, kv_req, catalog)


def _mla_attention(cfg: dict, name: str, hidden: int, heads: int, layers: int, kv_b: float) -> _Attention:
    """MLA: one latent (``kv_lora_rank + qk_rope_head_dim``) per layer, replicated on every rank."""
    lora, rope = int(_need(cfg, "kv_lora_rank", name)), int(_need(cfg, "qk_rope_head_dim", name))
    nope, v = int(_need(cfg, "qk_nope_head_dim", name)), int(_need(cfg, "v_head_dim", name))
    q_lora = int(cfg.get("q_lora_rank") or 0)
    q = hidden * q_lora + q_lora * heads * (nope + rope) if q_lora else hidden * heads * (nope + rope)
    attn = q + hidden * (lora + rope) + lora * heads * (nope + v) + heads * v * hidden
    kv_tok = layers * (lora + rope) * kv_b
    return _Attention("mla", attn, kv_tok, kv_tok, layers * heads * (2 * (nope + rope) + 2 * v))


def _dsa_attention(cfg: dict, name: str, hidden: int, heads: int, layers: int, kv_dtype: str) -> _Attention:
    """DSA (DeepSeek V3.2, GLM-5.x): the MLA latent as the DSA pool stores it plus the indexer keys
    (:mod:`sim.model.dsa`, sized as without HiSparse); a decode step scans every indexer key of the anchor layers
    and reads the top-k latent rows of every layer. The model's dtype (``auto``) stores bf16, as on Hopper."""
    for key in ("qk_rope_head_dim", "index_topk"):
        _need(cfg, key, name)
    mla = _mla_attention(cfg, name, hidden, heads, layers, 2)
    try:
        lay = dsa_layout(cfg, kv_dtype)
    except InputError as exc:
        raise InputError(f"{exc} (model {name!r})") from None
    per_req = layers * lay.index_topk * lay.kv_row_bytes
    lora, rope = int(cfg["kv_lora_rank"]), int(cfg["qk_rope_head_dim"])
    # FLOPs: the indexer scores every (query, token) pair of the anchor layers; attention reads top-k latents a
    # query in every layer (absorbed MLA: scores over lora + rope, values over lora)
    pair = lay.anchors * 2 * int(cfg.get("index_n_heads") or 64) * int(cfg.get("index_head_dim") or 128)
    per_tok = layers * lay.index_topk * heads * 2 * (2 * lora + rope)
    return _Attention("dsa", mla.params, lay.bytes_per_token(), lay.anchors * lay.indexer_row_bytes, pair, per_tok,
                      kv_read_bytes_per_request=per_req)


def _mha_attention(cfg: dict, hidden: int, heads: int, layers: int, kv_b: float, attn_tp: int) -> _Attention:
    """MHA / GQA: KV heads split over the attention TP group; with more ranks than KV heads each rank keeps one
    (replicated)."""
    kv_heads = int(cfg.get("num_key_value_heads") or heads)
    hd = int(cfg.get("head_dim") or hidden // heads)
    kv_tok = 2 * layers * max(1, math.ceil(kv_heads / attn_tp)) * hd * kv_b
    return _Attention("mha", hidden * heads * hd * 2 + 2 * hidden * kv_heads * hd, kv_tok, kv_tok, 4 * layers * heads * hd)


def _check_v4_layout(spec, name: str, layers: int, c4: int, c128: int, window: int, topk: int,
                     fp4_indexer: bool) -> None:  # fmt: skip
    """Refuse a V4 config whose layer structure is not the one the catalog pools were built from."""
    from sim.model.pools import v4_pools

    if (v4_pools(spec.page_size, layers, c4, c128, fp4_indexer) != spec.pools or window != spec.sliding_window
            or topk != spec.index_topk):  # fmt: skip
        raise InputError(f"model config {name!r}: {layers} layers ({c4} C4, {c128} C128), window {window}, "
                         f"index_topk {topk} is not the layout of the catalog's {spec.name} ({spec.notes})")  # fmt: skip


def model_spec(shape: ModelShape, page_size: int):
    """The :class:`sim.model.pools.ModelSpec`: the V4 catalog's pools, else one ``kv`` pool of the per-rank bytes."""
    from sim.model.pools import HitPolicy, ModelSpec, Pool, get_model

    if shape.catalog is not None:
        return get_model(shape.catalog, page_size=page_size, fp4_indexer=shape.fp4_indexer)
    per_page = round(shape.kv_bytes_per_token * page_size)
    pool = Pool("kv", per_page, "kv", HitPolicy.ALL_PAGES, rank_replicated=shape.family in ("mla", "dsa"))
    return ModelSpec(shape.name, page_size, (pool,), index_topk=shape.index_topk, layers=shape.layers,
                     notes=f"{shape.family}, {shape.kv_bytes_per_token:,.0f} B/token per rank (from config.json)")  # fmt: skip

"""The ``model`` section: a catalog model, inline pools or a config.json, and the pool specification a scenario's
model gives (:meth:`ModelConfig.spec`, read by the run, the cross-checks and HiSparse through
:func:`sim.scenario.schema.modelspec.build_model_spec`)."""

from __future__ import annotations

import difflib
from typing import Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from sim.scenario.schema.section import _field_error, _resolve_file, _Section

CATALOG_MODELS: tuple[str, ...] = ("deepseek-v4-flash", "deepseek-v4-pro", "deepseek-v4.1-flash", "generic")


def _named_config(name: Any) -> str | None:
    """A model name that is a Hugging Face id with a shipped config (``deepseek-ai/DeepSeek-V4-Pro``)."""
    if not isinstance(name, str) or "/" not in name:
        return None
    from sim.model.aic import shipped_id

    return shipped_id(name)  # the shipped id itself: a suffixed one resolves to its architecture's


class PoolConfig(_Section):
    """One KV pool of an inline model: its size per page, and how HiCache treats it (DESIGN.md 1.1).

    Give either ``bytes_per_page`` or a layer structure, as ``sim.model.pools.LayerGroup`` reads it: ``layers``
    with ``bytes_per_slot`` (and ``compress_ratio``, ``align``: per-layer page bytes padded as SGLang pads to
    576 B, pool_configurator.py:1372-1404), or ``layers`` with ``ring_rows`` x ``row_bytes`` (a state ring).
    """

    name: str = Field(description="Pool name, e.g. kv, swa, c4, c4_indexer, c4_state.")
    bytes_per_page: int | None = Field(
        None, ge=0, description="Bytes one page of this pool holds per rank (0 for the kv anchor)."
    )
    layers: int | None = Field(None, ge=0, description="Layer structure: layers owning this pool.")
    bytes_per_slot: int | None = Field(
        None, ge=1, description="Layer structure: bytes per slot per layer (584 for a v4 KV row)."
    )
    compress_ratio: int = Field(1, ge=1, description="Layer structure: raw tokens per slot (4 for C4, 128 for C128).")
    align: int = Field(1, ge=1, description="Layer structure: per-layer page bytes round up to this (576 for v4).")
    ring_rows: int | None = Field(None, ge=1, description="State ring: rows per page per layer (C4: 8).")
    row_bytes: int | None = Field(None, ge=1, description="State ring: bytes per row (fp32 C4 state: 8,192).")
    anchor: Literal["kv", "swa"] | None = Field(
        None,
        description="Pool whose indices this sidecar reuses; null for the anchors themselves (kv, swa).",
    )
    hit_policy: Literal["ALL_PAGES", "TRAILING_PAGES"] = Field(
        "ALL_PAGES",
        description="L3 hit rule; defaults to TRAILING_PAGES exactly when anchored on swa, as upstream.",
    )
    backupable: bool = Field(True, description="False for pools HiCache cannot back up (forced recompute).")
    rank_replicated: bool = Field(
        True, description="Every TP rank holds a full copy (true for all V4 pools)."
    )

    @model_validator(mode="before")
    @classmethod
    def _default_hit_policy(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("hit_policy") is None:
            anchor = data.get("anchor") or data.get("name")
            data = {**data, "hit_policy": "TRAILING_PAGES" if anchor == "swa" else "ALL_PAGES"}
        return data

    @model_validator(mode="after")
    def _one_size(self) -> PoolConfig:
        ring = self.ring_rows is not None or self.row_bytes is not None
        structured = self.layers is not None or self.bytes_per_slot is not None or ring
        if (self.bytes_per_page is None) == (not structured):
            raise _field_error(
                "bytes_per_page", "give either bytes_per_page or a layer structure (layers + ...), not both or neither"
            )
        if structured and self.layers is None:
            raise _field_error("layers", "a layer structure needs layers")
        if structured and ring and (self.ring_rows is None or self.row_bytes is None):
            raise _field_error("ring_rows", "a state ring needs both ring_rows and row_bytes")
        if structured and not ring and self.bytes_per_slot is None:
            raise _field_error("bytes_per_slot", "a layer structure needs bytes_per_slot (or ring_rows + row_bytes)")
        if self.anchor is None and self.name not in ("kv", "swa"):
            raise _field_error("anchor", f"pool {self.name!r} needs an anchor (kv or swa)")
        return self

    def page_bytes(self, page_size: int) -> int:
        """Bytes per page per rank at ``page_size`` tokens."""
        from sim.model.pools import LayerGroup

        if self.bytes_per_page is not None:
            return self.bytes_per_page
        group = LayerGroup(self.layers or 0, self.compress_ratio, self.bytes_per_slot or 0, self.align,
                           self.ring_rows or 0, self.row_bytes or 0)  # fmt: skip
        return group.page_bytes(page_size)


class ModelConfig(_Section):
    """The model whose KV is cached: a catalog name, an inline list of pools, a Hugging Face config.json, or a
    Hugging Face id whose config aiconfigurator-core ships (read as that config.json).

    A bare string in YAML (``model: deepseek-v4-flash``) means ``{name: ...}``. With ``config``, the KV bytes
    per rank (at ``hardware.tp_size``), the layers, and the compute model's inputs follow from the config
    (:mod:`sim.model.modelcfg`); DeepSeek V4 configs map to the catalog's pools.
    """

    name: str = Field(description=f"Catalog name ({', '.join(CATALOG_MODELS)}), a Hugging Face id whose config "
                      "aiconfigurator-core ships (deepseek-ai/DeepSeek-V4-Pro), or, with pools or "
                      "config, any label.")
    config: str | None = Field(
        None,
        description="Hugging Face config.json (a path, relative to the scenario file, or a bundled name: qwen3-14b, "
        "llama-3.1-8b, deepseek-v3, deepseek-v4-flash).",
    )
    kv_dtype: str = Field("auto", description="KV cache dtype as SGLang's --kv-cache-dtype (auto: the model's).")
    page_size: int | None = Field(
        None,
        ge=1,
        description="Tokens per page the pool sizes refer to; must equal hicache.page_size if set.",
    )
    generic_bytes_per_token: int | None = Field(
        None,
        ge=1,
        description="KV bytes per token per rank of the generic single-pool model (MLA fp8 V3: 35,136).",
    )
    pools: list[PoolConfig] | None = Field(
        None, min_length=1, description="Inline pool list; null to use the catalog entry."
    )
    sliding_window: int = Field(0, ge=0, description="Inline model: SWA window tokens (V4: 128); 0 = none.")
    index_topk: int | None = Field(None, ge=1, description="Inline model: the indexer's top-k (HiSparse).")
    layers: int = Field(1, ge=1, description="Inline model: transformer layers (load-back overlaps per layer).")
    expert_dtype: Literal["auto", "bf16", "fp8", "fp4"] = Field(
        "auto",
        description="Routed-expert weights (with a config): auto = the checkpoint's (fp4 when its quantization_config "
        "says routed_experts_quant_method mxfp4, configs/model_config.py:722-733, or the config declares expert_dtype "
        "fp4, as DeepSeek V4's does), or bf16, fp8, fp4 (MXFP4: "
        "e2m1 pairs and one scale per 32 weights, layers/quantization/fp8.py:1603-1716); also the quantization "
        "compute.backend: aiconfigurator prices the MoE kernels at.",
    )
    fp4_indexer: bool = Field(
        False,
        description="SGLang's --enable-deepseek-v4-fp4-indexer: C4 indexer keys stored as fp4 (68 B per compressed "
        "token instead of 132, mem_cache/deepseek_v4_memory_pool.py:53-57); SM100/SM120 only.",
    )

    kv_layout: Literal["paged", "unified", "unified_fp8"] = Field(
        "paged",
        description="DeepSeek V4's KV layout: paged (CUDA, and ROCm by default) or ROCm's unified layout "
        "(SGLANG_HACK_FLASHMLA_BACKEND=unified_kv_triton: 1,024-B bf16 rows, no SWA or state host pools; "
        "unified_fp8 adds SGLANG_DSV4_UNIFIED_KV_FP8=1, gfx95 only: fp8 nope rows and bf16 rope pools). "
        "sim/model/unified_kv.py.",
    )

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, data: Any) -> Any:
        return {"name": data} if isinstance(data, str) else data

    @field_validator("config")
    @classmethod
    def _resolve_config(cls, value: str | None, info: ValidationInfo) -> str | None:
        from sim.model.modelcfg import is_named

        if value is None or is_named(value):
            return value
        return _resolve_file(value, info)

    @model_validator(mode="after")
    def _check(self) -> ModelConfig:
        if self.config is not None:
            from sim.model.modelcfg import KV_DTYPE_BYTES

            if self.pools is not None or self.generic_bytes_per_token is not None:
                raise _field_error("config", "give a config.json or pools / generic_bytes_per_token, not both")
            if self.kv_dtype not in KV_DTYPE_BYTES:
                raise _field_error("kv_dtype", f"expected one of {', '.join(KV_DTYPE_BYTES)}, got {self.kv_dtype!r}")
            return self
        if self.expert_dtype != "auto":
            raise _field_error("expert_dtype", "needs model.config: the weights (and so the KV memory they leave) "
                               "come from a config.json")  # fmt: skip
        if self.pools is None:
            if self.name not in CATALOG_MODELS:
                close = difflib.get_close_matches(self.name, CATALOG_MODELS, n=1)
                hint = (
                    f" (did you mean {close[0]}?)"
                    if close
                    else "; a Hugging Face id names a config aiconfigurator-core ships (installed with "
                    "hicache-sim on Python 3.11-3.13), else give model.config: path/to/config.json"
                    if "/" in self.name
                    else f"; expected one of {', '.join(CATALOG_MODELS)}"
                )
                raise _field_error("name", f"unknown model {self.name!r}{hint}")
            if self.name == "generic" and self.generic_bytes_per_token is None:
                raise _field_error("generic_bytes_per_token", "required for the generic model")
            if self.name != "generic" and self.generic_bytes_per_token is not None:
                raise _field_error("generic_bytes_per_token", "applies only to the generic model")
            return self
        if self.generic_bytes_per_token is not None:
            raise _field_error(
                "generic_bytes_per_token", "applies only to the generic catalog model, not to inline pools"
            )
        names = [p.name for p in self.pools]
        dup = next((n for n in names if names.count(n) > 1), None)
        if dup is not None:
            raise _field_error("pools", f"pool {dup!r} listed twice")
        for i, pool in enumerate(self.pools):
            if pool.anchor is not None and pool.anchor not in names:
                raise _field_error(
                    f"pools.{i}.anchor", f"anchor pool {pool.anchor!r} is not in the pool list"
                )
        return self

    def shape(self, tp_size: int = 1, attn_dp_size: int = 1) -> Any:
        """The :class:`sim.model.modelcfg.ModelShape` of ``config`` at ``tp_size`` (None without a config)."""
        from sim.model.modelcfg import derive, load_config

        if self.config is None:
            return None
        cfg, _ = load_config(self.config)
        return derive(cfg, tp_size=tp_size, kv_dtype=self.kv_dtype, name=self.name, expert_dtype=self.expert_dtype,
                      fp4_indexer=self.fp4_indexer, attn_dp_size=attn_dp_size)  # fmt: skip

    def page_bytes(self, page_size: int, tp_size: int = 1, attn_dp_size: int = 1) -> int:
        """Total bytes per page per rank over all pools."""
        from sim.model import pools

        if self.kv_layout != "paged":
            return self.unified_spec(page_size, tp_size).bytes_per_page
        if self.config is not None:
            from sim.model.modelcfg import model_spec

            return model_spec(self.shape(tp_size, attn_dp_size), page_size).bytes_per_page
        if self.pools is not None:
            return sum(p.page_bytes(page_size) for p in self.pools)
        return pools.get_model(self.name, page_size=page_size, bytes_per_token=self.generic_bytes_per_token).bytes_per_page


    def unified_spec(self, page_size: int, tp_size: int = 1) -> Any:
        """The V4 model on ROCm's unified KV layout (:mod:`sim.model.unified_kv`)."""
        from sim.model.unified_kv import unified_model

        catalog = self.shape(tp_size).catalog if self.config is not None else self.name
        return unified_model(catalog or self.name, page_size, fp8=self.kv_layout == "unified_fp8",
                             fp4_indexer=self.fp4_indexer)  # fmt: skip

    def spec(self, page_size: int, tp_size: int = 1, attn_dp_size: int = 1) -> Any:
        """The ``sim.model.pools.ModelSpec`` of this model at a page size and parallelism (imports lazily)."""
        from sim.model import pools

        if self.kv_layout != "paged":  # the cross-checks hold it to a DeepSeek V4 model on a ROCm GPU
            return self.unified_spec(page_size, tp_size)
        if self.config is not None:
            from sim.model.modelcfg import model_spec

            return model_spec(self.shape(tp_size, attn_dp_size), page_size)
        if self.pools is not None:
            d = self.model_dump(mode="json", exclude_none=True)
            d["page_size"] = page_size
            for p in d["pools"]:
                p.setdefault("anchor", p["name"])
            return pools.model_from_dict(d)
        return pools.get_model(self.name, page_size=page_size, bytes_per_token=self.generic_bytes_per_token,
                               fp4_indexer=self.fp4_indexer)  # fmt: skip

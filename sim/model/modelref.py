"""A model named any way a user types it, to the pools HiCache registers for it.

``hicache-sim pools`` takes what ``run`` takes: a catalog name (``deepseek-v4-pro``, ``generic``), a bundled
config (``qwen3-14b``), a Hugging Face id whose config aiconfigurator-core ships (``deepseek-ai/DeepSeek-V4-Pro``),
or a config.json path; DeepSeek V4 configs map to the catalog's pools (:mod:`sim.model.modelcfg`). ``platform``
``rocm`` gives V4's pools on ROCm's unified KV layout (:mod:`sim.model.unified_kv`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from sim.base.errors import InputError
from sim.model.pools import CATALOG, ModelSpec, get_model

__all__ = ["PLATFORMS", "resolve_model"]

PLATFORMS = ("cuda", "rocm")


def resolve_model(ref: str, *, page_size: int | None = None, platform: str = "cuda", unified_fp8: bool = False,
                  fp4_indexer: bool = False, tp_size: int = 1) -> ModelSpec:  # fmt: skip
    """The :class:`ModelSpec` of ``ref`` at ``tp_size`` ranks (per-rank bytes for a sharded model)."""
    if platform not in PLATFORMS:
        raise InputError(f"--platform {platform}: expected one of {', '.join(PLATFORMS)}")
    catalog = ref if ref in CATALOG or ref == "generic" else None
    if catalog is None:
        from sim.model.aic import shipped_id
        from sim.model.modelcfg import bundled_configs, derive, is_named, load_config, model_spec

        if not is_named(ref) and not Path(ref).expanduser().exists():
            raise InputError(f"unknown model {ref!r} (known: {', '.join([*CATALOG, 'generic'])}; bundled configs "
                             f"{', '.join(bundled_configs())}; a Hugging Face id aiconfigurator-core ships; a "
                             "config.json or model YAML)")  # fmt: skip
        cfg, name = load_config(ref)
        shape = derive(cfg, tp_size=tp_size, name=name, fp4_indexer=fp4_indexer)
        if shape.catalog is None:
            if fp4_indexer:  # as a scenario's model.fp4_indexer is refused (sim.scenario.schema.checks)
                raise InputError(f"--fp4-indexer: applies to DeepSeek V4's C4 indexer; {ref} has none")
            if platform == "rocm":
                raise InputError(f"--platform rocm: {ref} is not a DeepSeek V4 model; its pool is the same on ROCm")
            spec = model_spec(shape, page_size or 1)
            base = shipped_id(ref) if "/" in ref else None
            if base is not None and base.lower() != ref.lower():
                spec = replace(spec, notes=f"{spec.notes}; the architecture config of {base} (release suffixes dropped)")
            return spec
        catalog = shape.catalog
    if platform == "rocm":
        from sim.model.unified_kv import unified_model

        return unified_model(catalog, page_size or 256, fp8=unified_fp8, fp4_indexer=fp4_indexer)
    if unified_fp8:
        raise InputError("--unified-kv-fp8: the unified KV layout is ROCm's (give --platform rocm)")
    return get_model(catalog, page_size=page_size, fp4_indexer=fp4_indexer)

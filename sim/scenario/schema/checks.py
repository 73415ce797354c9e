"""The rules across sections a whole scenario must keep, each a small named check that raises a field error.

:data:`CROSS_CHECKS` runs them in order once every section has validated (the loader hands them to the
validator, :func:`sim.scenario.load.scenario_from_dict`, then the rules that need the resolved server,
:mod:`sim.scenario.server_checks`); the first that fails is the one reported, so the order is part of the messages
users see.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from sim.model.modelcfg import attention_family, load_config
from sim.scenario.schema.hardware import FP4_INDEXER_GPUS
from sim.scenario.schema.modelspec import build_model_spec
from sim.scenario.schema.section import MAX_HISPARSE_IDS, MAX_WORKLOAD_PAGES, _field_error
from sim.scenario.schema.workload import BenchServingWorkload, MultiTurnWorkload, SyntheticWorkload

if TYPE_CHECKING:
    from sim.scenario.schema.scenario import Scenario


def _page_sizes_agree(sc: Scenario) -> None:
    if sc.model.page_size is not None and sc.model.page_size != sc.hicache.page_size:
        raise _field_error(
            "model.page_size", f"{sc.model.page_size} differs from hicache.page_size {sc.hicache.page_size}"
        )


def _chunk_holds_a_page(sc: Scenario) -> None:
    hc = sc.hicache
    if sc.scheduler.chunked_prefill_size < hc.page_size:
        raise _field_error("scheduler.chunked_prefill_size", f"{sc.scheduler.chunked_prefill_size} is below one "
                           f"page (hicache.page_size {hc.page_size}): SGLang rounds a chunk down to whole pages and "
                           "admits no prompt longer than it (schedule_policy.py:1664-1672)")  # fmt: skip


def _v4_pages_are_256(sc: Scenario) -> None:
    if sc.model.pools is None and sc.model.name.startswith("deepseek-v4") and sc.hicache.page_size != 256:
        raise _field_error("hicache.page_size", "DeepSeek V4 models require 256 (asserted by SGLang)")


def _l3_needs_l2(sc: Scenario) -> None:
    if sc.l3.enabled and not sc.hicache.enabled:
        raise _field_error("l3.enabled", "L3 needs hicache.enabled: true")


def _decode_workload(sc: Scenario) -> None:
    timeline = sc.cluster.role == "decode" or (sc.hisparse.enabled and _is_dsa_model(sc))
    if timeline and sc.workload.kind not in (
            "synthetic", "trace", "bench_serving"):  # fmt: skip
        raise _field_error("workload.kind", "a decode timeline (cluster.role: decode, or HiSparse on) needs a "
                           f"synthetic, trace or bench_serving workload, not {sc.workload.kind}")  # fmt: skip


def _workload_pages_bounded(sc: Scenario) -> None:
    page_size = sc.hicache.page_size
    if isinstance(sc.workload, (MultiTurnWorkload, SyntheticWorkload, BenchServingWorkload)):
        pages = sc.workload.pages(page_size)
        if pages > MAX_WORKLOAD_PAGES:
            raise _field_error("workload", f"{pages:,} page keys of {page_size} tokens, over the limit "
                               f"of {MAX_WORKLOAD_PAGES:,} (fewer or shorter requests)")  # fmt: skip


def _hisparse_fits(sc: Scenario) -> None:
    """HiSparse on a decode instance (a DSA model's colocated instance too), its top-k known and inside the hot
    buffer, its id stream bounded."""
    h = sc.hisparse
    if not h.enabled:
        return
    dsa = _is_dsa_model(sc)
    if sc.cluster.role != "decode" and not dsa:
        raise _field_error("hisparse.enabled", "HiSparse runs only on decode instances (colocated too for DSA "
                           "models: DeepSeek V3.2, GLM-5.x); set cluster.role: decode")  # fmt: skip
    if dsa and h.access.kind == "trace":
        raise _field_error("hisparse.access.kind", "a recorded top-k trace holds DeepSeek V4's C4 rows; a DSA model's "
                           "(raw token positions) is not modelled: use the parametric model")  # fmt: skip
    top_k = sc.hisparse_top_k
    if top_k is None:
        raise _field_error("hisparse.top_k", "required for a model without a catalog index_topk")
    if top_k > h.device_buffer_size:
        raise _field_error("hisparse.top_k", f"{top_k} exceeds hisparse.device_buffer_size {h.device_buffer_size}")
    steps = h.step_windows * h.window_steps if h.step_windows is not None else getattr(
        sc.workload, "output_length", 0)  # fmt: skip
    ids = h.sample_requests * h.access.layers_simulated * steps * top_k
    if ids > MAX_HISPARSE_IDS:
        raise _field_error("hisparse.sample_requests", f"{ids:,} top-k ids to simulate (sample_requests x "
                           "access.layers_simulated x steps x top_k), over the limit of "
                           f"{MAX_HISPARSE_IDS:,}")  # fmt: skip


def _is_dsa_model(sc: Scenario) -> bool:
    """Told by the config's fields: the scenario's model derived when its sections validated."""
    return sc.model.config is not None and attention_family(load_config(sc.model.config)[0]) == "dsa"


def _fp4_indexer_supported(sc: Scenario) -> None:
    """The fp4 indexer needs a C4 indexer pool, and a GPU SGLang runs it on."""
    if not sc.model.fp4_indexer:
        return
    spec = build_model_spec(sc)
    if "c4_indexer" not in {p.name for p in spec.pools}:
        raise _field_error("model.fp4_indexer", f"applies to DeepSeek V4's C4 indexer; {spec.name} has none")
    gpu = sc.hardware.gpu
    if gpu is not None and gpu.upper() not in FP4_INDEXER_GPUS:
        raise _field_error("model.fp4_indexer", f"SGLang refuses it on {gpu}: it needs SM100, SM120 or gfx95 "
                           f"({', '.join(FP4_INDEXER_GPUS)}; arg_groups/serving_hook.py:464-470)")  # fmt: skip


def _speculative_without_mixed_chunk(sc: Scenario) -> None:
    if sc.speculative.enabled and sc.scheduler.enable_mixed_chunk:
        raise _field_error("scheduler.enable_mixed_chunk", "not modelled with speculative decoding: SGLang runs "
                           "a mixed pass's decode rows as plain one-token decodes (speculative_hook.py:1103-1117)")  # fmt: skip


def _two_batch_overlap_runs(sc: Scenario) -> None:
    """Two-batch overlap where SGLang runs it: DP attention without an EP all-to-all backend
    (``arg_groups/validation_hook.py:756-772``; the V4 path needs more than one DP rank,
    ``models/deepseek_v4.py:4276-4283``), DeepSeek-V4 but not V4.1 (``arg_groups/deepseek_v4_hook.py:345-354``),
    no mixed chunk (V4's strategy raises on a MIXED pass, ``batch_overlap/operations_strategy.py:172-183``)."""
    if not sc.scheduler.enable_two_batch_overlap:
        return
    field = "scheduler.enable_two_batch_overlap"
    if sc.hardware.attn_dp_size < 2:
        raise _field_error(field, "needs DP attention (hardware.enable_dp_attention with dp_size > 1): without an EP "
                           "all-to-all backend SGLang refuses it (validation_hook.py:756-772)")  # fmt: skip
    name = build_model_spec(sc).name
    if name == "deepseek-v4.1-flash":
        raise _field_error(field, "SGLang refuses two-batch overlap for DeepSeek-V4.1 (deepseek_v4_hook.py:345-354)")
    if not name.startswith("deepseek-v4"):
        raise _field_error(field, f"modelled for DeepSeek-V4 only, not {name}: other models' overlap strategies run "
                           "on an EP all-to-all backend the simulator does not model")  # fmt: skip
    if sc.scheduler.enable_mixed_chunk:
        raise _field_error(field, "DeepSeek-V4's two-batch overlap has no strategy for a mixed-chunk pass "
                           "(operations_strategy.py:172-183): drop scheduler.enable_mixed_chunk")  # fmt: skip


def _dp_attention_serves(sc: Scenario) -> None:
    if sc.hardware.attn_dp_size > 1 and sc.cluster.role == "decode" and not _is_dsa_model(sc):
        raise _field_error("hardware.enable_dp_attention", "DP attention is modelled on serving instances and DSA "
                           "models' decode instances, not on this PD decode instance (cluster.role: decode)")  # fmt: skip


def _speculative_serves(sc: Scenario) -> None:
    if sc.speculative.enabled and (sc.cluster.role == "decode" or sc.hisparse.enabled):
        raise _field_error("speculative.algorithm", "not modelled on a decode timeline (cluster.role: decode, or "
                           "HiSparse on): its verify passes are not, though HiSparse's spec scratch is sized")  # fmt: skip


def _aiconfigurator_covers(sc: Scenario) -> None:
    if sc.compute.backend == "aiconfigurator":
        from sim.model.aic import coverage_error

        if (err := coverage_error(sc)) is not None:
            raise _field_error(*err)


def _unified_kv_layout(sc: Scenario) -> None:
    """ROCm's unified KV layout: DeepSeek V4 (V4.1 refuses it) on a ROCm GPU; fp8 rows on gfx95 only."""
    layout = sc.model.kv_layout
    if layout == "paged":
        return
    from sim.base.errors import InputError
    from sim.scenario.schema.hardware import HIP_GPUS

    gpu = (sc.hardware.gpu or "").upper()
    if sc.hardware.gpu is not None and gpu not in HIP_GPUS:
        raise _field_error("model.kv_layout", f"{layout} is ROCm's layout (is_hip, unified_kv_gate.py:12-15); "
                           f"{sc.hardware.gpu} is not a ROCm GPU ({', '.join(HIP_GPUS)})")  # fmt: skip
    if layout == "unified_fp8" and sc.hardware.gpu is not None and gpu != "MI355X":
        raise _field_error("model.kv_layout", f"unified_fp8 needs a gfx95 GPU (MI355X); on {sc.hardware.gpu} SGLang "
                           "falls back to bf16 rows (unified_kv_gate.py:31-37): set unified")  # fmt: skip
    try:
        build_model_spec(sc)
    except InputError as exc:
        raise _field_error("model.kv_layout", str(exc)) from None


CROSS_CHECKS: tuple[Callable[[Scenario], None], ...] = (
    _unified_kv_layout, _page_sizes_agree, _chunk_holds_a_page, _v4_pages_are_256, _l3_needs_l2, _decode_workload,
    _workload_pages_bounded, _hisparse_fits, _fp4_indexer_supported, _speculative_without_mixed_chunk,
    _dp_attention_serves, _two_batch_overlap_runs, _speculative_serves, _aiconfigurator_covers,
)  # fmt: skip

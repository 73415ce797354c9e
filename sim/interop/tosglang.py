"""The inverse of ``scenario from-sglang``: the ``sglang.launch_server`` command that runs a scenario's cache
setup, so a plan's recommendation can be pasted into a deployment.

With the user's own launch command, only the flags the recommendation changes are replaced (every other
flag stays as written); without one, the command is composed from the scenario's fields through the same
flag table ``sim.interop.fromsglang`` reads them with. What no flag expresses (a KV size given in GB without a GPU,
say) comes back as a note.
"""

from __future__ import annotations

import shlex
from typing import Any

from sim.interop.fromsglang import _LAUNCH, HF_IDS, _parse, _sglang_flags, _strip_program
from sim.scenario.load import Scenario

__all__ = ["launch_command"]

_MODEL_PATHS = {v: k for k, v in HF_IDS.items()} | {"deepseek-v4-flash": "deepseek-ai/DeepSeek-V4-Flash"}
_FIELDS = ("hicache.hicache_ratio", "hicache.write_policy", "hicache.io_backend", "hicache.mem_layout",
           "hicache.prefetch_policy", "hicache.swa_full_tokens_ratio", "hicache.page_size", "hardware.tp_size",
           "hardware.mem_fraction_static", "hardware.max_total_tokens", "scheduler.chunked_prefill_size",
           "scheduler.max_running_requests", "scheduler.max_prefill_tokens", "scheduler.schedule_policy")  # fmt: skip
ALWAYS = {"hicache.hicache_ratio", "hicache.write_policy"}  # what a plan recommends: always written


def _get(sc: Scenario, path: str) -> Any:
    value: Any = sc
    for part in path.split("."):
        value = getattr(value, part)
    return value


def _default(sc: Scenario, path: str) -> Any:
    """The schema's default for a field (the schema's defaults are SGLang's)."""
    section, name = path.split(".")
    return type(getattr(sc, section)).model_fields[name].default


def _flag_for(path: str) -> str:
    return next(flag for flag, (p, _) in _LAUNCH.items() if p == path)


def cache_flags(sc: Scenario, *, hicache_size_gb: float | None = None) -> list[tuple[str, str | None]]:
    """(flag, value or None for a switch) for the scenario's cache, scheduler and parallel setup."""
    from sim.scenario.load import build_model_spec

    out: list[tuple[str, str | None]] = []
    hc = sc.hicache
    windowed = build_model_spec(sc).has_swa
    if hc.enabled:
        out.append(("--enable-hierarchical-cache", None))
    for path in _FIELDS:
        value = _get(sc, path)
        if value is None or (path.startswith("hicache.") and not hc.enabled and path != "hicache.page_size"
                             and path != "hicache.swa_full_tokens_ratio"):  # fmt: skip
            continue
        if path == "hicache.swa_full_tokens_ratio" and (value == "cap" or not windowed):
            continue  # cap mode: SGLang picks it from --max-running-requests without a ratio
        if path == "hicache.hicache_ratio" and (hicache_size_gb is not None or hc.host_pages is not None):
            continue
        flag = _flag_for(path)
        if path not in ALWAYS and value == _default(sc, path) and not (path == "hicache.page_size" and value != 1):
            continue
        out.append((flag, f"{value:g}" if isinstance(value, float) else str(value)))
    if hc.enabled and hicache_size_gb is not None:
        out.append(("--hicache-size", f"{hicache_size_gb:g}"))
    if sc.scheduler.enable_mixed_chunk:
        out.append(("--enable-mixed-chunk", None))
    if not sc.scheduler.overlap_schedule:
        out.append(("--disable-overlap-schedule", None))
    if sc.l3.enabled:
        out.append(("--hicache-storage-backend", "file"))
    return out


def launch_command(sc: Scenario, base: str | None = None, *, hicache_size_gb: float | None = None
                   ) -> tuple[str, list[str]]:  # fmt: skip
    """(the launch command, notes on what it cannot express). ``base``: the user's own command, whose other
    flags are kept."""
    notes = []
    ours = cache_flags(sc, hicache_size_gb=hicache_size_gb)
    if base is not None:
        prog, argv = _strip_program(shlex.split(base), ("sglang.launch_server", "launch_server"))
        known = _sglang_flags()["launch_server"]
        replaced = {f for f, _ in ours} | {"--enable-hierarchical-cache", "--enable-hicache", "--hicache-ratio",
                                           "--hicache-size", "--hicache-write-policy"}  # fmt: skip
        kept = [text for flag, _, text in _parse(argv, known, "launch_server") if flag not in replaced]
        head = shlex.split(base)[: len(shlex.split(base)) - len(argv)]
        words = head + [w for t in kept for w in shlex.split(t)]
    else:
        ref = sc.model.config or sc.model.name
        words = ["python", "-m", "sglang.launch_server", "--model-path", _MODEL_PATHS.get(ref, ref)]
        if sc.model.kv_layout != "paged":  # ROCm's unified KV layout is chosen by the environment (unified_kv_gate.py)
            words[:0] = ["SGLANG_HACK_FLASHMLA_BACKEND=unified_kv_triton",
                         *(["SGLANG_DSV4_UNIFIED_KV_FP8=1"] if sc.model.kv_layout == "unified_fp8" else [])]  # fmt: skip
        if sc.hardware.gpu is None:
            notes.append(f"hardware.kv_mem_gb {sc.hardware.kv_mem_gb:g} has no launch flag without a GPU: choose "
                         "--mem-fraction-static so the KV pools take that much")  # fmt: skip
    for flag, value in ours:
        words += [flag] if value is None else [flag, value]
    if sc.l3.enabled:
        notes.append("--hicache-storage-backend file stands for the scenario's L3; name your backend")
    if sc.cluster.instances > 1:
        notes.append(f"cluster.instances {sc.cluster.instances}: run that many servers (or --dp-size)")
    return shlex.join(words), notes


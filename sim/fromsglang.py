"""A scenario from the commands a user already runs: ``sglang.launch_server`` and a bench client.

Every flag is accounted for. A flag the simulator models is mapped to its scenario field; any other flag
SGLang 0.5.23 accepts is listed as ignored, with why; a flag SGLang does not know is an error. The list
of SGLang's flags (``sim/data/sglang_flags.json``) is extracted from its source by
``tools/extract_sglang_flags.py``. Like argparse, a unique prefix of a flag names it (``--tp`` is
``--tp-size``). Clients: ``bench_serving`` (each command one step) and ``bench_multiturn.py``.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from sim.errors import InputError

__all__ = ["Conversion", "from_sglang", "to_yaml"]

# Hugging Face model ids whose config ships with the simulator (sim/data/models/).
HF_IDS = {
    "qwen/qwen3-14b": "qwen3-14b",
    "meta-llama/llama-3.1-8b": "llama-3.1-8b",
    "meta-llama/llama-3.1-8b-instruct": "llama-3.1-8b",
    "meta-llama/meta-llama-3.1-8b-instruct": "llama-3.1-8b",
    "deepseek-ai/deepseek-v3": "deepseek-v3",
    "deepseek-ai/deepseek-v3-0324": "deepseek-v3",
    "deepseek-ai/deepseek-r1": "deepseek-v3",
    "deepseek-ai/deepseek-r1-0528": "deepseek-v3",
    "deepseek-ai/deepseek-v4-flash": "deepseek-v4-flash",
}
# Flags that are not SGLang 0.5.23's but appear in published commands the validation set reproduces.
OUT_OF_TREE = {
    "--enable-eic-cache": "EIC L3 patch of the M1 source (SGLang v0.5.19 nightly): HiCache on with an EIC L3 "
    "at the measured EIC rates (l3 defaults), moving whole pages (its page is 9,158,208 B per rank); prefetches "
    "run to completion (its hit run reached 99.1% storage hits with reads queued for seconds, which 0.5.23's "
    "timeout policy would have cut)",
}
BENCH_MULTITURN_FLAGS = {  # benchmark/hicache/bench_multiturn.py (not in the wheel); True: takes a value
    "--num-clients": True, "--max-parallel": True, "--request-length": True, "--output-length": True,
    "--num-rounds": True, "--distribution": True, "--request-rate": True, "--host": True, "--port": True,
    "--model-path": True, "--dataset-path": True, "--log-file": True, "--disable-auto-run": False,
    "--disable-random-sample": False, "--sub-question-input-length": True, "--ready-queue-policy": True,
    "--tag": True, "--seed": True,
}  # fmt: skip


@cache
def _sglang_flags() -> dict[str, dict]:
    return json.loads(resources.files("sim").joinpath("data", "sglang_flags.json").read_text())


@dataclass
class Conversion:
    """The scenario (a YAML-ready dict) and the account of every flag: mapped or ignored (with why)."""

    scenario: dict[str, Any]
    mapped: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)


def _put(d: dict, path: str, value: Any) -> None:
    *parents, last = path.split(".")
    for p in parents:
        d = d.setdefault(p, {})
    d[last] = value


def _parse(argv: list[str], known: dict[str, Any], what: str) -> list[tuple[str, str | None, str]]:
    """(canonical flag, value or None, as written) for each option; unknown or ambiguous flags raise."""
    out, i = [], 0
    while i < len(argv):
        tok = argv[i]
        i += 1
        if not tok.startswith("--"):
            raise InputError(f"{what}: unexpected argument {tok!r} (expected --flag)")
        flag, eq, inline = tok.partition("=")
        if flag not in known:
            matches = [k for k in known if k.startswith(flag)]
            if len(matches) != 1:
                hint = f" (ambiguous: {', '.join(matches[:4])})" if matches else ""
                raise InputError(f"{what}: unknown flag {flag}{hint}")
            flag = matches[0]
        takes = known[flag]
        value = inline if eq else None
        if value is None and takes is True:
            if i >= len(argv):
                raise InputError(f"{what}: {flag} needs a value")
            value = argv[i]
            i += 1
            while i < len(argv) and not argv[i].startswith("--"):  # nargs="+" flags (e.g. --cuda-graph-bs)
                value += " " + argv[i]
                i += 1
        out.append((flag, value, tok if eq or value is None else f"{tok} {value}"))
    return out


def _strip_program(argv: list[str], programs: tuple[str, ...]) -> tuple[str, list[str]]:
    """Drop env assignments, the interpreter and ``-m module`` / script; return (program, flags)."""
    i = 0
    while i < len(argv) and "=" in argv[i] and not argv[i].startswith("-"):
        i += 1
    if i < len(argv) and Path(argv[i]).name.startswith("python"):
        i += 1
    if i < len(argv) and argv[i] == "-m":
        i += 1
    prog = argv[i] if i < len(argv) else ""
    if not any(p in prog for p in programs):
        raise InputError(f"expected a command running {' or '.join(programs)}, got {prog or 'nothing'!r}")
    return prog, argv[i + 1 :]


def _number(kind: Callable, flag: str, value: str) -> Any:
    try:
        return kind(value)
    except ValueError:
        raise InputError(f"{flag}: expected a number, got {value!r}") from None


def _model_ref(path: str, override: str | None) -> tuple[str, str]:
    """(config reference, name) for ``--model-path``."""
    if override:
        return override, Path(path).name or path
    local = Path(path).expanduser()
    if (local / "config.json").exists():
        return str(local / "config.json"), local.name
    bundled = HF_IDS.get(path.lower().rstrip("/"))
    if bundled is None:
        raise InputError(f"--model-path {path}: no local config.json and not a bundled model "
                         f"({', '.join(sorted(set(HF_IDS.values())))}); pass --model-config PATH")  # fmt: skip
    return bundled, Path(path).name


# launch_server flags the simulator models: flag -> (scenario field, value converter)
_LAUNCH = {
    "--tp-size": ("hardware.tp_size", int),
    "--dp-size": ("cluster.instances", int),
    "--page-size": ("hicache.page_size", int),
    "--mem-fraction-static": ("hardware.mem_fraction_static", float),
    "--chunked-prefill-size": ("scheduler.chunked_prefill_size", int),
    "--max-running-requests": ("scheduler.max_running_requests", int),
    "--max-prefill-tokens": ("scheduler.max_prefill_tokens", int),
    "--schedule-policy": ("scheduler.schedule_policy", str),
    "--hicache-ratio": ("hicache.hicache_ratio", float),
    "--hicache-write-policy": ("hicache.write_policy", str),
    "--hicache-io-backend": ("hicache.io_backend", str),
    "--hicache-mem-layout": ("hicache.mem_layout", str),
    "--hicache-storage-prefetch-policy": ("hicache.prefetch_policy", str),
    "--swa-full-tokens-ratio": ("hicache.swa_full_tokens_ratio", float),
    "--kv-cache-dtype": ("model.kv_dtype", str),
    "--hisparse-config": ("hisparse", json.loads),
}
_SWITCHES = {
    "--enable-mixed-chunk": ("scheduler.enable_mixed_chunk", True),
    "--disable-overlap-schedule": ("scheduler.overlap_schedule", False),
    "--enable-hierarchical-cache": ("hicache.enabled", True),
    "--enable-hicache": ("hicache.enabled", True),
    "--enable-hisparse": ("hisparse.enabled", True),
}
_WHY = {
    "--host": "network endpoint", "--port": "network endpoint", "--trust-remote-code": "loading only",
    "--enable-metrics": "reporting only: the simulator always reports its metrics",
    "--enable-cache-report": "reporting only: the simulator always reports cached tokens",
    "--attention-backend": "kernel choice: its speed is in the compute calibration (calibrate compute)",
    "--context-length": "a length limit: the simulator does not truncate prompts",
    "--served-model-name": "naming only", "--log-level": "logging only",
}  # fmt: skip


def _launch(conv: Conversion, argv: list[str], model_config: str | None) -> None:
    sc = conv.scenario
    flags = _parse(argv, {**_sglang_flags()["launch_server"], **dict.fromkeys(OUT_OF_TREE, False)},
                   "launch_server")  # fmt: skip
    hicache_size = None
    for flag, value, text in flags:
        if flag in ("--model-path", "--model"):
            ref, name = _model_ref(value, model_config)
            sc["name"] = sc.get("name") or name.lower()
            _put(sc, "model.name", name)
            _put(sc, "model.config", ref)
            conv.mapped.append(f"{text} -> model.config: {ref}")
        elif flag in _LAUNCH:
            path, kind = _LAUNCH[flag]
            converted = _number(kind, flag, value) if kind in (int, float) else kind(value)
            if flag == "--schedule-policy" and converted not in ("fcfs", "lpm"):
                raise InputError(f"--schedule-policy {value}: not modelled (the simulator has fcfs and lpm)")
            if flag == "--hicache-storage-prefetch-policy" and converted not in ("best_effort", "wait_complete", "timeout"):
                raise InputError(f"{flag} {value}: unknown policy")
            _put(sc, path, converted)
            conv.mapped.append(f"{text} -> {path}: {converted}")
        elif flag in _SWITCHES:
            path, v = _SWITCHES[flag]
            _put(sc, path, v)
            conv.mapped.append(f"{text} -> {path}: {v}")
        elif flag == "--hicache-size":
            hicache_size = _number(float, flag, value)
            conv.mapped.append(f"{text} -> " + ("hicache.host_pages (GB per rank over page bytes)" if hicache_size
                                                else "0: hicache_ratio sizes the host pool"))  # fmt: skip
        elif flag == "--hicache-storage-backend":
            _put(sc, "l3.enabled", True)
            conv.mapped.append(f"{text} -> l3.enabled: true (rates: l3 defaults, the measured EIC figures)")
        elif flag == "--disaggregation-mode":
            if value == "decode":
                _put(sc, "cluster.role", "decode")
                conv.mapped.append(f"{text} -> cluster.role: decode")
            else:
                conv.ignored.append(f"{text}: only a decode instance is modelled separately")
        elif flag in OUT_OF_TREE:
            _put(sc, "hicache.enabled", True)
            _put(sc, "l3.enabled", True)
            _put(sc, "l3.window_pages", "all")
            _put(sc, "hicache.prefetch_policy", "wait_complete")
            conv.mapped.append(f"{text} -> hicache.enabled, l3.enabled: true, l3.window_pages: all, "
                               f"hicache.prefetch_policy: wait_complete ({OUT_OF_TREE[flag]})")
        else:
            conv.ignored.append(f"{text}: {_WHY.get(flag, 'not modelled')}")
    if "model" not in sc:
        raise InputError("launch_server: --model-path is required")
    if hicache_size:
        from sim.schema import Scenario

        probe = Scenario.model_validate({**sc, "name": "probe", "hicache": {**sc.get("hicache", {}), "enabled": False}})
        page_bytes = probe.model.page_bytes(probe.hicache.page_size, probe.hardware.tp_size)
        _put(sc, "hicache.host_pages", int(hicache_size * 1e9 // page_bytes))


def _bench_serving(conv: Conversion, argv: list[str], index: int) -> None:
    sc = conv.scenario
    wl = sc.setdefault("workload", {"kind": "bench_serving", "steps": []})
    if wl.get("kind") != "bench_serving":
        raise InputError("bench_serving cannot follow a bench_multiturn command in one scenario")
    step: dict[str, Any] = {}
    names = {"--num-prompts": ("num_prompts", int), "--random-input-len": ("random_input_len", int),
             "--random-output-len": ("random_output_len", int), "--random-range-ratio": ("random_range_ratio", float),
             "--max-concurrency": ("max_concurrency", int), "--seed": ("seed", int)}  # fmt: skip
    for flag, value, text in _parse(argv, _sglang_flags()["bench_serving"], "bench_serving"):
        if flag in names:
            key, kind = names[flag]
            step[key] = _number(kind, flag, value)
            conv.mapped.append(f"{text} -> workload.steps[{index}].{key}")
        elif flag == "--request-rate":
            rate = _number(float, flag, value)
            step["request_rate"] = None if rate == float("inf") else rate
            conv.mapped.append(f"{text} -> workload.steps[{index}].request_rate: {step['request_rate']}")
        elif flag == "--flush-cache":
            step["flush_cache"] = True
            conv.mapped.append(f"{text} -> workload.steps[{index}].flush_cache: true")
        elif flag == "--dataset-name":
            if value not in ("random-ids", "random"):
                raise InputError(f"bench_serving --dataset-name {value}: not modelled (random-ids or random)")
            wl["dataset_name"] = value
            conv.mapped.append(f"{text} -> workload.dataset_name")
        else:
            conv.ignored.append(f"{text}: not modelled")
    step["label"] = f"step {index}" + (f" conc {step['max_concurrency']}" if "max_concurrency" in step else "")
    wl["steps"].append(step)


def _bench_multiturn(conv: Conversion, argv: list[str]) -> None:
    sc = conv.scenario
    if "workload" in sc:
        raise InputError("bench_multiturn: one client command per scenario")
    wl: dict[str, Any] = {"kind": "multi_turn"}
    names = {"--num-clients": int, "--max-parallel": int, "--request-length": int, "--output-length": int,
             "--num-rounds": int, "--request-rate": float, "--sub-question-input-length": int,
             "--distribution": str, "--ready-queue-policy": str}  # fmt: skip
    auto_run = True
    wl["request_rate"] = 1.0  # the client's default rate
    for flag, value, text in _parse(argv, BENCH_MULTITURN_FLAGS, "bench_multiturn"):
        if flag in names:
            key = flag[2:].replace("-", "_")
            kind = names[flag]
            wl[key] = _number(kind, flag, value) if kind is not str else value
            conv.mapped.append(f"{text} -> workload.{key}")
        elif flag == "--disable-random-sample":
            wl["disable_random_sample"] = True
            conv.mapped.append(f"{text} -> workload.disable_random_sample")
        elif flag == "--disable-auto-run":
            auto_run = False
            conv.mapped.append(f"{text} -> one request rate (no sweep)")
        elif flag == "--seed":
            sc["seed"] = _number(int, flag, value)
            conv.mapped.append(f"{text} -> seed")
        else:
            conv.ignored.append(f"{text}: not modelled")
    if auto_run:
        raise InputError("bench_multiturn without --disable-auto-run sweeps 13 request rates: add it, and sweep "
                         "with `hicache-sim sweep --grid workload.request_rate=16,14,...` instead")  # fmt: skip
    sc["workload"] = wl


def from_sglang(launch: str, benches: list[str] = (), *, gpu: str, name: str | None = None,
                model_config: str | None = None, host_mem_gb: float | None = None,
                sglang_version: str = "0.5.23") -> Conversion:  # fmt: skip
    """Convert a launch_server command (and bench client commands, in order) into a scenario.
    ``sglang_version``: the server's, whose default rules fill the memory fraction and chunk size it left out."""
    from sim.hardware import SGLANG_DEFAULTS

    if sglang_version not in SGLANG_DEFAULTS:
        raise InputError(f"--sglang-version {sglang_version}: known default rules are {', '.join(SGLANG_DEFAULTS)}")
    conv = Conversion({"name": name} if name else {}, commands=[launch, *benches])
    _, argv = _strip_program(shlex.split(launch), ("sglang.launch_server", "launch_server"))
    _launch(conv, argv, model_config)
    hw = conv.scenario.setdefault("hardware", {})
    hw["gpu"] = gpu
    if sglang_version != "0.5.23":
        hw["sglang_defaults"] = sglang_version
        conv.mapped.append(f"--sglang-version {sglang_version} -> hardware.sglang_defaults: {sglang_version} "
                           "(its default mem_fraction_static and chunked_prefill_size)")  # fmt: skip
    if host_mem_gb is not None:
        hw["host_mem_gb"] = host_mem_gb
    model = conv.scenario["model"]
    from sim.modelcfg import derive, load_config

    shape = derive(load_config(model["config"])[0], tp_size=hw.get("tp_size", 1), kv_dtype=model.get("kv_dtype", "auto"))
    hc = conv.scenario.setdefault("hicache", {})
    if shape.catalog is not None:
        hc.setdefault("page_size", 256)  # asserted by SGLang for DeepSeek V4
        if "max_running_requests" in conv.scenario.get("scheduler", {}) and "swa_full_tokens_ratio" not in hc:
            hc["swa_full_tokens_ratio"] = "cap"  # pool_configurator.py:1328-1351
            conv.mapped.append("--max-running-requests without --swa-full-tokens-ratio -> "
                               "hicache.swa_full_tokens_ratio: cap (SGLang's cap mode for DeepSeek V4)")  # fmt: skip
    else:
        hc.setdefault("page_size", 1)  # SGLang's default --page-size
    hc.setdefault("enabled", False)  # no --enable-hierarchical-cache: GPU only
    for i, bench in enumerate(benches):
        prog, argv = _strip_program(shlex.split(bench), ("bench_serving", "benchmark.serving", "bench_multiturn"))
        if "bench_multiturn" in prog:
            _bench_multiturn(conv, argv)
        else:
            _bench_serving(conv, argv, i)
    conv.scenario["name"] = conv.scenario["name"].replace("/", "_")
    order = ["name", "description", "seed", "model", "hardware", "hicache", "l3", "scheduler", "cluster", "hisparse",
             "workload"]  # fmt: skip
    conv.scenario = {k: conv.scenario[k] for k in order if k in conv.scenario}
    return conv


def to_yaml(conv: Conversion) -> str:
    """The scenario YAML, headed by the commands and the account of every flag."""
    head = ["# Generated by `hicache-sim scenario from-sglang` from:"]
    head += [f"#   {c}" for c in conv.commands]
    head += ["# Mapped:"] + [f"#   {m}" for m in conv.mapped]
    head += ["# Ignored (not modelled):"] + ([f"#   {m}" for m in conv.ignored] or ["#   (none)"])
    body = yaml.safe_dump(conv.scenario, sort_keys=False, default_flow_style=False)
    return "\n".join(head) + "\n" + body

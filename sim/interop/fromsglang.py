"""A scenario from the commands a user already runs: ``sglang.launch_server`` and a bench client.

Every flag is accounted for. A flag the simulator models is mapped to its scenario field; any other flag
SGLang 0.5.23 accepts is listed as ignored, with why; a flag SGLang does not know is an error. The list
of SGLang's flags (``sim/data/sglang_flags.json``) is extracted from its source by
``tools/extract_sglang_flags.py``. Like argparse, a unique prefix of a flag names it (``--tp`` is
``--tp-size``). Clients: ``bench_serving`` (each command one step), ``bench_multiturn.py``, and ``aiperf
profile`` replaying Weka/AgentX trajectories in lanes (``workload.kind: lanes``, as InferenceX's AgentX runs it).

Commands are taken as users type them: ``ENV=value`` assignments, ``env``, ``numactl``/``taskset``/``nohup``
prefixes, ``python3 -u -m sglang.launch_server`` or ``sglang serve MODEL``. An environment variable that changes
what the simulator models is mapped; every other one is listed as ignored, with why. SGLang 0.5.2's spellings
of flags that 0.5.23 renamed (``--cuda-graph-max-bs``) are accepted as their 0.5.23 flag; the 0.5.2 flags
0.5.23 dropped are listed as ignored.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from sim.base.errors import InputError
from sim.base.inputs import MAX_REQUEST_TOKENS, num_text, number_problem, read_number
from sim.interop.conversion import Conversion, joined, set_path, shell_words
from sim.interop.fromrouter import map_router
from sim.interop.hisparselaunch import NSA_SPELLINGS, dsa_launch, hisparse_launch
from sim.model.aic import model_config_path

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
# benchmark/hicache/bench_multiturn.py (not in the wheel; sgl-project/sglang main, read with its option list from
# the 0.5.2 era to now); True: takes a value.
BENCH_MULTITURN_FLAGS = {
    "--num-clients": True, "--max-parallel": True, "--request-length": True, "--output-length": True,
    "--num-rounds": True, "--distribution": True, "--request-rate": True, "--host": True, "--port": True,
    "--model-path": True, "--dataset-path": True, "--log-file": True, "--disable-auto-run": False,
    "--disable-random-sample": False, "--sub-question-input-length": True, "--ready-queue-policy": True,
    "--tag": True, "--seed": True, "--enable-round-barrier": False, "--min-rounds": True, "--max-rounds": True,
    "--range-ratio": True, "--lora-path": True, "--api-format": True, "--duration": True,
    "--min-session-rounds": True, "--max-session-rounds": True,
}  # fmt: skip
# The upstream client, once a round behind the barrier has finished, sends a heartbeat and sleeps 10 s before
# releasing the next round (bench_multiturn.py, response_handler).
ROUND_BARRIER_PAUSE_S = 10.0
# Tokens a second SGLang's tokenizer manager encodes a text prompt at, by the kind of text the client sends:
# bench_serving's random-ids text (consecutive vocab ids decoded) and ShareGPT-like prose. Measured with
# bench/tokenizer.py (a stand-in byte-level BPE, one thread, CPU time, 3,500-128,000-token prompts: 0.23-0.25
# M tok/s for random-ids text, 0.38-0.57 M tok/s for prose, on this project's AMD EPYC).
TOKENIZER_TOKENS_PER_S = {"random-ids": 2.4e5, "prose": 4.0e5}
# SGLang 0.5.2's spellings of flags 0.5.23 renamed, as the 0.5.23 flag (and the value it then takes, if any).
OLD_SPELLINGS = {
    "--cuda-graph-max-bs": ("--cuda-graph-max-bs-decode", None),
    "--cuda-graph-bs": ("--cuda-graph-bs-decode", None),
    "--enable-ep-moe": ("--ep-size", "tp"),  # "(Deprecated) ... The ep size is equal to the tp size."
    "--enable-deepep-moe": ("--moe-a2a-backend", "deepep"),
}
_PLACEMENT = "CPU and memory placement of the process: no effect on what the simulator models"
_RUNNER = "how the command is run (detached, timed, as another user): no effect on what the simulator models"
PREFIX_PROGRAMS = {  # a command's wrappers: (options that take a value as a separate token, why it is ignored)
    "numactl": ({"-N", "-m", "-C", "-p", "-i", "-w", "--cpunodebind", "--membind", "--physcpubind", "--preferred",
                 "--interleave", "--weighted-interleave", "--preferred-many"}, _PLACEMENT),
    "taskset": (set(), _PLACEMENT), "nohup": (set(), _RUNNER), "time": (set(), _RUNNER),
    "sudo": ({"-u", "--user", "-g", "--group", "-D", "--chdir"}, _RUNNER),
    "env": ({"-u", "--unset", "-C", "--chdir"}, "runs the command with the assignments that follow (each listed)"),
}  # fmt: skip
BENCH_MULTITURN_WHY = {
    "--host": "network endpoint", "--port": "network endpoint", "--log-file": "reporting only", "--tag": "reporting only",
    "--model-path": "the client's tokenizer: the model is the launch command's",
    "--dataset-path": "where ShareGPT prompts are drawn from: prompts are distinct either way, so no effect on the cache",
    "--lora-path": "a LoRA adapter per request: not modelled",
    "--min-session-rounds": "used only in the long-run mode (--duration), not modelled",
    "--max-session-rounds": "used only in the long-run mode (--duration), not modelled",
}  # fmt: skip
BENCH_SERVING_WHY = {
    "--backend": "the client's request format", "--host": "network endpoint", "--port": "network endpoint",
    "--base-url": "network endpoint", "--model": "the model is the launch command's",
    "--tokenizer": "the client's tokenizer: the model is the launch command's",
    "--output-file": "reporting only", "--output-details": "reporting only", "--disable-tqdm": "reporting only",
    "--dataset-path": "where prompts are drawn from: random-ids prompts are distinct either way",
    "--disable-stream": "without streaming the client's TTFT is the whole request: compare E2E instead",
    "--disable-ignore-eos": "outputs may stop early at EOS: the simulator generates every requested token",
    "--warmup-requests": "warm-up requests, not in the client's report: not simulated",
    "--extra-request-body": "extra request fields: not read (sampling options in it, such as max_new_tokens, would "
    "change the outputs the simulator generates)",
    "--apply-chat-template": "wraps each prompt in the chat template: a few more prompt tokens, not counted",
    "--prompt-suffix": "a suffix on every prompt: a few more prompt tokens, not counted",
    "--return-logprob": "logprobs in the response: not modelled", "--top-logprobs-num": "logprobs: not modelled",
    "--token-ids-logprob": "logprobs: not modelled", "--logprob-start-len": "logprobs: not modelled",
    "--return-routed-experts": "routed experts in the response: not modelled",
    "--temperature": "sampling: output lengths are fixed (ignore_eos)", "--top-p": "sampling: output lengths are fixed",
    "--lora-name": "a LoRA adapter per request: not modelled", "--lora-request-distribution": "LoRA: not modelled",
    "--lora-zipf-alpha": "LoRA: not modelled", "--cache-report": "reporting only: cached tokens are always reported",
    "--goodput": "reporting only", "--plot-throughput": "reporting only", "--print-requests": "reporting only",
    "--tag": "reporting only", "--header": "HTTP headers", "--served-model-name": "naming only",
    "--pd-separated": "a PD-disaggregated server: only the decode role is modelled (cluster.role)",
    "--fake-prefill": "skips the prefill on the server: not modelled",
    "--flush-cache-timeout": "how long the client waits for /flush_cache: the simulated flush waits until idle",
    "--ready-check-timeout-sec": "the client's wait for the server to come up",
    "--rust-client": "the client's implementation", "--rust-worker-threads": "the client's implementation",
    "--use-trace-timestamps": "trace datasets: not this client's random-ids steps (use a trace workload)",
}  # fmt: skip
OTHER_DATASET_OPTIONS = ("--dataset-offset", "--sharegpt-", "--mooncake-", "--agentic-", "--speed-bench-", "--image-",
                         "--random-image-", "--gsp-")  # fmt: skip


def _bench_serving_why(flag: str) -> str:
    if flag in BENCH_SERVING_WHY:
        return BENCH_SERVING_WHY[flag]
    if flag.startswith(OTHER_DATASET_OPTIONS):
        return "an option of another dataset than random-ids / random: no effect on these prompts"
    if flag.startswith("--profile"):
        return "profiling the server: no effect on what is measured here"
    return "a client option with no effect on the server"


# Environment variables that change what the simulator models: name -> (boolean scenario field, what it does).
ENV_MAPPED = {
    "SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP": (
        "scheduler.disable_consecutive_prefill_overlap", "no overlap between consecutive prefill passes "
        "(managers/scheduler.py:2136-2156)"),
}
ENV_WHY = {
    "SGLANG_ENABLE_UNIFIED_RADIX_TREE": "an older build's opt-in to the unified radix tree, which 0.5.23 builds for "
    "every model (mem_cache/registry.py:146) and the simulator models; 0.5.23 does not read it",
    "SGLANG_ENABLE_PREFILL_WAR_READ_DONE": "the prefill forward's early WAR fence (default on in 0.5.23): with "
    "HiCache on the fence is the whole forward either way, and without it no copy waits on it (the late first "
    "tokens are modelled from HiCache and the overlap scheduler)",
    "SGLANG_RETRACT_DECODE_STEPS": "retraction's decode-step reserve: the simulator keeps 0.5.23's default (20)",
}


# aiperf profile's options in InferenceX's AgentX commands: flag -> (takes a value, what it becomes). A mapped
# flag names its workload field (or "seed"); anything else says why it is not modelled.
AIPERF_FLAGS = {
    "--concurrency": (True, "workload.lanes"),
    "--benchmark-duration": (True, "workload.benchmark_duration_s"),
    "--trajectory-start-min-ratio": (True, "workload.trajectory_start_min_ratio"),
    "--trajectory-start-max-ratio": (True, "workload.trajectory_start_max_ratio"),
    "--warmup-requests-per-lane": (True, "workload.warmup_requests_per_lane"),
    "--trace-idle-gap-cap-seconds": (True, "workload.idle_gap_cap_s"),
    "--num-dataset-entries": (True, "workload.num_dataset_entries"),
    "--input-file": (True, "workload.path"),
    "--random-seed": (True, "seed"),
    "--custom-dataset-type": (True, "the trajectory format: weka_trace is workload.format: weka"),
    "--public-dataset": (True, "the corpus: its local copy (--input-file), else generated sessions like it"),
    "--use-end-to-start-delays": (False, "always: a call waits its end-to-start gap"),
    "--cache-bust": (True, "always first_turn_prefix: each replayed session has cache keys of its own"),
    "--use-server-token-count": (False, "always: the simulator's token counts are the server's"),
    "--streaming": (False, "always: TTFT and ITL are measured per token"),
    "--extra-inputs": (True, "request options (ignore_eos: outputs are the recorded lengths anyway)"),
    "--system-idle-gap-cap-seconds": (True, "not modelled: it only shortens time when every lane is idle"),
    "--warmup-grace-period": (True, "not the agentic warm-up's without --scenario (a --warmup-duration phase's)"),
    "--agentic-warmup-grace-period": (True, "workload.warmup_grace_period_s"),
    "--agentic-cache-warmup-duration": (True, "not modelled: no accelerated cache-pressure warm-up"),
    "--burst-phase-starts": (False, "always: every lane's warm-up calls go out at time 0"),
    "--benchmark-grace-period": (True, "workload.benchmark_grace_period_s"),
    "--max-context-length": (True, "not modelled: no trajectory is filtered by its peak context"),
    "--allow-dataset-wrap": (False, "always: lanes replay the dataset again and again"),
    "--failed-request-threshold": (True, "not modelled: simulated requests do not fail"),
    "--scenario": (True, "the named aiperf scenario: its locks are these flags"),
    "--unsafe-override": (False, "aiperf's scenario lock only"),
    **dict.fromkeys(("--url", "--endpoint", "--endpoint-type", "--model", "--tokenizer", "--server-metrics"),
                    (True, "endpoint and naming only")),
    **dict.fromkeys(("--stats-interval", "--slice-duration", "--output-artifact-dir", "--artifact-dir", "--ui"),
                    (True, "reporting only")),
    **dict.fromkeys(("--tokenizer-trust-remote-code", "--apply-chat-template", "--no-gpu-telemetry"),
                    (False, "tokenizing and reporting only")),
}  # fmt: skip
AIPERF_NUMBERS = {"workload.lanes": int, "workload.benchmark_duration_s": float, "workload.warmup_requests_per_lane": int,
                  "workload.trajectory_start_min_ratio": float, "workload.trajectory_start_max_ratio": float,
                  "workload.idle_gap_cap_s": float, "workload.num_dataset_entries": int, "seed": int,
                  "workload.benchmark_grace_period_s": float}  # fmt: skip


@cache
def _sglang_flags() -> dict[str, dict]:
    return json.loads(resources.files("sim").joinpath("data", "sglang_flags.json").read_text())


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
                hint = f" (ambiguous: {', '.join(matches[:4])})" if matches else _owner(flag, what)
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


def _owner(flag: str, what: str) -> str:
    """Where a flag ``what`` does not know belongs: another client's (or the server's) flag, pasted into the
    wrong command, is named as such."""
    known = _sglang_flags()
    tables = {"launch_server": known["launch_server"], "bench_serving": known["bench_serving"],
              "bench_multiturn": BENCH_MULTITURN_FLAGS, "aiperf": AIPERF_FLAGS}  # fmt: skip
    owners = [name for name, table in tables.items() if name != what and flag in table]
    return f" ({flag} is {' and '.join(owners)}'s, not {what}'s)" if owners else ""


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
    if not any(_runs(prog, p) for p in programs):
        raise InputError(f"expected a command running {' or '.join(programs)}, got {prog or 'nothing'!r}")
    return prog, argv[i + 1 :]


def _runs(prog: str, program: str) -> bool:
    """Whether ``prog`` (a module run with ``-m``, a script or an executable) is ``program``: the whole module
    or a dotted tail of it, or the file's name with or without its suffix; a misspelt module is none."""
    path = Path(prog)
    return (prog == program or prog.endswith(f".{program}") or path.name == program
            or (path.suffix == ".py" and path.stem == program))  # fmt: skip


def _truthy(value: str) -> bool:
    return value.strip().lower() in ("1", "true", "yes", "on")


def _env(conv: Conversion, name: str, value: str) -> None:
    text = f"{name}={value}"
    if name in ENV_MAPPED:
        path, why = ENV_MAPPED[name]
        set_path(conv.scenario, path, _truthy(value))
        conv.mapped.append(f"{text} -> {path}: {_truthy(value)} ({why})")
    elif name == "SGLANG_SIMULATE_ACC_LEN":
        _forced_accept(conv, name, value)
    elif name in ("SGLANG_HACK_FLASHMLA_BACKEND", "SGLANG_DSV4_UNIFIED_KV_FP8"):
        from sim.interop.fromlog import kv_layout_env

        kv_layout_env(conv, name, value, _truthy(value))
    elif name in ENV_WHY:
        conv.ignored.append(f"{text}: {ENV_WHY[name]}")
    elif name in _sglang_flags()["environ"]:
        conv.ignored.append(f"{text}: an SGLang setting the simulator does not model (its default is assumed)")
    elif name.startswith("SGLANG_"):
        conv.ignored.append(f"{text}: not a variable SGLang 0.5.23 reads (environ.py)")
    else:
        conv.ignored.append(f"{text}: process environment (devices, libraries, logging): not modelled")


def _forced_accept(conv: Conversion, name: str, value: str) -> None:
    """``SGLANG_SIMULATE_ACC_LEN`` (benchmark launchers set it): above 0, every verify pass accepts that many tokens
    in expectation instead of what the draft earns (``speculative/spec_utils.py:276, 489-519``,
    ``eagle_utils.py:830-840``, at most the ``num_steps + 1`` tokens of the draft chain, ``eagle_info.py:52-57``); at
    or below 0 it is off (the default, ``environ.py:527``)."""
    try:
        length = read_number(value)
    except ValueError as exc:
        raise InputError(f"{name}: {exc}") from None
    if length > 0:
        conv.forced_accept = (length, f"{name}={value}")
    else:
        conv.ignored.append(f"{name}={value}: off (at or below 0), SGLang's default")


def _command(conv: Conversion, command: str, programs: tuple[str, ...]) -> tuple[str, list[str]]:
    """(program, flags) of ``command`` as typed: its environment assignments and wrappers are accounted for
    in ``conv``; ``sglang serve [MODEL]`` is ``launch_server [--model-path MODEL]``."""
    argv = shell_words(command)
    i = 0
    while i < len(argv):
        tok = argv[i]
        if "=" in tok and not tok.startswith("-") and tok.split("=")[0].isidentifier():
            name, _, value = tok.partition("=")
            _env(conv, name, value)
            i += 1
        elif Path(tok).name in PREFIX_PROGRAMS:
            (takes, why), start = PREFIX_PROGRAMS[Path(tok).name], i
            i += 1
            if Path(tok).name == "taskset":  # taskset [-a] [-c] MASK-or-LIST COMMAND
                while i < len(argv) and argv[i].startswith("-"):
                    i += 1
                i += 1
            while i < len(argv) and argv[i].startswith("-"):
                i += 2 if argv[i] in takes else 1
            conv.ignored.append(f"{' '.join(argv[start:i])}: {why}")
        else:
            break
    argv = argv[i:]
    if argv and Path(argv[0]).name == "sglang" and argv[1:2] == ["serve"]:
        rest = argv[2:]
        if rest and not rest[0].startswith("-"):
            rest = ["--model-path", *rest]  # sglang serve <model> (cli/serve.py:62-66)
        out = []
        while rest:
            tok = rest.pop(0)
            if tok == "--model-type" or tok.startswith("--model-type="):  # the serve backend (cli/serve.py:31-59)
                value = tok.partition("=")[2] or (rest.pop(0) if rest else "")
                conv.ignored.append(f"--model-type {value}: sglang serve's backend selector (a language model here)")
            else:
                out.append(tok)
        argv = ["python", "-m", "sglang.launch_server", *out]
    elif argv and Path(argv[0]).name.startswith("python"):  # interpreter options before -m or the script
        j = 1
        while j < len(argv) and argv[j].startswith("-") and argv[j] != "-m":
            j += 2 if argv[j] in ("-X", "-W") else 1
        argv = [argv[0], *argv[j:]]
    return _strip_program(argv, programs)


def _number(kind: Callable, flag: str, value: str, *, infinite: bool = False) -> Any:
    """A flag's value converted as the flag's kind; what cannot be is the flag's error, named by the flag.
    ``infinite``: the flag gives ``inf`` a meaning of its own (bench_serving's request rate: all at once;
    aiperf's grace period: wait for every response)."""
    try:
        converted = kind(value)
    except ValueError as exc:
        what = "a number" if kind in (int, float) else f"a value of its kind ({' '.join(str(exc).split())[:80]})"
        raise InputError(f"{flag}: expected {what}, got {value[:80]!r}") from None
    problem = number_problem(converted) if kind in (int, float) and not (infinite and converted == math.inf) else None
    if problem:  # the bound every number of every input has, whether or not the flag maps to one field
        raise InputError(f"{flag}: {problem}")
    return converted


def _check_mapped(flag: str, value: Any, path: str) -> None:
    """A flag mapped to a scenario field is held to that field's bounds, and named by the flag."""
    from pydantic import BaseModel

    from sim.scenario.load import Scenario, field_problem

    section, _, key = path.partition(".")
    cls = Scenario.model_fields[section].annotation if section in Scenario.model_fields else None
    if isinstance(cls, type) and issubclass(cls, BaseModel) and key in cls.model_fields:
        problem = field_problem(cls, key, value)
        if problem is not None:
            raise InputError(f"{flag} {value}: {problem} (as {path})")


def _model_ref(path: str, override: str | None) -> tuple[str, str]:
    """(config reference, name) for ``--model-path``."""
    if override:
        return override, Path(path).name or path
    local = Path(path).expanduser()
    if (local / "config.json").exists():
        return str(local / "config.json"), local.name
    bundled = HF_IDS.get(path.lower().rstrip("/"))
    if bundled is None and model_config_path(path.rstrip("/")) is not None:
        from sim.model.aic import shipped_id

        bundled = shipped_id(path)  # a config aiconfigurator-core ships, suffixes dropped
    if bundled is None:
        raise InputError(f"--model-path {path}: no local config.json and not a bundled model "
                         f"({', '.join(sorted(set(HF_IDS.values())))}) or one aiconfigurator-core ships; "
                         "pass --model-config PATH")  # fmt: skip
    return bundled, Path(path).name


# launch_server flags the simulator models: flag -> (scenario field, value converter)
_LAUNCH = {
    "--tp-size": ("hardware.tp_size", int),
    "--attn-dp-size": ("hardware.dp_size", int),
    "--ep-size": ("hardware.ep_size", int),
    "--expert-parallel-size": ("hardware.ep_size", int),
    "--moe-a2a-backend": ("hardware.moe_a2a_backend", str),
    "--speculative-num-steps": ("speculative.num_steps", int),
    "--speculative-eagle-topk": ("speculative.eagle_topk", int),
    "--speculative-num-draft-tokens": ("speculative.num_draft_tokens", int),
    "--page-size": ("hicache.page_size", int),
    "--mem-fraction-static": ("hardware.mem_fraction_static", float),
    "--chunked-prefill-size": ("scheduler.chunked_prefill_size", int),
    "--max-total-tokens": ("hardware.max_total_tokens", int),
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
    "--tokenizer-worker-num": ("scheduler.tokenizer_workers", int),
    "--prefill-decode-interval": ("scheduler.prefill_decode_interval", int),
    "--prefill-decode-interval-min-bs": ("scheduler.prefill_decode_interval_min_bs", int),
    "--radix-eviction-policy": ("hicache.radix_eviction_policy", str),
    "--radix-eviction-policy-config": ("hicache.radix_eviction_policy_config", json.loads),
    "--prefill-delayer-max-delay-passes": ("scheduler.prefill_delayer_max_delay_passes", int),
    "--prefill-delayer-token-usage-low-watermark": ("scheduler.prefill_delayer_token_usage_low_watermark", float),
    "--tbo-token-distribution-threshold": ("scheduler.tbo_token_distribution_threshold", float),
}
_SWITCHES = {
    "--enable-mixed-chunk": ("scheduler.enable_mixed_chunk", True),
    "--enable-prefill-delayer": ("scheduler.enable_prefill_delayer", True),
    "--enable-two-batch-overlap": ("scheduler.enable_two_batch_overlap", True),
    "--disable-overlap-schedule": ("scheduler.overlap_schedule", False),
    "--enable-hierarchical-cache": ("hicache.enabled", True),
    "--enable-hicache": ("hicache.enabled", True),
    "--enable-hisparse": ("hisparse.enabled", True),
    "--enable-dp-attention": ("hardware.enable_dp_attention", True),
    "--enable-deepseek-v4-fp4-indexer": ("model.fp4_indexer", True),
}
GROUP_EXEC_WHY = ("a kernel or execution-backend choice (attention, MoE, GEMM, CUDA graphs, compile): it changes pass "
                  "time only, which the compute model or its calibration prices")  # fmt: skip
# Speculative algorithms modelled (sim.model.speculative); NEXTN is SGLang's alias of EAGLE (spec_registry.py:183).
SPEC_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN")
# --quantization values that set the routed experts' storage (model.expert_dtype); the other weights keep the
# checkpoint's dtype in the model.
QUANT_EXPERTS = {"mxfp4": "fp4", "modelopt_fp4": "fp4", "w4afp8": "fp4", "fp8": "fp8"}
_WHY = {
    "--host": "network endpoint", "--port": "network endpoint", "--trust-remote-code": "loading only",
    "--enable-metrics": "reporting only: the simulator always reports its metrics",
    "--enable-cache-report": "reporting only: the simulator always reports cached tokens",
    "--attention-backend": "kernel choice: its speed is in the compute calibration (calibrate compute)",
    "--context-length": "a length limit: the simulator does not truncate prompts",
    "--served-model-name": "naming only", "--log-level": "logging only",
    "--enable-single-batch-overlap": "overlaps the MoE combine with the down GEMM inside one batch: pass time only, "
    "which the step-time backends price whole (its gain belongs in a calibration of that setup)",
    "--stream-interval": "the first token is streamed at once whatever the interval "
    "(scheduler_components/output_streamer.py:455-468); later tokens are only sent in fewer chunks",
    "--skip-tokenizer-init": "prompts arrive as token ids: nothing tokenized (scheduler.tokenizer_tokens_per_s unset)",
    "--enable-dynamic-batch-tokenizer": "encodes concurrent prompts in one batched call: modelled as one "
    "tokenizer process encoding them in turn, an upper bound on the wait",
    "--detokenizer-worker-num": "detokenizing one token per stream chunk: microseconds, not modelled",
    "--scheduler-recv-interval": "polls for new requests every N scheduler iterations (default 1); not modelled",
    "--disable-radix-cache": "NOT MODELLED, and it matters: SGLang then reuses no prefix, while the simulator "
    "always matches prefixes, so every simulated cache hit is a miss on that server",
    "--disable-cuda-graph": GROUP_EXEC_WHY, "--enable-flashinfer-allreduce-fusion": GROUP_EXEC_WHY,
    "--sampling-backend": GROUP_EXEC_WHY, "--monokernel-backend": GROUP_EXEC_WHY,
    "--reasoning-parser": "parses the output text into reasoning and answer: no effect on passes or cache",
    "--tool-call-parser": "parses tool calls out of the output text: no effect on passes or cache",
    "--kv-canary-real-data": "a KV-cache debugging check: not modelled",
    "--moe-runner-backend": "MoE kernel choice: its speed is the step-time backend's",
    "--deepep-mode": "DeepEP dispatch mode (normal / low_latency): kernel choice, the step-time backend's",
    "--enable-dp-lm-head": "the LM head vocab-parallel inside each attention TP group: a small share of the weights, "
    "not moved between the attention and MoE groups in the memory model",
    "--enable-dp-attention-local-control-broadcast": "how control messages reach the DP ranks: no effect on passes",
    "--speculative-draft-model-path": "the draft's weights: DeepSeek's NEXTN head is in the target checkpoint "
    "(speculative_hook.py:1120-1155); the draft is speculative.draft_layers of the target's layers",
    "--speculative-moe-runner-backend": "the draft's MoE kernel: its speed is the step-time backend's",
    "--speculative-moe-a2a-backend": "the draft's MoE all-to-all kernel: its speed is the step-time backend's",
    "--speculative-attention-mode": "which attention path the draft runs: its speed is the step-time backend's",
}  # fmt: skip
for _flag in ("--prefill-delayer-forward-passes-buckets", "--prefill-delayer-wait-seconds-buckets"):
    _WHY[_flag] = "histogram buckets of the prefill delayer's metrics: reporting only"
for _flag in ("--prefill-delayer-queue-min-ratio", "--prefill-delayer-max-delay-ms"):
    _WHY[_flag] = "the prefill delayer's opt-in queue-length trigger: not modelled (its slot and DP rules are)"
# Why a flag of each ServerArgs group (arg_groups/fields/<group>.py) that is not mapped above is left out.
GROUP_WHY = {
    "device": "device and process placement: no effect on what the simulator models",
    "disagg": "a PD-disaggregation transport setting: only the decode role is modelled (cluster.role)",
    "exec": GROUP_EXEC_WHY,
    "lora": "LoRA adapters: not modelled",
    "memory": "a memory or cache setting the simulator does not model (SGLang's default is assumed)",
    "mm": "multimodal inputs: the workloads are text",
    "model": "model loading, format or quantization: the model is the --model-path config",
    "observability": "logging, metrics or tracing: reporting only",
    "parallel": "a parallelism setting the simulator does not model",
    "schedule": "a scheduling setting the simulator does not model (SGLang's default is assumed)",
    "serving": "an API-server option: no effect on passes, cache or timing",
    "spec": "a speculative-decoding setting the simulator does not model",
}


def _launch(conv: Conversion, argv: list[str], model_config: str | None) -> list[tuple[str, str | None, str]]:
    """launch_server's flags, each mapped onto the scenario or listed as ignored with why; returned as read.
    ``--dp-size`` and ``--hicache-size`` are resolved once every flag is read (they depend on others), and what
    SGLang refuses with ``--enable-hisparse`` is refused then (:mod:`sim.interop.hisparselaunch`)."""
    sc = conv.scenario
    known = _sglang_flags()
    older = {k: v for flags in known["older_launch_server"].values() for k, v in flags.items()}
    flags = _parse(argv, {**known["launch_server"], **older, **dict.fromkeys(OUT_OF_TREE, False),
                          **dict.fromkeys(NSA_SPELLINGS, True)}, "launch_server")  # fmt: skip
    aliases = {**known["launch_server_aliases"], **NSA_SPELLINGS}
    flags = [(aliases.get(f, f), v, t + (f" (the NSA-era spelling of {NSA_SPELLINGS[f]})" if f in NSA_SPELLINGS
                                         else "")) for f, v, t in flags]  # --tensor-parallel-size is --tp-size
    tp = next((v for f, v, _ in flags if f == "--tp-size"), "1")
    _check_choices(flags, known["launch_server_choices"])
    hicache_size = dp_size = None
    for flag, value, text in flags:
        current = _current_spelling(conv, flag, value, text, tp, older)
        if current is None:
            continue
        flag, value, text = current
        if flag == "--dp-size":
            dp_size = (_number(int, flag, value), text)  # replicas or DP-attention ranks: resolved below
        elif flag == "--hicache-size":
            hicache_size = _number(float, flag, value)
            conv.mapped.append(f"{text} -> " + ("hicache.host_pages (GB per rank over page bytes)" if hicache_size
                                                else "0: hicache_ratio sizes the host pool"))  # fmt: skip
        elif not (_map_table_flag(conv, flag, value, text) or _map_model_flag(conv, flag, value, text, model_config)
                  or _map_deployment_flag(conv, flag, value, text) or _map_hisparse_flag(conv, flag, value, text)):  # fmt: skip
            group = known["launch_server_groups"].get(flag, "")
            conv.ignored.append(f"{text}: {_WHY.get(flag) or GROUP_WHY.get(group, 'a launch option, not modelled')}")
    if "model" not in sc:
        raise InputError("launch_server: --model-path is required")
    _resolve_dp(conv, dp_size)
    hisparse_launch(conv, flags)
    if hicache_size:
        from sim.model.hostmem import V4_SIZE_REFUSED
        from sim.scenario.load import HiCacheConfig, build_model_spec, field_problem

        # what the rest of the command makes, checked as the whole result will be (its error is the same line)
        probe = conv.check({**sc, "name": "probe", "hicache": {**sc.get("hicache", {}), "enabled": False}})
        if build_model_spec(probe).paged_host:  # SGLang does not start it: no scenario for what would not run
            raise InputError(f"--hicache-size {num_text(hicache_size)}: {V4_SIZE_REFUSED}")
        page_bytes = probe.model.page_bytes(probe.hicache.page_size, probe.hardware.tp_size)
        pages = int(hicache_size * 1e9 // page_bytes)
        problem = field_problem(HiCacheConfig, "host_pages", pages)
        if problem:
            raise InputError(f"--hicache-size {num_text(hicache_size)}: {problem} (as hicache.host_pages, "
                             f"{num_text(page_bytes)} bytes a page)")  # fmt: skip
        set_path(sc, "hicache.host_pages", pages)
    return flags


def _check_choices(flags: list[tuple[str, str | None, str]], choices: dict[str, dict]) -> None:
    """A value outside a flag's argparse ``choices`` is refused, as SGLang's parser refuses it before it starts."""
    for flag, value, text in flags:
        allowed = choices.get(flag, {}).get("choices")
        if value is not None and allowed is not None and value not in map(str, allowed):
            shown = ", ".join(map(str, allowed[:12])) + (f" and {len(allowed) - 12} more" if len(allowed) > 12 else "")
            raise InputError(f"{text}: SGLang refuses it: expected one of {shown} "
                             f"(sglang/srt/{choices[flag]['at']})")  # fmt: skip


def _current_spelling(conv: Conversion, flag: str, value: str | None, text: str, tp: str,
                      older: dict[str, Any]) -> tuple[str, str | None, str] | None:  # fmt: skip
    """A flag as SGLang 0.5.23 spells it; None for a 0.5.2 flag that 0.5.23 dropped (listed as ignored)."""
    if flag == "--config":
        raise InputError(f"launch_server {text}: the flags in that file are not on the command line; "
                         "paste them into --launch instead")  # fmt: skip
    if flag in OLD_SPELLINGS:  # SGLang 0.5.2's spelling of a 0.5.23 flag
        new, fixed = OLD_SPELLINGS[flag]
        flag, value = new, (tp if fixed == "tp" else fixed) if fixed else value
        text = f"{text} (0.5.2's spelling of {new}{' ' + value if fixed else ''})"
    elif flag in older:
        conv.ignored.append(f"{text}: a flag of SGLang 0.5.2 that 0.5.23 no longer has; not modelled")
        return None
    return flag, value, text


def _map_table_flag(conv: Conversion, flag: str, value: str | None, text: str) -> bool:
    """A flag of the ``_LAUNCH`` (one field, its value converted) or ``_SWITCHES`` (one field, set) tables."""
    if flag in _LAUNCH:
        path, kind = _LAUNCH[flag]
        converted = _number(kind, flag, value)
        if flag == "--chunked-prefill-size" and converted <= 0:  # SGLang: no chunking (scheduler.py:1372-1373)
            converted = MAX_REQUEST_TOKENS
            text = f"{text} (SGLang's chunking off: a chunk no request reaches)"
        if flag == "--schedule-policy" and converted not in ("fcfs", "lpm"):
            raise InputError(f"--schedule-policy {value}: not modelled (the simulator has fcfs and lpm)")
        if flag == "--hicache-storage-prefetch-policy" and converted not in ("best_effort", "wait_complete", "timeout"):
            raise InputError(f"{flag} {value}: unknown policy")
        _check_mapped(flag, converted, path)
        set_path(conv.scenario, path, converted)
        conv.mapped.append(f"{text} -> {path}: {converted}")
    elif flag in _SWITCHES:
        path, converted = _SWITCHES[flag]
        set_path(conv.scenario, path, converted)
        conv.mapped.append(f"{text} -> {path}: {converted}")
    else:
        return False
    conv.origins[path] = text
    return True


def _map_model_flag(conv: Conversion, flag: str, value: str | None, text: str, model_config: str | None) -> bool:
    """What the model is: its config, its routed experts' dtype, its speculative algorithm."""
    sc = conv.scenario
    if flag in ("--model-path", "--model"):
        ref, name = _model_ref(value, model_config)
        sc["name"] = sc.get("name") or name.lower()
        set_path(sc, "model.name", name)
        set_path(sc, "model.config", ref)
        same = f" ({value.rstrip('/')} has its architecture: release suffixes dropped)" if (
            "/" in ref and ref.lower() != value.rstrip("/").lower()) else ""  # fmt: skip
        conv.mapped.append(f"{text} -> model.config: {ref}{same}")
    elif flag == "--speculative-algorithm":
        if value.upper() not in SPEC_ALGORITHMS:
            raise InputError(f"--speculative-algorithm {value}: not modelled (the simulator has "
                             f"{', '.join(SPEC_ALGORITHMS)})")  # fmt: skip
        set_path(sc, "speculative.algorithm", value.upper())
        conv.mapped.append(f"{text} -> speculative.algorithm: {value.upper()}")
    elif flag == "--quantization" and value in QUANT_EXPERTS:
        set_path(sc, "model.expert_dtype", QUANT_EXPERTS[value])
        conv.mapped.append(f"{text} -> model.expert_dtype: {QUANT_EXPERTS[value]} (the routed experts; other "
                           "weights as the checkpoint stores them)")  # fmt: skip
    else:
        return False
    return True


def _map_deployment_flag(conv: Conversion, flag: str, value: str | None, text: str) -> bool:
    """Where the server sits: its L3 storage, its PD role, its DP load balancer, its tokenizer."""
    sc = conv.scenario
    if flag == "--load-balance-method":
        set_path(sc, "scheduler.load_balance_method", value)
        conv.origins["scheduler.load_balance_method"] = text
        conv.mapped.append(f"{text} -> scheduler.load_balance_method: {value}")
    elif flag == "--hicache-storage-backend":
        set_path(sc, "l3.enabled", True)
        conv.mapped.append(f"{text} -> l3.enabled: true (rates: l3 defaults, the measured EIC figures)")
    elif flag in OUT_OF_TREE:
        set_path(sc, "hicache.enabled", True)
        set_path(sc, "l3.enabled", True)
        set_path(sc, "l3.window_pages", "all")
        set_path(sc, "hicache.prefetch_policy", "wait_complete")
        conv.mapped.append(f"{text} -> hicache.enabled, l3.enabled: true, l3.window_pages: all, "
                           f"hicache.prefetch_policy: wait_complete ({OUT_OF_TREE[flag]})")
    elif flag == "--disaggregation-mode":
        if value == "decode":
            set_path(sc, "cluster.role", "decode")
            conv.mapped.append(f"{text} -> cluster.role: decode")
        else:
            conv.ignored.append(f"{text}: only a decode instance is modelled separately")
    elif flag == "--skip-tokenizer-init":
        conv.token_ids = True
        conv.ignored.append(f"{text}: {_WHY[flag]}")
    else:
        return False
    return True


# --hisparse-config's keys (mem_cache/sparsity/factory.py:79-100): the modelled ones -> their scenario field, the
# rest -> why they are not modelled.
HISPARSE_KEYS = {"top_k": "hisparse.top_k", "device_buffer_size": "hisparse.device_buffer_size",
                 "host_to_device_ratio": "hisparse.host_to_device_ratio"}  # fmt: skip
HISPARSE_WHY = {
    "swap_in_block_size": "threads per swap-in kernel block: the kernel's time only, which the cost table prices",
    "algorithm": "the sparse algorithm of the generic sparse coordinator: DeepSeek V4's HiSparse path is modelled",
    "backend": "the sparse backend adaptor: DeepSeek V4's HiSparse path is modelled",
    "min_sparse_prompt_len": "the generic sparse coordinator's threshold: DeepSeek V4's HiSparse path is modelled",
    "page_size": "the generic sparse coordinator's page: V4's C4 page is the model's",
}


def _map_hisparse_flag(conv: Conversion, flag: str, value: str | None, text: str) -> bool:
    """``--hisparse-config JSON``, read as SGLang reads it (``factory.py:62-112``): each modelled key to its
    field, ``device_buffer_size`` defaulting to twice ``top_k`` where only ``top_k`` is given (:80), a buffer
    smaller than top-k refused as SGLang refuses it (:84-87)."""
    if flag != "--hisparse-config":
        return False
    try:
        cfg = json.loads(value or "")
    except json.JSONDecodeError as exc:
        raise InputError(f"{flag}: not JSON ({exc.msg}), got {(value or '')[:80]!r}") from None
    if not isinstance(cfg, dict):
        raise InputError(f"{flag}: expected a JSON object such as '{{\"top_k\": 512, \"device_buffer_size\": "
                         f"4096}}', got {(value or '')[:80]!r}")  # fmt: skip
    if "top_k" in cfg and "device_buffer_size" not in cfg and isinstance(cfg["top_k"], int):
        cfg["device_buffer_size"] = 2 * cfg["top_k"]
        conv.mapped.append(f"{flag}: no device_buffer_size -> 2 x top_k, {cfg['device_buffer_size']} (factory.py:80)")
    for key, v in cfg.items():
        if key in HISPARSE_KEYS:
            path = HISPARSE_KEYS[key]
            if not isinstance(v, int) or isinstance(v, bool):
                raise InputError(f"{flag}: {key} must be an integer, got {v!r}")
            _check_mapped(f"{flag} {key}", v, path)
            set_path(conv.scenario, path, v)
            conv.origins[path] = text
            conv.mapped.append(f"{flag} {key} {v} -> {path}")
        else:
            conv.ignored.append(f"{flag} {key} {json.dumps(v)}: {HISPARSE_WHY.get(key, 'passed to the sparse algorithm as extra config: not modelled')}")
    top_k, size = cfg.get("top_k"), cfg.get("device_buffer_size")
    if isinstance(top_k, int) and isinstance(size, int) and size < top_k:
        raise InputError(f"{flag}: device_buffer_size {size} is smaller than top_k {top_k} (SGLang refuses it: "
                         "mem_cache/sparsity/factory.py:84-87)")  # fmt: skip
    return True


def _decode_instance(conv: Conversion) -> None:
    """A PD decode instance (``--disaggregation-mode decode``): its SWA pool needs a ratio, and without a client
    command it gets a synthetic workload to edit."""
    sc = conv.scenario
    if sc.get("cluster", {}).get("role") != "decode":
        return
    if sc.get("hicache", {}).get("swa_full_tokens_ratio") == "cap":
        raise InputError("--max-running-requests: without --swa-full-tokens-ratio a DeepSeek V4 decode instance "
                         "sizes its SWA pool in cap mode with transfer slots (pool_configurator.py:957-961), which "
                         "is not modelled; add --swa-full-tokens-ratio R to the command")  # fmt: skip
    if "workload" not in sc:
        sc["workload"] = {"kind": "synthetic"}
        conv.mapped.append("no client command for a decode instance -> workload.kind: synthetic at its defaults "
                           "(rate, num_requests, input_length, output_length: set them to the run's)")  # fmt: skip


def _resolve_dp(conv: Conversion, dp_size: tuple[int, str] | None) -> None:
    """``--dp-size N``: with ``--enable-dp-attention``, N attention-DP ranks (``parallel_hook.py:39-61``); alone,
    N replicas of the model behind SGLang's DP controller, here N instances. With DP attention and no
    ``--load-balance-method``, SGLang's auto: follow_bootstrap_room on a PD prefill server, else round robin
    (``arg_groups/serving_hook.py:217-236``)."""
    sc = conv.scenario
    hw = sc.get("hardware", {})
    if dp_size is not None:
        n, text = dp_size
        path = "hardware.dp_size" if hw.get("enable_dp_attention") and "dp_size" not in hw else "cluster.instances"
        _check_mapped(text.split()[0], n, path)
        set_path(sc, path, n)
        conv.origins[path] = text
        conv.mapped.append(f"{text} -> {path}: {n} ({'attention-DP ranks' if path.startswith('hardware') else 'replicas'})")
    if hw.get("dp_size", 1) > 1 and not hw.get("enable_dp_attention"):  # --attn-dp-size N
        set_path(sc, "hardware.enable_dp_attention", True)
    if hw.get("enable_dp_attention") and hw.get("dp_size", 1) == 1:  # one attention-DP rank: plain TP
        conv.mapped.append("--enable-dp-attention with a DP size of 1: one rank, the same as TP alone")


def _resolve_spec(conv: Conversion, accept_length: float | None) -> None:
    """Speculative decoding needs the run's mean accept length, which no flag states, unless the launch forces it
    (``SGLANG_SIMULATE_ACC_LEN``: :func:`_forced_accept`); and SGLang
    caps the running requests at 48 when none is given (``arg_groups/speculative_hook.py:1086-1094``)."""
    sc = conv.scenario
    spec = sc.get("speculative")
    forced = conv.forced_accept
    if spec is None:
        if accept_length is not None:
            raise InputError("--accept-length: the launch command runs no speculative decoding")
        if forced is not None:
            conv.ignored.append(f"{forced[1]}: the launch runs no speculative decoding")
        return
    if forced is not None:
        length = min(forced[0], spec.get("num_steps", 3) + 1)
        if accept_length is not None and accept_length != length:
            raise InputError(f"--accept-length {accept_length:g}: the launch forces {length:g} tokens a verify pass "
                             f"({forced[1]})")  # fmt: skip
        accept_length, origin = length, forced[1]
    elif accept_length is None:
        raise InputError("--speculative-algorithm: give the run's mean accept length per verify pass with "
                         "--accept-length (SGLang logs it as accept len; published V4 runs: ~2.4-3.5)")  # fmt: skip
    else:
        origin = f"--accept-length {accept_length:g}"
    spec["accept_length"] = accept_length
    conv.origins["speculative.accept_length"] = origin
    conv.mapped.append(f"{origin} -> speculative.accept_length: {accept_length:g}")
    sched = sc.setdefault("scheduler", {})
    if "max_running_requests" not in sched:
        sched["max_running_requests"] = 48
        conv.mapped.append("speculative decoding without --max-running-requests -> scheduler.max_running_requests: "
                           "48 (SGLang's reset, speculative_hook.py:1086-1094)")  # fmt: skip


def _bench_serving(conv: Conversion, argv: list[str], index: int) -> None:
    sc = conv.scenario
    wl = sc.setdefault("workload", {"kind": "bench_serving", "steps": []})
    if wl.get("kind") != "bench_serving":
        raise InputError("bench_serving cannot follow a bench_multiturn command in one scenario")
    step: dict[str, Any] = {}
    tokenized = False
    names = {"--num-prompts": ("num_prompts", int), "--random-input-len": ("random_input_len", int),
             "--random-output-len": ("random_output_len", int), "--random-range-ratio": ("random_range_ratio", float),
             "--max-concurrency": ("max_concurrency", int), "--seed": ("seed", int)}  # fmt: skip
    known = _sglang_flags()
    older = {k: v for flags in known["older_bench_serving"].values() for k, v in flags.items()}
    for flag, value, text in _parse(argv, {**known["bench_serving"], **older}, "bench_serving"):
        if flag in older:
            conv.ignored.append(f"{text}: a bench_serving option of SGLang 0.5.2 that 0.5.23 no longer has; not modelled")
        elif flag in names:
            key, kind = names[flag]
            step[key] = _number(kind, flag, value)
            conv.mapped.append(f"{text} -> workload.steps[{index}].{key}")
            conv.origins[f"workload.steps.{index}.{key}"] = f"--bench {text}"
        elif flag == "--request-rate":
            rate = _number(float, flag, value, infinite=True)
            step["request_rate"] = None if rate == math.inf else rate
            conv.mapped.append(f"{text} -> workload.steps[{index}].request_rate: {step['request_rate']}")
            conv.origins[f"workload.steps.{index}.request_rate"] = f"--bench {text}"
        elif flag == "--flush-cache":
            step["flush_cache"] = True
            conv.mapped.append(f"{text} -> workload.steps[{index}].flush_cache: true")
        elif flag == "--dataset-name":
            if value not in ("random-ids", "random"):
                raise InputError(f"bench_serving --dataset-name {value}: not modelled (random-ids or random)")
            wl["dataset_name"] = value
            conv.mapped.append(f"{text} -> workload.dataset_name")
        elif flag == "--tokenize-prompt":
            tokenized = True
            conv.mapped.append(f"{text} -> prompts sent as token ids: nothing tokenized")
        else:
            conv.ignored.append(f"{text}: {_bench_serving_why(flag)}")
    # random-ids text is consecutive vocab ids decoded; random is ShareGPT text (benchmark/datasets/random.py:141-155)
    if not tokenized and conv.prompt_text is None:
        conv.prompt_text = "prose" if wl.get("dataset_name") == "random" else "random-ids"
    step["label"] = f"step {index}" + (f" conc {step['max_concurrency']}" if "max_concurrency" in step else "")
    wl["steps"].append(step)


def _bench_multiturn(conv: Conversion, argv: list[str], sglang_version: str) -> None:
    """bench_multiturn.py. Its native client sends text in the 0.5.2 era and token ids now (``return_text=False``);
    ``--api-format openai`` sends chat text."""
    sc = conv.scenario
    if "workload" in sc:
        raise InputError("bench_multiturn: one client command per scenario")
    wl: dict[str, Any] = {"kind": "multi_turn"}
    names = {"--num-clients": int, "--max-parallel": int, "--request-length": int, "--output-length": int,
             "--num-rounds": int, "--request-rate": float, "--sub-question-input-length": int,
             "--distribution": str, "--ready-queue-policy": str, "--min-rounds": int, "--max-rounds": int,
             "--range-ratio": float}  # fmt: skip
    auto_run, api, random_sample = True, "sglang", True
    wl["request_rate"] = 1.0  # the client's default rate
    for flag, value, text in _parse(argv, BENCH_MULTITURN_FLAGS, "bench_multiturn"):
        if flag in names:
            key = flag[2:].replace("-", "_")
            kind = names[flag]
            wl[key] = _number(kind, flag, value) if kind is not str else value
            conv.mapped.append(f"{text} -> workload.{key}")
            conv.origins[f"workload.{key}"] = f"--bench {text}"
        elif flag == "--disable-random-sample":
            wl["disable_random_sample"] = True
            random_sample = False
            conv.mapped.append(f"{text} -> workload.disable_random_sample")
        elif flag == "--enable-round-barrier":
            wl["round_barrier"] = True
            wl["round_barrier_pause_s"] = ROUND_BARRIER_PAUSE_S
            conv.mapped.append(f"{text} -> workload.round_barrier: true, round_barrier_pause_s: {ROUND_BARRIER_PAUSE_S:g} "
                               "(the client's heartbeat and 10 s sleep before each next round)")  # fmt: skip
        elif flag == "--api-format":
            if value not in ("sglang", "openai"):
                raise InputError(f"bench_multiturn --api-format {value}: expected sglang or openai")
            api = value
            conv.mapped.append(f"{text} -> " + ("chat text prompts, tokenized by the server" if value == "openai"
                                                else "SGLang's /generate"))  # fmt: skip
        elif flag == "--duration":
            if _number(float, flag, value) > 0:
                raise InputError("bench_multiturn --duration: the long-run mode (sessions restarted until a deadline) "
                                 "is not modelled; leave it at 0")  # fmt: skip
            conv.ignored.append(f"{text}: 0 is the client's default (no long-run mode)")
        elif flag == "--disable-auto-run":
            auto_run = False
            conv.mapped.append(f"{text} -> one request rate (no sweep)")
        elif flag == "--seed":
            sc["seed"] = _number(int, flag, value)
            conv.mapped.append(f"{text} -> seed")
        else:
            conv.ignored.append(f"{text}: {BENCH_MULTITURN_WHY[flag]}")
    if api == "openai" or sglang_version == "0.5.2":
        conv.prompt_text = "prose" if random_sample else "random-ids"
    if auto_run:
        raise InputError("bench_multiturn without --disable-auto-run sweeps 13 request rates: add it, and sweep "
                         "with `hicache-sim sweep --grid workload.request_rate=16,14,...` instead")  # fmt: skip
    sc["workload"] = wl


def _aiperf(conv: Conversion, argv: list[str]) -> None:
    """``aiperf profile`` replaying Weka trajectories: ``workload.kind: lanes``."""
    sc = conv.scenario
    if "workload" in sc:
        raise InputError("aiperf: one client command per scenario")
    if not argv or argv[0] != "profile":
        raise InputError("aiperf: expected `aiperf profile ...`")
    wl: dict[str, Any] = {"kind": "lanes", "format": "weka"}
    late: dict[str, tuple[Any, str]] = {}  # flags read together after the loop (sim.interop.aiperf_agentx)
    for flag, value, text in _parse(argv[1:], {k: takes for k, (takes, _) in AIPERF_FLAGS.items()}, "aiperf"):
        target = AIPERF_FLAGS[flag][1]
        if flag in ("--warmup-grace-period", "--agentic-warmup-grace-period"):
            late[flag] = (_number(float, flag, value, infinite=True), text)
        elif flag in ("--public-dataset", "--scenario"):
            late[flag] = (value, text)
        if flag in ("--warmup-grace-period", "--agentic-warmup-grace-period", "--public-dataset"):
            continue
        if target in AIPERF_NUMBERS:
            number = _number(AIPERF_NUMBERS[target], flag, value, infinite=flag == "--benchmark-grace-period")
            if number == math.inf:  # wait for every response
                number = None
            if target == "seed":
                sc["seed"] = number
            else:
                wl[target.split(".", 1)[1]] = number
            conv.mapped.append(f"{text} -> {target}: {number}")
            conv.origins[target] = f"--bench {text}"
        elif target == "workload.path":
            wl["path"] = str(Path(value).expanduser())
            conv.mapped.append(f"{text} -> workload.path")
            conv.origins["workload.path"] = f"--bench {text}"
        elif flag == "--custom-dataset-type" and value != "weka_trace":
            raise InputError(f"aiperf --custom-dataset-type {value}: only weka_trace is modelled (workload.kind: lanes)")
        elif flag == "--cache-bust" and value != "first_turn_prefix":
            raise InputError(f"aiperf --cache-bust {value}: only first_turn_prefix is modelled (sessions share nothing)")
        elif target.startswith(("always", "the trajectory format")):
            conv.mapped.append(f"{text} -> {target}")
        else:
            conv.ignored.append(f"{text}: {target}")
    sc["workload"] = _aiperf_corpus_and_grace(conv, wl, late)


def _aiperf_corpus_and_grace(conv: Conversion, wl: dict[str, Any], late: dict[str, tuple[Any, str]]) -> dict[str, Any]:
    """The corpus (a local copy, else generated sessions like it) and the agentic warm-up grace period."""
    from sim.interop import aiperf_agentx

    scenario = late.get("--scenario", (None, ""))[0]
    if (note := aiperf_agentx.scenario_defaults(scenario, wl)) is not None:
        conv.notes.append(note)
    grace, src = aiperf_agentx.warmup_grace(late.get("--agentic-warmup-grace-period", (None, ""))[0],
                                            late.get("--warmup-grace-period", (None, ""))[0], scenario)  # fmt: skip
    for flag in ("--agentic-warmup-grace-period", "--warmup-grace-period"):
        if flag in late:
            text = late[flag][1]
            if src.startswith(flag):
                wl["warmup_grace_period_s"] = grace
                conv.mapped.append(f"{text} -> workload.warmup_grace_period_s: {grace}")
                conv.origins["workload.warmup_grace_period_s"] = f"--bench {text}"
            else:
                why = "--agentic-warmup-grace-period wins" if src.startswith("--agentic") else AIPERF_FLAGS[flag][1]
                conv.ignored.append(f"{text}: {why}")
    corpus, corpus_text = late.get("--public-dataset", (None, ""))
    if "path" in wl:
        if corpus is not None:
            conv.mapped.append(f"{corpus_text} -> the corpus whose local copy --input-file names")
        return wl
    if corpus is None:
        raise InputError("aiperf: --input-file PATH is required: the Weka trajectories to replay (or "
                         "--public-dataset NAME)")  # fmt: skip
    try:
        out, line = aiperf_agentx.corpus_workload(corpus, wl)
    except ValueError as exc:
        raise InputError(f"aiperf {exc}") from None
    conv.mapped.append(line)
    conv.notes.append(line)
    conv.origins["workload.kind"] = f"--bench {corpus_text}"
    if (entries := conv.origins.pop("workload.num_dataset_entries", None)) is not None:
        conv.origins["workload.sessions"] = entries  # the entries became the sessions generated
    return out


def from_sglang(launch: str, benches: list[str] = (), *, gpu: str, name: str | None = None,
                model_config: str | None = None, host_mem_gb: float | None = None,
                sglang_version: str = "0.5.23", accept_length: float | None = None,
                server_log: str | None = None, pinnable_gb: float | None = None) -> Conversion:  # fmt: skip
    """Convert a launch_server command (and bench client commands, in order) into a scenario.
    ``sglang_version``: the server's, whose default rules fill the memory fraction and chunk size it left out.
    ``accept_length``: the run's mean accept length, with speculative decoding. ``server_log``: the server's
    startup log, whose capacities replace the derived ones (:mod:`sim.interop.fromlog`). ``pinnable_gb``: what the
    node lets its ranks pin (``hardware.pinnable_gb``; None: the platform's rule, :mod:`sim.model.pinning`)."""
    from sim.model.hardware import SGLANG_DEFAULTS

    if sglang_version not in SGLANG_DEFAULTS:
        raise InputError(f"--sglang-version {sglang_version}: known default rules are {', '.join(SGLANG_DEFAULTS)}")
    conv = Conversion({"name": name} if name else {}, commands=[launch, *benches])
    try:
        _, argv = _command(conv, launch, ("sglang.launch_server", "launch_server"))
    except InputError as exc:  # named by the option it came in
        raise InputError(f"--launch: {exc}") from None
    flags = _launch(conv, argv, model_config)
    _resolve_spec(conv, accept_length)
    _hardware(conv, gpu, sglang_version, host_mem_gb, pinnable_gb)
    dsa_launch(conv, flags, gpu, _names_dsa(conv))
    _page_defaults(conv, model_config)
    log = None
    if server_log is not None:
        from sim.interop.fromlog import apply_server_log

        log = apply_server_log(conv, server_log)
    for i, bench in enumerate(benches):
        _bench(conv, bench, i, sglang_version)
    _decode_instance(conv)
    if conv.prompt_text and not conv.token_ids:  # SGLang tokenizes text prompts one after another
        rate = TOKENIZER_TOKENS_PER_S[conv.prompt_text]
        set_path(conv.scenario, "scheduler.tokenizer_tokens_per_s", rate)
        conv.mapped.append(f"the client sends {conv.prompt_text} text -> scheduler.tokenizer_tokens_per_s: {rate:g} "
                           "(measured, bench/tokenizer.py; tokenizer_manager.py:1058-1066)")  # fmt: skip
    conv.scenario["name"] = conv.scenario["name"].replace("/", "_")
    order = ["name", "description", "seed", "model", "hardware", "hicache", "l3", "scheduler", "cluster", "hisparse",
             "speculative", "workload"]  # fmt: skip
    conv.scenario = {k: conv.scenario[k] for k in order if k in conv.scenario}
    if sglang_version != "0.5.23":
        conv.origins["hardware.sglang_defaults"] = f"--sglang-version {sglang_version}"
    if origins := {k: v for k, v in conv.origins.items() if _is_set(conv.scenario, k)}:
        conv.scenario["origins"] = origins  # where each value came from, for the resolved server's sources
    if log is not None:
        from sim.interop.fromlog import check_capacities

        conv.checks = check_capacities(conv, log)
    return conv


def _names_dsa(conv: Conversion) -> bool:
    """Whether the command's model is a DSA model (DeepSeek V3.2, GLM-5.x: :func:`sim.model.dsa.is_dsa`)."""
    from sim.model.dsa import is_dsa
    from sim.model.modelcfg import load_config

    ref = conv.scenario.get("model", {}).get("config")
    try:
        return ref is not None and is_dsa(load_config(ref)[0])
    except InputError:  # the model's own error is the scenario check's to report
        return False


def _is_set(doc: Any, path: str) -> bool:
    """Whether the scenario dict sets the field at dotted ``path``: only such a field has an origin."""
    for part in path.split("."):
        if isinstance(doc, dict) and part in doc:
            doc = doc[part]
        elif isinstance(doc, list) and part.isdigit() and int(part) < len(doc):
            doc = doc[int(part)]
        else:
            return False
    return True


def _hardware(conv: Conversion, gpu: str, sglang_version: str, host_mem_gb: float | None,
              pinnable_gb: float | None) -> None:  # fmt: skip
    """What the command does not say: the GPU, whose defaults fill what it left out, the host's memory and what
    of it the platform lets the ranks pin."""
    hw = conv.scenario.setdefault("hardware", {})
    hw["gpu"] = gpu
    if sglang_version != "0.5.23":
        hw["sglang_defaults"] = sglang_version
        conv.mapped.append(f"--sglang-version {sglang_version} -> hardware.sglang_defaults: {sglang_version} "
                           "(its default mem_fraction_static and chunked_prefill_size)")  # fmt: skip
    if host_mem_gb is not None:
        hw["host_mem_gb"] = host_mem_gb
    if pinnable_gb is not None:
        hw["pinnable_gb"] = pinnable_gb


def _page_defaults(conv: Conversion, model_config: str | None) -> None:
    """SGLang's page size for the model (256, asserted, for DeepSeek V4; else 1) and V4's SWA cap mode; HiCache
    off unless the command enabled it."""
    from sim.model.modelcfg import derive, load_config

    model, hw = conv.scenario["model"], conv.scenario["hardware"]
    try:
        config = load_config(model["config"])[0]
    except InputError as exc:  # the config --model-config names, or the one --model-path found
        raise InputError(f"{'--model-config' if model_config else '--launch'}: {exc}") from None
    try:
        shape = derive(config, tp_size=hw.get("tp_size", 1), kv_dtype=model.get("kv_dtype", "auto"),
                       expert_dtype=model.get("expert_dtype", "auto"))  # fmt: skip
    except InputError as exc:  # a flag's value the model cannot take (--kv-cache-dtype, --tp-size)
        raise InputError(f"--launch: {exc}") from None
    hc = conv.scenario.setdefault("hicache", {})
    if shape.catalog is not None:
        hc.setdefault("page_size", 256)  # asserted by SGLang for DeepSeek V4
        if "max_running_requests" in conv.scenario.get("scheduler", {}) and "swa_full_tokens_ratio" not in hc:
            hc["swa_full_tokens_ratio"] = "cap"  # pool_configurator.py:1328-1351
            conv.mapped.append("--max-running-requests without --swa-full-tokens-ratio -> "
                               "hicache.swa_full_tokens_ratio: cap (SGLang's cap mode for DeepSeek V4)")  # fmt: skip
    elif shape.family == "dsa":
        hc.setdefault("page_size", 64)  # DSA on CUDA: 64 x index_kpool (model_overrides/deepseek_v2.py:163-173)
    else:
        hc.setdefault("page_size", 1)  # SGLang's default --page-size
    hc.setdefault("enabled", False)  # no --enable-hierarchical-cache: GPU only


def _bench(conv: Conversion, bench: str, index: int, sglang_version: str) -> None:
    """One client command, read by its program: aiperf, bench_multiturn.py or bench_serving; or the
    sglang_router command in front of the server."""
    try:
        prog, argv = _command(conv, bench, ("bench_serving", "benchmark.serving", "bench_multiturn", "aiperf",
                                            "sglang_router.launch_router", "sglang_router"))  # fmt: skip
    except InputError as exc:
        raise InputError(f"--bench: {exc}") from None
    if "sglang_router" in prog:  # the router in front of the server (sim.interop.fromrouter)
        if conv.router is not None:
            raise InputError(f"--bench: a second sglang_router command; one router stands in front of the server "
                             f"(the first: {conv.router[:60]!r})")  # fmt: skip
        conv.router = bench
        map_router(conv, argv)
    elif Path(prog).name == "aiperf":
        _aiperf(conv, argv)
    elif "bench_multiturn" in prog:
        _bench_multiturn(conv, argv, sglang_version)
    else:
        _bench_serving(conv, argv, index)


HEADER = "# Generated by `hicache-sim scenario from-sglang` from:"


def to_yaml(conv: Conversion) -> str:
    """The scenario YAML, headed by the commands and the account of every flag. Each header line goes through
    :func:`sim.base.text.printable`, so no newline or control character in a command or a file name can end a
    comment; and the text is read back before it is returned: what cannot be read back is never written."""
    from sim.base.inputs import dump_yaml, parse_yaml
    from sim.base.text import printable

    head = [HEADER] + [f"#   {c}" for c in map(joined, conv.commands)]
    head += ["# Mapped:"] + [f"#   {m}" for m in conv.mapped]
    head += ["# Ignored (not modelled):"] + ([f"#   {m}" for m in conv.ignored] or ["#   (none)"])
    head += ["# The server's log against the derivation:"] + [f"#   {m}" for m in conv.checks] if conv.checks else []
    text = "\n".join(map(printable, head)) + "\n" + dump_yaml(conv.scenario)
    if parse_yaml(text, "the scenario written") != conv.scenario:
        raise InputError("the scenario would not read back as written; nothing was written (please report it)")
    return text

"""The ``hicache-sim`` command: argument parsing and wiring only; the work lives in the library modules."""

from __future__ import annotations

import argparse
import errno
import math
import os
import signal
import sys
import threading
import time
from concurrent.futures import BrokenExecutor

from sim import __version__
from sim.base.compiled import MODULES, compiled, stale
from sim.base.errors import InputError, os_error_text
from sim.base.fileio import WriteError
from sim.base.text import printable, printable_lines
from sim.cache.eviction import EVICTION_POLICIES
from sim.model.hardware import NODE_DRAM_GB


class _UsageError(Exception):
    """A bad command line: reported in one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # argparse would print the whole usage block and exit
        raise _UsageError(f"{self.prog}: {message} (see --help)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="hicache-sim",
        description="Simulate SGLang HiCache (L1 GPU / L2 host / L3 storage) and HiSparse for multi-pool KV models.",
    )
    n = len(compiled())
    build = "pure Python" if not n else f"compiled: {n} of {len(MODULES)} engine modules"
    parser.add_argument("--version", action="version", version=f"hicache-sim {__version__} ({build})")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_run(sub)
    _add_validate(sub)
    _add_replay(sub)
    _add_compare(sub)
    _add_pools(sub)
    _add_sweep(sub)
    _add_plot(sub)
    _add_tree(sub)
    _add_hisparse(sub)
    _add_scenario(sub)
    _add_diff(sub)
    _add_plan(sub)
    from sim.app.scorecmd import add_score_parser

    add_score_parser(sub)
    from calibrate.cli import add_calibrate_parser  # torch is imported only when calibrate runs

    add_calibrate_parser(sub)
    return parser


def _add_no_progress(p) -> None:
    p.add_argument("--no-progress", action="store_true",
                   help="no progress (a bar on a terminal; off one, a line every 30 s of a longer run)")


def _add_run(sub) -> None:
    p = sub.add_parser(
        "run",
        help="run a scenario in simulated time and write its results",
        description="Simulate a scenario (YAML) with SimPy: arrivals, batching, L1/L2/L3 residency and copy "
        "links. Writes DIR/summary.json, requests.parquet, timeseries.parquet and the resolved scenario.yaml.",
    )
    p.add_argument("scenario", metavar="SCENARIO.yaml", help="scenario file (see scenarios/)")
    p.add_argument("--out", metavar="DIR", default=None,
                   help="output folder (default: a new runs/<scenario name>/<date-time>)")  # fmt: skip
    p.add_argument("--overwrite", action="store_true", help="replace the results already in --out DIR")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a field, e.g. --set hicache.load_back_threshold=64 (repeatable)")  # fmt: skip
    p.add_argument("--seed", type=_nonneg_int, default=None, help="shorthand for --set seed=N")
    p.add_argument("--seeds", default=None, metavar="N|S1,S2,...",
                   help="run N seeds (from the scenario's own) or these seeds, in parallel; print and write each "
                        "figure's mean and 95%% interval (DIR/summary.json, seeds.csv)")  # fmt: skip
    p.add_argument("--workers", type=_positive_int, default=None, help="--seeds: parallel runs (default: CPUs)")
    _add_no_progress(p)
    p.set_defaults(func=_cmd_run, outputs=(("out", "folder"),))


def _cmd_run(args) -> int:
    from sim.app.run import format_summary, run_scenario, write_files
    from sim.base.fileio import run_folder
    from sim.scenario.load import load_scenario

    if args.workers is not None and args.seeds is None:
        raise InputError("--workers: parallel runs of --seeds; a single run is one process (add --seeds N)")
    overrides = list(args.overrides) + ([f"seed={args.seed}"] if args.seed is not None else [])
    scenario = load_scenario(args.scenario, overrides)
    _note_inert([o.partition("=")[0].strip() for o in args.overrides], [scenario], "--set")
    if args.seeds is not None:
        try:
            return _run_seeds(args, scenario)
        except InputError as exc:
            raise _blamed(exc, args.scenario, overrides) from None
    with run_folder(args.out, "runs", scenario.name, overwrite=args.overwrite) as (tmp, out):  # before the run
        try:
            result = run_scenario(scenario, progress=not args.no_progress,
                                  requests_out=tmp / "requests.parquet", notify=_note)  # fmt: skip
        except InputError as exc:  # found while the run starts (pools, workload)
            raise _blamed(exc, args.scenario, overrides) from None
        names = write_files(result, tmp)
    print(printable_lines(format_summary(result)))
    print(f"wrote {printable(str(out))}/: {', '.join(names)}")
    return 0


def _blamed(exc: InputError, scenario: str, overrides: list[str]) -> InputError:
    """An error found while the run starts, blamed as ``validate`` blames it: on the ``--set`` items that cause
    it (the scenario checked again through the start, only now that it failed), else on the scenario file."""
    if overrides:
        from sim.app.run import check_startable
        from sim.scenario.load import load_scenario

        try:
            load_scenario(scenario, overrides, check_start=check_startable)
        except InputError as blamed:
            return blamed
    return _in_scenario(exc, scenario)


def _in_scenario(exc: InputError, scenario: str) -> InputError:
    """``exc`` with the scenario file in front when it names a scenario field and no file (the pools, the
    workload), as it is when it names a trace or cost table already."""
    from sim.scenario.load import field_paths

    head = str(exc).split(": ", 1)[0]
    return InputError(str(exc), source=scenario) if head in field_paths() else exc


def _run_seeds(args, scenario) -> int:
    from sim.app.run import LONG_RUN_REQUESTS, check_startable, summary_json
    from sim.app.seeds import (
        NO_SPREAD_NOTE,
        format_intervals,
        no_spread,
        parse_seeds,
        run_seeds,
        seeds_summary,
    )
    from sim.base.fileio import run_folder
    from sim.scenario.load import dump_resolved

    seeds = parse_seeds(args.seeds, scenario.seed)
    requests = check_startable(scenario, progress=not args.no_progress)
    if requests and requests * len(seeds) >= LONG_RUN_REQUESTS:  # as one run announces its own length
        _note(f"{len(seeds)} seeds x {requests:,} requests = {requests * len(seeds):,} requests on "
              f"{min(args.workers or os.cpu_count() or 1, len(seeds))} worker(s): expect minutes")  # fmt: skip
    with run_folder(args.out, "runs", scenario.name, overwrite=args.overwrite) as (tmp, out):
        df = run_seeds(scenario, seeds, workers=args.workers, progress=not args.no_progress)
        (tmp / "summary.json").write_text(summary_json(seeds_summary(scenario, df)))
        df.to_csv(tmp / "seeds.csv", index=False)
        (tmp / "scenario.yaml").write_text(dump_resolved(scenario))
    print(f"{scenario.name}: {len(seeds)} seeds ({', '.join(map(str, seeds))})")
    if no_spread(df):
        _note(NO_SPREAD_NOTE)
    print(format_intervals(df))
    print(f"wrote {out}/: summary.json, seeds.csv, scenario.yaml")
    return 0


def _add_diff(sub) -> None:
    p = sub.add_parser("diff", help="compare two runs' figures: is B's difference from A outside the noise?",
                       description="Compare the headline figures of two run folders (best: both run with the same "
                       "--seeds, which pairs them seed by seed). Prints A, B, B - A and B / A with their 95% "
                       "intervals and whether the difference is outside the noise (its interval excludes 0). Against a "
                       "single run, the interval is the seeded run's spread for one more seed.")  # fmt: skip
    p.add_argument("a", metavar="RUN_A", help="a run folder (or its summary.json)")
    p.add_argument("b", metavar="RUN_B", help="the run to compare against A")
    p.add_argument("--json", metavar="OUT", default=None, help="also write the comparison as JSON")
    p.set_defaults(func=_cmd_diff, outputs=(("json", "file"),))


def _cmd_diff(args) -> int:
    import json

    from sim.app.seeds import compare, different_workloads, format_compare, read_seed_table
    from sim.base.fileio import check_output_file, write_text_atomic

    if args.json:
        check_output_file(args.json, "--json")
    diffs = compare(read_seed_table(args.a), read_seed_table(args.b))
    if fields := different_workloads(args.a, args.b):
        _note(f"A and B run different workloads (workload.{', workload.'.join(fields)} differ): B - A is the "
              "workload's difference as much as the setup's")  # fmt: skip
    print(f"A = {args.a}\nB = {args.b}")
    print(format_compare(diffs))
    if args.json:
        write_text_atomic(args.json, json.dumps([d.as_dict() for d in diffs], indent=1, allow_nan=False) + "\n")
    return 0


PLAN_HELP = """Answer the sizing questions before a deployment, in one report folder.

From an SGLang launch command (--launch, with --gpu and optionally --bench client commands, as `scenario
from-sglang` reads them) or a scenario, plus a workload (the bench command's, the scenario's, or --trace),
and optional SLOs, it runs every candidate over seeds and writes DIR/report.md with its PNGs, and the same
numbers in DIR/plan.json and CSVs: host memory per candidate --hicache-ratio / --hicache-size pool by pool
against the node's DRAM and SGLang's start-up checks; hit rate, throughput and TTFT against host GB (with
the knee and the clairvoyant ceiling); write policies side by side; L3 prefetch per policy and threshold;
DeepSeek-V4's hit rate lost to the SWA pool; HiSparse against the batch (--decode); and the cheapest
candidate that meets the SLOs, with its launch command.

  hicache-sim plan --scenario scenarios/quickstart.yaml --slo ttft_p90=1.5s --decode scenarios/hisparse_quick.yaml
"""


def _add_plan(sub) -> None:
    p = sub.add_parser("plan", help="size host memory and pick a HiCache setup for SLOs: one report",
                       description=PLAN_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--launch", metavar="CMD", help="the sglang.launch_server command line (quoted)")
    src.add_argument("--scenario", metavar="SCENARIO.yaml", help="a scenario instead of a launch command")
    p.add_argument("--gpu", default=None, help="with --launch: the catalog GPU it runs on (H20, H200, ...)")
    p.add_argument("--bench", action="append", default=[], metavar="CMD",
                   help="with --launch: a bench_serving or bench_multiturn.py command (the workload)")  # fmt: skip
    p.add_argument("--trace", default=None, metavar="TRACE", help="replay this trace (Mooncake or token ids) instead")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a field of the base scenario (repeatable)")  # fmt: skip
    p.add_argument("--slo", default=None, metavar="K=V,...",
                   help="targets, each once and with its unit (s or ms): ttft_p90, ttft_mean, ttft_p99, itl (TPOT mean), "
                        "e.g. ttft_p90=2s,itl=50ms")  # fmt: skip
    p.add_argument("--ratios", default="1,2,4,8,16", metavar="R1,R2,...",
                   help="candidate --hicache-ratio values (default: %(default)s)")  # fmt: skip
    p.add_argument("--sizes", default="", metavar="GB1,GB2,...", help="candidate --hicache-size values (GB per rank)")
    p.add_argument("--node-dram-gb", type=_positive_float, default=None,
                   help="host DRAM available on a node, GB (default: the scenario's hardware.host_mem_gb; "
                        f"with --launch, {NODE_DRAM_GB:g} GB, every command's default)")  # fmt: skip
    p.add_argument("--pinnable-gb", type=_positive_float, default=None,
                   help="host memory the platform lets a node pin, GB (hipHostRegister pins into the GPU's GTT, "
                        "half of DRAM by default); candidates past it are refused and it bounds the largest "
                        "--hicache-ratio that fits (default: the scenario's hardware.pinnable_gb, else the "
                        "platform's rule: none on CUDA, half of --node-dram-gb on ROCm)")  # fmt: skip
    p.add_argument("--gpus-per-node", type=_positive_int, default=8, help="ranks per node (default: %(default)s)")
    p.add_argument("--seeds", default="3", metavar="N|S1,S2,...", help="seeds per timed figure (default: %(default)s)")
    p.add_argument("--decode", default=None, metavar="SCENARIO.yaml",
                   help="a decode-instance scenario for the HiSparse section (throughput against the batch)")  # fmt: skip
    p.add_argument("--batches", default=None, type=_int_list, metavar="B1,B2,...",
                   help="--decode: batch caps to run HiSparse on and off at (default: 1,2,4,8,16,32,64)")  # fmt: skip
    p.add_argument("--out", default=None, metavar="DIR", help="report folder (default: runs/plan-NAME/DATE)")
    p.add_argument("--overwrite", action="store_true", help="replace the report already in --out DIR")
    p.add_argument("--workers", type=_positive_int, default=None, help="parallel runs (default: CPU count)")
    p.add_argument("--executor", choices=["local", "ray"], default="local",
                   help="local processes (default) or Ray tasks, for larger grids")  # fmt: skip
    p.add_argument("--ray-address", default=None, metavar="ADDR", help="join this Ray cluster (default: local)")
    _add_no_progress(p)
    p.set_defaults(func=_cmd_plan, outputs=(("out", "folder"),))


def _cmd_plan(args) -> int:
    import contextlib
    import shlex
    from pathlib import Path

    from sim.app.plan.build import PlanSpec, make_plan, parse_slo
    from sim.app.plan.inputs import base_scenario
    from sim.app.plan.report import write_report
    from sim.app.plan.tierages import headline
    from sim.app.run import check_startable, decode_timeline
    from sim.app.seeds import parse_seeds
    from sim.base.fileio import new_run_dir, staged_dir
    from sim.scenario.load import load_scenario

    sc = base_scenario(scenario=args.scenario, launch=args.launch, gpu=args.gpu, benches=args.bench,
                       trace=args.trace, overrides=args.overrides)  # fmt: skip
    decode = load_scenario(args.decode) if args.decode else None
    if sc.hisparse.enabled:  # a DSA model's colocated HiSparse launch: the server planned without it, and with it
        decode = decode or sc  # in the HiSparse section
        sc = base_scenario(scenario=args.scenario, launch=args.launch, gpu=args.gpu, benches=args.bench,
                           trace=args.trace, overrides=[*(args.overrides or []), "hisparse.enabled=false"])  # fmt: skip
    if args.batches is not None and decode is None:
        raise InputError("--batches: the batch caps of the HiSparse section, which runs on a decode instance: "
                         "add --decode SCENARIO.yaml")  # fmt: skip
    check_startable(sc, progress=not args.no_progress)  # a whole trace is read through first: minutes
    if decode is not None and not decode_timeline(decode):
        raise InputError("--decode: not a decode instance (set cluster.role: decode)", source=args.decode)
    spec = PlanSpec(sc, launch=args.launch, slo=parse_slo(args.slo), ratios=_float_list(args.ratios, "--ratios"),
                    sizes_gb=_float_list(args.sizes, "--sizes") if args.sizes else [],
                    node_dram_gb=args.node_dram_gb if args.node_dram_gb is not None else (
                        sc.hardware.host_mem_gb if args.scenario else NODE_DRAM_GB),
                    gpus_per_node=args.gpus_per_node, pinnable_gb=args.pinnable_gb,
                    seeds=parse_seeds(args.seeds, sc.seed), decode=decode,
                    **({"decode_batches": args.batches} if args.batches else {}))  # fmt: skip
    command = "hicache-sim plan " + shlex.join(sys.argv[2:] if sys.argv[1:2] == ["plan"] else [])
    with contextlib.ExitStack() as stack:  # the report folder: --out (replaced only if it holds a plan) or a new one
        if args.out is None:
            tmp, out = stack.enter_context(new_run_dir("runs", f"plan-{sc.name}"))
        else:
            out = Path(args.out)
            tmp = stack.enter_context(staged_dir(out, overwrite=args.overwrite, marker="plan.json"))
        data = make_plan(spec, workers=args.workers, progress=not args.no_progress,
                         executor=args.executor, ray_address=args.ray_address)  # fmt: skip
        names = write_report(data, tmp, command=command.strip())
    rec = data["recommendation"]
    print(f"plan {printable(sc.name)}: {data['runs']} runs, {len(data['failed_runs'])} failed")
    print(f"recommendation: {rec['choice'] or 'none meets the SLOs'}" + (f"\n  {rec['launch']}" if rec.get("launch") else ""))
    for line in headline(data.get("tier_ages", {}), rec["choice"]):
        print(line)
    print(f"wrote {out}/: {', '.join(names)}")
    return 0


def _float_list(text: str, option: str) -> list[float]:
    """Distinct positive numbers within every input's bounds (a repeated candidate would run twice)."""
    values = []
    for t in (t for t in text.split(",") if t.strip()):
        try:
            values.append(_positive_float(t.strip()))
        except argparse.ArgumentTypeError as exc:
            raise InputError(f"{option} {text}: {t.strip()}: {exc}") from None
    if not values:
        raise InputError(f"{option} {text}: expected numbers, e.g. 1,2,4")
    if len(set(values)) != len(values):
        raise InputError(f"{option} {text}: a value is repeated")
    return values


def _note(message: str) -> None:
    print(f"hicache-sim: note: {printable(message)}", file=sys.stderr)


TREE_HELP = """Answer a stream of prefix-cache calls the way SGLang's own trees record them, and check the answers.

Three formats (examples of each, with their READMEs, in the repository's tests/data/sglang_vectors): SGLang's
RadixCache calls (insert / match / evict / state), the DeepSeek-V4
UnifiedRadixCache calls (config / request / admit / extend / decode / finish / match / state), and the host-tier
calls of SGLang's caches with HiCache on (vectors/hicache: those plus ack / complete_loads / step / evict_host /
evict, for plain models and V4; answers add host hits, loads, host usage, the write-through window and the
host-tier events in order). Each line is a
call, or {"call": ..., "expect": ...}. Prints one JSON answer per call with SGLang's field names; where expects
are present it prints the agreement on stderr and exits 1 on any mismatch. Record your own SGLang version's
answers in this format to check the model against it.
"""


def _add_tree(sub) -> None:
    p = sub.add_parser("tree", help="answer a call stream like SGLang's radix trees; check recorded answers",
                       description=TREE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("calls", metavar="CALLS.jsonl", help="call stream (vectors format; expects optional)")
    p.add_argument("--quiet", action="store_true", help="print only the agreement and mismatches, not every answer")
    p.set_defaults(func=_cmd_tree)


def _call_file(arg: str):
    """A call stream's path, refused in one line unless it is a regular file (a folder, a pipe, a device)."""
    from sim.base.inputs import check_input

    return check_input(arg, "call stream (JSON lines)")


def _cmd_tree(args) -> int:
    import json

    from sim.offline.treecalls import compare, run_calls

    path = _call_file(args.calls)
    answered = list(run_calls(path))  # every call first: a bad one is refused before any answer is printed
    if not answered:
        raise InputError("holds no calls", source=args.calls)
    checked = agreed = 0
    for lineno, answer, expect in answered:
        if not args.quiet:
            print(json.dumps(answer, separators=(",", ":")))
        if expect is None:
            continue
        checked += 1
        wrong = compare(answer, expect)
        if wrong:
            print(f"{path}:{lineno}: call {answer.get('id', '?')}: {'; '.join(wrong)}", file=sys.stderr)
        else:
            agreed += 1
    if checked:
        print(f"{agreed}/{checked} answers agree with the recorded ones", file=sys.stderr)
    return 0 if agreed == checked else 1


HISPARSE_HELP = """Answer a stream of HiSparse decode calls as SGLang 0.5.23's HiSparseCoordinator and its swap-in
kernel decide them, and check the answers against a recording.

Calls (one JSON object a line): config (device_buffer_size, top_k, layers, ...; "family": "dsa" for DeepSeek
V3.2 / GLM-5.x, with their IndexShare fields under index_share), arrive (rid, prompt_len; "admission": "staging"
for a colocated request, else a PD decode request whose prompt is on the host), step (reqs: [{rid, seq_len,
topk}] in batch order; topk is one row of ids, -1 padding, or one row per layer, null on a DSA skip layer; ids
are compressed for V4, raw positions for DSA), finish (rid). Prints one JSON answer per (step, request, layer),
in SGLang's call order (a step's layers in turn, each over the batch): the fast path, hits, misses, loads as
[token, slot] in miss order, the ids they evicted, the D2H backup, the resident count, a digest of the LRU order,
and for DSA the buffer's slots and, on a skip layer, the anchor it replays and the items it copied. With
--expect, prints the agreement per field on stderr and exits 1 on any mismatch. Format and SGLang's recorded
streams (gzipped, read as they are), in the repository's tests/data/sglang_vectors/hisparse.
"""


def _add_hisparse(sub) -> None:
    p = sub.add_parser("hisparse", help="answer HiSparse decode calls like SGLang's coordinator; check recorded answers",
                       description=HISPARSE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("calls", metavar="CALLS.jsonl", help="call stream (config / arrive / step / finish; .gz read too)")
    p.add_argument("--expect", metavar="ANSWERS.jsonl", default=None,
                   help="recorded answers, one line per (step, request, layer): print the agreement per field")
    p.add_argument("--quiet", action="store_true", help="print only the agreement and mismatches, not every answer")
    p.set_defaults(func=_cmd_hisparse)


def _cmd_hisparse(args) -> int:
    import json

    from sim.offline.hisparsecalls import agreement, read_answers, run_calls

    path = _call_file(args.calls)
    expected = read_answers(_call_file(args.expect)) if args.expect else None  # both read before any output
    answered = list(run_calls(path))
    if not answered:
        raise InputError("holds no calls", source=args.calls)
    answers = [a for _, rows in answered for a in rows]
    if not args.quiet:
        _emit(json.dumps(a, separators=(",", ":")) for a in answers)
    if expected is None:
        return 0
    per_field, wrong = agreement(answers, expected)
    for i, diff in wrong[:10]:
        row = answers[i] if i < len(answers) else {}
        print(f"{args.expect}:{i + 1}: step {row.get('step', '?')} rid {row.get('rid', '?')} layer "
              f"{row.get('layer', '?')}: {'; '.join(diff)}"[:600], file=sys.stderr)  # fmt: skip
    if len(wrong) > 10:
        print(f"... and {len(wrong) - 10} more rows differ", file=sys.stderr)
    rows = max(len(answers), len(expected))
    fields = ", ".join(f"{k} {a}/{n}" for k, (a, n) in per_field.items())
    print(f"{rows - len(wrong)}/{rows} rows agree ({len(answers)} answered, {len(expected)} recorded); per field: "
          f"{fields}", file=sys.stderr)  # fmt: skip
    return 0 if not wrong else 1


class _StdoutFailed(Exception):
    """Standard output refused what was printed (a full disk, a file-size limit): one line, exit status 2."""


def _emit(lines) -> None:
    """Lines to standard output. Where it cannot take them all (ENOSPC, EFBIG under ``ulimit -f``), the lines
    already written stay where they went, so the one line says so instead of claiming nothing was kept; the rest
    of the buffer goes nowhere, so the interpreter's last flush does not fail again."""
    try:
        for line in lines:
            sys.stdout.write(line + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        raise _StdoutFailed(f"standard output: {os_error_text(exc)}; what was printed before it is incomplete") from None


def _add_validate(sub) -> None:
    p = sub.add_parser("validate", help="check a scenario file and print what it resolves to",
                       description="Validate a scenario YAML: unknown keys, wrong types and impossible sizes "
                       "are reported with the YAML path of the field; exit status 2 on error.")  # fmt: skip
    p.add_argument("scenario", metavar="SCENARIO.yaml")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a field as run does, and check the result (repeatable)")  # fmt: skip
    p.set_defaults(func=_cmd_validate)


def _cmd_validate(args) -> int:
    from sim.app.run import check_startable
    from sim.scenario.validate import validate_file

    print(validate_file(args.scenario, args.overrides, check_start=check_startable))
    return 0


def _load_model(name: str, page_size: int | None = None):
    """A catalog name, or a YAML file holding a model description (see ``sim.model.pools.model_from_dict``)."""

    from sim.model.pools import get_model, model_from_dict

    if name.endswith((".yaml", ".yml")):
        from sim.base.inputs import parse_yaml, read_text

        data = parse_yaml(read_text(name, "model file"), name)
        if isinstance(data, dict) and isinstance(data.get("model"), dict):
            data = data["model"]
        if not isinstance(data, dict):
            raise InputError("expected a mapping with page_size and pools", source=name)
        return model_from_dict(data, source=name)
    return get_model(name, page_size=page_size)


def _add_pools(sub) -> None:
    p = sub.add_parser(
        "pools",
        help="print a model's registered pools and bytes per page",
        description="Print the pools HiCache registers for a model: anchor, hit policy, bytes per page.",
    )
    p.add_argument("model", metavar="MODEL",
                   help="what run takes: a catalog name (deepseek-v4-flash, deepseek-v4-pro, deepseek-v4.1-flash, "
                        "generic), a bundled config (qwen3-14b), a Hugging Face id aiconfigurator-core ships, a "
                        "config.json, or a model YAML file")  # fmt: skip
    p.add_argument("--page-size", type=_positive_int, default=None, help="tokens per page (default: the model's)")
    p.add_argument("--platform", choices=("cuda", "rocm"), default="cuda",
                   help="rocm: DeepSeek V4 on ROCm's unified KV layout (SGLANG_HACK_FLASHMLA_BACKEND="
                        "unified_kv_triton): no SWA or state host pools, 1,024-B bf16 rows")  # fmt: skip
    p.add_argument("--unified-kv-fp8", action="store_true",
                   help="with --platform rocm: SGLANG_DSV4_UNIFIED_KV_FP8=1 (gfx95): fp8 nope rows and bf16 rope pools")
    p.add_argument("--fp4-indexer", action="store_true", help="--enable-deepseek-v4-fp4-indexer's C4 indexer pools")
    p.add_argument("--tp-size", type=_positive_int, default=1, help="ranks a config's KV heads are split over (default 1)")
    p.set_defaults(func=_cmd_pools)


def _cmd_pools(args) -> int:
    from sim.model.modelref import resolve_model
    from sim.model.pools import pool_table

    if args.model.endswith((".yaml", ".yml")):
        model = _load_model(args.model, args.page_size)
    else:
        model = resolve_model(args.model, page_size=args.page_size, platform=args.platform,
                              unified_fp8=args.unified_kv_fp8, fp4_indexer=args.fp4_indexer, tp_size=args.tp_size)  # fmt: skip
    print(pool_table(model))
    return 0


REPLAY_HELP = """Replay a trace in request order (no clock) through the L1/L2 residency model and report hit rates.

Hit rates: "by tokens" = input tokens served from the cache / all input tokens; "by pages" = whole
input pages served from the cache / all whole input pages. L1 hit = device prefix; L1+L2 = device
prefix plus the host hit loaded back (a host hit below --load-back-threshold is recomputed and does not
count). A match is capped at input_len - 1 tokens, as SGLang always computes the last token.

The clairvoyant bound beside them is Belady's rule (evict the page whose next use is furthest away) at the
same L1 and L1+L2 capacities: the best any eviction policy could do on this trace, a reference that no
server can implement because it reads the future. --no-bound skips it. The bound, --policy boundary and
--eviction-policy apply to the single-pool residency model; the V4 cache (models with SWA) has neither yet.
"""


def _add_trace_args(p) -> None:
    """The trace and tree options ``replay`` and ``compare`` share."""
    p.add_argument("--load-back-threshold", type=_nonneg_int, default=10,
                   help="min host-hit tokens worth loading back (default: %(default)s)")  # fmt: skip
    p.add_argument("--page-size", type=_positive_int, default=None,
                   help="tokens per tree page (default: the trace's block size, else the model's page size)")  # fmt: skip
    p.add_argument("--block-size", type=_positive_int, default=None,
                   help="tokens per hash id (default: the format's: Mooncake 512, Bailian 16; Weka files say)")  # fmt: skip
    p.add_argument("--format", default="auto", choices=["auto", "mooncake", "tokens", "bailian", "weka"],
                   help="trace format (auto: from the first record)")  # fmt: skip


def _trace_block(args, fmt: str) -> int | None:
    """The block size of a block-hashed trace (the default tree page for a model without a fixed page)."""
    if fmt == "weka" and args.block_size is not None:
        raise InputError("--block-size: a Weka trace states its own block size in each trajectory (block_size), which its hash_ids follow")
    return args.block_size or {"mooncake": 512, "bailian": 16, "weka": 64}.get(fmt)


def _add_replay(sub) -> None:
    p = sub.add_parser("replay", help="replay a trace in request order and report hit rates",
                       description=REPLAY_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("trace", metavar="TRACE", help="Mooncake, Qwen-Bailian or Weka/AgentX JSONL (hash_ids), or token-id JSONL")
    _add_no_progress(p)
    p.add_argument("--model", default="deepseek-v4-flash", help="catalog name or model YAML (default: %(default)s)")
    l1 = p.add_mutually_exclusive_group()
    l1.add_argument("--l1-pages", type=_positive_int, help="device (L1) capacity in pages (default: unbounded)")
    l1.add_argument("--l1-bytes", help="device capacity in bytes, e.g. 60GiB, converted through the model's pools")
    l2 = p.add_mutually_exclusive_group()
    l2.add_argument("--l2-pages", type=_nonneg_int, help="host (L2) capacity in pages; 0 disables L2 (default: 0)")
    l2.add_argument("--l2-bytes", help="host capacity in bytes, e.g. 200GB")
    p.add_argument("--policy", default="write_through",
                   choices=["write_through", "write_through_selective", "write_back", "boundary"],
                   help="write policy; boundary: SGLang's policy-simulator boundary_l1_l2 (default: %(default)s)")
    p.add_argument("--eviction-policy", default="lru", choices=EVICTION_POLICIES,
                   help="device victim order, SGLang's --radix-eviction-policy (default: %(default)s)")
    p.add_argument("--eviction-config", metavar="JSON", default=None,
                   help='its parameters, as SGLang\'s --radix-eviction-policy-config, e.g. \'{"protected_threshold": 4}\'')
    p.add_argument("--no-bound", action="store_true",
                   help="skip the clairvoyant bound (a second pass over the trace, about as long as the replay)")  # fmt: skip
    p.add_argument("--granularity", choices=["node", "page"], default="node",
                   help="node: SGLang's trees (runs of pages split on demand, evicted whole; a partial last block is "
                        "never cached); page: SGLang's policy simulator's unit, one node per page and every hash id "
                        "a page, the partial last block too (single-pool models; default: %(default)s)")  # fmt: skip
    _add_trace_args(p)
    p.add_argument("--swa-ratio", type=_ratio, default=0.1, help="SWA pool size as a share of full pages, in (0, 1]")
    p.add_argument("--max-requests", type=_positive_int, default=None, help="replay only the first N requests")
    p.add_argument("--json", metavar="OUT", help="also write the summary and metrics as JSON")
    p.set_defaults(func=_cmd_replay, outputs=(("json", "file"),))


def _cmd_replay(args) -> int:
    import json

    from sim.base.fileio import check_output_file, write_text_atomic
    from sim.cache.hicache import HiCache
    from sim.cache.v4.swacache import v4_cache
    from sim.offline.replay import check_fits_v4, format_table, pages_for_bytes, parse_size, replay, replay_v4
    from sim.workload.traces import detect_format, trace_requests

    if args.json:
        check_output_file(args.json, "--json")
    model = _load_model(args.model)
    if not (0 < args.swa_ratio <= 1):
        raise InputError(f"--swa-ratio: must be in (0, 1], got {args.swa_ratio}")
    fmt = detect_format(args.trace) if args.format == "auto" else args.format
    v4 = model.has_swa  # SGLang's V4 cache: FULL + SWA tree over 256-token pages (sim/cache/v4/swacache.py)
    block = _trace_block(args, fmt)
    page = args.page_size or (block if not v4 else None) or model.page_size
    # The policy simulator's unit: one node per hash id, the partial last block a page of its own. The trace is
    # read as it is replayed, so memory does not grow with it; a first pass checks every record and counts them.
    requests = trace_requests(args.trace, fmt=fmt, block_size=args.block_size, page_size=page,
                              max_requests=args.max_requests, whole_blocks=args.granularity == "page")  # fmt: skip
    start = time.perf_counter()
    seen = requests.survey(lambda n_in, n_out: 0.0, not args.no_progress)
    read_s = time.perf_counter() - start  # the checking pass: reading, as replay's reads are
    l1 = args.l1_pages
    if args.l1_bytes:
        l1 = pages_for_bytes(model, parse_size(args.l1_bytes, "--l1-bytes"), page, args.swa_ratio)
    l2 = args.l2_pages or 0
    if args.l2_bytes:
        l2 = pages_for_bytes(model, parse_size(args.l2_bytes, "--l2-bytes"), page, args.swa_ratio)
    for option, pages in (("--l1-bytes", l1), ("--l2-bytes", l2 if args.l2_bytes else 1)):
        if pages is not None and pages < 1:
            raise InputError(f"{option}: smaller than one {page}-token page of {model.name}")
    if v4:
        if args.policy == "boundary" or args.eviction_policy != "lru" or args.eviction_config or \
                args.granularity != "node":
            raise InputError(f"--policy boundary, --granularity and --eviction-policy/--eviction-config apply to the "
                             f"single-pool residency model, not yet to the V4 cache of {model.name} (try --model generic)")
        def make():
            return v4_cache(model, l1_pages=l1, l2_pages=l2, policy=args.policy, page=page,
                            load_back_threshold=args.load_back_threshold, swa_ratio=args.swa_ratio)  # fmt: skip

        check_fits_v4(make(), seen.largest, args.trace)  # before the replay, on pools of their own
        result = replay_v4(make(), model, requests, args.trace, progress=not args.no_progress, read_s=read_s)
    else:
        cache = HiCache(model, l1_pages=l1, l2_pages=l2, policy=args.policy, page_tokens=page,
                        load_back_threshold=args.load_back_threshold, eviction_policy=args.eviction_policy,
                        eviction_config=_json_object(args.eviction_config, "--eviction-config"),
                        one_page_nodes=args.granularity == "page")  # fmt: skip
        result = replay(cache, requests, args.trace, progress=not args.no_progress, bound=not args.no_bound,
                        read_s=read_s)
    print(format_table(result))
    if args.json:
        write_text_atomic(args.json, json.dumps(result.summary(), indent=2, default=str, allow_nan=False) + "\n")
    return 0


COMPARE_HELP = """Replay one trace under several policies and capacities and print one table.

A policy is WRITE[+EVICTION]: write policy write_through (default), write_through_selective, write_back or
boundary; eviction lru (default), lfu, slru, fifo, filo or mru; e.g. boundary+lfu. "clairvoyant" adds the
bound (Belady's rule: the best any eviction could do knowing the trace's future; no server can implement it).
Hit rates are by whole input pages, as SGLang's policy simulator reports them. Failed H: host reservations
that could not be met; dedup: host copies of device pages given up for L2 room (boundary).
"""


def _add_compare(sub) -> None:
    p = sub.add_parser("compare", help="replay a trace under several policies and capacities, one table",
                       description=COMPARE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("trace", metavar="TRACE", help="Mooncake, Qwen-Bailian or Weka/AgentX JSONL (hash_ids), or token-id JSONL")
    _add_no_progress(p)
    p.add_argument("--policies", required=True, metavar="P1,P2,...",
                   help="e.g. write_through,boundary,write_through+lfu,clairvoyant")  # fmt: skip
    p.add_argument("--l1-pages", required=True, metavar="N1,N2,...", type=_int_list, help="L1 capacities in pages")
    p.add_argument("--l2-pages", default="0", metavar="M1,M2,...",
                   help="L2 capacities: pages, or multiples of L1 such as 0.5x,2x; 0 = L2 off (default: 0)")  # fmt: skip
    p.add_argument("--model", default="generic",
                   help="catalog name or model YAML without sliding-window pools (default: %(default)s)")
    _add_trace_args(p)
    p.add_argument("--max-requests", type=_positive_int, default=None, help="replay only the first N requests")
    p.add_argument("--workers", type=_positive_int, default=None,
                   help="replays run at once, in worker processes (default: CPU count; 1 = in this process)")
    p.add_argument("--csv", metavar="OUT.csv", help="also write the table as CSV")
    p.add_argument("--plot", metavar="FILE.png|FILE.svg", help="also plot hit rate vs L1 capacity per policy")
    p.set_defaults(func=_cmd_compare, outputs=(("csv", "file"), ("plot", "image")))


def _in_workers(calls: list, workers: int | None, progress: bool) -> list:
    """Each call's result, in order, from up to ``workers`` processes; a call that raised is an internal bug."""
    from sim.app.parallel import run_calls

    outcomes = run_calls(calls, workers=workers, progress=progress, desc="compare")
    failed = next((o["error"] for o in outcomes if o["status"] != "ok"), None)
    if failed is not None:
        raise RuntimeError(f"a compare replay failed: {failed}")
    return [o["value"] for o in outcomes]


def _cmd_compare(args) -> int:
    from sim.base.fileio import write_text_atomic
    from sim.offline.compare import compare, format_compare, parse_l2, parse_policies
    from sim.workload.traces import detect_format, read_trace

    policies = parse_policies(args.policies)
    l2 = parse_l2(args.l2_pages)
    model = _load_model(args.model)
    if model.has_swa:
        raise InputError(f"--model {args.model}: compare runs the single-pool residency model; the V4 cache of "
                         f"models with sliding-window pools has no boundary policy or eviction orders yet")
    fmt = detect_format(args.trace) if args.format == "auto" else args.format
    page = args.page_size or _trace_block(args, fmt) or model.page_size
    requests = read_trace(args.trace, fmt=fmt, block_size=args.block_size, page_size=page,
                          max_requests=args.max_requests)  # fmt: skip
    df = compare(requests, model, policies, args.l1_pages, l2, page_tokens=page,
                 load_back_threshold=args.load_back_threshold, workers=args.workers or os.cpu_count() or 1,
                 mapper=lambda calls: _in_workers(calls, args.workers, not args.no_progress))  # fmt: skip
    print(format_compare(df))
    if args.csv:
        write_text_atomic(args.csv, df.to_csv(index=False))
        print(f"wrote {args.csv}")
    if args.plot:
        from sim.app.plot import plot_compare

        print(f"wrote {plot_compare(df, args.plot)}")
    return 0


SWEEP_HELP = """Run a scenario over the cartesian product of --grid axes, in parallel, and tabulate the results.

Writes DIR/points/<point_id>.json as each point finishes (rerunning the same sweep into DIR resumes it: finished
points are skipped, failed ones tried again), DIR/sweep.parquet (one row per point: point_id, grid columns by
dotted path, seed, status "ok" or "failed", error, flat metrics) and DIR/sweep.yaml (the resolved base scenario and
the grid; pass it back as SCENARIO to rerun). Every point is validated before any runs; a DIR holding another
sweep is refused unless --overwrite. A point that fails is recorded with its reason and the others go on; the
command then exits 2.
"""


def _add_sweep(sub) -> None:
    p = sub.add_parser("sweep", help="run a scenario over a parameter grid and tabulate the results",
                       description=SWEEP_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("scenario", metavar="SCENARIO.yaml", help="scenario file, or a sweep.yaml a sweep wrote")
    p.add_argument("--grid", action="append", default=[], metavar="KEY.PATH=V1,V2,...",
                   help="one axis, e.g. --grid hicache.load_back_threshold=1,10,64 (repeatable)")  # fmt: skip
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a field of the base scenario (repeatable)")  # fmt: skip
    p.add_argument("--out", metavar="DIR", required=True,
                   help="sweep folder; rerunning the same sweep there resumes it (finished points are kept)")  # fmt: skip
    p.add_argument("--overwrite", action="store_true", help="replace a different sweep already in --out DIR")
    p.add_argument("--executor", choices=["local", "ray"], default="local",
                   help="local processes (default) or Ray tasks")  # fmt: skip
    p.add_argument("--workers", type=_positive_int, default=None, help="parallel points (default: CPU count)")
    p.add_argument("--ray-address", default=None, metavar="ADDR", help="join this Ray cluster (default: local)")
    p.add_argument("--seeds", default=None, metavar="N|S1,S2,...",
                   help="run every point at N seeds (or these seeds): a seed axis, and the table printed and "
                        "written (DIR/sweep_seeds.csv) as mean and 95%% interval over seeds")  # fmt: skip
    _add_no_progress(p)
    p.set_defaults(func=_cmd_sweep, outputs=(("out", "folder"),))


LARGE_SWEEP_POINTS = 1_000  # a sweep this large is said before it starts (hours at a few seconds a point)


def _cmd_sweep(args) -> int:
    from sim.app.sweep import format_rows, parse_grid, plan_sweep, run_sweep

    grid = list(args.grid) + ([_seed_axis(args)] if args.seeds is not None else [])
    axes = parse_grid(grid)
    if (n := math.prod(len(a.values) for a in axes)) >= LARGE_SWEEP_POINTS:  # said before each point is checked
        _note(f"{n:,} points ({' x '.join(str(len(a.values)) for a in axes)}), each checked now and then a whole "
              f"run, on {args.workers or os.cpu_count() or 1} worker(s): the progress bar gives the time left; "
              "interrupt it and rerun the same command to resume")  # fmt: skip
    plan = plan_sweep(args.scenario, grid, args.overrides)  # validates every point; writes nothing
    # over seeds (--seeds, --grid seed=..., or a resumed seeded sweep's sweep.yaml): the intervals too
    seeded = any(a.key == "seed" and len(a.values) > 1 for a in plan.axes)
    _note_inert([a.key for a in plan.axes], [p.scenario for p in plan.points], "--grid")
    if args.executor == "ray":
        _note_ray_start(len(plan.points), args.ray_address)
    df = run_sweep(plan, args.out, executor=args.executor, workers=args.workers, ray_address=args.ray_address,
                   progress=not args.no_progress, overwrite=args.overwrite)  # fmt: skip
    if seeded:
        from sim.app.seeds import NO_SPREAD_NOTE, aggregate, format_intervals, no_spread
        from sim.base.fileio import write_text_atomic

        keys = [a.key for a in plan.axes if a.key != "seed"]
        if no_spread(df, keys):
            _note(NO_SPREAD_NOTE)
        print(format_intervals(df, keys))
        write_text_atomic(f"{args.out}/sweep_seeds.csv", aggregate(df, keys).to_csv(index=False))
    else:
        print(format_rows(df, [a.key for a in plan.axes]))
    also = ", sweep_seeds.csv" if seeded else ""
    print(f"wrote {args.out}/sweep.parquet ({len(df)} of {len(plan.points)} points), sweep.yaml{also}, points/")
    failed = df[df["status"] == "failed"] if "status" in df else df.iloc[:0]
    if len(failed):
        first = failed.iloc[0]
        raise InputError(f"{len(failed)} of {len(plan.points)} points failed (point {first['point_id']}: "
                         f"{first['error']}); their rows have status 'failed', the others are whole")  # fmt: skip
    return 0


def _note_inert(keys: list[str], scenarios: list, how: str) -> None:
    """Say which given knobs cannot act in these scenarios (prefetch without L3, load-back without L2, ...)."""
    from sim.scenario.knobs import inert_notes

    for line in inert_notes(keys, scenarios, how):
        _note(line)


def _note_ray_start(points: int, address: str | None) -> None:
    """Ray repays its start (tens of seconds for a local cluster) only with more CPUs than this machine has.
    An address nothing answers at is the one line said (``check_reachable``), not a note before it."""
    from sim.app.parallel import check_reachable

    if address and address != "auto":
        check_reachable(address)
    cpus = os.cpu_count() or 1
    if points <= cpus:
        _note(f"--executor ray: {points} points fit this machine's {cpus} CPUs at once; local processes (the "
              "default executor) run them without Ray's start, which takes tens of seconds")  # fmt: skip
    elif address is None:
        _note("--executor ray without --ray-address starts a Ray cluster on this machine: the same CPUs local "
              "processes (the default) use, after tens of seconds of start; join a larger cluster to gain")  # fmt: skip


def _seed_axis(args) -> str:
    """``--seeds`` as a ``seed`` grid axis, counted from the base scenario's seed."""
    from pathlib import Path

    from sim.app.seeds import parse_seeds
    from sim.app.sweep import _read_sweep_file
    from sim.scenario.load import load_scenario

    if any(g.partition("=")[0].strip() == "seed" for g in args.grid):
        raise InputError("--seeds and --grid seed=... both give the seeds; use one")
    recorded = _read_sweep_file(Path(args.scenario))
    if "," in str(args.seeds):
        base = 0
    elif recorded is not None:
        base = int(recorded["scenario"].get("seed", 0))
    else:
        base = load_scenario(args.scenario, args.overrides).seed
    return "seed=" + ",".join(map(str, parse_seeds(args.seeds, base)))


def _add_plot(sub) -> None:
    p = sub.add_parser("plot", help="plot a sweep, HiSparse miss counts or a run's occupancy",
                       description="Plot one of: threshold (a sweep.parquet or its folder: hit rate, TTFT and "
                       "input throughput vs a grid parameter), misses (misses.parquet: misses per step and "
                       "their distribution per policy and buffer size), occupancy (a run's timeseries.parquet "
                       "or its folder: L1/L2 pages and queues over time), rounds (a run's requests.parquet or its folder: TTFT "
                       "and hit rate per bench_multiturn round or bench_serving step), ages (a run's summary.json or its folder: "
                       "page age at hit and at eviction per tier, log-scaled seconds).")  # fmt: skip
    p.add_argument("kind", choices=["threshold", "misses", "occupancy", "rounds", "ages"], help="what to plot")
    p.add_argument("input", metavar="INPUT", help="parquet file or the folder holding it")
    p.add_argument("--out", metavar="FILE.png|FILE.svg", required=True, help="image to write")
    p.add_argument("--x", default=None, metavar="PARAM", help="threshold: grid column on the x axis")
    p.add_argument("--y", nargs="+", default=None, metavar="METRIC", help="threshold: metric columns, one panel each")
    p.set_defaults(func=_cmd_plot, outputs=(("out", "image"),))


def _cmd_plot(args) -> int:
    from sim.app.plot import plot

    print(f"wrote {plot(args.kind, args.input, args.out, x=args.x, y=args.y)}")
    return 0


def _ratio(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not (math.isfinite(value) and 0 < value <= 1):
        raise argparse.ArgumentTypeError(f"must be in (0, 1], got {text}")
    return _bounded(value)


def _bounded(value: int | float) -> int | float:
    """A command-line number holds to the bounds every input has (sim.base.inputs), as a scenario's do."""
    from sim.base.inputs import number_problem

    problem = number_problem(value)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return value


FROM_SGLANG_HELP = """Write a scenario YAML from an SGLang launch command and, optionally, bench client commands.

Every launch_server flag is either mapped to a scenario field or listed as ignored (in the YAML's header and
on stdout); a flag SGLang 0.5.23 does not accept is an error (0.5.2's spellings, such as --cuda-graph-max-bs,
are accepted). Paste commands as typed: ENV=value assignments (mapped when they change what is modelled, else
listed), numactl/taskset/env/nohup prefixes, python3 -m sglang.launch_server or sglang serve MODEL. Each --bench
bench_serving command becomes one step (run in order); a bench_multiturn.py command becomes the multi-turn
workload; an `aiperf profile` command replaying Weka trajectories (InferenceX's AgentX) becomes a lane
replay: give the local corpus with --input-file (--public-dataset only names it), unknown aiperf options are
an error, unmodelled ones listed. The GPU is not on the command line: name it with --gpu (the KV memory then follows as SGLang sizes it).

  hicache-sim scenario from-sglang --gpu A10 --out m2.yaml \\
    --launch "numactl --cpunodebind=0 python3 -m sglang.launch_server --model-path Qwen/Qwen3-14B --tp-size 2" \\
    --bench "python bench_multiturn.py --num-clients 20 --num-rounds 10 --disable-auto-run"
"""


def _add_scenario(sub) -> None:
    p = sub.add_parser("scenario", help="make scenarios (from-sglang: from SGLang command lines)")
    inner = p.add_subparsers(dest="scenario_command", required=True, metavar="{from-sglang}")
    f = inner.add_parser("from-sglang", help="write a scenario from an SGLang launch (+ bench) command",
                         description=FROM_SGLANG_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    f.add_argument("--launch", required=True, metavar="CMD", help="the sglang.launch_server command line (quoted)")
    f.add_argument("--bench", action="append", default=[], metavar="CMD",
                   help="a bench_serving, bench_multiturn.py or aiperf profile command line (repeatable: one step each)")  # fmt: skip
    f.add_argument("--gpu", required=True, help="catalog GPU the server ran on (H20, H100, H200, A10, ...)")
    f.add_argument("--name", default=None, help="scenario name (default: from the model path)")
    f.add_argument("--model-config", default=None, metavar="CONFIG.json",
                   help="the model's config.json when --model-path is neither local nor bundled")  # fmt: skip
    f.add_argument("--host-mem-gb", type=_positive_float, default=None, help="host DRAM available for the L2 pools (all ranks), GB (default: "
                   f"{NODE_DRAM_GB:g} GB, every command's default)")
    f.add_argument("--pinnable-gb", type=_positive_float, default=None,
                   help="host memory the platform lets the ranks pin, GB (all ranks): hardware.pinnable_gb (default: "
                        "the platform's rule, none on CUDA, half of --host-mem-gb on ROCm; the node's "
                        "/sys/class/drm/card0/device/mem_info_gtt_total on ROCm)")  # fmt: skip
    f.add_argument("--sglang-version", default="0.5.23", metavar="V",
                   help="the server's SGLang version, whose defaults fill the memory fraction and chunk size "
                        "the command leaves out: 0.5.23 (default) or 0.5.2")  # fmt: skip
    f.add_argument("--accept-length", type=_positive_float, default=None, metavar="X",
                   help="with --speculative-algorithm: the run's mean tokens per verify pass (its accept len)")
    f.add_argument("--server-log", default=None, metavar="FILE",
                   help="the server's startup log: the pool capacities, chunk size and request cap it printed "
                        "replace the derived ones (a derived pool more than a page off is reported)")  # fmt: skip
    f.add_argument("--out", default=None, metavar="FILE.yaml", help="write here (default: stdout)")
    f.set_defaults(func=_cmd_from_sglang, outputs=(("out", "file"),))


def _cmd_from_sglang(args) -> int:
    from sim.app.run import check_startable
    from sim.base.fileio import check_output_file, write_text_atomic
    from sim.interop.fromsglang import from_sglang, to_yaml

    if args.out is not None:
        check_output_file(args.out, "--out")
        _check_replaceable(args.out)
    conv = from_sglang(args.launch, args.bench, gpu=args.gpu, name=args.name, model_config=args.model_config,
                       host_mem_gb=args.host_mem_gb, sglang_version=args.sglang_version,
                       accept_length=args.accept_length, server_log=args.server_log,
                       pinnable_gb=args.pinnable_gb)  # fmt: skip
    check_startable(conv.check())  # the result must load, and start: the workload it names read and checked
    for line in conv.notes:
        print(printable(f"note: {line}"), file=sys.stderr)
    if args.out is not None:  # the paths typed here, written relative to the scenario's own folder
        from pathlib import Path

        from sim.scenario.load import rebase_paths

        conv.scenario = rebase_paths(conv.scenario, Path.cwd(), Path(args.out).parent)
    text = to_yaml(conv)
    if args.out is None:
        print(text, end="")
        return 0
    write_text_atomic(args.out, text)
    print(printable(f"wrote {args.out}: {len(conv.mapped)} flags mapped, {len(conv.ignored)} ignored"))
    for line in conv.ignored:
        print(printable(f"  ignored {line}"))
    for line in conv.checks:
        print(printable(f"  log vs derived: {line}"))
    return 0


def _check_replaceable(out: str) -> None:
    """An existing file at ``--out`` is replaced only if from-sglang wrote it (its first line is the header):
    a typo never overwrites the user's notes."""
    from sim.interop.fromsglang import HEADER

    try:
        with open(out, "rb") as fh:
            first = fh.read(len(HEADER)).decode("utf-8", "replace")
    except FileNotFoundError:
        return
    except OSError:
        return  # check_output_file named what keeps it from being written
    if first != HEADER:
        raise InputError("--out: the file exists and is not a scenario from-sglang wrote; remove it or give "
                         "another name", source=out)  # fmt: skip


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {value}")
    return _bounded(value)


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not _bounded(value) > 0:  # the bounds first: they name a nan or an inf as such
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _json_object(text: str | None, option: str) -> dict | None:

    if text is None:
        return None
    from sim.base.inputs import numbers_problem, parse_json

    value = parse_json(text, option)
    if (found := numbers_problem(value)) is not None:
        raise InputError(f"{option}: {found[0]}: {found[1]}")
    if not isinstance(value, dict):
        raise InputError(f"{option}: expected a JSON object, got {text!r}")
    return value


def _int_list(text: str) -> list[int]:
    return [_positive_int(t.strip()) for t in text.split(",") if t.strip()] or _positive_int("")


def _nonneg_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return _bounded(value)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except _UsageError as exc:
        print(f"hicache-sim: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    edited = stale()
    if edited:
        print(f"hicache-sim: warning: {', '.join(edited)} changed after being compiled, and the compiled copy is what "
              "runs: rebuild with HICACHE_SIM_COMPILE=1 pip install -e .", file=sys.stderr)  # fmt: skip
    main_thread = threading.current_thread() is threading.main_thread()
    # `kill`, `timeout`; SIGHUP: the terminal or ssh session closed. Both end as Ctrl-C does, staging removed.
    previous = {s: signal.signal(s, _terminated) for s in (signal.SIGTERM, signal.SIGHUP)} if main_thread else {}
    try:
        check_outputs(args)
        code = int(args.func(args) or 0)
        sys.stdout.flush()  # a closed pipe shows here, inside the handler below, not at the interpreter's exit
        return code
    except _StdoutFailed as exc:
        print(f"hicache-sim: error: {exc}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `| head`: the reader has gone; end as a shell would, without a word
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's last flush does not fail again
        return 128 + signal.SIGPIPE
    except WriteError as exc:  # the output could not be written: what the command kept is its to say
        print(f"hicache-sim: error: {printable(str(exc))}; {_kept(args)}", file=sys.stderr)
        return 2
    except InputError as exc:  # one line, whatever of the user's text it quotes (sim.base.text.printable)
        print(f"hicache-sim: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    except BrokenExecutor:  # a worker process killed (the OOM killer, a signal): no traceback of the pool's
        print(f"hicache-sim: error: a worker process died before its point finished (out of memory, or killed); "
              f"{_kept(args)}", file=sys.stderr)  # fmt: skip
        return 2
    except OSError as exc:
        if exc.errno not in _ENVIRONMENT_ERRNOS:
            raise  # a bug: keep the traceback
        where = f"{printable(str(exc.filename))}: " if exc.filename else ""
        print(f"hicache-sim: error: {where}{os_error_text(exc)}; {_kept(args)}", file=sys.stderr)
        return 2
    except _Terminated as exc:
        why = "hung up (SIGHUP: the terminal closed)" if exc.signum == signal.SIGHUP else "terminated"
        print(f"hicache-sim: {why}; {_kept(args)}", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        if main_thread:  # the command is ending: a second SIGINT (`timeout` signals the process group as well)
            signal.signal(signal.SIGINT, signal.SIG_IGN)  # must not break this line or the exit's thread joins
        print(f"hicache-sim: interrupted; {_kept(args)}", file=sys.stderr)
        return 130
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


_ENVIRONMENT_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENAMETOOLONG}


def check_outputs(args) -> None:
    """Every output a command declares (``outputs``: attribute and kind) is checked before it starts, so a
    path that cannot be written costs one line, not the work."""
    from sim.base.fileio import check_image_file, check_output_file, check_output_folder

    checks = {"file": check_output_file, "folder": check_output_folder, "image": check_image_file}
    for attr, kind in getattr(args, "outputs", ()):
        value = getattr(args, attr, None)
        if value is not None:
            checks[kind](value, "--" + attr)


def _kept(args) -> str:
    """What an ending command leaves: a sweep keeps its finished points (the same command resumes it); every
    other command, nothing (its staging is removed)."""
    if getattr(args, "command", None) == "sweep":
        from sim.app.sweep import finished_points

        n = finished_points(args.out)
        if n:
            return f"the {n} finished point(s) in {args.out}/points were kept: run the same command again to resume"
    return "nothing half-written was kept"


class _Terminated(BaseException):
    """SIGTERM or SIGHUP, raised where the program is so ``finally`` blocks remove staging files."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _terminated(signum, frame):
    raise _Terminated(signum)


if __name__ == "__main__":
    sys.exit(main())

"""The ``hicache-sim calibrate`` subcommands; torch is imported only when one of them runs.

hicache-sim calibrate [--suite default|quick] --out PATH [--device auto|cpu|cuda] [--plot PATH]
hicache-sim calibrate check NEW.json --baseline BASE.json [--tolerance 10%] [--allow-device-change]
hicache-sim calibrate compute [MEASURED...] [--from RUN...] --scenario S.yaml --out TABLE.json [--table BASE.json] [--fix K=V]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from calibrate.suites import SUITES
from sim.base.errors import InputError

__all__ = ["add_calibrate_parser", "format_run"]


def add_calibrate_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "calibrate",
        help="time the transfer and swap-in kernels and write a cost table",
        description="Time every kernel over a grid of V4 item sizes and counts, measure the link ceilings, fit "
        "latency + bytes/bandwidth per (op, backend), and write a cost table plus a plot. Without CUDA the same "
        "suite runs on CPU tensors (device: cpu): a pipeline check, not GPU numbers.",
    )
    p.add_argument(
        "--suite", choices=SUITES, default="default", help="grid to time (quick: a small one, for CI)"
    )
    p.add_argument("--out", metavar="PATH", help="cost table to write (e.g. calibrations/h200.json)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--plot", metavar="PATH", help="bandwidth plot (default: OUT with .png)")
    p.add_argument("--seed", type=int, default=0, help="seed for the random page indices")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=_calibrate, outputs=(("out", "file"), ("plot", "image")))
    inner = p.add_subparsers(dest="calibrate_command", metavar="{check,compute}")
    c = inner.add_parser(
        "check",
        help="compare a new table with a baseline",
        description="Compare two cost tables entry by entry (same op, backend and shape). Exit 1 on a regression "
        "beyond the tolerance, 2 on incompatible tables (schema, or device unless --allow-device-change).",
    )
    c.add_argument("new", metavar="NEW.json")
    c.add_argument("--baseline", metavar="BASE.json", required=True)
    c.add_argument("--tolerance", default="10%", help="allowed slowdown per entry, e.g. 10%% (default)")
    c.add_argument("--allow-device-change", action="store_true", help="compare tables from different devices")
    c.set_defaults(func=_check)
    m = inner.add_parser(
        "compute",
        help="fit the step-time model to measured SGLang runs",
        description="Fit the compute model's mfu, mbu, per-step overhead and attention FLOPs scale to measured "
        "points: SGLang bench_serving result files (--output-file F --output-details; per-request input length, "
        "TTFT, ITL, cached tokens) or a CSV (kind,tokens,context,batch,seconds[,label]). The scenario gives the "
        "model, GPU and TP the FLOPs and bytes follow from. Prints each point's fit error and writes the "
        "parameters into a cost table's compute section (the base table's copy costs kept).",
    )
    m.add_argument("measured", nargs="*", metavar="MEASURED", help="bench_serving .jsonl/.json results or a .csv")
    m.add_argument("--from", dest="runs", nargs="+", default=[], metavar="RUN",
                   help="what a measured run left behind, in any format `hicache-sim score` reads: ITL gives decode "
                        "points, TTFT at concurrency 1 prefill points (calibrate/measured.py)")  # fmt: skip
    m.add_argument("--scenario", required=True, metavar="S.yaml", help="scenario naming the model and hardware")
    m.add_argument("--out", required=True, metavar="TABLE.json", help="cost table to write")
    m.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a scenario field, e.g. --set hardware.cost_table=null (fit from the spec's roofline)")
    m.add_argument("--table", default=None, metavar="BASE.json", help="base cost table (default: bundled spec)")
    m.add_argument("--fix", action="append", default=[], metavar="PARAM=VALUE",
                   help="pin a parameter (step_overhead_ms, mfu, attn_flops_scale, mbu), e.g. --fix attn_flops_scale=1")  # fmt: skip
    m.set_defaults(func=_compute, outputs=(("out", "file"),))


def _check(args: argparse.Namespace) -> int:
    from calibrate.check import run_check

    return run_check(args.new, args.baseline, args.tolerance, args.allow_device_change)


def _compute(args: argparse.Namespace) -> int:
    import dataclasses
    import datetime

    from calibrate.compute import PARAMS, fit_compute, format_fit
    from sim import __version__
    from sim.base.fileio import check_output_file
    from sim.model.compute import Roofline
    from sim.model.costs import resolve_cost_table, write_cost_table
    from sim.scenario.load import ComputeConfig, field_problem, load_scenario

    check_output_file(args.out, "--out")
    fixed = {}
    for item in args.fix:
        key, sep, value = item.partition("=")
        key = key.strip()
        try:
            fixed[key] = float(value)
        except ValueError:
            raise InputError(f"--fix {item}: expected PARAM=NUMBER") from None
        if not sep:
            raise InputError(f"--fix {item}: expected PARAM=NUMBER")
        if key not in PARAMS:
            raise InputError(f"--fix {item}: unknown parameter {key!r} (known: {', '.join(PARAMS)})")
        problem = field_problem(ComputeConfig, key, fixed[key])  # the bounds of the scenario's compute.KEY
        if problem is not None:
            raise InputError(f"--fix {item}: {problem} (as compute.{key} in a scenario)")
    sc = load_scenario(args.scenario, args.overrides)
    points, runs = _measured_points(args, sc)
    base_model = Roofline.from_scenario(sc)
    decodes = {(p.batch, p.context) for p in points if p.kind == "decode"}
    if len(decodes) == 1 and not {"step_overhead_ms", "mbu"} & set(fixed):  # overhead and bytes: one equation
        fixed["step_overhead_ms"] = base_model.overhead_s * 1e3
        print(f"note: the decode points are all one batch ({decodes.pop()[0]}), which cannot part the per-step "
              f"overhead from the bytes: step_overhead_ms pinned at the scenario's {fixed['step_overhead_ms']:.2f} "
              "(--fix another value, or add a run at another concurrency)", file=sys.stderr)  # fmt: skip
    try:
        result = fit_compute(points, base_model, sc.scheduler.chunked_prefill_size, fixed=fixed)
    except InputError as exc:  # what the points cannot fit: named by the files they came from
        raise InputError(str(exc), source=", ".join([*args.measured, *args.runs])) from None
    base = resolve_cost_table(args.table)
    source = {"kind": "measured-fit", "device": sc.hardware.gpu_name, "model": sc.model.name,
              "tp_size": sc.hardware.tp_size, "scenario": args.scenario, "measured": list(args.measured),
              "points": len(points), "free_parameters": result.free, "rms_error": round(result.rms_error, 4),
              "fixed": sorted(fixed), "runs": runs, "hicache_sim": __version__,
              "date": datetime.date.today().isoformat()}  # fmt: skip
    table = dataclasses.replace(base, compute={**result.params, "source": source}, path=args.out)
    write_cost_table(table, args.out)
    print(format_fit(result))
    print(f"wrote {args.out} (compute section; copy costs from {base.describe()})")
    return 0


def _measured_points(args: argparse.Namespace, sc) -> tuple[list, list[dict]]:
    """The points of the MEASURED files and of the --from runs (checked against the scenario as `score` checks
    them), and each run's provenance: its file, tool and the SHA-256 of its bytes."""
    import hashlib

    from calibrate.compute import read_points
    from calibrate.measured import points_from_measured
    from sim.app.score import check_against, scenario_concurrency
    from sim.interop.measured import read_measured

    if not args.measured and not args.runs:
        raise InputError("calibrate compute: give MEASURED files or --from RUN... (what a measured run left behind)")
    points = read_points(args.measured) if args.measured else []
    runs = read_measured(args.runs) if args.runs else []
    check_against(runs, sc)
    found = points_from_measured(runs, scenario_concurrency(sc, "")[0])
    if runs and not found:
        raise InputError("no step-time point in these runs: they need ISL, and ITL or TTFT at concurrency 1, "
                         "at a stated concurrency", source=", ".join(args.runs))  # fmt: skip
    prov = [{"file": m.source, "tool": m.tool, "sha256": hashlib.sha256(Path(m.source.split(" .. ")[-1]).read_bytes())
             .hexdigest()[:16]} for m in runs]  # fmt: skip
    return points + found, prov


def format_run(table, mechanisms: dict[str, str]) -> str:
    """The printed summary: one line per entry with bandwidth as a fraction of its direction's ceiling.

    On a CPU there is no link: the "ceiling" is one large host memcpy, which small copies that stay in cache
    outrun, so no fraction of it is printed there."""
    gpu = table.source.device != "cpu"
    lines = [
        table.describe(),
        ("ceilings (GB/s): " if gpu else "one large host memcpy (GB/s; no GPU, so no link ceiling): ")
        + ", ".join(f"{k} {v:.2f}" for k, v in table.ceilings.items()),
    ]
    lines.append("mechanisms: " + ", ".join(f"{k}={v}" for k, v in mechanisms.items()))
    lines.append(
        f"{'op':<8}{'backend':<12}{'item B':>10}{'items':>12}{'median us':>12}{'p10':>10}{'p90':>10}{'GB/s':>9}"
        + (f"{'ceil':>7}" if gpu else "")
    )
    for e in table.entries:
        bw = e.n_items * e.item_bytes / e.median_s / 1e9 if e.median_s > 0 else 0.0
        ceiling = table.ceilings["d2h" if e.op == "d2h" else "h2d"]
        shape = f"{e.n_items}" if e.op != "swap_in" else f"{e.n_requests}x{e.top_k}@{e.hit_ratio:g}"
        lines.append(
            f"{e.op:<8}{e.backend:<12}{e.item_bytes:>10}{shape:>12}{e.median_s * 1e6:>12.2f}"
            f"{e.p10_s * 1e6:>10.2f}{e.p90_s * 1e6:>10.2f}{bw:>9.2f}" + (f"{bw / ceiling:>7.0%}" if gpu else "")
        )
    lines.append("fits: t = latency + n * per_item + bytes / bandwidth")
    for (op, be), f in sorted(table.fits.items()):
        lines.append(
            f"  {op}/{be}: latency {f.latency_s * 1e6:.2f} us, per item {f.per_item_s * 1e6:.3f} us, "
            f"bandwidth {f.bandwidth_Bps / 1e9:.2f} GB/s"
        )
    return "\n".join(lines)


def _calibrate(args: argparse.Namespace) -> int:
    if not args.out:
        raise InputError("calibrate: --out PATH is required (where to write the cost table)")
    from calibrate.harness import resolve_device, run_suite
    from calibrate.plot import plot_bandwidth
    from calibrate.suites import get_suite
    from sim.base.fileio import check_output_file
    from sim.model.costs import write_cost_table

    plot = args.plot or str(Path(args.out).with_suffix(".png"))
    check_output_file(args.out, "--out")  # before the suite: a bad path must not cost the timings
    check_output_file(plot, "--plot")
    device = resolve_device(args.device)
    suite = get_suite(args.suite, device)
    run = run_suite(suite, device, seed=args.seed, show_progress=not args.no_progress)
    run.table.path = args.out
    write_cost_table(run.table, args.out)
    plot_bandwidth(run.table, plot)
    print(format_run(run.table, run.mechanisms))
    print(f"wrote {args.out} and {plot}")
    return 0

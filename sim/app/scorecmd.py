"""The ``hicache-sim score`` subcommand: its flags and its run (the work is in :mod:`sim.app.score`)."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from sim.base.errors import InputError

__all__ = ["add_score_parser"]

SCORE_HELP = """Hold the simulator against your own run: read what the run left behind, simulate the same setup over
seeds, and print each figure measured / simulated [95% interval] / error, with the inputs that drive a miss.

MEASURED files, the format told from the content: aiperf's profile_export.jsonl (replayed request for request:
its arrivals, sizes and conversations), profile_export_aiperf.json or .csv; SGLang's bench_serving --output-file
(one line a step, in the scenario's step order); bench_multiturn's --log-file (per round with
--enable-round-barrier); InferenceX's agentic result JSON; SGLang's /metrics text (one snapshot, or two for the
window between them). A file of another model or another concurrency than the scenario is refused.

  hicache-sim score bench.jsonl --scenario scenarios/quickstart.yaml --seeds 3
"""


def add_score_parser(sub) -> None:
    p = sub.add_parser("score", help="compare the simulator with a measured run, figure by figure",
                       description=SCORE_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("measured", nargs="+", metavar="MEASURED", help="what the run left behind (see above)")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--scenario", metavar="S.yaml", help="the scenario of the measured setup")
    src.add_argument("--launch", metavar="CMD", help="the sglang.launch_server command line (quoted)")
    p.add_argument("--gpu", default=None, help="with --launch: the catalog GPU it ran on")
    p.add_argument("--bench", action="append", default=[], metavar="CMD", help="with --launch: the client command(s)")
    p.add_argument("--server-log", default=None, metavar="FILE", help="with --launch: the server's startup log")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY.PATH=VALUE",
                   help="override a field, e.g. --set hardware.cost_table=fit.json (a calibrate compute fit)")  # fmt: skip
    p.add_argument("--seeds", default="3", metavar="N|S1,S2,...", help="seeds to simulate (default: %(default)s)")
    p.add_argument("--workers", type=int, default=None, help="parallel runs (default: CPUs)")
    p.add_argument("--out", default=None, metavar="DIR", help="write score.csv, score.json, score.png here "
                   "(default: runs/score-NAME/DATE)")  # fmt: skip
    p.add_argument("--overwrite", action="store_true", help="replace the results already in --out DIR")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_cmd_score, outputs=(("out", "folder"),))


def _scenario(args, extra: list[str]):
    from sim.scenario.load import apply_overrides, load_scenario, scenario_from_dict

    sets = [*args.overrides, *extra]
    if args.scenario is not None:
        if args.bench or args.gpu or args.server_log:
            raise InputError("--bench, --gpu and --server-log go with --launch, not --scenario")
        return load_scenario(args.scenario, sets)
    from sim.interop.fromsglang import from_sglang

    if args.gpu is None:
        raise InputError("--launch needs --gpu (the catalog GPU the server ran on: H20, H200, ...)")
    conv = from_sglang(args.launch, args.bench, gpu=args.gpu, server_log=args.server_log)
    return scenario_from_dict(apply_overrides(conv.scenario, sets), source="--launch")


@contextlib.contextmanager
def _folder(args, name: str):
    """(staging, final) folder: --out (replaced only with --overwrite, and only if it holds a score) or a new one."""
    from sim.base.fileio import new_run_dir, staged_dir

    if args.out is None:
        with new_run_dir("runs", f"score-{name}") as staged:
            yield staged
    else:
        with staged_dir(args.out, overwrite=args.overwrite, marker="score.json") as tmp:
            yield tmp, Path(args.out)


def _cmd_score(args) -> int:
    from sim.app.run import check_startable
    from sim.app.score import check_against, replay_source, replay_trace, simulate
    from sim.app.scoretable import (
        format_request_for_request,
        format_score,
        request_for_request,
        score_rows,
        write_score,
    )
    from sim.app.seeds import NO_SPREAD_NOTE, no_spread, parse_seeds
    from sim.interop.measured import read_measured
    from sim.scenario.load import dump_resolved

    if args.workers is not None and args.workers < 1:
        raise InputError(f"--workers {args.workers}: must be >= 1")
    runs = read_measured(args.measured)
    sc = _scenario(args, [])
    check_against(runs, sc)
    seeds = parse_seeds(args.seeds, sc.seed)
    replay = replay_source(runs)
    with _folder(args, sc.name) as (tmp, out):
        if replay is not None:
            trace = tmp / "replay.jsonl"
            replay_trace(replay.requests, trace, sc.hicache.page_size)
            sc = _scenario(args, ["workload.kind=trace", f"workload.path={trace.resolve()}", "workload.format=mooncake",
                                  f"workload.block_size={sc.hicache.page_size}"])  # fmt: skip
        check_startable(sc, progress=not args.no_progress)
        per_seed = simulate(sc, seeds, workers=args.workers, progress=not args.no_progress,
                            per_request=replay is not None)  # fmt: skip
        rows = score_rows(runs, per_seed)
        rr = (request_for_request([r.ttft_s for r in replay.requests], per_seed.attrs["request_ttft_s"])
              if replay is not None else None)  # fmt: skip
        names = write_score(rows, tmp, rr)
        per_seed.to_csv(tmp / "seeds.csv", index=False)
        (tmp / "scenario.yaml").write_text(dump_resolved(sc).replace(str(tmp.resolve()), str(out.resolve())))
    how = f", replaying {len(replay.requests):,} requests of {replay.source}" if replay is not None else ""
    print(f"{sc.name}: {len(seeds)} seeds ({', '.join(map(str, seeds))}){how}")
    print(format_score(rows))
    if rr:
        print(format_request_for_request(rr))
    if no_spread(per_seed):
        print(f"note: {NO_SPREAD_NOTE}")
    print(f"wrote {out}/: {', '.join(names)}, seeds.csv, scenario.yaml")
    return 0

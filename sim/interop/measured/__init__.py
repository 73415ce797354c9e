"""Readers of what a real run leaves behind: the client's exports (aiperf, bench_serving, bench_multiturn,
InferenceX's aggregate) and the server's Prometheus text, each as a :class:`~sim.interop.measured.run.Measured`
whose figures carry the simulator's names. The format is told from the content, not the file name.
"""

from __future__ import annotations

from pathlib import Path

from sim.base.errors import InputError
from sim.base.inputs import check_input, parse_json, read_text
from sim.interop.measured.aiperf import is_aiperf_json, read_aiperf_csv, read_aiperf_json, read_aiperf_jsonl
from sim.interop.measured.benchserving import is_bench_serving, read_bench_serving
from sim.interop.measured.inferencex import is_inferencex, read_inferencex
from sim.interop.measured.multiturn import is_multiturn_log, read_multiturn
from sim.interop.measured.prometheus import is_prometheus, read_prometheus
from sim.interop.measured.run import Measured, MeasuredRequest, Where, part_of

__all__ = ["Measured", "MeasuredRequest", "Where", "part_of", "read_measured"]


def _one(path: str, text: str) -> Measured | None:
    """The file's run from its ``text`` (read once), or None for a Prometheus snapshot (read with its pair)."""
    if Path(path).suffix.lower() == ".csv":
        return read_aiperf_csv(path, text)
    if is_prometheus(text):
        return None
    first = next((line for line in text.splitlines() if line.strip()), "")
    if not first.lstrip().startswith("{"):
        raise InputError("not a format score reads (aiperf, bench_serving, bench_multiturn, InferenceX JSON; "
                         "Prometheus text)", source=path)  # fmt: skip
    try:
        doc = parse_json(text, path)  # one document (aiperf's and InferenceX's aggregates are indented)
    except InputError:
        doc = parse_json(first, path, line=1, what="JSON line (a cut-short export?)")  # JSON lines: the first
    if isinstance(doc, dict) and isinstance(doc.get("metadata"), dict) and isinstance(doc.get("metrics"), dict):
        return read_aiperf_jsonl(path, text)
    if is_inferencex(doc):
        return read_inferencex(path, doc)
    if is_bench_serving(doc):
        return read_bench_serving(path, text)
    if is_multiturn_log(doc):
        return read_multiturn(path, text)
    if is_aiperf_json(doc):
        return read_aiperf_json(path, doc)
    raise InputError("a JSON file of no format score reads (aiperf, bench_serving, bench_multiturn, InferenceX)",
                     source=path)  # fmt: skip


def read_measured(paths: list[str]) -> list[Measured]:
    """Every run in ``paths``; Prometheus snapshots make one run (two: the window between them, in order)."""
    runs, snapshots = [], []
    for name in paths:
        check_input(name, "measured file")
        text = read_text(name, "measured file")
        run = _one(name, text)
        if run is None:
            snapshots.append((name, text))
        else:
            runs.append(run)
    if len(snapshots) > 2:
        raise InputError(f"{len(snapshots)} Prometheus snapshots: give one, or two for the window between them",
                         source=snapshots[2][0])  # fmt: skip
    if snapshots:
        runs.append(read_prometheus(snapshots))
    return runs

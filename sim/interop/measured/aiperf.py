"""aiperf's exports (aiperf 0.13.0): ``profile_export.jsonl`` (one request a line), ``profile_export_aiperf.json``
and ``profile_export_aiperf.csv`` (the run's aggregates).

Field names follow aiperf's own export models: a request line is a ``MetricRecordInfo``
(``common/models/record_models.py``: ``metadata`` with ``request_start_ns``, ``request_end_ns``,
``benchmark_phase``, ``conversation_id``, ``turn_index``; ``metrics`` as ``{tag: {"value", "unit"}}``; ``error``);
the JSON aggregate is a ``JsonExportData`` (``common/models/export_models.py``: one ``JsonMetricResult`` per
metric tag, with ``unit``, ``avg``, ``p50``..``p99``; ``input_config`` holding ``models.items[].name`` and
``phases[].concurrency``; ``is_complete``); the CSV is ``MetricsCsvExporter``'s
(``exporters/metrics_csv_exporter.py``: ``Metric`` + ``STAT_KEYS`` rows named "header (unit)", then ``Metric,Value``
rows). The metric tags and headers are those of ``metrics/types/*.py`` (``time_to_first_token`` "Time to First
Token", ``inter_token_latency``, ``output_token_throughput``, ...). Warm-up and failed requests are left out of a
per-request export's figures, as InferenceX's aggregation leaves them out (``utils/agentic/aggregation/
request_metrics.py``, ``load_records_with_accounting``).
"""

from __future__ import annotations

import csv
import io

import numpy as np

from sim.base.inputs import parse_json
from sim.interop.measured.run import Measured, MeasuredRequest, Where, field_number

__all__ = ["is_aiperf_json", "read_aiperf_csv", "read_aiperf_json", "read_aiperf_jsonl"]

# aiperf display units -> seconds or 1 (metric_enums.py: MetricTimeUnit tags; counts and rates as they are).
_SCALE = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "sec": 1.0, "s": 1.0, "tokens": 1.0, "requests": 1.0,
          "tokens/sec": 1.0, "requests/sec": 1.0, "tokens/sec/user": 1.0, "": 1.0}  # fmt: skip
# metric tag -> (CSV header, figure name prefix, statistics kept as figure suffixes).
_METRICS = {
    "time_to_first_token": ("Time to First Token", "ttft", {"avg": "mean_s", "p50": "p50_s", "p90": "p90_s",
                                                            "p99": "p99_s"}),
    "inter_token_latency": ("Inter Token Latency", "tpot", {"avg": "mean_s", "p90": "p90_s"}),
    "request_latency": ("Request Latency", "e2e", {"avg": "mean_s"}),
    "input_sequence_length": ("Input Sequence Length", "isl", {"avg": "mean"}),
    "output_sequence_length": ("Output Sequence Length", "osl", {"avg": "mean"}),
    "output_token_throughput": ("Output Token Throughput", "output_tokens_per_s", {"avg": ""}),
    "output_token_throughput_per_user": ("Output Token Throughput Per User", "tok_per_s_per_user", {"avg": ""}),
    "request_throughput": ("Request Throughput", "requests_per_s", {"avg": ""}),
    "benchmark_duration": ("Benchmark Duration", "duration_s", {"avg": ""}),
    "total_isl": ("Total Input Sequence Length", "total_isl", {"avg": ""}),
}  # fmt: skip


def _name(prefix: str, suffix: str) -> str:
    return f"{prefix}_{suffix}" if suffix else prefix


def _scale(unit, where: Where) -> float:
    if not isinstance(unit, str) or unit not in _SCALE:
        raise where.error(f"unit {unit!r} is not one aiperf 0.13.0 writes ({', '.join(k for k in _SCALE if k)})")
    return _SCALE[unit]


def _derived(m: Measured) -> None:
    """Input tokens per second: aiperf reports the total input tokens and the duration, not their ratio."""
    if m.figures.get("duration_s") and "total_isl" in m.figures:
        m.put("input_tokens_per_s", m.figures.pop("total_isl") / m.figures["duration_s"])


def read_aiperf_json(path: str, doc: dict) -> Measured:
    m = Measured(path, "aiperf")
    if doc.get("is_complete") is False:
        raise Where(path, "is_complete").error(f"false: the run did not finish ({doc.get('incomplete_reason')})")
    for tag, (_, prefix, stats) in _METRICS.items():
        result = doc.get(tag)
        if result is None:
            continue
        where = Where(path, tag)
        if not isinstance(result, dict):
            raise where.error("expected an object (a JsonMetricResult)")
        scale = _scale(result.get("unit", ""), Where(path, f"{tag}.unit"))
        for stat, suffix in stats.items():
            value = field_number(result, stat, where)
            m.put(_name(prefix, suffix), None if value is None else value * scale)
    _derived(m)
    config = doc.get("input_config")
    config = config if isinstance(config, dict) else {}
    models = config.get("models")
    items = models.get("items") if isinstance(models, dict) else None
    if isinstance(items, list) and items and isinstance(items[0], dict) and isinstance(items[0].get("name"), str):
        m.model = (items[0]["name"], Where(path, "input_config.models.items[0].name"))
    phases = config.get("phases")
    for i, phase in enumerate(phases if isinstance(phases, list) else []):
        conc = phase.get("concurrency") if isinstance(phase, dict) and phase.get("name") != "warmup" else None
        if isinstance(conc, int) and not isinstance(conc, bool):
            where = Where(path, f"input_config.phases[{i}].concurrency")
            if conc < 1:
                raise where.error(f"expected a positive integer, got {conc}")
            m.concurrency[""] = (conc, where)
    if not m.figures:
        raise Where(path, "time_to_first_token").error("no aiperf metric in this JSON (not a profile_export_aiperf.json)")
    return m


def read_aiperf_csv(path: str, text: str) -> Measured:
    m = Measured(path, "aiperf")
    by_header = {header: (prefix, stats) for header, prefix, stats in _METRICS.values()}
    heads: list[str] = []
    for lineno, row in enumerate(csv.reader(io.StringIO(text)), 1):
        if not row:
            continue
        if row[0] == "Metric":
            heads = row
            continue
        header, _, unit = row[0].partition(" (")
        if header not in by_header or not heads:
            continue
        prefix, stats = by_header[header]
        scale = _scale(unit.rstrip(")"), Where(path, f"{row[0]} (unit)", lineno))
        cells = dict(zip(heads, row))
        for stat, suffix in stats.items():
            text = cells.get(stat if "avg" in heads else "Value", "")
            if text:
                try:
                    value = float(text.replace(",", ""))
                except ValueError:
                    raise Where(path, f"{row[0]} {stat}", lineno).error(f"expected a number, got {text!r}") from None
                m.put(_name(prefix, suffix), value * scale)
    _derived(m)
    if not m.figures:
        raise Where(path, "Metric").error("no aiperf metric row (not a profile_export_aiperf.csv)")
    return m


def _record(path: str, lineno: int, line: str) -> dict | None:
    """One request line, or None for a warm-up or failed request."""
    rec = parse_json(line, path, line=lineno, what="JSON line (a cut-short export?)")
    if not isinstance(rec, dict) or not isinstance(rec.get("metadata"), dict) or not isinstance(rec.get("metrics"), dict):
        raise Where(path, "metadata", lineno).error("expected a MetricRecordInfo object (metadata, metrics)")
    if rec.get("error") or rec["metadata"].get("benchmark_phase", "profiling") != "profiling":
        return None
    return rec


def _value(rec: dict, tag: str, path: str, lineno: int, required: bool = False) -> float | None:
    metric = rec["metrics"].get(tag)
    where = Where(path, f"metrics.{tag}", lineno)
    if metric is None:
        if required:
            raise where.error("missing")
        return None
    if not isinstance(metric, dict):
        raise where.error("expected {value, unit}")
    value = field_number(metric, "value", where, required=True)
    return value * _scale(metric.get("unit", ""), Where(path, f"metrics.{tag}.unit", lineno))


def read_aiperf_jsonl(path: str, text: str) -> Measured:
    """A per-request export: the run's figures computed from its requests, and the requests themselves."""
    m = Measured(path, "aiperf")
    rows = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or (rec := _record(path, lineno, line)) is None:
            continue
        meta, where = rec["metadata"], Where(path, "metadata", lineno)
        start = field_number(meta, "request_start_ns", where, required=True)
        end = field_number(meta, "request_end_ns", where, required=True)
        isl = _value(rec, "input_sequence_length", path, lineno, required=True)
        osl = _value(rec, "output_sequence_length", path, lineno, required=True)
        rows.append((start * 1e-9, end * 1e-9, int(isl), int(osl), _value(rec, "time_to_first_token", path, lineno),
                     _value(rec, "inter_token_latency", path, lineno),
                     _value(rec, "output_token_throughput_per_user", path, lineno),
                     meta.get("conversation_id"), meta.get("turn_index")))  # fmt: skip
    if not rows:
        raise Where(path, "metadata.benchmark_phase").error("no finished profiling request in this export")
    t0 = min(r[0] for r in rows)
    duration = max(r[1] for r in rows) - t0
    m.requests = [MeasuredRequest(r[0] - t0, r[2], r[3], r[4], None if r[7] is None else str(r[7]),
                                  r[8] if isinstance(r[8], int) else None) for r in sorted(rows)]  # fmt: skip
    ttft = np.array([r[4] for r in rows if r[4] is not None], float)
    itl = np.array([r[5] for r in rows if r[5] is not None], float)
    per_user = [r[6] for r in rows if r[6] is not None]
    if len(ttft):
        m.figures.update({"ttft_mean_s": float(ttft.mean()), **{f"ttft_p{q}_s": float(np.percentile(ttft, q))
                                                                for q in (50, 90, 99)}})  # fmt: skip
    m.put("tpot_mean_s", float(itl.mean()) if len(itl) else None)
    m.put("tok_per_s_per_user", float(np.mean(per_user)) if per_user else None)
    m.put("isl_mean", float(np.mean([r[2] for r in rows])))
    m.put("osl_mean", float(np.mean([r[3] for r in rows])))
    if duration > 0:
        m.put("duration_s", duration)
        m.put("input_tokens_per_s", sum(r[2] for r in rows) / duration)
        m.put("output_tokens_per_s", sum(r[3] for r in rows) / duration)
        m.put("requests_per_s", len(rows) / duration)
    return m


def is_aiperf_json(doc) -> bool:
    return isinstance(doc, dict) and ("time_to_first_token" in doc or "aiperf_version" in doc
                                      or "request_throughput" in doc)  # fmt: skip


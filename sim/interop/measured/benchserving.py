"""SGLang ``bench_serving``'s result file (``--output-file``): one JSON object a run, appended a line a run, so a
file of N lines is N steps in order (as ``from-sglang`` makes one step of each ``--bench`` command).

Field names are those ``benchmark/serving.py`` writes (sglang 0.5.23, ``result = {...}`` at :1855-1908 and
``cache_report`` at :1913-1922): ``duration``, ``completed``, ``total_input_tokens``, ``total_output_tokens``,
``request_throughput``, ``input_throughput``, ``output_throughput``, ``total_throughput``, ``mean_ttft_ms`` /
``median_`` / ``p90_`` / ``p99_``, ``mean_tpot_ms``, ``mean_itl_ms``, ``max_concurrency``, ``server_info`` (the
server's ``/server_info``: ``model_path``) and, with ``--cache-report``, ``cache_hit_rate_pct`` and the cached
tokens by tier.
"""

from __future__ import annotations

from sim.base.inputs import parse_json
from sim.interop.measured.run import Measured, Where, field_number

__all__ = ["is_bench_serving", "read_bench_serving"]

_MS = {"mean_ttft_ms": "ttft_mean_s", "median_ttft_ms": "ttft_p50_s", "p90_ttft_ms": "ttft_p90_s",
       "p99_ttft_ms": "ttft_p99_s", "mean_tpot_ms": "tpot_mean_s", "mean_e2e_latency_ms": "e2e_mean_s"}  # fmt: skip
_RATES = {"request_throughput": "requests_per_s", "input_throughput": "input_tokens_per_s",
          "output_throughput": "output_tokens_per_s", "total_throughput": "total_tokens_per_s",
          "duration": "duration_s"}  # fmt: skip


def is_bench_serving(doc) -> bool:
    return isinstance(doc, dict) and "mean_ttft_ms" in doc and "total_throughput" in doc


def _step(m: Measured, step: int, run: dict, where: Where) -> None:
    for key in ("completed", "mean_ttft_ms", "total_throughput", "duration"):
        field_number(run, key, where, required=True)  # a line cut short or another tool's JSON
    put = {v: field_number(run, k, where) for k, v in _RATES.items()}
    for key, name in _MS.items():
        ms = field_number(run, key, where)
        put[name] = None if ms is None else ms * 1e-3
    done = field_number(run, "completed", where) or 0
    if done:
        put["isl_mean"] = (field_number(run, "total_input_tokens", where) or 0) / done
        put["osl_mean"] = (field_number(run, "total_output_tokens", where) or 0) / done
    report = run.get("cache_report")
    if isinstance(report, dict) and (prompt := field_number(report, "total_prompt_tokens", where)):
        for tier in ("device", "host", "storage"):
            tokens = field_number(report, f"{tier}_cached_tokens", where)
            put[f"hit_{tier}"] = None if tokens is None else tokens / prompt
        put["hit_total"] = (field_number(report, "total_cached_tokens", where) or 0) / prompt
    for name, value in put.items():
        m.put(f"step{step}.{name}", value)
    conc = run.get("max_concurrency")
    if conc is not None:
        if isinstance(conc, bool) or not isinstance(conc, int) or conc < 1:
            raise Where(where.source, "max_concurrency", where.line).error(f"expected a positive integer, got {conc!r}")
        m.concurrency[f"step{step}"] = (conc, Where(where.source, "max_concurrency", where.line))
    info = run.get("server_info")
    if isinstance(info, dict) and isinstance(info.get("model_path"), str) and m.model is None:
        m.model = (info["model_path"], Where(where.source, "server_info.model_path", where.line))


def read_bench_serving(path: str, text: str) -> Measured:
    m = Measured(path, "bench_serving")
    step = 0
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        run = parse_json(line, path, line=lineno, what="JSON line (a cut-short result file?)")
        if not is_bench_serving(run):
            raise Where(path, "mean_ttft_ms", lineno).error("not a bench_serving result (no mean_ttft_ms, total_throughput)")
        _step(m, step, run, Where(path, "", lineno))
        step += 1
    if not step:
        raise Where(path, "mean_ttft_ms").error("no bench_serving result in this file")
    return m

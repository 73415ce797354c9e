"""SGLang's ``benchmark/hicache/bench_multiturn.py`` log (``--log-file``, JSON lines): one line a run, with its
``summary`` and, under ``--enable-round-barrier``, ``round`` (``round_0``, ``round_1``, ...).

Field names are those ``WorkloadGenerator.run`` builds into ``performance_data`` before ``log_to_jsonl_file``
(sgl-project/sglang ``benchmark/hicache/bench_multiturn.py``): ``summary.average_ttft`` / ``p90_ttft`` /
``median_ttft`` (seconds), ``average_latency``, ``throughput`` (requests per second), ``input_token_throughput``,
``output_token_throughput``, ``average_prompt_len``, ``average_output_len``, ``cache_hit_rate`` (cached / prompt
tokens) and ``request_rate``; per round ``average_ttft``, ``cache_hit_rate``, ``request_count``. Older versions
write a subset (the summary's TTFT, latency and throughput only): what is there is read.
"""

from __future__ import annotations

from sim.base.inputs import parse_json
from sim.interop.measured.run import Measured, Where, field_number

__all__ = ["is_multiturn_log", "read_multiturn"]

_SUMMARY = {"average_ttft": "ttft_mean_s", "p90_ttft": "ttft_p90_s", "median_ttft": "ttft_p50_s",
            "average_latency": "e2e_mean_s", "throughput": "requests_per_s", "average_itl": "tpot_mean_s",
            "input_token_throughput": "input_tokens_per_s", "output_token_throughput": "output_tokens_per_s",
            "average_prompt_len": "isl_mean", "average_output_len": "osl_mean", "cache_hit_rate": "hit_total"}  # fmt: skip
_ROUND = {"average_ttft": "ttft_mean_s", "cache_hit_rate": "hit_total"}


def is_multiturn_log(doc) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("summary"), dict) and "average_ttft" in doc["summary"]


def read_multiturn(path: str, text: str) -> Measured:
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]
    if len(lines) != 1:
        raise Where(path, "summary").error(
            f"{len(lines)} runs in this log (auto-run appends one a request rate): keep the line of the run "
            "the scenario describes" if lines else "empty log")  # fmt: skip
    lineno, line = lines[0]
    doc = parse_json(line, path, line=lineno, what="JSON line (a cut-short log?)")
    if not is_multiturn_log(doc):
        raise Where(path, "summary.average_ttft", lineno).error("not a bench_multiturn log line")
    m = Measured(path, "bench_multiturn")
    where = Where(path, "summary", lineno)
    for key, name in _SUMMARY.items():
        m.put(name, field_number(doc["summary"], key, where))
    rounds = doc.get("round") or {}
    if not isinstance(rounds, dict):
        raise Where(path, "round", lineno).error("expected an object of round_N entries")
    for key, entry in rounds.items():
        index = key.removeprefix("round_")
        if not index.isdigit() or not isinstance(entry, dict):
            raise Where(path, f"round.{key}", lineno).error("expected round_N: {average_ttft, cache_hit_rate, ...}")
        for field, name in _ROUND.items():
            m.put(f"round{int(index)}.{name}", field_number(entry, field, Where(path, f"round.{key}", lineno)))
    return m

"""SGLang's Prometheus ``/metrics`` text: one snapshot (counters since the server started), or two (the window
between them: each counter's difference; gauges from the later one).

The metric names are SGLang 0.5.23's (``srt/observability/metrics_collector.py``): ``sglang:prompt_tokens_total``
(:1856), ``sglang:generation_tokens_total`` (:1861), ``sglang:cached_tokens_total{cache_source=device|host|
storage}`` (:1935), ``sglang:time_to_first_token_seconds`` and ``sglang:inter_token_latency_seconds`` (histograms,
``_sum`` / ``_count``; :2041, :2051), ``sglang:e2e_request_latency_seconds`` (:2068), and the gauges
``sglang:num_queue_reqs`` (:371), ``sglang:num_running_reqs`` (:365) and ``sglang:token_usage`` (:405). Every
series is summed over its other labels (ranks, DP groups); the ``model_name`` label names the model.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict

from sim.interop.measured.run import Measured, Where

__all__ = ["is_prometheus", "read_prometheus"]

_LINE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)(\s+\S+)?\s*$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_P = "sglang:"


def is_prometheus(text: str) -> bool:
    return any(line.startswith(_P) or line.startswith(f"# TYPE {_P}") for line in text.splitlines()[:200])


_MEAN = {"token_usage"}  # a fraction per rank: its mean over the ranks, where counts are summed


def _parse(path: str, text: str) -> tuple[dict[tuple[str, str], float], str | None]:
    """(metric, cache_source) -> value summed over the other labels (averaged, for :data:`_MEAN`); and the
    model_name label."""
    out: dict[tuple[str, str], float] = defaultdict(float)
    series: dict[tuple[str, str], int] = defaultdict(int)
    model = None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.startswith("#"):
            continue
        match = _LINE.match(line)
        if match is None:
            raise Where(path, line.split("{")[0].split()[0], lineno).error("not a Prometheus sample line (cut short?)")
        name, labels, text = match.group(1), dict(_LABEL.findall(match.group(2) or "")), match.group(3)
        try:
            value = float(text)
        except ValueError:
            raise Where(path, name, lineno).error(f"expected a number, got {text!r}") from None
        if not name.startswith(_P) or math.isnan(value):
            continue
        key = (name.removeprefix(_P), labels.get("cache_source", ""))
        out[key] += value
        series[key] += 1
        model = model or labels.get("model_name")
    for key in out:
        if key[0] in _MEAN:
            out[key] /= series[key]
    if not out:
        raise Where(path, "sglang:").error("no sglang: metric in this text (not SGLang's /metrics, or --enable-metrics off)")
    return out, model


def read_prometheus(snapshots: list[tuple[str, str]]) -> Measured:
    """One snapshot, or two (earlier first) for the window between them: (path, its text) each."""
    later, model = _parse(*snapshots[-1])
    earlier = _parse(*snapshots[0])[0] if len(snapshots) == 2 else defaultdict(float)
    paths = [path for path, _ in snapshots]
    source = " .. ".join(paths)
    m = Measured(source, "prometheus")
    if model:
        m.model = (model, Where(paths[-1], "model_name (label)"))

    def delta(name: str, label: str = "") -> float:
        value = later.get((name, label), 0.0) - earlier.get((name, label), 0.0)
        if value < 0:
            raise Where(paths[-1], f"sglang:{name}").error(
                f"smaller than in {paths[0]} (the server restarted between the snapshots, or they are swapped)")
        return value

    prompt = delta("prompt_tokens_total")
    if prompt:
        tiers = {t: delta("cached_tokens_total", t) / prompt for t in ("device", "host", "storage")}
        m.figures.update({f"hit_{t}": v for t, v in tiers.items()})
        m.figures["hit_total"] = sum(tiers.values())
    for name, figure in (("time_to_first_token_seconds", "ttft_mean_s"), ("inter_token_latency_seconds", "tpot_mean_s"),
                         ("e2e_request_latency_seconds", "e2e_mean_s")):  # fmt: skip
        if count := delta(f"{name}_count"):
            m.figures[figure] = delta(f"{name}_sum") / count
    if requests := delta("e2e_request_latency_seconds_count"):
        m.figures["isl_mean"] = prompt / requests
        m.figures["osl_mean"] = delta("generation_tokens_total") / requests
    for name, figure in (("num_queue_reqs", "queue_now"), ("num_running_reqs", "running_now"),
                         ("token_usage", "token_usage")):  # fmt: skip
        if (name, "") in later:
            m.figures[figure] = later[(name, "")]
    return m

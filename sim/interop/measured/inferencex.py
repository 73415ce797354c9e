"""InferenceX's aggregated result JSON of an agentic (AgentX) submission: what ``utils/agentic/aggregation/
process_agentic_result.py`` (``build_agg``) writes from aiperf's exports and the server's metrics.

Fields read (SemiAnalysisAI/InferenceX ``build_agg`` and ``request_metrics.py``): ``model``, ``conc``,
``request_metrics.throughput.per_gpu.total_tput_tps`` (tok/s/GPU), ``request_metrics.throughput.total
.tokens_per_second``, ``request_metrics.latency.{ttft,itl,intvty}.{mean,p50,p90}`` (seconds; ``intvty`` is 1 /
ITL, tok/s/user), ``request_metrics.tokens.{input,output_actual}.mean``, ``request_metrics.qps.mean``, and
``server_metrics.cache.{gpu,cpu,external}_cache_hit_rate`` / ``server_metrics.kv_cache.gpu_usage_pct``
(fractions). ``conc`` counts lanes (``AgentX concurrency counts live session trees``, the launchers' comment), so
the request rate over it is each lane's calls per hour.
"""

from __future__ import annotations

from sim.interop.measured.run import Measured, Where, field_number

__all__ = ["is_inferencex", "read_inferencex"]

# (path under the document, figure name)
_FIGURES = (
    (("request_metrics", "throughput", "per_gpu", "total_tput_tps"), "tok_per_s_per_gpu"),
    (("request_metrics", "throughput", "total", "tokens_per_second"), "total_tokens_per_s"),
    (("request_metrics", "latency", "ttft", "mean"), "ttft_mean_s"),
    (("request_metrics", "latency", "ttft", "p50"), "ttft_p50_s"),
    (("request_metrics", "latency", "ttft", "p90"), "ttft_p90_s"),
    (("request_metrics", "latency", "itl", "mean"), "tpot_mean_s"),
    (("request_metrics", "latency", "itl", "p90"), "tpot_p90_s"),
    (("request_metrics", "latency", "intvty", "mean"), "tok_per_s_per_user"),
    (("request_metrics", "tokens", "input", "mean"), "isl_mean"),
    (("request_metrics", "tokens", "output_actual", "mean"), "osl_mean"),
    (("request_metrics", "qps", "mean"), "requests_per_s"),
    (("server_metrics", "cache", "gpu_cache_hit_rate"), "hit_device"),
    (("server_metrics", "cache", "cpu_cache_hit_rate"), "hit_host"),
    (("server_metrics", "cache", "external_cache_hit_rate"), "hit_storage"),
    (("server_metrics", "kv_cache", "gpu_usage_pct"), "token_usage"),
)


def is_inferencex(doc) -> bool:
    return isinstance(doc, dict) and isinstance(doc.get("request_metrics"), dict) and "conc" in doc


def read_inferencex(path: str, doc: dict) -> Measured:
    m = Measured(path, "inferencex")
    for keys, name in _FIGURES:
        node = doc
        for key in keys[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if isinstance(node, dict):
            m.put(name, field_number(node, keys[-1], Where(path, ".".join(keys[:-1]))))
    if "tok_per_s_per_gpu" not in m.figures:
        raise Where(path, "request_metrics.throughput.per_gpu.total_tput_tps").error(
            "missing: not an InferenceX agentic result, or one whose GPU count was not set")
    conc = doc.get("conc")
    if isinstance(conc, bool) or not isinstance(conc, int) or conc < 1:
        raise Where(path, "conc").error(f"expected the run's concurrency (a positive integer), got {conc!r}")
    m.concurrency[""] = (conc, Where(path, "conc"))
    if "requests_per_s" in m.figures:  # AgentX's concurrency is lanes: each lane's call rate
        m.put("calls_per_lane_hour", m.figures["requests_per_s"] * 3600 / conc)
    if isinstance(doc.get("model"), str) and doc["model"]:
        m.model = (doc["model"], Where(path, "model"))
    return m

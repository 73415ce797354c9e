"""The validation table: the published SGLang runs of ``shared/reference/measurements.md``, simulated.

    python bench/validation.py [--write-scenarios] [--rounds-only] [--markdown FILE.md]

Each run is set up from its stated commands alone: ``--write-scenarios`` regenerates
``scenarios/validation/*.yaml`` from the command lines below through ``hicache-sim scenario from-sglang``
(the commands add ``--model-path`` for the model the source names; the GPU is the source's). Then every
scenario runs and every number of measurements.md, and of the published runs on GPUs aiconfigurator-core
covers (``docs/notes/validation_covered_gpus.md``), is printed as measured / simulated / error, with the
ON/OFF ratios a user decides on. Each number is simulated three times: with the spec-derived roofline, with
the one global compute calibration of its GPU (``CALIBRATIONS``: a cost table whose compute section
``hicache-sim calibrate compute`` fitted to the points named there; a GPU without one keeps the spec), and
with ``compute.backend: aiconfigurator``: the database's kernels where it covers the GPU and model, else the
nearest measured GPU's carried over by the datasheets (``sim/model/transfer.py``: H20 on H100's); a run no
measured GPU prices is shown as such, never priced by a fallback. The two roofline columns pin
``compute.backend=roofline`` (the default, ``auto``, would take the kernels). ``MECHANISMS`` says why each number the
measured kernels miss by more than 15% misses, or that it is not pinned down.
Below the table, the what-ifs of ``SENSITIVITY`` (a setting the commands imply but from-sglang cannot know, such
as an older SGLang's defaults) are shown beside the generated run, never in its error columns.
A run published per round only (M3, 8 x H800) has a table of its own after them: each round's TTFT and hit rate,
simulated at several seeds (``ROUND_SEEDS``: their mean and range); ``--rounds-only`` prints just that table.
This is the one command that regenerates the table in the README.
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

from sim.app.run import run_scenario
from sim.base.errors import InputError
from sim.base.fileio import write_text_atomic
from sim.interop.fromsglang import from_sglang, to_yaml
from sim.model.costs import default_cost_table, load_cost_table
from sim.scenario.load import load_scenario

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "scenarios" / "validation"
# One compute calibration per GPU, fitted by:
#   hicache-sim calibrate compute calibrations/h20_dsv4_flash_points.csv \
#     --scenario scenarios/validation/m1a_off.yaml --out calibrations/h20_dsv4_flash.json
CALIBRATIONS = {"H20": ROOT / "calibrations" / "h20_dsv4_flash.json"}

# ---- M1: DeepSeek-V4-Flash FP8, 8 x H20, TP8; L3 (EIC) on vs off ------------------------------------------
M1_SERVER = ("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Flash --tp 8 --attention-backend dsv4 "
             "--chunked-prefill-size 16384 --context-length 131072 --mem-fraction-static 0.85 "
             "--max-running-requests 32 --swa-full-tokens-ratio 1.0 --enable-cache-report --enable-metrics")  # fmt: skip
M1_BENCH = ("python -m sglang.bench_serving --dataset-name random-ids --random-range-ratio 1 --request-rate inf "
            "--flush-cache")  # fmt: skip
M1A_STEPS = [(1, 4), (8, 32), (16, 64), (32, 128)]  # (concurrency, prompts)


def _m1a_benches() -> list[str]:
    return [f"{M1_BENCH} --random-input-len 3500 --random-output-len 1500 --num-prompts {n} --max-concurrency {c}"
            for c, n in M1A_STEPS]  # fmt: skip


M1B_BENCH = f"{M1_BENCH} --random-input-len 16000 --random-output-len 16 --num-prompts 32 --max-concurrency 8"

# ---- M2: Qwen3-14B, 2 x A10, TP2; GPU only vs L1 + L2 (bench_multiturn) ------------------------------------
M2_SERVER = "python -m sglang.launch_server --model-path Qwen/Qwen3-14B --tp-size 2 --page-size 64"
M2_HICACHE = " --enable-hierarchical-cache --hicache-write-policy write_through --hicache-ratio 2 --hicache-size 0"
M2_BENCH = ("python3 benchmark/hicache/bench_multiturn.py --disable-random-sample --output-length 16 "
            "--request-length 2048 --num-clients 20 --num-rounds 10 --max-parallel 4 --request-rate 20 "
            "--ready-queue-policy random --disable-auto-run --seed 42")  # fmt: skip

# ---- M3: Qwen3-235B-A22B-Instruct-2507, 8 x H800, TP8; GPU only vs L1 + L2 (bench_multiturn, per round) ------
# Mooncake's page (as M2), "H800 Server": its launch and client commands; --hicache-size 30 is 30 GB a rank
# (the page: "8*30 = 240GB"). The page does not say its SGLang version or publish a server log (so no logged
# max_total_num_tokens); it is the page M2 comes from, so the same 0.5.2 defaults. Figures: ROUND_FIGURES.
M3_SERVER = ("numactl --cpunodebind=0,1 --interleave=0,1 python3 -m sglang.launch_server "
             "--model-path Qwen/Qwen3-235B-A22B-Instruct-2507 --tp 8 --page-size 64")  # fmt: skip
M3_HICACHE = " --enable-hierarchical-cache --hicache-write-policy write_through --hicache-size 30"
M3_BENCH = ("python3 benchmark/hicache/bench_multiturn.py --model-path $MODEL_PATH --dataset-path $DATASET_PATH "
            "--disable-random-sample --output-length 1 --request-length 2048 --num-clients 80 --num-rounds 10 "
            "--max-parallel 4 --request-rate 16 --ready-queue-policy random --disable-auto-run "
            "--enable-round-barrier")  # fmt: skip

# ---- C1: DeepSeek-V4-Flash FP8 on 4 x H200, TP4 (SGLang cookbook, low-latency cell, sglang 0.5.15) ---------
# docs_new/src/snippets/configs/deepseek-ai/deepseek-v4.jsx (launch) and deepseek-v4-benchmarks.jsx (numbers),
# sgl-project/sglang main, 2026-07; the cell's env SGLANG_DSV4_FP4_EXPERTS=0 selects the FP8 experts the
# sgl-project/DeepSeek-V4-Flash-FP8 checkpoint holds anyway. bench: the card's "Reproduce" command,
# num_prompts 32 at both concurrencies (numPromptsByConc), cache-cold as the cookbook re-benchmarks
# (PR #31363: "--flush-cache each run"; bench_serving's default seed gives every run the same prompts, so
# a warm cache would hit them all, which the measured c16 TTFT above c1 rules out).
C1_SERVER = ("python -m sglang.launch_server --trust-remote-code --model-path sgl-project/DeepSeek-V4-Flash-FP8 "
             "--tp 4 --speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 1 "
             "--speculative-num-draft-tokens 4")  # fmt: skip
COOKBOOK_BENCH = ("python3 -m sglang.bench_serving --backend sglang --dataset-name random --random-input-len 8192 "
                  "--random-output-len 1024 --num-prompts 32 --warmup-requests 64 --flush-cache")  # fmt: skip
COOKBOOK_CONC = (1, 16)
# ---- C2: GLM-5.2-FP8 on 8 x H200, TP8 (SGLang cookbook, low-latency cell, sglang v0.5.14 @ 49e384ce) -------
# docs_new/src/snippets/configs/zai-org/glm-5.2.jsx and glm-5.2-benchmarks.jsx; this card's Reproduce command
# fixes the lengths (--random-range-ratio 1.0), flushes after warmup, and sends 8 prompts at c1, 64 at c16.
C2_BENCH = ("python3 -m sglang.bench_serving --backend sglang --dataset-name random --random-input-len 8192 "
            "--random-output-len 1024 --random-range-ratio 1.0 --warmup-requests 64 --flush-cache")  # fmt: skip
C2_PROMPTS = {1: 8, 16: 64}
C2_SERVER = ("python -m sglang.launch_server --model-path zai-org/GLM-5.2-FP8 --tp 8 --speculative-algorithm EAGLE "
             "--speculative-num-steps 5 --speculative-eagle-topk 1 --speculative-num-draft-tokens 6 "
             "--mem-fraction-static 0.8")  # fmt: skip

M3_EXTRA = {"sglang_version": "0.5.2", "backend": "aiconfigurator",
            "note": "(server log) not published: the L1 is derived from hardware.kv_mem_gb, not a logged "
                    "max_total_num_tokens"}  # fmt: skip

# name -> (launch, benches, gpu, extra settings the commands cannot carry, with why).
# M2's server is about v0.5.2 (measurements.md: first added 2025-09-11, version not stated), and its command
# leaves the memory fraction and chunk size to that version's defaults (sglang 0.5.2 srt/server_args.py:452-518:
# 0.867 and 2,048 on an A10 at TP2, against 0.5.23's 0.678 and 4,096).
SCENARIOS = {
    "m1a_on": (M1_SERVER + " --enable-eic-cache", _m1a_benches(), "H20", {}),
    "m1a_off": (M1_SERVER, _m1a_benches(), "H20", {}),
    # The hit run reads what the cold run stored: its 99.1% storage hit says the backups had landed first.
    "m1b_on": (M1_SERVER + " --enable-eic-cache", [M1B_BENCH, M1B_BENCH], "H20", {"wait_backups_step": 1}),
    "m1b_off": (M1_SERVER, [M1B_BENCH], "H20", {}),
    "m2_gpu_only": (M2_SERVER, [M2_BENCH], "A10", {"sglang_version": "0.5.2"}),
    "m2_l1l2": (M2_SERVER + M2_HICACHE, [M2_BENCH], "A10", {"sglang_version": "0.5.2"}),
    # H800 is covered by the measured kernels (H100's, collectives rescaled): the scenarios run on them.
    "m3_h800_gpu_only": (M3_SERVER, [M3_BENCH], "H800", M3_EXTRA),
    "m3_h800_l1l2": (M3_SERVER + M3_HICACHE, [M3_BENCH], "H800", M3_EXTRA),
    # The cookbook states no accept length: 1.0 (each verify pass emits one token) is the floor, not a fit, so
    # their TPOT rows are the draft-verify pass time and the miss table prints the acceptance they imply.
    "c1_v4flash_h200": (C1_SERVER, [f"{COOKBOOK_BENCH} --max-concurrency {c}" for c in COOKBOOK_CONC], "H200",
                        {"accept_length": 1.0}),
    "c2_glm52_h200": (C2_SERVER, [f"{C2_BENCH} --num-prompts {n} --max-concurrency {c}" for c, n in C2_PROMPTS.items()],
                      "H200", {"accept_length": 1.0}),
}


@dataclass(frozen=True)
class Number:
    """One published number: which run, what metric, the measured value and its unit."""

    label: str
    scenario: str
    metric: str  # a key understood by :func:`simulated`
    step: int
    measured: float
    unit: str


def _m1a() -> list[Number]:
    rows = []
    table = {  # conc: (ON tok/s, OFF tok/s, ON TTFT mean, p99, OFF mean, p99, ON TPOT, OFF TPOT)
        1: (491, 478, 541, 798, 832, 2347, 6.4, 6.4),
        8: (2856, 2907, 2091, 2231, 1759, 2313, 7.9, 8.0),
        16: (4564, 4614, 3357, 3829, 2837, 3389, 9.4, 9.7),
        32: (6466, 6727, 5808, 7833, 4493, 6545, 12.6, 12.9),
    }
    for step, (conc, v) in enumerate(table.items()):
        for side, off in (("ON", 0), ("OFF", 1)):
            sc = "m1a_on" if side == "ON" else "m1a_off"
            rows.append(Number(f"M1-A c{conc} {side} total tok/s", sc, "total_throughput", step, v[off], "tok/s"))
            rows.append(Number(f"M1-A c{conc} {side} TTFT mean", sc, "ttft_mean", step, v[2 + 2 * off], "ms"))
            rows.append(Number(f"M1-A c{conc} {side} TTFT p99", sc, "ttft_p99", step, v[3 + 2 * off], "ms"))
            rows.append(Number(f"M1-A c{conc} {side} TPOT", sc, "tpot_mean", step, v[6 + off], "ms"))
    return rows


def _cookbook(prefix: str, scenario: str, stat: str, table: dict[int, tuple[float, float]]) -> list[Number]:
    """TTFT and TPOT (ms) per concurrency, as the cookbook card reports them (``stat``: mean or median)."""
    rows = []
    label = {"mean": "mean", "median": "p50"}[stat]
    for step, (conc, (ttft, tpot)) in enumerate(table.items()):
        rows.append(Number(f"{prefix} c{conc} TTFT {label}", scenario, f"ttft_{stat}", step, ttft, "ms"))
        rows.append(Number(f"{prefix} c{conc} TPOT {label}", scenario, f"tpot_{stat}", step, tpot, "ms"))
    return rows


NUMBERS = [
    *_m1a(),
    Number("M1-B cold (ON) duration", "m1b_on", "duration", 0, 110.1, "s"),
    Number("M1-B cold (ON) input tok/s", "m1b_on", "input_throughput", 0, 4652, "tok/s"),
    Number("M1-B cold (ON) TTFT mean", "m1b_on", "ttft_mean", 0, 25438, "ms"),
    Number("M1-B hit (ON) duration", "m1b_on", "duration", 1, 32.6, "s"),
    Number("M1-B hit (ON) input tok/s", "m1b_on", "input_throughput", 1, 15692, "tok/s"),
    Number("M1-B hit (ON) TTFT mean", "m1b_on", "ttft_mean", 1, 7151, "ms"),
    Number("M1-B hit (ON) TTFT p50", "m1b_on", "ttft_median", 1, 7839, "ms"),
    Number("M1-B hit (ON) TTFT p99", "m1b_on", "ttft_p99", 1, 8589, "ms"),
    Number("M1-B hit (ON) storage hit rate", "m1b_on", "hit_rate", 1, 99.1, "%"),
    Number("M1-B OFF duration", "m1b_off", "duration", 0, 36.1, "s"),
    Number("M1-B OFF input tok/s", "m1b_off", "input_throughput", 0, 14163, "tok/s"),
    Number("M1-B OFF TTFT mean", "m1b_off", "ttft_mean", 0, 8019, "ms"),
    Number("M1-B OFF TTFT p99", "m1b_off", "ttft_p99", 0, 11069, "ms"),
    Number("M2 GPU only average TTFT", "m2_gpu_only", "average_ttft", 0, 7.78, "s"),
    Number("M2 L1+L2 average TTFT", "m2_l1l2", "average_ttft", 0, 5.27, "s"),
    Number("M2 GPU only input tok/s", "m2_gpu_only", "input_tokens_per_s", 0, 4114, "tok/s"),
    Number("M2 L1+L2 input tok/s", "m2_l1l2", "input_tokens_per_s", 0, 5809, "tok/s"),
    # C1's re-benchmark reports P50 (PR #31363: latencyPercentile "Mean" -> "P50"); the GLM-5.2 card states no
    # statistic (its config sets no latencyPercentile), so the mean is compared, as the cards did before.
    *_cookbook("C1 V4-Flash H200", "c1_v4flash_h200", "median", {1: (178, 3.28), 16: (263, 8.99)}),
    *_cookbook("C2 GLM-5.2 H200", "c2_glm52_h200", "mean", {1: (668, 5.05), 16: (6148, 16.11)}),
]
# Why the measured kernels (aiconfigurator column) miss a number by more than 15%, by label prefix; checked
# against the table each run (a miss without an entry prints "not pinned down").
MECHANISMS = {
    "C1 V4-Flash H200 c1 TPOT": "the cookbook states no accept length, so the run is simulated at 1.0 (each "
    "draft-verify pass emits one token: the floor, not a fit) and its TPOT is the priced EAGLE 3-1-4 pass; "
    "the roofline's near miss is its pass being that much too fast",
    "C1 V4-Flash H200 c16 TPOT": "as c1: accept length 1.0, the pass time",
    "C2 GLM-5.2 H200 c1 TPOT": "as C1: accept length 1.0, the EAGLE 5-1-6 pass time",
    "C2 GLM-5.2 H200 c16 TPOT": "as C1: accept length 1.0, the pass time",
    "C1 V4-Flash H200 c1 TTFT": "not pinned down: the prefill pass, the draft's extend and the tokenizer (all "
    "modelled) are 32 ms under the measured P50 first token, and SGLang's path spends nothing else above a "
    "millisecond outside the passes (docs/notes/request_path.md); left: the estimator's V4 prefill itself",
}
# M1 on the aiconfigurator column is a transfer (the H20 has no tables): one mechanism for all its rows.
MECHANISMS["M1-"] = (
    "a transfer, not H20 kernels: H100's measured per-op times carried to the H20 by the datasheets "
    "(sim/model/transfer.py); its prefill ops keep H100's fraction of peak over a 6.7x smaller FLOP peak, about half "
    "the measured prefill rate (M1-B OFF input tok/s), which the TTFT, duration and throughput rows inherit; decode "
    "rides HBM bandwidth (the TPOT rows). The calibrated column is the H20's own fit")
RATIOS = [  # (label, numerator, denominator): ON/OFF as a user compares them
    *[(f"M1-A c{c} ON/OFF total tok/s", f"M1-A c{c} ON total tok/s", f"M1-A c{c} OFF total tok/s")
      for c, _ in M1A_STEPS],
    *[(f"M1-A c{c} ON/OFF TTFT mean", f"M1-A c{c} ON TTFT mean", f"M1-A c{c} OFF TTFT mean") for c, _ in M1A_STEPS],
    ("M1-B hit/OFF input tok/s", "M1-B hit (ON) input tok/s", "M1-B OFF input tok/s"),
    ("M1-B hit/OFF TTFT mean", "M1-B hit (ON) TTFT mean", "M1-B OFF TTFT mean"),
    ("M1-B cold/OFF duration", "M1-B cold (ON) duration", "M1-B OFF duration"),
    ("M2 L1+L2 / GPU only TTFT", "M2 L1+L2 average TTFT", "M2 GPU only average TTFT"),
    ("M2 L1+L2 / GPU only input tok/s", "M2 L1+L2 input tok/s", "M2 GPU only input tok/s"),
]  # fmt: skip

TABLE_SCENARIOS = tuple(dict.fromkeys(n.scenario for n in NUMBERS))  # the runs the table above compares

# ---- Per-round figures (M3) ------------------------------------------------------------------------------------
# Mooncake's page publishes M3's figures as a chart only (docs/source/image/hicache_multi_turn_per_turn.png): each
# round's average TTFT and cache hit rate, no table and no server log. Read off the chart: each marker's centre in
# pixels against the axis ticks (rounds 2-10 at x 150-561 px; 1-4 s at y 436-153 px; 0-80% at y 494-151 px), a
# marker another covers by eye from its visible edge (ROUND_OCCLUDED); about 0.03 s and 1 point. The "+ L2" hit
# rates of rounds 2-3 lie under the "+ Mooncake" markers, which the page states equal there.
# scenario -> (label, TTFT s per round, hit rate % per round), rounds 1-10.
ROUND_FIGURES = {
    "m3_h800_gpu_only": ("M3 H800 GPU only",
                         (0.39, 0.62, 1.10, 1.51, 2.04, 2.26, 2.95, 3.51, 3.85, 4.47),
                         (0.0, 17.5, 5.9, 4.7, 0.9, 6.4, 0.9, 2.1, 0.0, 0.0)),
    "m3_h800_l1l2": ("M3 H800 L1+L2",
                     (0.42, 0.42, 0.44, 0.61, 1.38, 1.80, 2.37, 3.05, 3.53, 4.15),
                     (0.0, 49.0, 65.7, 63.7, 33.6, 26.8, 20.5, 15.2, 9.1, 7.7)),
}  # fmt: skip
ROUND_OCCLUDED = {("m3_h800_l1l2", "ttft", r) for r in (1, 2, 3, 4)} | {("m3_h800_l1l2", "hit", r) for r in (2, 3)}
ROUND_SEEDS = (0, 1, 2, 3, 4)  # each per-round run is simulated at these seeds: their mean and range are shown


def simulate_rounds(name: str, seeds=ROUND_SEEDS) -> list[list[dict]]:
    """Each seed's per-round client figures (``summary['client']['rounds']``) of scenario ``name``, on its own
    backend."""
    return [run_scenario(load_scenario(OUT / f"{name}.yaml", [f"seed={seed}"]), costs=default_cost_table())
            .summary["client"]["rounds"] for seed in seeds]  # fmt: skip


def _interval(values: list[float], fmt: str) -> str:
    return f"{format(sum(values) / len(values), fmt)} [{format(min(values), fmt)}-{format(max(values), fmt)}]"


def round_table(runs: dict[str, list[list[dict]]]) -> list[str]:
    """Per round: published and simulated (the seeds' mean [range]) TTFT and hit rate, with the mean's error
    (TTFT relative; hit rate in points, as a relative error of a rate near 0 says nothing)."""
    lines = [f"| round | TTFT published | simulated, {len(ROUND_SEEDS)} seeds | error | hit published | simulated | "
             "error (points) |", "|---|---:|---:|---:|---:|---:|---:|"]  # fmt: skip
    for name, (label, ttfts, hits) in ROUND_FIGURES.items():
        for i, (ttft, hit) in enumerate(zip(ttfts, hits, strict=True)):
            sim_t = [rounds[i]["ttft_mean_s"] for rounds in runs[name]]
            sim_h = [100 * rounds[i]["hit_rate"] for rounds in runs[name]]
            mark = {k: " (occluded)" if (name, k, i + 1) in ROUND_OCCLUDED else "" for k in ("ttft", "hit")}
            lines.append(f"| {label} r{i + 1} | {ttft:.2f} s{mark['ttft']} | {_interval(sim_t, '.2f')} | "
                         f"{sum(sim_t) / len(sim_t) / ttft - 1:+.0%} | {hit:.1f}%{mark['hit']} | "
                         f"{_interval(sim_h, '.1f')} | {sum(sim_h) / len(sim_h) - hit:+.1f} |")  # fmt: skip
    return lines


# What-ifs printed beside the table (never in its error columns): (title, overrides, scenarios they apply to).
SENSITIVITY = [
    # The same commands under 0.5.23's defaults (0.678 and 4,096 on an A10 at TP2): the KV capacity a newer
    # server would give this setup.
    ("M2 at 0.5.23's defaults", ["hardware.sglang_defaults=0.5.23"], ["m2_gpu_only", "m2_l1l2"]),
    # Without the overlap scheduler's late first tokens (--disable-overlap-schedule): what the ON rows owe to it.
    ("M1-A without the overlap scheduler", ["scheduler.overlap_schedule=false"], ["m1a_on", "m1a_off"]),
]


ROOFLINE = ["compute.backend=roofline"]  # the roofline columns' backend, named: auto would take the kernels


def conversion(name: str):
    """The scenario ``name`` as its published commands (and the settings they cannot carry) generate it."""
    launch, benches, gpu, extra = SCENARIOS[name]
    conv = from_sglang(launch, benches, gpu=gpu, name=name, sglang_version=extra.get("sglang_version", "0.5.23"),
                       accept_length=extra.get("accept_length"))  # fmt: skip
    if gpu in CALIBRATIONS:  # run directly, the scenario prices what the calibrated column uses
        table = CALIBRATIONS[gpu].relative_to(ROOT).as_posix()
        conv.scenario["hardware"]["cost_table"] = table
        conv.mapped.append(f"(calibration) {gpu}'s compute calibration: hardware.cost_table: {table}")
    if "backend" in extra:
        conv.scenario["compute"] = {"backend": extra["backend"]}
        conv.mapped.append(f"(backend) the GPU is in the kernel database: compute.backend: {extra['backend']}")
    if "note" in extra:
        conv.mapped.append(extra["note"])
    if "wait_backups_step" in extra:
        conv.scenario["workload"]["steps"][extra["wait_backups_step"]]["wait_backups"] = True
        conv.mapped.append("(protocol) the hit step waits for the cold step's backups: workload.steps[1].wait_backups")
    return conv


def write_scenarios() -> None:
    for name in SCENARIOS:
        write_text_atomic(OUT / f"{name}.yaml", to_yaml(conversion(name)))
        print(f"wrote {OUT / name}.yaml")


def simulated(summary: dict, metric: str, step: int) -> float:
    client = summary.get("client") or {}
    if metric == "input_tokens_per_s":
        return summary["throughput"]["input_tokens_per_s"]
    if client.get("client") == "bench_multiturn":
        return client["summary"][metric]
    row = client["steps"][step]
    if metric.startswith("ttft_"):
        return row["ttft_ms"][metric[5:]]
    if metric.startswith("tpot_"):
        return row["tpot_ms"][metric[5:]]
    if metric == "duration":
        return row["duration_s"]
    if metric == "hit_rate":
        return 100 * row["cache_hit_rate"]
    return row[metric]


def _cell(value: float | None, measured: float, fmt: str = "") -> str:
    """A simulated value and its error, or the run's absence where the backend does not cover it."""
    if value is None:
        return "not covered | -"
    shown = format(value, fmt) if fmt else _num(value)
    return f"{shown} | {value / measured - 1:+.0%}"


def _scenario_of(label: str) -> str:
    return next(n.scenario for n in NUMBERS if n.label == label)


def _mechanism(label: str) -> str:
    return next((why for key, why in MECHANISMS.items() if label.startswith(key)), "not pinned down")


def _num(x: float) -> str:
    """Four significant digits, with thousands separators and no exponent."""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:.4g}"


def _run_all(tables: dict[str, object], names=TABLE_SCENARIOS, overrides: list[str] = (),
             uncovered: dict[str, str] | None = None) -> tuple[dict[str, dict], dict[str, float]]:  # fmt: skip
    """Run each scenario; with ``uncovered``, a scenario refused (its backend cannot price it) is recorded
    there with the one-line reason instead of run."""
    summaries, walls = {}, {}
    for name in names:
        try:
            sc = load_scenario(OUT / f"{name}.yaml", overrides)
        except InputError as exc:
            if uncovered is None:
                raise
            uncovered[name] = str(exc).split(": ", 2)[-1]
            continue
        start = time.perf_counter()
        summaries[name] = run_scenario(sc, costs=tables.get(sc.hardware.gpu, default_cost_table())).summary
        walls[name] = time.perf_counter() - start
    return summaries, walls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write-scenarios", action="store_true", help="regenerate scenarios/validation/ first")
    parser.add_argument("--rounds-only", action="store_true", help="print only the per-round table (M3)")
    parser.add_argument("--markdown", default=None, help="also write the table as Markdown here")
    args = parser.parse_args(argv)
    if args.write_scenarios:
        write_scenarios()
    if args.rounds_only:
        return _emit(_rounds(), args.markdown)
    tables = {gpu: load_cost_table(path) for gpu, path in CALIBRATIONS.items()}
    spec, walls = _run_all({}, overrides=ROOFLINE)
    calibrated, _ = _run_all(tables, overrides=ROOFLINE)
    uncovered: dict[str, str] = {}
    measured_kernels, _ = _run_all({}, overrides=["compute.backend=aiconfigurator"], uncovered=uncovered)
    head = ("| {} | measured | roofline (spec) | error | roofline (calibrated) | error | aiconfigurator | error |",
            "|---|---|---|---|---|---|---|---|")  # fmt: skip
    lines = [head[0].format("number"), head[1]]
    values = {}
    for n in NUMBERS:
        a, b = simulated(spec[n.scenario], n.metric, n.step), simulated(calibrated[n.scenario], n.metric, n.step)
        c = simulated(measured_kernels[n.scenario], n.metric, n.step) if n.scenario in measured_kernels else None
        values[n.label] = (n.measured, a, b, c)
        lines.append(f"| {n.label} | {_num(n.measured)} {n.unit} | {_num(a)} | {a / n.measured - 1:+.0%} | "
                     f"{_num(b)} | {b / n.measured - 1:+.0%} | {_cell(c, n.measured)} |")  # fmt: skip
    lines += ["", head[0].format("ratio"), head[1]]
    for label, x, y in RATIOS:
        m, a, b = (values[x][i] / values[y][i] for i in range(3))
        c = values[x][3] / values[y][3] if values[x][3] is not None else None
        lines.append(f"| {label} | {m:.3f} | {a:.3f} | {a / m - 1:+.0%} | {b:.3f} | {b / m - 1:+.0%} | "
                     f"{_cell(c, m, '.3f')} |")  # fmt: skip
    by_reason: dict[str, list[str]] = {}
    for name, why in uncovered.items():
        by_reason.setdefault(why, []).append(name)
    lines += ["", "aiconfigurator, refused (no fallback): "
              + "; ".join(f"{', '.join(names)}: {why}" for why, names in by_reason.items())] if uncovered else []
    misses = [(n.label, values[n.label][3] / n.measured - 1) for n in NUMBERS
              if values[n.label][3] is not None and abs(values[n.label][3] / n.measured - 1) > 0.15]  # fmt: skip
    if misses:
        lines += ["", "| aiconfigurator miss over 15% | error | mechanism |", "|---|---|---|"]
        lines += [f"| {label} | {err:+.0%} | {_mechanism(label)}"
                  + (f" (the measured TPOT implies an accept length of {err + 1:.2f})" if "TPOT" in label
                     and SCENARIOS[_scenario_of(label)][3].get("accept_length") == 1.0 else "") + " |"
                  for label, err in misses]  # fmt: skip
    for title, overrides, names in SENSITIVITY:
        alt, _ = _run_all(tables, names, [*ROOFLINE, *overrides])
        lines += ["", f"| {title} | measured | simulated (as generated) | error | simulated ({', '.join(overrides)}) | error |",
                  "|---|---|---|---|---|---|"]  # fmt: skip
        alt_values = {}
        for n in (n for n in NUMBERS if n.scenario in names):
            b = simulated(alt[n.scenario], n.metric, n.step)
            alt_values[n.label] = b
            m, a = values[n.label][0], values[n.label][2]
            lines.append(f"| {n.label} | {_num(m)} {n.unit} | {_num(a)} | {a / m - 1:+.0%} | {_num(b)} | {b / m - 1:+.0%} |")
        for label, x, y in RATIOS:
            if x in alt_values and y in alt_values:
                m, a, b = values[x][0] / values[y][0], values[x][2] / values[y][2], alt_values[x] / alt_values[y]
                lines.append(f"| {label} | {m:.3f} | {a:.3f} | {a / m - 1:+.0%} | {b:.3f} | {b / m - 1:+.0%} |")
    lines.append("")
    for gpu, t in tables.items():
        p = t.compute_params
        lines.append(f"calibration {gpu}: {CALIBRATIONS[gpu].relative_to(ROOT)}: mfu {p['mfu']:.3f}, mbu {p['mbu']:.3f}, "
                     f"step overhead {p['step_overhead_ms']:.2f} ms, attention x{p['attn_flops_scale']:g} "
                     f"(fitted to {t.compute['source'].get('measured')})")  # fmt: skip
    lines += ["", *_rounds()]
    lines.append("wall time per scenario (spec run): " + ", ".join(f"{k} {v:.1f} s" for k, v in walls.items()))
    return _emit(lines, args.markdown)


def _rounds() -> list[str]:
    """The per-round table, or the one line saying why its runs were refused (their backend is not installed)."""
    try:
        return round_table({name: simulate_rounds(name) for name in ROUND_FIGURES})
    except InputError as exc:
        return [f"per-round runs ({', '.join(ROUND_FIGURES)}), refused: {str(exc).split(': ', 2)[-1]}"]


def _emit(lines: list[str], markdown: str | None) -> int:
    """Print the table, and write it as Markdown where asked."""
    table = "\n".join(lines)
    print(table)
    if markdown:
        write_text_atomic(markdown, table + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

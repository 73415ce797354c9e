"""InferenceX's B200 AgentX submission (SemiAnalysisAI/InferenceX PR #2718) from its published commands, against its
published figures: tok/s/GPU and tok/s/user at c128 and c160.

    python bench/agentx_b200.py [--conc 128 160] [--seeds 1 2 3] [--duration 3600]

The launch is ``benchmarks/single_node/agentic/dsv4_fp4_b200_sglang_mtp.sh``'s with ``DP_ATTENTION=true TP=8
EP_SIZE=8`` and HiCache (DEP8, MegaMoE, FP4 indexer, EAGLE MTP with the script's synthetic accept length 2.49,
HiCache ratio 8 write_through, mem fraction 0.90, or 0.88 with interval 20 at c160, 6,144-token chunks a rank,
``--load-balance-method total_requests``), behind ``sglang_router --policy cache_aware --dp-aware``; the client is
aiperf's AgentX command as InferenceX's ``benchmark_lib.sh`` builds it: the start ratios 0.25-0.75, a primer and 10
one-token warm-up calls a lane in a 1,800 s grace, the 300 s idle cap. No local copy of the corpus: 393 sessions
generated with its published statistics. The commands go through ``scenario from-sglang`` unedited: the step
times are B200's measured kernel tables (``compute.backend: auto``), the accept length the launch's
``SGLANG_SIMULATE_ACC_LEN``. The host is from-sglang's default 2 TB node: ratio 8 fits it once the KV sizing
charges what MegaMoE keeps resident (:mod:`sim.model.moeweights`). Nothing here is fitted to the published figures.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

PUBLISHED = {128: (43_382.65, 34.587), 160: (50_468.23, 28.916)}  # tok/s/GPU, tok/s/user (PR #2718, 2026-08-24)

LAUNCH = ("SGLANG_SIMULATE_ACC_LEN=2.49 python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Pro "
          "--trust-remote-code --tp 8 --load-balance-method total_requests --dp 8 --tokenizer-worker-num 8 "
          "--prefill-decode-interval {interval} --enable-dp-attention --enable-dp-attention-local-control-broadcast "
          "--incremental-streaming-output --stream-interval 20 --ep-size 8 --moe-a2a-backend megamoe "
          "--enable-deepseek-v4-fp4-indexer --disable-shared-experts-fusion --disable-flashinfer-autotune "
          "--mem-fraction-static {mem} --swa-full-tokens-ratio 0.02 --max-running-requests {max_running} "
          "--cuda-graph-max-bs 32 --chunked-prefill-size 49152 --speculative-algorithm EAGLE --speculative-num-steps 3 "
          "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4 --enable-metrics --enable-cache-report "
          "--enable-hierarchical-cache --hicache-ratio 8 --hicache-write-policy write_through --hicache-io-backend direct "
          "--hicache-mem-layout page_first_direct")  # fmt: skip
# InferenceX's aiperf command for it (``benchmarks/benchmark_lib.sh`` ``build_replay_cmd``, with the launcher's
# values), the published seed 42 replaced by each of ``--seeds``.
AIPERF = ("aiperf profile --scenario inferencex-agentx-mvp --url http://localhost:8888 --endpoint /v1/chat/completions "
          "--endpoint-type chat --streaming --model deepseek-ai/DeepSeek-V4-Pro --tokenizer deepseek-ai/DeepSeek-V4-Pro "
          "--concurrency {conc} --benchmark-duration {duration:g} --stats-interval 30 --random-seed {seed} "
          "--failed-request-threshold 0.10 --trajectory-start-min-ratio 0.25 --trajectory-start-max-ratio 0.75 "
          "--warmup-requests-per-lane 10 --trace-idle-gap-cap-seconds 300 --warmup-grace-period 1800 "
          "--use-server-token-count --no-gpu-telemetry --tokenizer-trust-remote-code --num-dataset-entries 393 "
          "--slice-duration 1.0 --output-artifact-dir results/aiperf_artifacts "
          "--public-dataset semianalysis_cc_traces_weka_062126")  # fmt: skip
# The router at both points; c160 adds the cache-aware policy's absolute balance threshold 32 (the PR's description).
ROUTER = ("python -m sglang_router.launch_router --worker-urls http://localhost:8889 --policy cache_aware "
          "--request-id-headers x-correlation-id --dp-aware")  # fmt: skip
ROUTER_C160 = ROUTER + " --balance-abs-threshold 32"


def one(conc: int, seed: int, duration: float) -> dict:
    from sim.app.run import run_scenario
    from sim.interop.fromsglang import from_sglang
    from sim.scenario.load import scenario_from_dict

    interval, mem = (20, 0.88) if conc == 160 else (24, 0.90)
    launch = LAUNCH.format(interval=interval, mem=mem, max_running=2 * conc)
    router = ROUTER_C160 if conc == 160 else ROUTER
    conv = from_sglang(launch, [AIPERF.format(conc=conc, duration=duration, seed=seed), router], gpu="B200")
    r = run_scenario(scenario_from_dict(conv.scenario, source="agentx_b200")).summary["client"]
    if r.get("warmup_failed"):
        return {"conc": conc, "seed": seed, "warmup_failed": r["warmup_failed"]}
    return {"conc": conc, "seed": seed, "tok_per_s_per_gpu": r["tok_per_s_per_gpu"],
            "tok_per_s_per_user": 1 / r["itl_s"]["mean"], "calls_per_lane_hour": r["calls_per_lane_hour"],
            "isl_mean": r["isl"]["mean"], "osl_mean": r["osl"]["mean"], "idle_gap_mean_s": r["idle_gap_s"]["mean"],
            "warmup_end_s": r["warmup_end_s"]}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--conc", type=int, nargs="+", default=[128, 160], choices=sorted(PUBLISHED))
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--duration", type=float, default=3600.0,
                    help="measured phase, simulated s (InferenceX's AgentX default and the PR's full hour: 3600)")
    args = ap.parse_args()
    for conc in args.conc:
        rows = [one(conc, s, args.duration) for s in args.seeds]
        for row in rows:
            print(json.dumps(row))
        ok = [r for r in rows if "tok_per_s_per_gpu" in r]
        if not ok:
            continue
        gpu, user = (float(np.mean([r[k] for r in ok])) for k in ("tok_per_s_per_gpu", "tok_per_s_per_user"))
        pub_gpu, pub_user = PUBLISHED[conc]
        print(f"c{conc}: tok/s/GPU {gpu:,.0f} vs {pub_gpu:,.0f} published ({gpu / pub_gpu - 1:+.1%}); tok/s/user "
              f"{user:.2f} vs {pub_user:.3f} ({user / pub_user - 1:+.1%}); {len(ok)} of {len(rows)} seeds warmed up")


if __name__ == "__main__":
    main()

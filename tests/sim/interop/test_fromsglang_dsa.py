"""``scenario from-sglang`` on DSA models (GLM-5.1/5.2, DeepSeek V3.2) with HiSparse: the LMSYS post's colocated
launch and a PD decode launch build instances that run, SGLang's KV dtype and page rules apply, and what SGLang
refuses with ``--enable-hisparse`` is refused, named by its flag."""

from __future__ import annotations

import json

import pytest

from sim.app.run import run_scenario
from sim.base.errors import InputError
from sim.interop.fromsglang import from_sglang
from sim.scenario.load import scenario_from_dict

CONFIG = json.dumps({"top_k": 2048, "device_buffer_size": 4096, "host_to_device_ratio": 8})
# The LMSYS HiSparse post's colocated launch on 8 x H200.
LMSYS = ("python3 -m sglang.launch_server --model-path zai-org/GLM-5.1-FP8 --tp-size 8 --dp-size 8 "
         "--enable-dp-attention --disable-radix-cache --chunked-prefill-size 65536 --max-running-requests 480 "
         f"--mem-fraction-static 0.85 --enable-hisparse --hisparse-config '{CONFIG}'")  # fmt: skip
PD = ("python3 -m sglang.launch_server --model-path {model} --tp 8 --disaggregation-mode decode "
      "--kv-cache-dtype fp8_e4m3 --dsa-decode-backend flashmla_kv --disable-radix-cache --max-running-requests 64 "
      f"--enable-hisparse --hisparse-config '{CONFIG}'")  # fmt: skip
BENCH = ("python3 -m sglang.bench_serving --backend sglang --dataset-name random --random-input-len 8192 "
         "--random-output-len 64 --random-range-ratio 1 --num-prompts 32 --max-concurrency 16")  # fmt: skip
QUICK = {"step_windows": 1, "window_steps": 16, "sample_requests": 1, "access": {"layers_simulated": 1}}


def quick(conv) -> dict:
    doc = dict(conv.scenario)
    doc["hisparse"] = {**doc["hisparse"], **QUICK}
    return doc


def test_the_lmsys_colocated_launch_builds_a_colocated_dsa_instance_that_runs():
    conv = from_sglang(LMSYS, [BENCH], gpu="H200")
    sc = scenario_from_dict(quick(conv), source="test")
    assert sc.cluster.role == "colocated" and sc.hisparse.enabled and sc.hardware.attn_dp_size == 8
    assert sc.model.kv_dtype == "bfloat16"  # auto on Hopper (overrides.py:532-535)
    assert sc.hicache.page_size == 64  # DSA on CUDA (model_overrides/deepseek_v2.py:163-173)
    assert not any(i.startswith("--disable-radix-cache") for i in conv.ignored)  # HiSparse requires it
    s = run_scenario(sc).summary
    assert s["role"] == "colocated" and s["dp_ranks"] == 8
    assert s["requests"]["finished"] == 32 // 8  # rank 0's round-robin share
    h = s["hisparse"]
    assert h["family"] == "dsa" and h["capacity_gain"] > 1 and h["max_batch_hisparse"] > h["max_batch_baseline"]
    assert 0 < h["peak_batch"] <= 16 // 8  # the client's concurrency, per rank
    assert s["engine"]["steps"] > 0


@pytest.mark.parametrize("model", ["zai-org/GLM-5.1-FP8", "zai-org/GLM-5.2-FP8", "deepseek-ai/DeepSeek-V3.2"])
def test_a_pd_decode_launch_builds_a_decode_instance_for_each_dsa_family(model):
    conv = from_sglang(PD.replace("{model}", model), gpu="H200")
    sc = scenario_from_dict(quick(conv), source="test")
    assert sc.cluster.role == "decode" and sc.model.kv_dtype == "fp8_e4m3"
    assert any("index_topk instead" in n for n in conv.notes)
    s = run_scenario(scenario_from_dict({**quick(conv), "workload": {
        "kind": "synthetic", "rate": 50.0, "num_requests": 8, "input_length": 8192, "output_length": 32}},
        source="test")).summary  # fmt: skip
    assert s["requests"]["finished"] == 8 and s["hisparse"]["kv_dtype"] == "fp8_e4m3"
    assert (s["hisparse"]["skip_layers"] > 0) == (model == "zai-org/GLM-5.2-FP8")  # IndexShare


def test_the_nsa_spelling_of_the_backend_flag_reads_as_the_dsa_one():
    conv = from_sglang(PD.replace("{model}", "zai-org/GLM-5.1-FP8").replace("--dsa-", "--nsa-"), gpu="H200")
    assert any("NSA-era spelling of --dsa-decode-backend" in i for i in conv.ignored)


@pytest.mark.parametrize("command, message", [
    (LMSYS.replace("--disable-radix-cache ", ""), "--enable-hisparse: SGLang requires --disable-radix-cache"),
    (LMSYS + " --enable-mixed-chunk", "--enable-mixed-chunk: SGLang refuses it with --enable-hisparse"),
    (LMSYS + " --speculative-algorithm EAGLE --speculative-num-steps 3 --speculative-eagle-topk 2 "
             "--speculative-num-draft-tokens 4", "--speculative-eagle-topk 2: HiSparse takes linear speculation"),
    (LMSYS + " --dsa-decode-backend flashmla_kv", "--dsa-decode-backend flashmla_kv: HiSparse runs DSA with "
                                                  "flashmla_sparse at --kv-cache-dtype bfloat16"),
    (LMSYS + " --kv-cache-dtype fp8_e5m2", "--kv-cache-dtype fp8_e5m2: DSA models store bf16 or fp8_e4m3"),
])  # fmt: skip
def test_what_sglang_refuses_with_hisparse_is_named_by_its_flag(command, message):
    with pytest.raises(InputError, match="^" + message):
        from_sglang(command, gpu="H200")


def test_blackwell_resolves_dsa_kv_to_fp8():
    assert from_sglang(LMSYS, gpu="B200").scenario["model"]["kv_dtype"] == "fp8_e4m3"


def test_sglangs_hisparse_guide_decode_launch_and_bench_run():
    """docs/advanced_features/hisparse_guide.md's decode instance (DP attention 8) and bench_serving command
    (random 40K/20K, --request-rate 40, --max-concurrency 200), shortened to run here."""
    launch = ("python3 -m sglang.launch_server --model-path zai-org/GLM-5.1-FP8 --trust-remote-code --port 8000 "
              "--host 0.0.0.0 --context-length 81920 --tp-size 8 --dp-size 8 --enable-dp-attention "
              "--mem-fraction-static 0.85 --disable-radix-cache --disaggregation-mode decode "
              "--disaggregation-ib-device mlx5_0,mlx5_1 --dist-init-addr 127.0.0.1:5757 --nnodes 1 --node-rank 0 "
              "--enable-hisparse --hisparse-config='{\"top_k\": 2048, \"device_buffer_size\": 6144, "
              "\"host_to_device_ratio\": 10, \"swap_in_block_size\": 512}'")  # fmt: skip
    bench = ("python3 -m sglang.bench_serving --backend sglang --dataset-path /data/ShareGPT.json --dataset-name "
             "random --random-input 40000 --random-output 20000 --num-prompts 200 --max-concurrency 200 "
             "--request-rate 40 --random-range-ratio 1.0 --host 127.0.0.1 --port 20000 --flush-cache")  # fmt: skip
    conv = from_sglang(launch, [bench], gpu="H200")
    doc = quick(conv)
    doc["workload"]["steps"][0].update(num_prompts=32, random_output_len=64)
    sc = scenario_from_dict(doc, source="test")
    assert sc.cluster.role == "decode" and sc.hardware.attn_dp_size == 8 and sc.hisparse.device_buffer_size == 6144
    assert sc.workload.steps[0].request_rate == 40 and sc.workload.steps[0].max_concurrency == 200
    s = run_scenario(sc).summary
    assert s["requests"]["finished"] == 32 // 8 and s["hisparse"]["per_request_device_slots"] == 6144 + 64
    assert s["hisparse"]["peak_batch"] > 1  # the rank's requests, sent 5 a second, decode together


def test_a_raw_fp8_layout_backend_is_named_as_not_modelled():
    base = LMSYS.split(" --enable-hisparse")[0] + " --kv-cache-dtype fp8_e4m3 --dsa-decode-backend trtllm"
    assert any(n.startswith("--dsa-decode-backend trtllm: stores fp8 KV in the raw layout")
               for n in from_sglang(base, gpu="H200").notes)  # fmt: skip

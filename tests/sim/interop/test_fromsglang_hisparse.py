"""``scenario from-sglang`` builds a HiSparse decode instance from a PD decode launch command: ``--enable-hisparse``
and ``--hisparse-config`` read as SGLang reads them (mem_cache/sparsity/factory.py), the model named as the
command names it."""

from __future__ import annotations

import json

import pytest

from sim.app.run import run_scenario
from sim.base.errors import InputError
from sim.interop.fromsglang import from_sglang
from sim.scenario.load import scenario_from_dict

DECODE = ("python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Flash --trust-remote-code --tp 4 "
          "--disaggregation-mode decode --disaggregation-transfer-backend mooncake --disable-radix-cache --enable-hisparse "
          "--swa-full-tokens-ratio 0.004 --max-running-requests 256")  # fmt: skip


def launch(config: dict | str | None = None, base: str = DECODE) -> str:
    if config is None:
        return base
    text = config if isinstance(config, str) else json.dumps(config)
    return f"{base} --hisparse-config '{text}'"


def test_a_pd_decode_command_with_hisparse_flags_builds_a_decode_instance_that_runs():
    conv = from_sglang(launch({"top_k": 512, "device_buffer_size": 4096, "host_to_device_ratio": 10,
                               "swap_in_block_size": 512}), gpu="H200")  # fmt: skip
    sc = scenario_from_dict(conv.scenario)
    assert sc.cluster.role == "decode" and sc.hisparse.enabled and sc.model.name == "DeepSeek-V4-Flash"
    h = sc.hisparse
    assert (h.top_k, h.device_buffer_size, h.host_to_device_ratio) == (512, 4096, 10)
    assert any(i.startswith("--hisparse-config swap_in_block_size 512: threads per swap-in") for i in conv.ignored)
    assert sc.workload.kind == "synthetic"  # no client command: a workload to edit, and it says so
    assert any("no client command for a decode instance" in m for m in conv.mapped)
    summary = run_scenario(sc).summary
    assert summary["role"] == "decode" and summary["hisparse"]["enabled"]
    assert summary["requests"]["finished"] == sc.workload.num_requests


def test_sglangs_defaults_fill_what_the_config_leaves_out():
    sc = scenario_from_dict(from_sglang(launch({"top_k": 1024}), gpu="H200").scenario)
    assert (sc.hisparse.top_k, sc.hisparse.device_buffer_size) == (1024, 2048)  # factory.py:80: 2 x top_k
    sc = scenario_from_dict(from_sglang(launch(), gpu="H200").scenario)
    assert sc.hisparse.enabled and sc.hisparse.device_buffer_size == 4096 and sc.hisparse.host_to_device_ratio == 2


def test_the_long_spelling_of_the_config_flag_maps_too():
    base = DECODE + " --hierarchical-sparse-attention-extra-config '{\"device_buffer_size\": 8192}'"
    assert scenario_from_dict(from_sglang(base, gpu="H200").scenario).hisparse.device_buffer_size == 8192


@pytest.mark.parametrize("command, message", [
    (launch({"top_k": 2048, "device_buffer_size": 1024}), "--hisparse-config: device_buffer_size 1024 is smaller "
                                                          "than top_k 2048"),
    (launch("{not json"), "--hisparse-config: not JSON"),
    (launch("[512]"), "--hisparse-config: expected a JSON object"),
    (launch({"top_k": "512"}), "--hisparse-config: top_k must be an integer"),
    (launch({"host_to_device_ratio": 0}), "--hisparse-config host_to_device_ratio 0:"),
    (DECODE.replace("--disaggregation-mode decode ", ""), "--enable-hisparse: hisparse.enabled: HiSparse runs only on decode"),
    (DECODE.replace("--swa-full-tokens-ratio 0.004 ", ""), "--max-running-requests: without --swa-full-tokens-ratio"),
])  # fmt: skip
def test_what_sglang_or_the_model_refuses_is_named_by_its_flag(command, message):
    with pytest.raises(InputError, match="^" + message.replace("[", r"\[").replace("(", r"\(")):
        from_sglang(command, gpu="H200").check()  # as the command checks what it writes

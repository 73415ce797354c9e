"""An sglang_router command (given with --bench) maps its policy onto cluster.router, as AgentX's B300 recipes
front a DP-attention server: --policy consistent_hashing --request-id-headers x-correlation-id --dp-aware."""

from __future__ import annotations

import pytest

from sim.app.fromsglang import from_sglang
from sim.app.scenario import scenario_from_dict
from sim.base.errors import InputError

LAUNCH = ("python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Flash --tp 8 --dp-size 8 "
          "--enable-dp-attention")  # fmt: skip
ROUTER = ("python3 -m sglang_router.launch_router --worker-urls http://localhost:8000 --policy consistent_hashing "
          "--request-id-headers x-correlation-id --dp-aware --host 0.0.0.0 --port 8888 --prometheus-host 127.0.0.1 "
          "--prometheus-port 29000 --connect-timeout-secs 900 --request-timeout-secs 14400 --disable-health-check "
          "--disable-retries")  # fmt: skip


def test_the_agentx_router_command_maps_to_dp_aware_consistent_hashing():
    conv = from_sglang(LAUNCH, [ROUTER], gpu="B200")
    assert scenario_from_dict(conv.scenario).cluster.router == "consistent_hashing"
    assert any(m.startswith("--policy consistent_hashing --dp-aware -> cluster.router") for m in conv.mapped)
    router_lines = [line for line in conv.ignored if line.startswith(("--worker-urls", "--request-id-headers",
                                                                      "--port", "--disable-retries"))]  # fmt: skip
    assert len(router_lines) == 4 and all(": " in line for line in router_lines)


def test_consistent_hashing_over_dp_ranks_needs_dp_aware():
    with pytest.raises(InputError, match="--dp-aware"):
        from_sglang(LAUNCH, [ROUTER.replace(" --dp-aware", "")], gpu="B200")


def test_an_unmodelled_policy_is_refused_by_name():
    with pytest.raises(InputError, match="--policy power_of_two: not modelled"):
        from_sglang(LAUNCH, [ROUTER.replace("consistent_hashing", "power_of_two")], gpu="B200")

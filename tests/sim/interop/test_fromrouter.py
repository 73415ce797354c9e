"""An sglang_router command (given with --bench) maps its policy onto cluster.router, as AgentX's B300 recipes
front a DP-attention server: --policy consistent_hashing --request-id-headers x-correlation-id --dp-aware."""

from __future__ import annotations

import pytest

from sim.app.cli import main
from sim.base.errors import InputError
from sim.interop.fromrouter import OTHER_WHY, ROUTER_WHY, router_flags
from sim.interop.fromsglang import from_sglang
from sim.scenario.load import scenario_from_dict

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


@pytest.mark.parametrize("flag", sorted(ROUTER_WHY))
def test_each_listed_router_option_is_ignored_with_its_reason(flag):
    conv = from_sglang(LAUNCH, [ROUTER], gpu="B200")
    lines = [line for line in conv.ignored if line.split(":", 1)[0].split(" ", 1)[0] == flag]
    assert len(lines) == 1 and lines[0].endswith(ROUTER_WHY[flag])


def test_worker_urls_take_every_word_up_to_the_next_flag():
    urls = "--worker-urls http://a:1 http://b:2 http://c:3"
    assert router_flags(urls.split() + ["--policy=round_robin"]) == [
        ("--worker-urls", "http://a:1 http://b:2 http://c:3", urls),
        ("--policy", "round_robin", "--policy=round_robin"),
    ]


def test_an_unlisted_option_is_ignored_as_having_no_effect_on_placement():
    conv = from_sglang(LAUNCH, [ROUTER + " --log-level debug"], gpu="B200")
    assert f"--log-level debug: {OTHER_WHY}" in conv.ignored


@pytest.mark.parametrize("policy", ["round_robin", "cache_aware"])
def test_the_other_modelled_policies_map_with_or_without_dp_aware(policy):
    for router in (ROUTER, ROUTER.replace(" --dp-aware", "")):
        conv = from_sglang(LAUNCH, [router.replace("consistent_hashing", policy)], gpu="B200")
        assert scenario_from_dict(conv.scenario).cluster.router == policy


def test_consistent_hashing_needs_no_dp_aware_without_dp_attention():
    launch = LAUNCH.replace(" --dp-size 8 --enable-dp-attention", "")
    conv = from_sglang(launch, [ROUTER.replace(" --dp-aware", "")], gpu="B200")
    assert scenario_from_dict(conv.scenario).cluster.router == "consistent_hashing"


def test_without_a_policy_the_router_stays_round_robin_and_says_why():
    conv = from_sglang(LAUNCH, [ROUTER.replace(" --policy consistent_hashing", "")], gpu="B200")
    assert scenario_from_dict(conv.scenario).cluster.router == "round_robin"
    assert any(line.startswith("sglang_router without --policy") for line in conv.ignored)


def test_a_stray_positional_argument_is_refused():
    with pytest.raises(InputError, match="sglang_router: unexpected argument 'extra'"):
        from_sglang(LAUNCH, [ROUTER.replace("python3 -m sglang_router.launch_router", "sglang_router extra")],
                    gpu="B200")  # fmt: skip


@pytest.mark.parametrize(("edit", "says"), [
    (("consistent_hashing", "power_of_two"), "sglang_router --policy power_of_two: not modelled"),
    ((" --dp-aware", ""), "sglang_router --policy consistent_hashing without --dp-aware"),
])  # fmt: skip
def test_the_cli_refuses_a_bad_router_command_in_one_line_with_exit_2(tmp_path, capsys, edit, says):
    out = tmp_path / "s.yaml"
    argv = ["scenario", "from-sglang", "--gpu", "B200", "--launch", LAUNCH, "--bench", ROUTER.replace(*edit)]
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and not out.exists()

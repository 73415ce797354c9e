"""An sglang_router command (given with --bench) maps its policy onto cluster.router, as AgentX's B300 recipes
front a DP-attention server: --policy consistent_hashing --request-id-headers x-correlation-id --dp-aware; and
cache_aware's options (sglang-router 0.3.2's router_args.py) onto cluster.router_*."""

from __future__ import annotations

import re

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


def test_without_dp_aware_the_router_has_one_worker_and_the_dp_controller_picks_the_rank():
    for policy in ("consistent_hashing", "cache_aware"):
        router = ROUTER.replace("consistent_hashing", policy).replace(" --dp-aware", "") + " --balance-abs-threshold 8"
        conv = from_sglang(LAUNCH, [router], gpu="B200")
        assert conv.check().cluster.router == "round_robin" and "router_balance_abs_threshold" not in conv.origins
        assert any(m.startswith("sglang_router without --dp-aware -> cluster.router: round_robin") for m in conv.mapped)
        assert f"--policy {policy}: without --dp-aware the router's only worker is the launch's server" in conv.ignored


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


def test_round_robin_maps_with_or_without_dp_aware():
    for router in (ROUTER, ROUTER.replace(" --dp-aware", "")):
        conv = from_sglang(LAUNCH, [router.replace("consistent_hashing", "round_robin")], gpu="B200")
        assert scenario_from_dict(conv.scenario).cluster.router == "round_robin"


def test_cache_aware_with_dp_aware_routes_over_the_ranks():
    cache_aware = ROUTER.replace("consistent_hashing", "cache_aware")
    assert scenario_from_dict(from_sglang(LAUNCH, [cache_aware], gpu="B200").scenario).cluster.router == "cache_aware"


CACHE_AWARE = ("python -m sglang_router.launch_router --worker-urls http://localhost:8889 --policy cache_aware "
               "--request-id-headers x-correlation-id --dp-aware")  # InferenceX #2718's router  # fmt: skip


@pytest.mark.parametrize(("option", "field", "value"), [
    ("--cache-threshold 0.5", "router_cache_threshold", 0.5),
    ("--balance-abs-threshold 32", "router_balance_abs_threshold", 32),
    ("--balance-rel-threshold=1.0001", "router_balance_rel_threshold", 1.0001),
    ("--eviction-interval-secs 30", "router_eviction_interval_s", 30),
    ("--eviction-interval 30", "router_eviction_interval_s", 30),  # argparse's abbreviation of the flag above
    ("--max-tree-size 1000", "router_max_tree_size", 1000),
])  # fmt: skip
def test_each_cache_aware_option_maps_to_its_field_with_the_flag_as_origin(option, field, value):
    conv = from_sglang(LAUNCH, [f"{CACHE_AWARE} {option}"], gpu="B200")
    assert getattr(conv.check().cluster, field) == value
    assert conv.origins[f"cluster.{field}"] == option
    assert f"{option} -> cluster.{field}: {value}" in conv.mapped
    assert not any(line.startswith(option) for line in conv.ignored)


def test_the_cache_aware_defaults_are_sglang_router_0_3_2s():
    cluster = from_sglang(LAUNCH, [CACHE_AWARE], gpu="B200").check().cluster
    assert (cluster.router_cache_threshold, cluster.router_balance_abs_threshold, cluster.router_balance_rel_threshold,
            cluster.router_eviction_interval_s, cluster.router_max_tree_size) == (0.3, 64, 1.5, 60, 2**26)  # fmt: skip


@pytest.mark.parametrize(("option", "says"), [
    ("--cache-threshold 1.5", "--cache-threshold 1.5: cluster.router_cache_threshold: must be <= 1"),
    ("--balance-abs-threshold x", "sglang_router --balance-abs-threshold: expected an integer, got 'x'"),
    ("--max-tree-size 0", "--max-tree-size 0: cluster.router_max_tree_size: must be >= 1"),
])  # fmt: skip
def test_a_bad_cache_aware_option_is_refused_naming_the_flag(option, says):
    with pytest.raises(InputError, match=re.escape(says)):
        from_sglang(LAUNCH, [f"{CACHE_AWARE} {option}"], gpu="B200").check()


def test_a_cache_aware_option_under_another_policy_is_ignored_with_why():
    conv = from_sglang(LAUNCH, [ROUTER + " --balance-abs-threshold 32"], gpu="B200")
    assert "--balance-abs-threshold 32: an option of --policy cache_aware only" in conv.ignored
    assert "router_balance_abs_threshold" not in conv.scenario.get("cluster", {})


def test_consistent_hashing_needs_no_dp_aware_without_dp_attention():
    launch = LAUNCH.replace(" --dp-size 8 --enable-dp-attention", "")
    conv = from_sglang(launch, [ROUTER.replace(" --dp-aware", "")], gpu="B200")
    assert scenario_from_dict(conv.scenario).cluster.router == "consistent_hashing"


def test_without_a_policy_the_router_takes_its_default_cache_aware():
    conv = from_sglang(LAUNCH, [ROUTER.replace(" --policy consistent_hashing", "")], gpu="B200")
    assert scenario_from_dict(conv.scenario).cluster.router == "cache_aware"
    assert any(line.startswith("--policy cache_aware (the router's default) --dp-aware") for line in conv.mapped)


def test_a_stray_positional_argument_is_refused():
    with pytest.raises(InputError, match="sglang_router: unexpected argument 'extra'"):
        from_sglang(LAUNCH, [ROUTER.replace("python3 -m sglang_router.launch_router", "sglang_router extra")],
                    gpu="B200")  # fmt: skip


@pytest.mark.parametrize(("edit", "says"), [
    (("consistent_hashing", "power_of_two"), "sglang_router --policy power_of_two: not modelled"),
    (("consistent_hashing", "cache_aware --cache-threshold x"), "sglang_router --cache-threshold: expected a number"),
])  # fmt: skip
def test_the_cli_refuses_a_bad_router_command_in_one_line_with_exit_2(tmp_path, capsys, edit, says):
    out = tmp_path / "s.yaml"
    argv = ["scenario", "from-sglang", "--gpu", "B200", "--launch", LAUNCH, "--bench", ROUTER.replace(*edit)]
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and says in err[0] and not out.exists()

"""The launch command of a scenario, the inverse of ``scenario from-sglang``."""

import shlex

from sim.interop.fromsglang import from_sglang
from sim.interop.tosglang import launch_command
from sim.scenario.load import load_scenario, scenario_from_dict

LAUNCH = ("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Flash --tp-size 8 "
          "--enable-hierarchical-cache --hicache-ratio 4 --host 0.0.0.0 --port 30000 --trust-remote-code")  # fmt: skip


def back(cmd: str):
    return scenario_from_dict(from_sglang(cmd, [], gpu="H200", host_mem_gb=1e6).scenario, source="t")


def test_a_changed_ratio_and_policy_replace_only_their_flags_in_the_users_command():
    sc = back(LAUNCH)
    new = sc.model_copy(update={"hicache": sc.hicache.model_copy(update={"hicache_ratio": 8.0,
                                                                          "write_policy": "write_back"})})
    cmd, notes = launch_command(new, LAUNCH)
    words = shlex.split(cmd)
    assert words.count("--hicache-ratio") == 1 and words[words.index("--hicache-ratio") + 1] == "8"
    assert "--port" in words and "--trust-remote-code" in words  # the user's other flags stay
    again = back(cmd)
    assert (again.hicache.hicache_ratio, again.hicache.write_policy, again.hardware.tp_size) == (8.0, "write_back", 8)
    assert notes == []


def test_l1_only_drops_the_hierarchical_cache_flags():
    sc = back(LAUNCH)
    off = sc.model_copy(update={"hicache": sc.hicache.model_copy(update={"enabled": False})})
    cmd, _ = launch_command(off, LAUNCH)
    assert "--enable-hierarchical-cache" not in cmd and "--hicache-ratio" not in cmd
    assert back(cmd).hicache.enabled is False


def test_a_scenario_without_a_command_gets_one_and_a_note_for_what_no_flag_says():
    cmd, notes = launch_command(load_scenario("scenarios/quickstart.yaml"))
    hc = from_sglang(cmd, [], gpu="H200").scenario["hicache"]  # (one H200 cannot hold V4-Flash: not validated)
    assert hc["enabled"] is True and hc["hicache_ratio"] == 2.0 and hc["write_policy"] == "write_through"
    assert any("kv_mem_gb" in n for n in notes)


def test_a_v4_swa_share_round_trips_through_its_flag():
    sc = back(LAUNCH + " --swa-full-tokens-ratio 0.5")
    cmd, _ = launch_command(sc)
    assert "--swa-full-tokens-ratio 0.5" in cmd
    assert back(cmd).hicache.swa_full_tokens_ratio == 0.5


def test_rocms_unified_layout_comes_back_as_its_environment():
    sc = scenario_from_dict({"name": "r", "model": {"name": "deepseek-v4-pro", "kv_layout": "unified_fp8"},
                             "hardware": {"gpu": "MI355X", "tp_size": 8}, "hicache": {"enabled": False}})  # fmt: skip
    command, _ = launch_command(sc)
    assert command.startswith("SGLANG_HACK_FLASHMLA_BACKEND=unified_kv_triton SGLANG_DSV4_UNIFIED_KV_FP8=1 python")

"""Command lines SGLang (or its router, or aiperf) would not take are refused, each naming the flag, and a
repeated option is read as argparse reads it: the last one."""

from __future__ import annotations

import pytest

from sim.app.cli import main
from sim.base.errors import InputError
from sim.interop.fromsglang import from_sglang
from sim.scenario.load import scenario_from_dict

LAUNCH = "python -m sglang.launch_server --model-path Qwen/Qwen3-14B --tp-size 2"
ROUTER = "python -m sglang_router.launch_router --policy round_robin"


def test_a_repeated_policy_is_the_last_one_and_the_first_is_listed():
    conv = from_sglang(LAUNCH, [ROUTER + " --policy consistent_hashing"], gpu="H200")
    assert scenario_from_dict(conv.scenario).cluster.router == "consistent_hashing"
    assert any(line.startswith("--policy round_robin: overridden by the later --policy consistent_hashing")
               for line in conv.ignored)  # fmt: skip


def test_a_repeated_launch_flag_is_the_last_one():
    assert from_sglang(LAUNCH + " --tp-size 4", gpu="H200").scenario["hardware"]["tp_size"] == 4


def test_two_router_commands_are_refused():
    with pytest.raises(InputError, match="--bench: a second sglang_router command"):
        from_sglang(LAUNCH, [ROUTER, ROUTER.replace("round_robin", "consistent_hashing")], gpu="H200")


@pytest.mark.parametrize("module", ["sglang_router.launch_routr", "sglang_router.launch_router_x", "sglang.bench_servin"])
def test_a_misspelt_module_is_refused(module):
    with pytest.raises(InputError, match=f"--bench: expected a command running .* got '{module}'"):
        from_sglang(LAUNCH, [f"python -m {module} --policy round_robin"], gpu="H200")


def test_no_dataset_entries_is_refused():
    launch = "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Pro --tp 8"
    bench = ("aiperf profile --public-dataset semianalysis_cc_traces_weka_062126 --concurrency 4 "
             "--num-dataset-entries 0")  # fmt: skip
    with pytest.raises(InputError, match="--num-dataset-entries 0: must be >= 1"):
        from_sglang(launch, [bench], gpu="H200")


@pytest.mark.parametrize("tp, message", [
    (3, r"40 attention heads do not split over an attention TP group of 3 ranks \(SGLang asserts num_heads % "
        r"attn_tp_size == 0, models/qwen3.py:166"),
    (1000000, "an attention TP group of 1000000 ranks"),
])  # fmt: skip
def test_a_tp_size_the_models_heads_do_not_split_over_is_refused_citing_sglang(tp, message):
    with pytest.raises(InputError, match=rf"--launch: tp_size: .*{message}"):
        from_sglang(f"python -m sglang.launch_server --model-path Qwen/Qwen3-14B --tp-size {tp}", gpu="H200")


def test_a_v4_tp_past_its_heads_is_refused():
    with pytest.raises(InputError, match=r"leaves no head .* models/deepseek_v4.py:1035"):
        from_sglang("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Pro --tp 1024", gpu="H200")


def test_pools_refuses_the_fp4_indexer_on_a_model_without_an_indexer(capsys):
    assert main(["pools", "qwen3-14b", "--fp4-indexer"]) == 2
    assert "--fp4-indexer: applies to DeepSeek V4's C4 indexer; qwen3-14b has none" in capsys.readouterr().err

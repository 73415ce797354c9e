"""Hugging Face ids as users type them: release and tuning suffixes name the shipped architecture config."""

from __future__ import annotations

import pytest

from sim.app.cli import main
from sim.interop.fromsglang import from_sglang
from sim.model.aic import shipped_id, shipped_models
from sim.scenario.load import scenario_from_dict

pytestmark = pytest.mark.skipif(not shipped_models(), reason="needs aiconfigurator-core's shipped configs")


@pytest.mark.parametrize("typed, shipped", [
    ("Qwen/Qwen3-235B-A22B-Instruct-2507", "Qwen/Qwen3-235B-A22B"),
    ("Qwen/Qwen3-235B-A22B-Thinking-2507", "Qwen/Qwen3-235B-A22B"),
    ("qwen/qwen3-235b-a22b", "Qwen/Qwen3-235B-A22B"),
    ("deepseek-ai/DeepSeek-V4-Pro/", "deepseek-ai/DeepSeek-V4-Pro"),
])  # fmt: skip
def test_release_and_tuning_suffixes_name_the_shipped_architecture(typed, shipped):
    assert shipped_id(typed) == shipped


@pytest.mark.parametrize("typed", ["Qwen/Qwen3-235B-A22B-AWQ", "Qwen/Qwen3-2507", "nobody/Instruct-2507"])
def test_suffixes_that_change_the_weights_or_name_nothing_shipped_are_not_dropped(typed):
    assert shipped_id(typed) is None


def test_a_suffixed_id_runs_as_its_architecture_and_says_so(capsys):
    sc = scenario_from_dict({"name": "q", "model": "Qwen/Qwen3-235B-A22B-Instruct-2507",
                             "hardware": {"gpu": "H200", "tp_size": 8, "host_mem_gb": 2000}})  # fmt: skip
    assert (sc.model.name, sc.model.config) == ("Qwen/Qwen3-235B-A22B-Instruct-2507", "Qwen/Qwen3-235B-A22B")
    conv = from_sglang("python -m sglang.launch_server --model-path Qwen/Qwen3-235B-A22B-Instruct-2507 --tp 8",
                       gpu="H200")  # fmt: skip
    assert any("model.config: Qwen/Qwen3-235B-A22B (Qwen/Qwen3-235B-A22B-Instruct-2507 has its architecture"
               in line for line in conv.mapped)  # fmt: skip
    assert main(["pools", "Qwen/Qwen3-235B-A22B-Instruct-2507", "--tp-size", "8"]) == 0
    assert "the architecture config of Qwen/Qwen3-235B-A22B" in capsys.readouterr().out


def test_pools_takes_what_run_takes(capsys):
    for ref in ("deepseek-ai/DeepSeek-V4-Pro", "qwen3-14b", "deepseek-v4-flash"):
        assert main(["pools", ref]) == 0
    assert "deepseek-v4-pro: 7 pools" in capsys.readouterr().out

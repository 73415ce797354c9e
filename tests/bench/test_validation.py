"""bench/validation.py, the one command behind the README's validation table, runs end to end."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

# The covered-GPU runs name their models by Hugging Face id, read from the configs the aic extra ships.
pytest.importorskip("aiconfigurator_core")

ROOT = Path(__file__).resolve().parents[2]


def load_validation():
    spec = importlib.util.spec_from_file_location("validation", ROOT / "bench" / "validation.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["validation"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_it_prints_every_published_number_and_ratio(tmp_path, capsys):
    validation = load_validation()
    out = tmp_path / "table.md"
    assert validation.main(["--markdown", str(out)]) == 0
    table = out.read_text()
    for n in validation.NUMBERS:
        assert f"| {n.label} | " in table
    for label, _, _ in validation.RATIOS:
        assert f"| {label} | " in table
    assert "calibration H20" in table and table.strip() in capsys.readouterr().out.strip()


def test_the_scenarios_are_what_their_commands_generate():
    from sim.app.scenario import load_scenario, scenario_from_dict

    validation = load_validation()
    for name in validation.SCENARIOS:
        conv = validation.conversion(name)
        assert scenario_from_dict(conv.scenario) == load_scenario(ROOT / "scenarios" / "validation" / f"{name}.yaml")


def test_every_number_names_a_scenario_that_ships():
    validation = load_validation()
    assert {n.scenario for n in validation.NUMBERS} == set(validation.SCENARIOS)
    for name in validation.SCENARIOS:
        assert (ROOT / "scenarios" / "validation" / f"{name}.yaml").is_file()

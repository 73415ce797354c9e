"""bench/validation.py, the one command behind the README's validation table, runs end to end."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

# The covered-GPU runs name their models by Hugging Face id, read from the configs aiconfigurator-core ships.
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
    from sim.scenario.load import load_scenario, scenario_from_dict

    validation = load_validation()
    for name in validation.SCENARIOS:
        conv = validation.conversion(name)
        assert scenario_from_dict(conv.scenario) == load_scenario(ROOT / "scenarios" / "validation" / f"{name}.yaml")


def test_every_number_names_a_scenario_that_ships():
    validation = load_validation()
    assert {n.scenario for n in validation.NUMBERS} | set(validation.ROUND_FIGURES) == set(validation.SCENARIOS)
    for name in validation.SCENARIOS:
        assert (ROOT / "scenarios" / "validation" / f"{name}.yaml").is_file()


def test_every_published_round_has_a_ttft_and_a_hit_rate_for_each_of_its_rounds():
    validation = load_validation()
    for name, (_, ttfts, hits) in validation.ROUND_FIGURES.items():
        rounds = validation.load_scenario(validation.OUT / f"{name}.yaml").workload.num_rounds
        assert len(ttfts) == len(hits) == rounds
        assert all(t > 0 for t in ttfts) and all(0 <= h <= 100 for h in hits)


def test_the_round_table_shows_each_rounds_seed_interval_and_errors():
    validation = load_validation()
    fake = [[{"ttft_mean_s": 0.5 * s, "hit_rate": 0.1 * s} for _ in range(10)] for s in (1, 2)]
    lines = validation.round_table({name: fake for name in validation.ROUND_FIGURES})
    assert len(lines) == 2 + 10 * len(validation.ROUND_FIGURES)
    row = next(line for line in lines if line.startswith("| M3 H800 GPU only r2 |"))
    assert "| 0.62 s | 0.75 [0.50-1.00] | +21% | 17.5% | 15.0 [10.0-20.0] | -2.5 |" in row


def test_the_h800_runs_are_on_the_measured_kernels_and_say_no_log_was_published():
    validation = load_validation()
    for name in validation.ROUND_FIGURES:
        text = (validation.OUT / f"{name}.yaml").read_text()
        assert "backend: aiconfigurator" in text and "(server log) not published" in text


def test_per_round_runs_a_backend_refuses_are_one_line_not_a_crash(monkeypatch):
    from sim.base.errors import InputError

    validation = load_validation()

    def refuse(name):
        raise InputError("compute.backend: aiconfigurator needs the aic extra", source="m3.yaml")

    monkeypatch.setattr(validation, "simulate_rounds", refuse)
    assert validation._rounds() == ["per-round runs (m3_h800_gpu_only, m3_h800_l1l2), refused: "
                                    "aiconfigurator needs the aic extra"]  # fmt: skip

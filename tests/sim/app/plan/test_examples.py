"""The shipped plan example is what its command makes today: the README's ``plan`` command is run again and its
plan and report compared with docs/plan_example/ (a change that moves them regenerates the folder with that
command, and says why in CHANGELOG.md)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from sim.app.cli import main

ROOT = Path(__file__).resolve().parents[4]
SHIPPED = ROOT / "docs" / "plan_example"
COMMAND = ["plan", "--scenario", "scenarios/quickstart.yaml", "--slo", "ttft_p90=1.5s", "--decode",
           "scenarios/hisparse_quick.yaml"]  # fmt: skip


def _body(report: str) -> str:
    """The report without its first fenced block, the command as typed (its --out differs here)."""
    return re.sub(r"^```\n.*?\n```\n", "", report, count=1, flags=re.S | re.M)


def test_the_shipped_plan_example_is_what_the_readme_command_makes_now(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    out = tmp_path / "plan"
    assert main([*COMMAND, "--out", str(out), "--no-progress"]) == 0
    readme = (ROOT / "README.md").read_text()
    assert "hicache-sim " + " ".join(COMMAND) + " --out docs/plan_example" in readme
    stale = "docs/plan_example is stale: regenerate it with the README's plan command"
    assert json.loads((out / "plan.json").read_text()) == json.loads((SHIPPED / "plan.json").read_text()), stale
    assert _body((out / "report.md").read_text()) == _body((SHIPPED / "report.md").read_text()), stale
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in SHIPPED.iterdir())

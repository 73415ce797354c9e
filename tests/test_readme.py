"""The README is short and true: its set-up commands are the ones CI runs, every ``hicache-sim`` command it shows
runs in a clean folder (those that fit in CI; the rest are named here with why), and every relative link of the
README, the changelog and ``docs/`` leads to a file and, with ``#anchor``, to a heading in it.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
SETUP = 'pip install -e . && hicache-sim run scenarios/quickstart.yaml'
TESTS = 'pip install "torch==2.13.0" -e ".[dev,gpu]" && python -m pytest'
# Commands the README shows that are too long for CI, with where they are held instead.
TOO_LONG = {"plan": "100+ runs, 30-60 s: tests/sim/app/plan runs plan on smaller candidates"}
MAX_LINES = 300
# Each figure the README quotes beside a command, with the command that prints it (as the README shows it) and
# what its output must hold: a figure that moves fails here, not in a reader's terminal.
QUOTED = {
    "hicache-sim run scenarios/quickstart.yaml": [
        "L1 is too small for the reuse window: median age at eviction 0.96 s < median age at hit in L2 1.8 s"],
    "hicache-sim run scenarios/dsv4_flash_hisparse_200k.yaml --set hicache.swa_full_tokens_ratio=0.004 --set "
    "hisparse.host_to_device_ratio=10": [r"max decode batch\s+340 ", r"HiSparse pays from batch\s+176 "],
    "hicache-sim diff runs/tbo_off runs/tbo_on": [r"TTFT mean s .* 0\.941x "],
    "hicache-sim run scenarios/glm51_hisparse_lmsys.yaml --seeds 3": [r"\s3\s+2,117 ± 3\s.*4\.65x ± 0\.00x\s+7 ± 0"],
    "hicache-sim run scenarios/glm51_hisparse_lmsys.yaml --seeds 3 --set hisparse.enabled=false": [
        r"\s3\s+3,703 ± 0\s+926 ± 0\s"],
    "hicache-sim run scenarios/glm51_hisparse_lmsys.yaml --set hisparse.host_to_device_ratio=5": [
        r"max decode batch\s+20 ", r"3\.54x at host_to_device_ratio 5"],
    "hicache-sim run scenarios/glm51_hisparse_lmsys.yaml --set hisparse.host_to_device_ratio=10": [
        r"max decode batch\s+29 ", r"5\.19x at host_to_device_ratio 10", r"peak batch reached\s+22\n"],
    "hicache-sim run scenarios/glm51_hisparse_lmsys.yaml --set workload.steps.0.max_concurrency=8 --set "
    "workload.steps.0.num_prompts=16": [r"output throughput\s+304 tok/s"],
    "hicache-sim run scenarios/glm51_hisparse_lmsys.yaml --set workload.steps.0.max_concurrency=8 --set "
    "workload.steps.0.num_prompts=16 --set hisparse.enabled=false": [r"output throughput\s+302 tok/s"],
}


def _fenced_lines(text: str) -> list[str]:
    """The command lines of the README's fenced blocks, continuation lines joined, comments dropped."""
    lines: list[str] = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", text, flags=re.S | re.M):
        joined = re.sub(r"\\\n\s*", " ", block)
        lines += [re.sub(r"\s+#.*$", "", line).strip() for line in joined.splitlines() if line.strip()]
    return lines


def _commands() -> list[str]:
    """Every ``hicache-sim`` invocation in the README's fenced blocks (the part after ``&&`` of a set-up line)."""
    out = []
    for line in _fenced_lines(README.read_text()):
        for part in line.split("&&"):
            if part.strip().startswith("hicache-sim "):
                out.append(part.strip())
    return out


def test_readme_is_short() -> None:
    assert len(README.read_text().splitlines()) <= MAX_LINES


def test_readme_keeps_the_two_setup_commands_ci_runs() -> None:
    lines = _fenced_lines(README.read_text())
    assert SETUP in lines and TESTS in lines
    ci = (ROOT / ".ci" / "run").read_text()
    assert '"torch==2.13.0" -e ".[dev,gpu]"' in ci and "python -m pytest" in ci


def test_readme_shows_the_main_commands() -> None:
    shown = {shlex.split(c)[1] for c in _commands()}
    assert {"run", "diff", "plan"} <= shown


def test_readme_commands_run_in_a_clean_folder(tmp_path: Path) -> None:
    """In order, as a user would type them: later commands read what earlier ones wrote (``diff`` its runs)."""
    shutil.copytree(ROOT / "scenarios", tmp_path / "scenarios")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    ran, quoted = [], set()
    for command in _commands():
        args = shlex.split(command)[1:]
        if args[0] in TOO_LONG:
            continue
        if "--out" in args and args[0] == "run":
            args += ["--overwrite"]
        proc = subprocess.run([sys.executable, "-m", "sim.app.cli", *args, "--no-progress"]
                              if args[0] in {"run", "sweep"} else [sys.executable, "-m", "sim.app.cli", *args],
                              cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
        assert proc.returncode == 0, f"{command}\n{proc.stderr[-2000:]}"
        ran.append(args[0])
        if command in QUOTED:
            quoted.add(command)
            for quote in QUOTED[command]:
                assert re.search(quote, proc.stdout), f"{command}: the README quotes {quote!r}; it printed:\n{proc.stdout}"
    assert ran.count("run") >= 3 and "diff" in ran
    assert quoted == set(QUOTED), "a quoted command is no longer in the README"
    assert not (tmp_path / "docs").exists(), "a README command ran wrote outside its own folders"


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation but ``-`` and ``_`` dropped, spaces to ``-``."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _pages() -> list[Path]:
    return [README, ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("page", _pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        assert file.exists(), f"{page.name}: {target} does not exist"
        if anchor:
            headings = re.findall(r"^#+ (.+)$", file.read_text(), flags=re.M)
            assert anchor in {_slug(h) for h in headings}, f"{page.name}: no heading #{anchor} in {file.name}"


def test_every_command_in_the_table_exists_with_its_options(capsys):
    """The command table's lines are templates (S.yaml, TRACE): each names a real command whose --help lists
    every option the line shows."""
    from sim.app.cli import main

    rows = re.findall(r"^\| `hicache-sim ([^`]+)` \|", README.read_text(), flags=re.M)
    assert len(rows) >= 10
    for row in rows:
        words = row.replace("\\|", "|").split()
        command = words[:2] if words[:2] == ["scenario", "from-sglang"] else words[:1]
        with pytest.raises(SystemExit) as done:
            main([*command, "--help"])
        assert done.value.code == 0, row
        helptext = capsys.readouterr().out
        for option in re.findall(r"--[a-z][a-z0-9-]*", row):
            assert option in helptext, f"{row}: {option} is not an option of {' '.join(command)}"


def _subcommands() -> set[str]:
    import argparse

    from sim.app.cli import build_parser

    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return set(action.choices)


def test_usage_lists_every_command_and_every_plot_with_real_options(capsys):
    """docs/usage.md's table names every subcommand, every kind of plot, and only options each command has."""
    from sim.app.cli import main

    rows = re.findall(r"^\| `hicache-sim ([^`]+)` \|", (ROOT / "docs" / "usage.md").read_text(), flags=re.M)
    assert {row.split()[0] for row in rows} >= _subcommands()
    plot_row = next(row for row in rows if row.startswith("plot "))
    with pytest.raises(SystemExit):
        main(["plot", "--help"])
    kinds = re.search(r"\{([a-z,]+)\}", capsys.readouterr().out).group(1).split(",")
    assert all(kind in plot_row for kind in kinds), (kinds, plot_row)
    for row in rows:
        words = row.replace("\\|", "|").split()
        command = words[:2] if words[:2] in (["scenario", "from-sglang"], ["calibrate", "check"],
                                             ["calibrate", "compute"]) else words[:1]  # fmt: skip
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        helptext = capsys.readouterr().out
        for option in re.findall(r"--[a-z][a-z0-9-]*", row.split(" | ")[0]):
            assert option in helptext, f"usage.md: {row[:60]}: {option} is not an option of {' '.join(command)}"

"""The ``hicache-sim run`` and ``validate`` commands, as a user meets them."""

import json
from pathlib import Path

import pytest

from sim.app.cli import main

SCENARIOS = Path(__file__).resolve().parents[3] / "scenarios"


def test_run_writes_the_four_outputs_and_prints_the_summary(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", str(SCENARIOS / "quickstart.yaml"), "--out", str(out), "--no-progress"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["requests.parquet", "scenario.yaml", "summary.json",
                                                      "timeseries.parquet"]  # fmt: skip
    printed = capsys.readouterr().out
    assert "TTFT" in printed and "input throughput" in printed
    assert "spec-derived" in printed  # which cost table, and where it came from


def test_the_resolved_scenario_runs_again_to_the_same_summary(tmp_path):
    first, second = tmp_path / "a", tmp_path / "b"
    main(["run", str(SCENARIOS / "quickstart.yaml"), "--out", str(first), "--no-progress"])
    main(["run", str(first / "scenario.yaml"), "--out", str(second), "--no-progress"])
    assert (first / "summary.json").read_bytes() == (second / "summary.json").read_bytes()


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("hicache.load_back_threshold=-1", "hicache.load_back_threshold"),
        ("hicache.prefech_threshold=1", "hicache.prefech_threshold"),
        ("hardware.kv_mem_gb=500", "hardware.kv_mem_gb"),
        ("workload.num_clients=abc", "workload.num_clients"),
    ],
)
def test_a_bad_scenario_exits_2_naming_the_field_and_writes_nothing(tmp_path, capsys, override, message):
    out = tmp_path / "out"
    code = main(["run", str(SCENARIOS / "quickstart.yaml"), "--out", str(out), "--set", override, "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize("seeds", [[], ["--seeds", "2"]])
def test_an_error_found_as_the_run_starts_blames_the_set_that_causes_it(tmp_path, capsys, seeds):
    out = tmp_path / "out"
    code = main(["run", str(SCENARIOS / "quickstart.yaml"), "--out", str(out), "--set", "workload.num_clients=8",
                 "--set", "hardware.kv_mem_gb=0.01", "--no-progress", *seeds])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("hicache-sim: error: --set hardware.kv_mem_gb=0.01: hardware.kv_mem_gb: the empty")
    assert not out.exists()


def test_validate_reports_a_malformed_file_with_its_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nhicache: [unclosed\n")
    assert main(["validate", str(bad)]) == 2
    assert "bad.yaml" in capsys.readouterr().err


def test_validate_accepts_every_shipped_scenario(capsys):
    for path in sorted(SCENARIOS.glob("*.yaml")):
        assert main(["validate", str(path)]) == 0, path


# ------------------------------------------------------------------------ where runs go, whole or not at all


def _run(tmp_path, *extra):
    return main(["run", str(SCENARIOS / "quickstart.yaml"), "--set", "workload.num_clients=8", "--no-progress",
                 *extra])  # fmt: skip


def test_each_run_gets_its_own_folder_under_runs_name(tmp_path, monkeypatch, capsys):
    """The README's comparison (with and without L2) keeps both runs."""
    monkeypatch.chdir(tmp_path)
    assert _run(tmp_path) == 0
    assert _run(tmp_path, "--set", "hicache.enabled=false") == 0
    folders = sorted((tmp_path / "runs" / "quickstart").iterdir())
    assert len(folders) == 2
    summaries = [json.loads((f / "summary.json").read_text()) for f in folders]
    assert summaries[0]["capacity_pages"]["l2"] > 0 and summaries[1]["capacity_pages"]["l2"] == 0
    assert str(folders[1].relative_to(tmp_path)) in capsys.readouterr().out


def test_a_folder_with_results_is_replaced_only_on_request_and_then_whole(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["run", str(SCENARIOS / "hisparse_quick.yaml"), "--out", str(out), "--no-progress"]) == 0
    assert (out / "misses.parquet").exists()
    assert _run(tmp_path, "--out", str(out)) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert json.loads((out / "summary.json").read_text())["scenario"] == "hisparse_quick"  # untouched
    assert _run(tmp_path, "--out", str(out), "--overwrite") == 0
    assert not (out / "misses.parquet").exists()  # nothing stale from the earlier run
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_an_interrupted_run_leaves_no_folder(tmp_path):
    """SIGINT or SIGTERM at any moment, writing included: the folder is whole or absent."""
    import signal
    import subprocess
    import sys
    import time

    for sig in (signal.SIGINT, signal.SIGTERM):
        out = tmp_path / f"out{sig}"
        proc = subprocess.Popen([sys.executable, "-m", "sim.app.cli", "run", str(SCENARIOS / "quickstart.yaml"),
                                 "--set", "workload.num_clients=1024", "--set", "workload.num_rounds=6",
                                 "--out", str(out), "--no-progress"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob(f".{out.name}.partial-*")):  # the run has started writing
            assert proc.poll() is None and time.monotonic() < deadline, "the run never started"
            time.sleep(0.01)
        time.sleep(0.3)
        proc.send_signal(sig)
        err = proc.communicate(timeout=120)[1].decode()
        assert proc.returncode in (130, 128 + signal.SIGTERM) and "Traceback" not in err, err
        assert not out.exists()
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


# ------------------------------------------------------------------------------- one line and exit 2


BINARY = b"\x89PNG\r\n\x1a\n\xff\xfe\x00\x80"


def _write_bad_files(tmp_path: Path) -> None:
    (tmp_path / "bin.yaml").write_bytes(b"name: x\n" + BINARY)
    (tmp_path / "bin.jsonl").write_bytes(BINARY)
    (tmp_path / "bin.json").write_bytes(BINARY)
    (tmp_path / "trace.yaml").write_text(f"name: t\nworkload: {{kind: trace, path: {tmp_path / 'bin.jsonl'}}}\n")
    (tmp_path / "cost.yaml").write_text(f"name: c\nhardware: {{cost_table: {tmp_path / 'bin.json'}}}\n")
    (tmp_path / "file").write_text("")


def _bad_inputs(tmp_path: Path) -> dict[str, list[str]]:
    trace = str(Path(__file__).resolve().parents[3] / "data" / "mooncake_conversation_trace.jsonl")
    quick = str(SCENARIOS / "quickstart.yaml")
    sweep = ["sweep", quick, "--grid", "seed=1,2"]
    return {
        "binary scenario": ["run", str(tmp_path / "bin.yaml")],
        "binary scenario (validate)": ["validate", str(tmp_path / "bin.yaml")],
        "binary trace": ["run", str(tmp_path / "trace.yaml")],
        "binary trace (validate)": ["validate", str(tmp_path / "trace.yaml")],
        "binary trace (replay)": ["replay", str(tmp_path / "bin.jsonl")],
        "binary cost table": ["validate", str(tmp_path / "cost.yaml")],
        "negative seed": ["run", quick, "--set", "seed=-1"],
        "negative --seed": ["run", quick, "--seed", "-1"],
        "swa ratio nan": ["replay", trace, "--swa-ratio", "nan"],
        "swa ratio -1": ["replay", trace, "--swa-ratio", "-1"],
        "run --out file": ["run", quick, "--out", str(tmp_path / "file")],
        "run --out file/sub": ["run", quick, "--out", str(tmp_path / "file" / "sub")],
        "sweep --out file": [*sweep, "--out", str(tmp_path / "file")],
        "sweep --out file/sub": [*sweep, "--out", str(tmp_path / "file" / "sub")],
        "plot --out file/sub": ["plot", "occupancy", str(tmp_path), "--out", str(tmp_path / "file" / "x.png")],
        "replay --json file/sub": ["replay", trace, "--json", str(tmp_path / "file" / "x.json")],
        "replay --json folder": ["replay", trace, "--json", str(tmp_path)],
        "name escapes runs/": ["run", quick, "--set", "name=../../x"],
        "decode with multi_turn (validate)": ["validate", quick, "--set", "cluster.role=decode"],
    }


@pytest.mark.parametrize("case", list(_bad_inputs(Path("/nonexistent"))))
def test_a_user_facing_failure_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch, case):
    monkeypatch.chdir(tmp_path)
    _write_bad_files(tmp_path)
    argv = _bad_inputs(tmp_path)[case]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "runs").exists()


def test_calibrate_checks_its_output_before_timing_anything(tmp_path, capsys, monkeypatch):
    pytest.importorskip("torch")
    import calibrate.harness

    monkeypatch.setattr(calibrate.harness, "run_suite", lambda *a, **k: pytest.fail("the suite ran"))
    (tmp_path / "file").write_text("")
    assert main(["calibrate", "--suite", "quick", "--out", str(tmp_path / "file" / "t.json")]) == 2
    assert "is a file, not a folder" in capsys.readouterr().err


def test_an_internal_bug_keeps_its_traceback(monkeypatch):
    import sim.app.run

    def boom(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(sim.app.run, "run_scenario", boom)
    with pytest.raises(ZeroDivisionError):
        main(["run", str(SCENARIOS / "quickstart.yaml"), "--out", "/nonexistent-never-created", "--no-progress"])


def test_a_full_disk_is_one_line_and_leaves_no_folder(tmp_path, capsys, monkeypatch):
    import errno

    import sim.app.run

    def full(result, folder):
        (folder / "summary.json").write_text("{")  # half-written when the disk fills
        raise OSError(errno.ENOSPC, "No space left on device", str(folder / "timeseries.parquet"))

    monkeypatch.setattr(sim.app.run, "write_files", full)
    assert _run(tmp_path, "--out", str(tmp_path / "out")) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'out'}: cannot write: No space left on device (ENOSPC)" in err
    assert len(err.strip().splitlines()) == 1
    assert list(tmp_path.iterdir()) == []


def test_replay_takes_the_policy_simulators_page_granularity(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(f'{{"timestamp": {i}, "input_length": 2048, "output_length": 8, '
                             f'"hash_ids": [1, 2, {10 + i}, {20 + i}]}}\n' for i in range(6)))  # fmt: skip
    args = ["replay", str(trace), "--model", "generic", "--l1-pages", "4", "--l2-pages", "4", "--no-bound"]
    assert main(args + ["--granularity", "page"]) == 0
    assert "L1+L2 hit" in capsys.readouterr().out
    assert main(["replay", str(trace), "--model", "deepseek-v4-flash", "--granularity", "page"]) == 2
    assert "--granularity" in capsys.readouterr().err


def test_every_command_assumes_one_host_memory_and_says_which(capsys):
    """from-sglang and plan used to assume 1 TB and 2 TB: one launch was refused by one and accepted by the other."""
    from sim.app.plan.build import PlanSpec
    from sim.scenario.schema.hardware import HardwareConfig

    default = HardwareConfig.model_fields["host_mem_gb"].default
    assert PlanSpec.__dataclass_fields__["node_dram_gb"].default == default
    for command in (["scenario", "from-sglang"], ["plan"]):
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        assert f"{default:g} GB, every command's default" in " ".join(capsys.readouterr().out.split())


def test_a_host_pool_must_leave_sglangs_reserve_as_plan_prices_it(tmp_path, capsys):
    """The scenario check and plan's host-memory table share SGLang's rule: available memory less 10 GiB."""
    sets = ["hardware.kv_mem_gb=8", "hicache.hicache_ratio=2"]  # V4-Flash: a 16 GB host pool
    assert main(["validate", "scenarios/quickstart.yaml", *sum([["--set", s] for s in sets], []),
                 "--set", "hardware.host_mem_gb=30"]) == 0
    capsys.readouterr()
    assert main(["validate", "scenarios/quickstart.yaml", *sum([["--set", s] for s in sets], []),
                 "--set", "hardware.host_mem_gb=20"]) == 2
    assert "less SGLang's 10 GiB reserve" in capsys.readouterr().err


def test_help_and_validate_leave_pandas_pyarrow_and_matplotlib_unimported():
    """They start in a fraction of a second: the data libraries load only where a command writes or draws."""
    import subprocess
    import sys

    code = ("import sys; from sim.app.cli import main; main(['validate', 'scenarios/quickstart.yaml']); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'pandas', 'pyarrow', 'matplotlib'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1] == "[]"


def test_from_sglang_writes_the_paths_typed_relative_to_the_scenario_it_writes(tmp_path, monkeypatch, capsys):
    """A corpus named on the command line is found beside the written scenario, whatever folder runs it."""
    import yaml

    weka = SCENARIOS.parent / "data" / "agentic" / "weka_synthetic.jsonl"
    (tmp_path / "w.jsonl").write_bytes(weka.read_bytes())
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "runs" / "agentx.yaml"
    out.parent.mkdir()
    launch = "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Flash --tp 8"
    assert main(["scenario", "from-sglang", "--launch", launch, "--gpu", "h200", "--out", str(out),
                 "--bench", "aiperf profile --concurrency 2 --input-file w.jsonl"]) == 0  # fmt: skip
    assert yaml.safe_load(out.read_text())["workload"]["path"] == "../w.jsonl"
    monkeypatch.chdir(SCENARIOS)
    assert main(["validate", str(out)]) == 0


def test_from_sglang_says_in_one_line_when_generated_sessions_stand_in_for_the_corpus(tmp_path, capsys):
    launch = "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Flash --tp 8"
    bench = "aiperf profile --concurrency 4 --public-dataset semianalysis_cc_traces_weka_062126"
    assert main(["scenario", "from-sglang", "--launch", launch, "--gpu", "h200", "--bench", bench,
                 "--out", str(tmp_path / "s.yaml")]) == 0  # fmt: skip
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note: ")]
    assert len(notes) == 1 and "393 sessions generated with the corpus's published statistics" in notes[0]

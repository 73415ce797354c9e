"""``hicache-sim sweep``: a grid of scenario points, run in parallel, tabulated, resumable."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from sim.app.cli import main
from sim.app.sweep import flat_metrics, plan_sweep, run_sweep

QUICKSTART = str(Path(__file__).resolve().parents[3] / "scenarios" / "quickstart.yaml")
SMALL = ["--set", "workload.num_clients=16", "--set", "workload.num_rounds=2"]
SMALL_SETS = ["workload.num_clients=16", "workload.num_rounds=2"]
GRID_4X3 = [
    "--grid",
    "hicache.prefetch_threshold=64,128,256,512",
    "--grid",
    "hicache.load_back_threshold=1,10,64",
]
METRICS = ["input_tokens_per_s", "output_tokens_per_s", "requests_per_s", "ttft_mean_s", "ttft_p50_s",
           "ttft_p90_s", "ttft_p99_s", "hit_device", "hit_host", "hit_storage", "hit_total", "dropped_tokens",
           "load_back_tokens", "backup_bytes", "util_h2d", "util_d2h", "admission_stalls", "simulated_s"]  # fmt: skip


@pytest.fixture(scope="module")
def sweep_4x3(tmp_path_factory):
    """The 12-point quickstart sweep, run once through the CLI: (folder, printed output)."""
    out = tmp_path_factory.mktemp("sweep") / "out"
    code = main(
        ["sweep", QUICKSTART, *SMALL, *GRID_4X3, "--out", str(out), "--workers", "2", "--no-progress"]
    )
    assert code == 0
    return out


class TestGrid:
    def test_a_4x3_grid_writes_12_rows_in_grid_order(self, sweep_4x3):
        """One row per point; the first axis varies slowest, as in itertools.product."""
        df = pd.read_parquet(sweep_4x3 / "sweep.parquet")
        assert len(df) == 12
        assert df["hicache.prefetch_threshold"].tolist() == [64] * 3 + [128] * 3 + [256] * 3 + [512] * 3
        assert df["hicache.load_back_threshold"].tolist() == [1, 10, 64] * 4
        assert df["point_id"].is_unique and (df["seed"] == 1).all()

    def test_rows_carry_the_grid_columns_then_flat_metrics(self, sweep_4x3):
        df = pd.read_parquet(sweep_4x3 / "sweep.parquet")
        assert list(df.columns[:4]) == ["point_id", "hicache.prefetch_threshold", "hicache.load_back_threshold",
                                        "seed"]  # fmt: skip
        assert set(METRICS) <= set(df.columns)
        assert ((df["hit_total"] >= 0) & (df["hit_total"] <= 1)).all()
        assert (df["input_tokens_per_s"] > 0).all()

    def test_each_point_has_its_json_and_the_sweep_its_yaml(self, sweep_4x3):
        df = pd.read_parquet(sweep_4x3 / "sweep.parquet")
        assert sorted(p.stem for p in (sweep_4x3 / "points").glob("*.json")) == sorted(df["point_id"])
        recorded = json.loads((sweep_4x3 / "points" / f"{df['point_id'][0]}.json").read_text())
        assert recorded["params"] == {"hicache.prefetch_threshold": 64, "hicache.load_back_threshold": 1}
        assert not list(sweep_4x3.glob(".*.tmp")) and not list((sweep_4x3 / "points").glob(".*.tmp"))

    def test_the_recorded_sweep_yaml_reruns_the_same_points(self, sweep_4x3):
        plan = plan_sweep(sweep_4x3 / "sweep.yaml", [])
        df = pd.read_parquet(sweep_4x3 / "sweep.parquet")
        assert [p.point_id for p in plan.points] == df["point_id"].tolist()
        assert plan.overrides == SMALL_SETS

    def test_the_table_is_printed(self, tmp_path, capsys):
        out = tmp_path / "out"
        main(["sweep", QUICKSTART, *SMALL, "--grid", "hicache.load_back_threshold=1,64", "--out", str(out),
              "--workers", "1", "--no-progress"])  # fmt: skip
        printed = capsys.readouterr().out
        assert "load_back_threshold" in printed and "hit total" in printed
        assert "2 of 2 points" in printed


class TestBadInput:
    @pytest.mark.parametrize(
        ("grid", "expected"),
        [
            ("hicache.prefech_threshold=64,128", "hicache.prefech_threshold"),
            ("hicache.load_back_threshold=1,abc", "hicache.load_back_threshold=abc"),
            ("hicache.load_back_threshold=10,-1", "hicache.load_back_threshold=-1"),
            ("hicache.load_back_threshold", "hicache.load_back_threshold"),
            ("hicache.load_back_threshold=1,1", "repeated"),
        ],
    )
    def test_a_bad_axis_exits_2_in_one_line_and_writes_nothing(self, tmp_path, capsys, grid, expected):
        """Every point is validated before any runs, so a bad last value still leaves no folder."""
        out = tmp_path / "out"
        code = main(["sweep", QUICKSTART, *SMALL, "--grid", "hicache.prefetch_threshold=64,128", "--grid", grid,
                     "--out", str(out), "--no-progress"])  # fmt: skip
        err = capsys.readouterr().err
        assert code == 2 and expected in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1
        assert not out.exists()

    def test_no_grid_is_an_input_error(self, tmp_path, capsys):
        assert main(["sweep", QUICKSTART, "--out", str(tmp_path / "out")]) == 2
        assert "--grid" in capsys.readouterr().err


class TestResume:
    def test_a_restart_runs_only_the_missing_points_and_keeps_finished_rows(self, tmp_path, monkeypatch):
        out = tmp_path / "out"
        plan = plan_sweep(QUICKSTART, ["hicache.load_back_threshold=1,10,64", "hicache.enabled=true,false"],
                          SMALL_SETS)  # fmt: skip
        first = run_sweep(plan, out, workers=2, max_points=2)  # stands in for an interrupted sweep
        assert len(first) == 2
        kept = {p: p.read_bytes() for p in (out / "points").glob("*.json")}

        import sim.app.sweep

        ran: list[str] = []
        real = sim.app.sweep._run_local

        def spy(todo, workers):
            ran.extend(p.point_id for p in todo)
            return real(todo, workers)

        monkeypatch.setattr(sim.app.sweep, "_run_local", spy)
        second = run_sweep(plan, out, workers=2)
        assert len(ran) == 4 and not set(ran) & set(first["point_id"])
        assert len(second) == 6 and second["point_id"].tolist() == [p.point_id for p in plan.points]
        assert all(p.read_bytes() == body for p, body in kept.items())
        pd.testing.assert_frame_equal(second[second["point_id"].isin(first["point_id"])].reset_index(drop=True),
                                      first)  # fmt: skip

    def test_a_killed_sweep_process_resumes_where_it_stopped(self, tmp_path):
        """SIGKILL after the first point lands; the restart finishes the rest and loses nothing."""
        out = tmp_path / "out"
        args = [sys.executable, "-m", "sim.app.cli", "sweep", QUICKSTART, "--grid", "seed=1,2,3,4", "--out", str(out),
                "--workers", "1", "--no-progress"]  # fmt: skip
        proc = subprocess.Popen(
            args, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        deadline = time.monotonic() + 60
        try:
            while not list((out / "points").glob("*.json")) and proc.poll() is None:
                assert time.monotonic() < deadline, "no point finished in 60 s"
                time.sleep(0.005)
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()
        finished = {p.name: p.read_bytes() for p in (out / "points").glob("*.json")}
        assert 1 <= len(finished) < 4
        # The kill may land between a point's json and the table rewrite: the json is the record.
        assert {f"{i}.json" for i in pd.read_parquet(out / "sweep.parquet")["point_id"]} <= set(finished)

        assert main(["sweep", QUICKSTART, "--grid", "seed=1,2,3,4", "--out", str(out), "--workers", "2",
                     "--no-progress"]) == 0  # fmt: skip
        df = pd.read_parquet(out / "sweep.parquet")
        assert df["seed"].tolist() == [1, 2, 3, 4]
        assert all((out / "points" / name).read_bytes() == body for name, body in finished.items())


@pytest.mark.slow
def test_ray_and_local_give_identical_rows(tmp_path):
    pytest.importorskip("ray")
    plan = plan_sweep(QUICKSTART, ["hicache.prefetch_threshold=64,512", "hicache.load_back_threshold=1,64"],
                      SMALL_SETS)  # fmt: skip
    local = run_sweep(plan, tmp_path / "local", executor="local", workers=2)
    remote = run_sweep(plan, tmp_path / "ray", executor="ray", workers=2)
    assert len(local) == 4
    pd.testing.assert_frame_equal(local, remote, check_exact=True)
    pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "local" / "sweep.parquet"),
                                  pd.read_parquet(tmp_path / "ray" / "sweep.parquet"))  # fmt: skip


def test_flat_metrics_keep_hisparse_scalars_and_drop_its_tables():
    summary = {
        "throughput": {"input_tokens_per_s": 1.0, "output_tokens_per_s": 2.0, "requests_per_s": 3.0},
        "ttft_s": {"mean": 0.1, "p50": 0.1, "p90": 0.2, "p99": 0.3},
        "hit_rate": {"device": 0.5, "host": 0.1, "storage": 0.0, "total": 0.6},
        "link_utilization": {"h2d": 0.1, "d2h": 0.2},
        "engine": {"admission_stalls": 0},
        "requests": {"finished": 9},
        "simulated_s": 5.0,
        "metrics": {"load_back_tokens_total": {"kv": 0, "swa": 512}},
        "hisparse": {"miss_rate": 0.25, "max_batch": 96, "misses_per_step": [1, 2]},
    }
    row = flat_metrics(summary)
    assert row["hisparse_miss_rate"] == 0.25 and row["hisparse_max_batch"] == 96
    assert "hisparse_misses_per_step" not in row
    assert row["load_back_tokens"] == 512 and row["dropped_tokens"] == 0 and row["util_l3_read"] == 0.0


# ------------------------------------------------------------------ failed points, reused folders, workers


def _trace(path: Path, bad_second_line: bool = False) -> Path:
    lines = [{"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [1, 2]},
             {"timestamp": 10, "input_length": 600, "output_length": 4, "hash_ids": [1, 3]}]  # fmt: skip
    text = "\n".join(json.dumps(line) for line in lines) + "\n"
    path.write_text(text.replace('"timestamp": 10', '"timestamp": NaN') if bad_second_line else text)
    return path


def _trace_scenario(tmp_path: Path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text("name: tr\nworkload: {kind: trace, path: a.jsonl}\n")
    return path


class TestFailedPoints:
    def test_a_failed_point_is_a_row_with_its_reason_and_the_others_finish(self, tmp_path):
        a, b = _trace(tmp_path / "a.jsonl"), _trace(tmp_path / "b.jsonl")
        plan = plan_sweep(_trace_scenario(tmp_path), [f"workload.path={a},{b}"])
        b.unlink()  # goes missing after planning: the point fails when it runs
        df = run_sweep(plan, tmp_path / "out", workers=2)
        assert df["status"].tolist() == ["ok", "failed"]
        assert "cannot read trace" in df["error"][1] and pd.isna(df["error"][0])
        assert df["finished_requests"][0] == 2 and pd.isna(df["finished_requests"][1])
        record = json.loads((tmp_path / "out" / "points" / f"{df['point_id'][1]}.json").read_text())
        assert record["status"] == "failed" and "Traceback" in record["traceback"]

        _trace(b)  # fixed: a resumed sweep tries the failed point again, and only it
        again = run_sweep(plan, tmp_path / "out", workers=2)
        assert again["status"].tolist() == ["ok", "ok"]
        assert again.loc[0].equals(df.loc[0])

    def test_the_command_reports_failed_points_in_one_line_with_exit_2(self, tmp_path, capsys, monkeypatch):
        import sim.app.sweep

        _trace(tmp_path / "a.jsonl", bad_second_line=True)
        monkeypatch.setattr(sim.app.sweep, "_check_startable", lambda points: None)  # let it reach the workers
        code = main(["sweep", str(_trace_scenario(tmp_path)), "--grid", "seed=1,2", "--out", str(tmp_path / "o"),
                     "--workers", "1", "--no-progress"])  # fmt: skip
        err = capsys.readouterr().err
        errors = [line for line in err.strip().splitlines() if not line.startswith("hicache-sim: note:")]
        assert code == 2 and len(errors) == 1 and "2 of 2 points failed" in errors[0]  # (and a note: seeds of a trace)
        assert "a.jsonl:2: timestamp: NaN" in err
        assert pd.read_parquet(tmp_path / "o" / "sweep.parquet")["status"].tolist() == ["failed", "failed"]

    def test_an_error_every_point_would_hit_is_caught_before_anything_runs(self, tmp_path, capsys):
        _trace(tmp_path / "a.jsonl", bad_second_line=True)
        code = main(["sweep", str(_trace_scenario(tmp_path)), "--grid", "seed=1,2", "--out", str(tmp_path / "o")])
        assert code == 2 and "a.jsonl:2: timestamp: NaN" in capsys.readouterr().err
        assert not (tmp_path / "o").exists()


class TestReusedFolder:
    def test_another_sweep_in_the_folder_is_refused_unless_replaced(self, tmp_path, capsys):
        out = str(tmp_path / "out")
        args = ["sweep", QUICKSTART, *SMALL, "--out", out, "--workers", "2", "--no-progress"]
        assert main([*args, "--grid", "seed=1,2"]) == 0
        before = pd.read_parquet(tmp_path / "out" / "sweep.parquet")
        assert main([*args, "--grid", "seed=3,4"]) == 2
        assert "holds another sweep" in capsys.readouterr().err
        pd.testing.assert_frame_equal(pd.read_parquet(tmp_path / "out" / "sweep.parquet"), before)
        assert main([*args, "--grid", "seed=3,4", "--overwrite"]) == 0
        assert pd.read_parquet(tmp_path / "out" / "sweep.parquet")["seed"].tolist() == [3, 4]
        assert len(list((tmp_path / "out" / "points").glob("*.json"))) == 2  # nothing left from seeds 1, 2

    def test_a_folder_of_other_files_is_never_replaced(self, tmp_path, capsys):
        (tmp_path / "notes.txt").write_text("mine")
        args = ["sweep", QUICKSTART, "--grid", "seed=1,2", "--out", str(tmp_path)]
        assert main(args) == 2 and main([*args, "--overwrite"]) == 2
        assert "not a sweep folder" in capsys.readouterr().err
        assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]


def _children(pid: int) -> set[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return set()
    return {int(c) for c in text.split()}


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="needs /proc")
def test_workers_die_with_the_sweep_process(tmp_path):
    """SIGKILL to the sweep process alone (not its group): its workers exit within seconds."""
    args = [sys.executable, "-m", "sim.app.cli", "sweep", QUICKSTART, "--set", "workload.num_clients=256",
            "--set", "workload.num_rounds=8", "--grid", "seed=1,2", "--out", str(tmp_path / "o"),
            "--workers", "2", "--no-progress"]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    try:
        while len(workers := _children(proc.pid)) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "no workers started"
            time.sleep(0.05)
        time.sleep(0.5)  # the workers are inside their points
    finally:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{w}").exists() and "zombie" not in Path(f"/proc/{w}/status").read_text()
              for w in workers):  # fmt: skip
        assert time.monotonic() < deadline, f"workers {workers} outlived their parent"
        time.sleep(0.1)


def test_an_unreachable_ray_address_fails_fast_in_one_line(tmp_path, capsys):
    pytest.importorskip("ray")
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    code = main(["sweep", QUICKSTART, "--grid", "seed=1,2", "--out", str(tmp_path / "o"), "--executor", "ray",
                 "--ray-address", f"127.0.0.1:{port}"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "cannot connect" in err and len(err.strip().splitlines()) == 1
    assert time.monotonic() - start < 10 and not (tmp_path / "o").exists()


@pytest.mark.parametrize("points, address, says", [
    (2, None, "2 points fit this machine's"),
    (10_000, None, "starts a Ray cluster on this machine"),
])
def test_ray_says_when_it_cannot_repay_its_start(points, address, says, capsys):
    from sim.app.cli import _note_ray_start

    _note_ray_start(points, address)
    assert says in capsys.readouterr().err


def test_ray_joining_a_cluster_for_a_large_grid_says_nothing(capsys, monkeypatch):
    import sim.app.parallel
    from sim.app.cli import _note_ray_start

    monkeypatch.setattr(sim.app.parallel, "check_reachable", lambda address: None)  # a cluster that answers
    _note_ray_start(10_000, "10.0.0.1:6379")
    assert capsys.readouterr().err == ""

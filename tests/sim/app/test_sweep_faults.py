"""What earlier hostile sets left: a dead sweep worker, a file-size limit in the middle of a sweep, a sweep too large
to start without a word, and messages that named no file or field."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from sim.app.cli import main
from sim.base.errors import InputError

TINY = """name: tiny
seed: 1
hardware: {kv_mem_gb: 0.2}
workload: {kind: multi_turn, num_clients: 2, max_parallel: 2, request_length: 64, output_length: 4,
           num_rounds: 2, request_rate: null}
"""


def _die(scenario):
    """A sweep point whose worker is killed (the OOM killer's SIGKILL)."""
    os.kill(os.getpid(), signal.SIGKILL)


def test_a_dead_worker_ends_the_sweep_in_one_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "s.yaml").write_text(TINY)
    monkeypatch.setattr("sim.app.sweep._run_point", _die)  # forked workers inherit it
    code = main(["sweep", str(tmp_path / "s.yaml"), "--grid", "seed=1,2", "--workers", "2", "--out",
                 str(tmp_path / "o"), "--no-progress"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert err.strip().splitlines() == ["hicache-sim: error: a worker process died before its point finished (out of "
                                        "memory, or killed); nothing half-written was kept"]  # fmt: skip
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("fsize", [3_000, 5_000, 8_000])
def test_a_file_size_limit_mid_sweep_says_what_was_kept(tmp_path, under_limit, fsize):
    (tmp_path / "s.yaml").write_text(TINY)
    argv = ["sweep", str(tmp_path / "s.yaml"), "--grid", "seed=1,2,3", "--workers", "1", "--out", "o", "--no-progress"]
    ((code, err),) = under_limit([argv], tmp_path, fsize=fsize)
    assert "Traceback" not in err
    if code == 0:
        return
    (line,) = err.strip().splitlines()
    kept = sorted((tmp_path / "o" / "points").glob("*.json")) if (tmp_path / "o").exists() else []
    if kept:
        assert line.endswith(f"the {len(kept)} finished point(s) in o/points were kept: run the same command again "
                             "to resume"), line  # fmt: skip
    else:
        assert line.endswith("nothing half-written was kept") and not (tmp_path / "o").exists(), line


def test_a_large_sweep_says_so_before_it_starts(tmp_path, capsys, monkeypatch):
    (tmp_path / "s.yaml").write_text(TINY)
    monkeypatch.setattr("sim.app.cli.LARGE_SWEEP_POINTS", 4)  # the rule, on a grid a test can run
    assert main(["sweep", str(tmp_path / "s.yaml"), "--grid", "seed=1,2", "--grid", "workload.num_clients=2,3",
                 "--workers", "1", "--out", str(tmp_path / "o"), "--no-progress"]) == 0  # fmt: skip
    assert "hicache-sim: note: 4 points (2 x 2), each checked now and then a whole run, on 1 worker(s)" in capsys.readouterr().err


def test_a_weka_block_size_the_page_size_does_not_divide_names_the_line_and_field(tmp_path):
    from sim.workload.trajectory import read_weka

    rec = json.loads(Path("data/agentic/weka_synthetic.jsonl").read_text().splitlines()[0])
    path = tmp_path / "w.jsonl"
    path.write_text(json.dumps({**rec, "block_size": 48}) + "\n")
    with pytest.raises(InputError, match=r"w.jsonl:1: block_size: 48 and the scenario's page size 64 "
                                         r"\(hicache.page_size\): one must divide the other"):  # fmt: skip
        read_weka(path, page_size=64)


def test_a_mooncake_block_size_the_page_size_does_not_divide_names_the_file_and_fields(tmp_path):
    from sim.workload.traces import read_mooncake

    path = tmp_path / "m.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [1, 2]}\n')
    with pytest.raises(InputError, match=r"m.jsonl: workload.block_size 48 and hicache.page_size 64"):
        read_mooncake(path, block_size=48, page_size=64)


@pytest.mark.parametrize("value", ["NaN", "-Infinity", "1e999"])
def test_a_config_value_json_refuses_names_its_field_and_line(tmp_path, capsys, value):
    cfg = Path("sim/data/models/qwen3-14b.json").read_text().replace('"head_dim": ', f'"rope_theta": {value}, "head_dim": ')
    (tmp_path / "c.json").write_text(cfg)
    line = next(i for i, text in enumerate(cfg.splitlines(), 1) if "rope_theta" in text)
    assert main(["pools", str(tmp_path / "c.json")]) == 2
    assert f"c.json:{line}: rope_theta: {value}" in capsys.readouterr().err


def test_a_flag_of_another_client_says_whose_it_is():
    from sim.interop.fromsglang import from_sglang

    with pytest.raises(InputError, match=r"aiperf: unknown flag --request-rate \(--request-rate is bench_serving"):
        from_sglang("python -m sglang.launch_server --model-path Qwen/Qwen3-14B", ["aiperf profile --request-rate 3"],
                    gpu="H200")  # fmt: skip

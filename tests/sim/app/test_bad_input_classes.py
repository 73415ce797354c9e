"""The classes of bad input issue 21 found, one example of each, through the command line: one line naming
the origin and exit 2 (or the documented behaviour), before any work; nothing left behind."""

import json
import os
import re
import subprocess
import sys
from importlib import resources
from pathlib import Path

import pandas as pd
import pytest

from sim.app.cli import main

ROOT = Path(__file__).resolve().parents[3]
TINY = """name: tiny
seed: 1
hardware: {kv_mem_gb: 0.2}
workload: {kind: multi_turn, num_clients: 2, max_parallel: 2, request_length: 64, output_length: 4,
           num_rounds: 2, request_rate: null}
"""


def one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


@pytest.fixture
def tiny(tmp_path) -> Path:
    (tmp_path / "s.yaml").write_text(TINY)
    return tmp_path / "s.yaml"


class TestTracebacks:
    def test_a_config_json_is_named_with_its_field(self, tmp_path, tiny, capsys):
        cfg = json.loads(resources.files("sim").joinpath("data", "models", "qwen3-14b.json").read_text())
        (tmp_path / "config.json").write_text(json.dumps({**cfg, "num_attention_heads": 0}))
        tiny.write_text(TINY.replace("hardware:", f"model: {{name: q, config: {tmp_path / 'config.json'}}}\nhardware:"))
        assert main(["validate", str(tiny)]) == 2
        assert f"{tmp_path / 'config.json'}: num_attention_heads: must be an integer from 1" in one_line(capsys)

    def test_an_unbalanced_quote_names_the_option(self, capsys):
        assert main(["scenario", "from-sglang", "--gpu", "H200", "--launch", "python -m sglang.launch_server '"]) == 2
        assert "--launch: cannot split the command" in one_line(capsys)

    def test_a_tree_call_without_its_field_names_file_line_and_field(self, tmp_path, capsys):
        calls = tmp_path / "c.jsonl"
        calls.write_text('{"page_size": 1}\n{"op": "insert", "tokens": [1, 2]}\n{"op": "evict"}\n')
        assert main(["tree", str(calls), "--quiet"]) == 2
        assert f"{calls}:3: n: required field missing" in one_line(capsys)

    def test_mixed_grid_values_make_one_typed_column(self, tmp_path, tiny, capsys):
        out = tmp_path / "sw"
        assert main(["sweep", str(tiny), "--grid", "hicache.hicache_ratio=2,1e1", "--out", str(out), "--workers", "1",
                     "--no-progress"]) == 0  # fmt: skip
        assert pd.read_parquet(out / "sweep.parquet")["hicache.hicache_ratio"].tolist() == [2.0, 10.0]

    def test_a_closed_pipe_ends_quietly_with_sigpipes_status(self, tmp_path):
        calls = tmp_path / "c.jsonl"  # ~2 MB of answers, far more than a pipe holds
        calls.write_text("".join('{"op": "match", "tokens": [1, 2, 3]}\n' for _ in range(20_000)))
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen([sys.executable, "-m", "sim.app.cli", "tree", str(calls)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=env)  # fmt: skip
        proc.stdout.read(10)
        proc.stdout.close()  # the reader goes away, as `| head` does
        err = proc.stderr.read().decode()
        assert proc.wait() == 141 and err == ""


class TestHangs:
    def test_a_chunk_below_a_page_is_refused_as_sglang_admits_nothing(self, tiny, capsys):
        assert main(["validate", str(tiny), "--set", "scheduler.chunked_prefill_size=100"]) == 2
        assert "--set scheduler.chunked_prefill_size=100: scheduler.chunked_prefill_size: 100 is below one page" \
            in one_line(capsys)  # fmt: skip

    def test_a_tree_chunk_of_0_turns_chunking_off_as_sglang_does(self, tmp_path, capsys):
        calls = tmp_path / "c.jsonl"
        calls.write_text('{"op": "config", "chunked_prefill_size": 0}\n{"op": "request", "tokens": [[0, 1000]]}\n')
        assert main(["tree", str(calls)]) == 0
        answers = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert answers[1]["chunks"] == [[0, 1000]]


class TestNonsense:
    def test_a_rate_of_1e_300_is_out_of_range(self, tiny, capsys):
        assert main(["validate", str(tiny), "--set", "workload.request_rate=1e-300"]) == 2
        assert "workload.request_rate: 1e-300 is out of range" in one_line(capsys)

    def test_a_trace_time_past_the_longest_run_is_refused(self, tmp_path, capsys):
        trace = tmp_path / "t.jsonl"
        trace.write_text('{"timestamp": 1e14, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}\n')
        assert main(["replay", str(trace), "--no-bound"]) == 2
        assert f"{trace}:1: timestamp: arrives at 1e+11 s" in one_line(capsys)

    def test_a_swa_pool_that_drops_every_request_is_refused_before_the_run(self, tmp_path, tiny, capsys):
        out = tmp_path / "out"
        assert main(["run", str(tiny), "--set", "hicache.swa_full_tokens_ratio=0.0001", "--out", str(out)]) == 2
        assert "cannot admit the workload's smallest request" in one_line(capsys) and not out.exists()

    def test_fix_mfu_5_is_held_to_compute_mfu_bounds(self, tmp_path, tiny, capsys):
        (tmp_path / "p.csv").write_text("kind,tokens,context,batch,seconds\nprefill,2000,0,1,0.1\n")
        argv = ["calibrate", "compute", str(tmp_path / "p.csv"), "--scenario", str(tiny), "--out", str(tmp_path / "t.json")]
        assert main([*argv, "--fix", "mfu=5"]) == 2
        assert "--fix mfu=5: must be <= 1" in one_line(capsys) and not (tmp_path / "t.json").exists()

    def test_a_cost_table_without_entries_is_refused(self, tmp_path, capsys):
        spec = json.loads(resources.files("sim").joinpath("data", "h200_spec.json").read_text())
        (tmp_path / "new.json").write_text(json.dumps({**spec, "entries": []}))
        (tmp_path / "base.json").write_text(json.dumps(spec))
        assert main(["calibrate", "check", str(tmp_path / "new.json"), "--baseline", str(tmp_path / "base.json")]) == 2
        assert f"{tmp_path / 'new.json'}: entries: expected a non-empty list" in one_line(capsys)

    def test_plot_rounds_of_a_run_without_rounds_is_refused(self, tmp_path, tiny, capsys):
        tiny.write_text(TINY.replace("workload: {kind: multi_turn, num_clients: 2, max_parallel: 2, request_length: 64, "
                                     "output_length: 4,\n           num_rounds: 2, request_rate: null}",
                                     "workload: {kind: synthetic, num_requests: 4, input_length: 64, output_length: 4}"))
        assert main(["run", str(tiny), "--out", str(tmp_path / "run"), "--no-progress"]) == 0
        capsys.readouterr()
        assert main(["plot", "rounds", str(tmp_path / "run"), "--out", str(tmp_path / "r.png")]) == 2
        assert "no rounds to plot" in one_line(capsys) and not (tmp_path / "r.png").exists()


class TestOrigins:
    def test_a_set_that_creates_a_section_is_blamed_not_the_file(self, tiny, capsys):
        assert main(["validate", str(tiny), "--set", "model.config=null"]) == 2
        assert one_line(capsys).startswith("hicache-sim: error: --set model.config=null: model.name")

    def test_a_grid_value_a_cross_check_refuses_is_blamed_on_the_grid(self, tmp_path, tiny, capsys):
        assert main(["sweep", str(tiny), "--grid", "hardware.gpu_mem_gb=0.1,100", "--out", str(tmp_path / "sw")]) == 2
        assert "--grid hardware.gpu_mem_gb=0.1: hardware.kv_mem_gb" in one_line(capsys)

    def test_compare_checks_its_plot_before_the_comparison(self, tmp_path, capsys):
        assert main(["compare", "no-such-trace", "--policies", "lru", "--l1-pages", "10", "--plot", "/proc/x.png"]) == 2
        assert "--plot: cannot write into /proc" in one_line(capsys)

    def test_an_output_name_too_long_for_the_file_system_is_refused(self, tmp_path, tiny, capsys):
        assert main(["run", str(tiny), "--out", str(tmp_path / ("x" * 300))]) == 2
        assert "--out: a name of 300 bytes in the path is too long" in one_line(capsys)


# ---------------------------------------------------------------------------------------------- issue 37
class TestWriteErrors:
    """Class 1: every write error is one line naming the output and the errno's meaning; nothing is left."""

    def test_a_file_size_limit_is_one_line_naming_each_commands_output(self, tmp_path, tiny, under_limit):
        tiny.write_text(TINY)
        assert main(["run", str(tiny), "--out", str(tmp_path / "r"), "--no-progress"]) == 0
        trace = tmp_path / "t.jsonl"
        trace.write_text("".join(f'{{"timestamp": {i}, "input_length": 600, "output_length": 4, "hash_ids": [{i}, {i + 100}]}}\n'
                                 for i in range(20)))  # fmt: skip
        launch = "python -m sglang.launch_server --model-path Qwen/Qwen3-14B"
        argvs = {"o": ["run", str(tiny), "--out", "o", "--no-progress"],
                 "s": ["run", str(tiny), "--seeds", "2", "--workers", "1", "--out", "s", "--no-progress"],
                 "w": ["sweep", str(tiny), "--grid", "seed=1,2", "--out", "w", "--workers", "1", "--no-progress"],
                 "p.png": ["plot", "rounds", str(tmp_path / "r"), "--out", "p.png"],
                 "j.json": ["replay", str(trace), "--l1-pages", "100", "--json", "j.json", "--no-progress"],
                 "c.png": ["compare", str(trace), "--policies", "lru", "--l1-pages", "100", "--plot", "c.png"],
                 "f.yaml": ["scenario", "from-sglang", "--gpu", "H200", "--launch", launch, "--out", "f.yaml"]}
        work = tmp_path / "work"
        work.mkdir()
        for out, (code, err) in zip(argvs, under_limit(list(argvs.values()), work), strict=True):
            lines = err.strip().splitlines()
            assert code == 2 and len(lines) == 1, (out, err)
            assert lines[0].startswith(f"hicache-sim: error: {out}") and "File too large (EFBIG)" in lines[0], lines
        assert sorted(p.name for p in work.iterdir()) == [], "nothing half-written, no staging folder"

    def test_a_dangling_symlink_as_out_is_refused_naming_its_target(self, tmp_path, tiny, capsys):
        (tmp_path / "link").symlink_to(tmp_path / "gone")
        assert main(["run", str(tiny), "--out", str(tmp_path / "link")]) == 2
        assert f"a symbolic link to {tmp_path / 'gone'}, which does not exist" in one_line(capsys)
        assert sorted(p.name for p in tmp_path.iterdir()) == ["link", "s.yaml"]


class TestPipesAndDevices:
    """Class 3: an input must be a regular file (or a folder where one is expected), found before it is opened."""

    @pytest.mark.parametrize("argv", [["validate", "{p}"], ["tree", "{p}"], ["diff", "{p}", "{p}"],
                                      ["plan", "--scenario", "{s}", "--trace", "{p}"],
                                      ["validate", "{s}", "--set", "model.config={p}"]])  # fmt: skip
    def test_a_fifo_is_named_as_one_not_read(self, tiny, fifo, capsys, argv):
        pipe = fifo()
        assert main([a.format(p=pipe, s=tiny) for a in argv]) == 2
        assert re.search(f"{pipe}: cannot read .*: a named pipe \\(FIFO\\), not a regular file$", one_line(capsys))

    @pytest.mark.parametrize("sets", [["model.config=/dev/zero"], ["workload.kind=trace", "workload.path=/dev/zero"]])
    def test_a_device_is_named_as_one(self, tiny, capsys, sets):
        assert main(["validate", str(tiny), *(a for s in sets for a in ("--set", s))]) == 2
        assert re.search("/dev/zero: cannot read .*: a character device, not a regular file$", one_line(capsys))

    def test_a_binary_file_is_named_as_one(self, tmp_path, tiny, capsys):
        (tmp_path / "w.bin").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(100))
        assert main(["plan", "--scenario", str(tiny), "--trace", str(tmp_path / "w.bin")]) == 2
        assert f"{tmp_path / 'w.bin'}:1: a binary file (a NUL byte at 7)" in one_line(capsys)
        assert main(["validate", str(tiny), "--set", f"model.config={tmp_path / 'w.bin'}"]) == 2
        assert f"{tmp_path / 'w.bin'}: a binary file (a NUL byte at 7), not a model config.json" in one_line(capsys)


class TestOneWriterAFolder:
    """Class 2: ``--out`` is claimed before it is looked at; a second writer stops at once, naming the folder."""

    @pytest.mark.parametrize("extra", [[], ["--seeds", "2", "--workers", "1"]])
    def test_a_second_writer_into_a_folder_being_written_is_refused(self, tmp_path, tiny, capsys, extra):
        from sim.base.fileio import staged_dir

        out = tmp_path / "out"
        with staged_dir(out) as tmp:  # the first writer, still running
            assert main(["run", str(tiny), "--out", str(out), "--no-progress", *extra]) == 2
            assert f"{out}: --out: another command is writing this folder now" in one_line(capsys)
            (tmp / "summary.json").write_text("{}")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "s.yaml"]

    def test_two_runs_started_together_into_one_new_folder_keep_one_result_and_say_so(self, tmp_path, tiny):
        out = tmp_path / "out"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        argv = [sys.executable, "-m", "sim.app.cli", "run", str(tiny), "--out", str(out), "--no-progress"]
        procs = [subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(2)]  # fmt: skip
        ends = sorted((p.wait(timeout=120), p.stderr.read()) for p in procs)
        assert [code for code, _ in ends] == [0, 2], ends
        assert str(out) in ends[1][1] and len(ends[1][1].strip().splitlines()) == 1
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "s.yaml"]


def weka_trajectory(api: float = 1.0, duration_ms: float = 500) -> dict:
    return {"id": "a", "block_size": 64, "hash_id_scope": "local", "requests": [
        {"type": "n", "t": 0, "in": 256, "out": 4, "hash_ids": [1, 2, 3, 4], "api_time": api},
        {"type": "subagent", "t": 1, "duration_ms": duration_ms,
         "requests": [{"type": "s", "t": 1, "in": 128, "out": 2, "hash_ids": [9, 10]}]},
        {"type": "n", "t": 3, "in": 512, "out": 4, "hash_ids": list(range(1, 9))}]}  # fmt: skip


class TestNumbersEverywhere:
    """Class 4: the number rule holds every number of every trace record, nested ones included."""

    @pytest.mark.parametrize(("change", "message"), [
        ({"api": 1e300}, "requests[0].api_time: 1e+300 is out of range"),
        ({"duration_ms": 1e17}, "requests[1].duration_ms: 1e+17 is out of range"),
        ({"duration_ms": -5}, "requests[1].duration_ms: expected milliseconds >= 0 or null, got -5"),
        ({"duration_ms": 1e14}, "requests[1].duration_ms: the group ends at 1e+11 s, over the limit")])  # fmt: skip
    def test_a_weka_number_out_of_bounds_is_refused_by_validate_naming_line_and_field(self, tmp_path, tiny, capsys,
                                                                                      change, message):  # fmt: skip
        trace = tmp_path / "w.jsonl"
        trace.write_text(json.dumps(weka_trajectory()) + "\n")
        sets = ["--set", "workload.kind=trace", "--set", f"workload.path={trace}", "--set", "workload.format=weka"]
        assert main(["validate", str(tiny), *sets]) == 0
        trace.write_text(json.dumps(weka_trajectory(**change)) + "\n")
        capsys.readouterr()
        assert main(["validate", str(tiny), *sets]) == 2
        assert f"{trace}:1: {message}" in one_line(capsys)

    def test_ids_and_epoch_nanoseconds_are_not_quantities(self, tmp_path, capsys):
        trace = tmp_path / "t.jsonl"
        trace.write_text('{"input_ids": [1, 2, 3], "output_length": 2, "arrival_time_ns": 1733000000000000000}\n'
                         '{"input_ids": [1, 18446744073709551615], "output_length": 2, '
                         '"arrival_time_ns": 1733000001000000000}\n')  # fmt: skip
        assert main(["replay", str(trace), "--model", "generic", "--l1-pages", "10", "--no-bound"]) == 0


class TestTheUsersValueBlamed:
    """Class 6: the check that names what the user typed runs before a derivation that consumes it."""

    V3 = "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V3 --tp 8"

    @pytest.mark.parametrize(("flags", "accept", "message"), [
        ("--dp-size 3 --enable-dp-attention", None, "--dp-size 3: hardware.dp_size: 3 does not divide tp_size 8"),
        ("--dp-size 0 --enable-dp-attention", None, "--dp-size 0: must be >= 1 (as hardware.dp_size)"),
        ("--dp-size 0", None, "--dp-size 0: must be >= 1 (as cluster.instances)"),
        ("--load-balance-method bogus", None, "--load-balance-method bogus: SGLang refuses it: expected one of auto"),
        ("--speculative-algorithm EAGLE", "9", "--accept-length 9: speculative.accept_length: 9 exceeds")])  # fmt: skip
    def test_a_flag_is_blamed_for_its_own_value(self, tmp_path, capsys, flags, accept, message):
        argv = ["scenario", "from-sglang", "--gpu", "H200", "--launch", f"{self.V3} {flags}", "--out", str(tmp_path / "s.yaml")]
        assert main(argv + (["--accept-length", accept] if accept else [])) == 2
        assert one_line(capsys).startswith(f"hicache-sim: error: {message}")

    def test_weights_no_gpu_holds_are_blamed_on_the_config(self, tmp_path, tiny, capsys):
        cfg = json.loads(resources.files("sim").joinpath("data", "models", "qwen3-14b.json").read_text())
        (tmp_path / "config.json").write_text(json.dumps({**cfg, "num_hidden_layers": 10**9}))
        tiny.write_text(TINY.replace("hardware: {kv_mem_gb: 0.2}",
                                     f"model: {{name: q, config: {tmp_path / 'config.json'}}}\nhardware: {{gpu: H200}}"))
        assert main(["validate", str(tiny)]) == 2
        assert f"model.config: {tmp_path / 'config.json'}: the weights (" in one_line(capsys)


class TestAsSGLangChecks:
    """Class 5: what SGLang refuses is refused, naming where SGLang refuses it; what it accepts is accepted."""

    QWEN = "python -m sglang.launch_server --model-path Qwen/Qwen3-14B"

    def test_a_value_outside_a_flags_choices_is_refused_with_sglangs_line(self, tmp_path, capsys):
        argv = ["scenario", "from-sglang", "--gpu", "H200", "--out", str(tmp_path / "s.yaml")]
        assert main([*argv, "--launch", f"{self.QWEN} --quantization fp2"]) == 2
        line = one_line(capsys)
        assert "--quantization fp2: SGLang refuses it: expected one of awq, fp8" in line
        assert line.endswith("(sglang/srt/arg_groups/fields/model.py:181)")
        assert not (tmp_path / "s.yaml").exists()

    def test_a_chunk_of_minus_1_turns_chunking_off_as_sglang_does(self, tmp_path, capsys):
        out = tmp_path / "s.yaml"
        assert main(["scenario", "from-sglang", "--gpu", "H200", "--launch", f"{self.QWEN} --chunked-prefill-size -1",
                     "--out", str(out)]) == 0  # fmt: skip
        assert "chunked_prefill_size: 4194304" in out.read_text()
        assert main(["validate", str(out)]) == 0

    def test_more_kv_heads_than_heads_is_refused_naming_the_config_field(self, tmp_path, tiny, capsys):
        cfg = json.loads(resources.files("sim").joinpath("data", "models", "qwen3-14b.json").read_text())
        (tmp_path / "config.json").write_text(json.dumps({**cfg, "num_key_value_heads": 64}))
        tiny.write_text(TINY.replace("hardware:", f"model: {{name: q, config: {tmp_path / 'config.json'}}}\nhardware:"))
        assert main(["validate", str(tiny)]) == 2
        assert "num_key_value_heads: 64 KV heads do not divide the 40 attention heads" in one_line(capsys)

    def test_a_block_size_for_a_weka_trace_that_states_its_own_is_refused(self, tmp_path, tiny, capsys):
        trace = tmp_path / "w.jsonl"
        trace.write_text(json.dumps(weka_trajectory()) + "\n")
        assert main(["replay", str(trace), "--block-size", "7"]) == 2
        assert one_line(capsys).startswith("hicache-sim: error: --block-size: a Weka trace states its own block size")
        sets = ["--set", "workload.kind=trace", "--set", f"workload.path={trace}", "--set", "workload.format=weka"]
        assert main(["validate", str(tiny), *sets, "--set", "workload.block_size=7"]) == 2
        assert "workload.block_size: a Weka trace states its own block size" in one_line(capsys)

    def test_plan_batches_without_a_decode_instance_is_refused(self, tmp_path, tiny, capsys, monkeypatch):
        monkeypatch.chdir(tmp_path)  # the default report folder, were it not refused
        assert main(["plan", "--scenario", str(tiny), "--batches", "4"]) == 2
        assert "--batches: the batch caps of the HiSparse section" in one_line(capsys)

    def test_a_config_naming_deepseek_v4_without_its_fields_is_refused(self, tmp_path, tiny, capsys):
        cfg = json.loads(resources.files("sim").joinpath("data", "models", "qwen3-14b.json").read_text())
        (tmp_path / "config.json").write_text(json.dumps({**cfg, "model_type": "deepseek_v4",
                                                          "architectures": ["DeepseekV4ForCausalLM"]}))  # fmt: skip
        tiny.write_text(TINY.replace("hardware:", f"model: {{name: q, config: {tmp_path / 'config.json'}}}\nhardware:"))
        assert main(["validate", str(tiny)]) == 2
        assert "compress_ratios: required field missing" in one_line(capsys)


class TestSignals:
    """Class 8: SIGHUP ends a command as SIGTERM does; an ending sweep says what it kept and how to resume."""

    def test_sighup_removes_the_staging_and_says_so(self, tmp_path, tiny):
        import signal
        import time

        tiny.write_text(TINY.replace("num_clients: 2, max_parallel: 2", "num_clients: 1024, max_parallel: 64")
                        .replace("num_rounds: 2", "num_rounds: 6"))  # fmt: skip
        out = tmp_path / "out"
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen([sys.executable, "-m", "sim.app.cli", "run", str(tiny), "--out", str(out), "--no-progress"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)  # fmt: skip
        deadline = time.monotonic() + 60
        while not list(tmp_path.glob(".out.partial-*")):  # the run has started
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
            time.sleep(0.01)
        proc.send_signal(signal.SIGHUP)
        err = proc.communicate(timeout=120)[1]
        assert proc.returncode == 128 + signal.SIGHUP, err
        assert err.strip().splitlines() == ["hicache-sim: hung up (SIGHUP: the terminal closed); nothing half-written "
                                            "was kept"]  # fmt: skip
        assert sorted(p.name for p in tmp_path.iterdir()) == ["s.yaml"]

    def test_an_interrupted_sweep_names_the_points_it_kept(self, tmp_path, tiny, capsys, monkeypatch):
        import sim.app.sweep

        run_local = sim.app.sweep._run_local

        def one_then_ctrl_c(todo, workers):
            yield from run_local(todo[:1], workers)
            raise KeyboardInterrupt

        monkeypatch.setattr(sim.app.sweep, "_run_local", one_then_ctrl_c)
        out = tmp_path / "sw"
        argv = ["sweep", str(tiny), "--grid", "seed=1,2,3", "--out", str(out), "--workers", "1", "--no-progress"]
        assert main(argv) == 130
        assert one_line(capsys) == (f"hicache-sim: interrupted; the 1 finished point(s) in {out}/points were kept: run "
                                    "the same command again to resume")  # fmt: skip


class TestPhysics:
    """Class 9: a timing faster than the link or the launch can be is a broken measurement, not an improvement."""

    @pytest.fixture
    def tables(self, tmp_path):
        spec = json.loads(resources.files("sim").joinpath("data", "h200_spec.json").read_text())
        (tmp_path / "base.json").write_text(json.dumps(spec))
        return tmp_path, spec

    def check(self, tmp_path, new: dict) -> int:
        (tmp_path / "new.json").write_text(json.dumps(new))
        return main(["calibrate", "check", str(tmp_path / "new.json"), "--baseline", str(tmp_path / "base.json")])

    def test_medians_of_1e_30_s_are_refused_not_an_improvement(self, tables, capsys):
        tmp_path, spec = tables
        fast = [{**e, "median_s": 1e-30, "p10_s": 1e-30, "p90_s": 1e-30} for e in spec["entries"]]
        assert self.check(tmp_path, {**spec, "entries": fast}) == 2
        assert f"{tmp_path / 'new.json'}: entries[0].median_s: 1e-30 s is faster than any GPU operation timed from " \
            "the host" in one_line(capsys)  # fmt: skip

    def test_a_transfer_faster_than_the_tables_own_link_is_refused(self, tables, capsys):
        tmp_path, spec = tables
        big = max(range(len(spec["entries"])), key=lambda i: spec["entries"][i]["n_items"] * spec["entries"][i]["item_bytes"])
        entries = [dict(e) for e in spec["entries"]]
        entries[big].update(median_s=entries[big]["median_s"] / 10, p10_s=entries[big]["p10_s"] / 10)
        assert self.check(tmp_path, {**spec, "entries": entries}) == 2
        assert f"entries[{big}].median_s:" in (line := one_line(capsys))
        assert "faster than the PCIe Gen5 x16 link (source.pcie) carries (63.008 GB/s)" in line


class TestNoiseAndNotes:
    """Class 7: the seed note and the noise test know zero spread and different workloads; long work speaks."""

    @pytest.fixture
    def trace_scenario(self, tmp_path) -> Path:
        trace = tmp_path / "t.jsonl"
        trace.write_text("".join(f'{{"timestamp": {i * 50}, "input_length": 600, "output_length": 4, '
                                 f'"hash_ids": [{i % 3}, {i}]}}\n' for i in range(30)))  # fmt: skip
        (tmp_path / "t.yaml").write_text(TINY.replace(
            "workload: {kind: multi_turn, num_clients: 2, max_parallel: 2, request_length: 64, output_length: 4,\n"
            "           num_rounds: 2, request_rate: null}", f"workload: {{kind: trace, path: {trace}}}"))
        return tmp_path / "t.yaml"

    def test_a_difference_between_deterministic_runs_is_not_called_outside_the_noise(self, tmp_path, trace_scenario,
                                                                                       capsys):  # fmt: skip
        a, b = tmp_path / "a", tmp_path / "b"
        for out, sets in ((a, []), (b, ["--set", "scheduler.max_running_requests=2"])):
            assert main(["run", str(trace_scenario), "--seeds", "2", "--workers", "1", "--out", str(out),
                         "--no-progress", *sets]) == 0  # fmt: skip
            assert "every seed gave the same figures" in capsys.readouterr().err
        assert main(["diff", str(a), str(b), "--json", str(tmp_path / "d.json")]) == 0
        assert "outside the noise" not in capsys.readouterr().out
        rows = json.loads((tmp_path / "d.json").read_text())
        assert {r["test"] for r in rows} == {"no spread"} and not any(r["significant"] for r in rows)

    def test_seeds_that_add_up_to_a_long_run_are_announced_before_the_work(self, tmp_path, tiny, capsys, monkeypatch):
        monkeypatch.setattr("sim.app.run.LONG_RUN_REQUESTS", 8)  # as 100,000 requests: tiny's 4 a seed, 2 seeds
        assert main(["run", str(tiny), "--seeds", "2", "--workers", "1", "--out", str(tmp_path / "o"),
                     "--no-progress"]) == 0  # fmt: skip
        assert "hicache-sim: note: 2 seeds x 4 requests = 8 requests on 1 worker(s): expect minutes" \
            in capsys.readouterr().err  # fmt: skip

    def test_a_diff_of_two_workloads_says_so(self, tmp_path, tiny, capsys):
        assert main(["run", str(tiny), "--out", str(tmp_path / "a"), "--no-progress"]) == 0
        assert main(["run", str(tiny), "--out", str(tmp_path / "b"), "--no-progress", "--set",
                     "workload.num_rounds=3"]) == 0  # fmt: skip
        capsys.readouterr()
        assert main(["diff", str(tmp_path / "a"), str(tmp_path / "b")]) == 0
        assert one_line(capsys) == ("hicache-sim: note: A and B run different workloads (workload.num_rounds differ): "
                                    "B - A is the workload's difference as much as the setup's")  # fmt: skip

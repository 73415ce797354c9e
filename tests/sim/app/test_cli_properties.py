"""Property: whatever a user feeds ``validate`` and ``run`` (random field values, random trace lines, random
bytes), the answer is exit 0 with a whole output folder or exit 2 with one line and no folder; never a
traceback, never a partial folder. Kept fast: a tiny scenario and bounded examples."""

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.app.cli import main

OUTPUTS = {"requests.parquet", "scenario.yaml", "summary.json", "timeseries.parquet"}
TINY = """name: tiny
seed: 1
hardware: {kv_mem_gb: 0.2}
workload: {kind: multi_turn, num_clients: 2, max_parallel: 2, request_length: 64, output_length: 4,
           num_rounds: 2, request_rate: null}
"""
FIELDS = [
    "seed", "duration_s", "hardware.kv_mem_gb", "hardware.gpu_mem_gb", "hardware.tp_size", "hardware.peak_tflops",
    "hicache.enabled", "hicache.page_size", "hicache.hicache_ratio", "hicache.host_pages",
    "hicache.load_back_threshold", "hicache.write_policy", "hicache.swa_full_tokens_ratio", "l3.enabled",
    "l3.read_gbps", "scheduler.max_running_requests", "scheduler.chunked_prefill_size", "compute.mfu",
    "compute.prefill_flops_per_token", "workload.num_clients", "workload.request_length", "workload.output_length",
    "workload.num_rounds", "workload.request_rate", "workload.system_prompt_length", "workload.kind",
    "workload.rate", "workload.num_requests", "workload.input_length", "cluster.instances", "cluster.role",
    "cluster.router", "hisparse.enabled", "output.timeseries_interval_s", "output.record_requests", "name", "model",
]  # fmt: skip
VALUES = st.sampled_from([
    "-1", "0", "1", "7", "300", "10000000", "18446744073709551616", "-0.5", "1e-9", "0.5", "2.5", "1e9", ".nan",
    ".inf", "-.inf", "true", "false", "null", "abc", "''", "[1, 2]", "{a: 1}", "synthetic", "decode",
    "cache_aware", "write_back", "../../x", "deepseek-v4-pro", "generic", "bench_serving",
])  # fmt: skip


def _check(tmp_path: Path, argv: list[str], capsys) -> int:
    """Run ``argv`` (validate, then run when valid) and assert the whole-or-nothing contract."""
    out = tmp_path / "out"
    code = main(["validate", *argv])
    err = capsys.readouterr().err
    assert code in (0, 2) and "Traceback" not in err
    if code == 2:
        assert len(err.strip().splitlines()) == 1, err
        return code
    code = main(["run", *argv, "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code in (0, 2), err  # anything else raised out of main, with its traceback, and failed the test
    if code == 0:
        assert {p.name for p in out.iterdir()} >= OUTPUTS
        json.loads((out / "summary.json").read_text(), parse_constant=lambda c: pytest.fail(f"{c} in summary"))
    else:
        assert "Traceback" not in err and not out.exists(), err
        assert len([line for line in err.splitlines() if "error" in line]) == 1, err
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # no staging folder left
    return code


SETTINGS = settings(max_examples=30, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip


@SETTINGS
@given(overrides=st.lists(st.tuples(st.sampled_from(FIELDS), VALUES), min_size=1, max_size=3))
def test_random_field_values_give_exit_0_or_2_and_whole_folders(tmp_path_factory, capsys, overrides):
    tmp_path = tmp_path_factory.mktemp("p")
    (tmp_path / "s.yaml").write_text(TINY)
    argv = [str(tmp_path / "s.yaml")] + [a for k, v in overrides for a in ("--set", f"{k}={v}")]
    _check(tmp_path, argv, capsys)


NUMBERS = st.sampled_from(["0", "1", "-1", "600", "1e3", "1e999", "NaN", "Infinity", "-Infinity", "10000000000000",
                           "2.5", '"5"', "true", "null", "[]", "[1, 2]", "123456789012345678901234567890"])  # fmt: skip
RECORD = st.dictionaries(st.sampled_from(["timestamp", "input_length", "output_length", "hash_ids"]), NUMBERS)
LINE = st.one_of(
    RECORD.map(lambda d: "{" + ", ".join(f'"{k}": {v}' for k, v in d.items()) + "}"),
    st.builds(lambda ts, n: json.dumps({"timestamp": ts, "input_length": n, "output_length": 4,
                                        "hash_ids": list(range(n // 512 + 1))}),  # fmt: skip
              st.integers(-5, 10**6), st.integers(1, 3000)),
    st.sampled_from(["", "{", "[1]", "\x00", "\ufffd", '{"timestamp": 1}']),
)


@SETTINGS
@given(lines=st.lists(LINE, min_size=0, max_size=5), raw=st.binary(max_size=8))
def test_random_trace_lines_give_exit_0_or_2_and_whole_folders(tmp_path_factory, capsys, lines, raw):
    tmp_path = tmp_path_factory.mktemp("t")
    (tmp_path / "t.jsonl").write_bytes("\n".join(lines).encode() + b"\n" + raw)
    (tmp_path / "s.yaml").write_text("name: tr\nhardware: {kv_mem_gb: 0.2}\n"
                                     "workload: {kind: trace, path: t.jsonl, format: mooncake}\n")  # fmt: skip
    _check(tmp_path, [str(tmp_path / "s.yaml")], capsys)


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(body=st.binary(max_size=64))
def test_random_bytes_as_a_scenario_give_exit_2_in_one_line(tmp_path_factory, capsys, body):
    tmp_path = tmp_path_factory.mktemp("b")
    (tmp_path / "s.yaml").write_bytes(body)
    assert _check(tmp_path, [str(tmp_path / "s.yaml")], capsys) == 2

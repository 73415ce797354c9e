"""The host tier answers SGLang 0.5.23's own HiCache recordings (``shared/vectors/hicache``, copied into the test
data) through the caches the engine and the replay use: the plain model's :class:`~sim.cache.hicache.HiCache` and V4's
:class:`~sim.cache.v4.swacache.SWACache`. Every field of every answer: matches and host hits, admission verdicts,
load-backs, chunks, pool and host-pool usage, the write-through window, and the host-tier events in order.
"""

import json
from pathlib import Path

import pytest

from sim.app.cli import main
from sim.offline.hostcalls import host_pool_tokens
from sim.offline.treecalls import compare, run_calls

DATA = Path(__file__).parents[2] / "data" / "sglang_vectors" / "hicache"
# The first set (41 streams), the second (``more/``: 60 streams, ten a file, about 14,000 calls) and, for each class
# of answer the model once got wrong on the second, the stream cut at its first differing call.
VECTORS = sorted(DATA.glob("*.jsonl")) + sorted(DATA.glob("more/*.jsonl"))
FIRST_DIFFERENCES = sorted(DATA.glob("first_differences/*.jsonl"))


@pytest.mark.parametrize("path", VECTORS + FIRST_DIFFERENCES,
                         ids=[str(p.relative_to(DATA).with_suffix("")) for p in VECTORS + FIRST_DIFFERENCES])
def test_every_answer_matches_sglangs(path):
    wrong, checked = set(), 0
    for _, answer, expect in run_calls(path):
        assert expect is not None
        if compare(answer, expect):
            wrong.add(expect["id"])
        checked += 1
    assert checked > 30
    assert not wrong, sorted(wrong)


def test_the_second_set_is_all_here():
    assert len(list(DATA.glob("more/*.jsonl"))) == 12
    assert {json.loads(p.read_text().splitlines()[0])["model"] for p in FIRST_DIFFERENCES} == {"plain", "v4"}


def test_both_models_and_every_policy_are_covered():
    configs = [json.loads(line)["call"] for p in VECTORS for line in p.read_text().splitlines()
               if '"op":"config"' in line or '"op": "config"' in line]  # fmt: skip
    assert {c["model"] for c in configs} == {"plain", "v4"}
    assert {c["write_policy"] for c in configs} == {"write_through", "write_through_selective", "write_back"}
    assert {c["load_policy"] for c in configs} == {"forward", "explicit"}


def test_host_pool_is_the_ratio_rounded_down_to_pages_plus_a_page():
    assert host_pool_tokens(64, 1.5, 4) == 100  # hicache scenario a.0
    assert host_pool_tokens(1664, 2.0, 1) == 3329


def test_cli_checks_a_host_tier_recording_and_fails_on_a_changed_answer(tmp_path, capsys):
    src = (DATA / "hicache_scenarios.jsonl").read_text().splitlines()
    assert main(["tree", str(DATA / "hicache_scenarios.jsonl"), "--quiet"]) == 0
    assert f"{len(src) - 1}/{len(src) - 1} answers agree" in capsys.readouterr().err
    rec = json.loads(src[2])
    assert rec["expect"]["events"] == [{"backup": [0, 20, 1019], "tokens": 20}]
    rec["expect"]["events"] = []  # a (hypothetical) SGLang that did not back the prompt up
    bad = tmp_path / "calls.jsonl"
    bad.write_text("\n".join([src[0], src[1], json.dumps(rec)]) + "\n")
    assert main(["tree", str(bad), "--quiet"]) == 1
    assert "events: got [{'backup': [0, 20, 1019], 'tokens': 20}], expected []" in capsys.readouterr().err


# ----- bad input (issue 21): one line naming file, line and field, exit 2; never a traceback or a hang -----------

PLAIN = {"op": "config", "model": "plain", "kv": "mha", "page_size": 4, "full_pages": 16, "chunked_prefill_size": 64,
         "max_prefill_tokens": 16384, "hicache_ratio": 1.5, "write_policy": "write_through",
         "write_through_threshold": None, "load_back_threshold": 10, "load_policy": "forward"}  # fmt: skip
ADMIT = {"op": "admit", "rid": "g", "tokens": [[0, 20]], "output": [[100, 4]]}


def _stream(tmp_path, *calls) -> Path:
    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in calls))
    return path


def _one_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in err[0], err
    return err[0]


def test_every_op_the_drivers_handle_is_declared():
    from sim.offline.hostcalls import PlainHostDriver
    from sim.offline.treecalls import HOST_CALL_FIELDS
    from sim.offline.v4hostcalls import V4HostDriver

    assert set(HOST_CALL_FIELDS) == set(PlainHostDriver.ops) == set(V4HostDriver.ops)


@pytest.mark.parametrize(("call", "message"), [
    ({"op": "evict_host"}, "n: required field missing"),
    ({"op": "evict", "full": "x"}, "full: expected an integer from 0"),
    ({"op": "request", "id": [1], "tokens": [1, 2]}, "id: expected a string or integer, got [1]"),
    ({**PLAIN, "write_policy": "write_sometimes"}, "write_policy: expected one of write_through"),
    ({**PLAIN, "hicache_ratio": "2"}, "hicache_ratio: expected a number from 0"),
])  # fmt: skip
def test_a_missing_or_mistyped_field_is_one_line_naming_file_line_and_field(tmp_path, capsys, call, message):
    path = _stream(tmp_path, PLAIN, call)
    assert main(["tree", str(path), "--quiet"]) == 2
    assert f"{path}:2: {message}" in _one_line(capsys)


def test_a_config_key_no_config_has_set_is_named(tmp_path, capsys):
    path = _stream(tmp_path, {k: v for k, v in PLAIN.items() if k != "page_size"})
    assert main(["tree", str(path), "--quiet"]) == 2
    assert f"{path}:1: page_size: required field missing" in _one_line(capsys)


@pytest.mark.parametrize(("calls", "message"), [
    ([ADMIT, {"op": "finish", "rid": "g"}, {"op": "extend", "rid": "g"}], "rid: request 'g' has finished"),
    ([ADMIT, {"op": "finish", "rid": "g"}, {"op": "finish", "rid": "g"}],
     "rid: request 'g' was finished by an earlier finish call"),
    ([ADMIT, {"op": "extend", "rid": "g"}, {"op": "extend", "rid": "g"}], "rid: request 'g' has no prompt left"),
    ([ADMIT, {"op": "decode", "rid": "g", "n": 2}], "rid: request 'g' has prompt left to prefill"),
    ([ADMIT, ADMIT], "rid: request 'g' is already running"),
    ([{"op": "extend", "rid": "zz"}], "rid: no request 'zz'"),
])  # fmt: skip
def test_a_call_out_of_order_for_the_requests_state_is_refused_at_its_line(tmp_path, capsys, calls, message):
    path = _stream(tmp_path, PLAIN, *calls)
    assert main(["tree", str(path), "--quiet"]) == 2
    assert f"{path}:{len(calls) + 1}: {message}" in _one_line(capsys)


def test_a_v4_chunk_that_gets_no_tokens_ends_the_request_as_the_format_says_not_a_loop(tmp_path, capsys):
    # the SWA pool (3 pages) holds two chunks' windows, locked until an ack that no call inside `request` brings
    v4 = {**PLAIN, "model": "v4", "page_size": 256, "window": 128, "full_pages": 64, "swa_pages": 3,
          "chunked_prefill_size": 256, "hicache_ratio": 2.0}  # fmt: skip
    path = _stream(tmp_path, v4, {"op": "request", "tokens": [[0, 2000]], "output": [[90000, 4]]})
    assert main(["tree", str(path)]) == 0
    answer = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert answer["aborted"] is True and "got no tokens from the prefill budget" in answer["error"]
    assert answer["running"] == 0

"""The prefix-cache models answer SGLang 0.5.23's recorded call streams exactly, through the same code the
replay uses: ``RadixCache`` (page sizes 1, 4, 16) and DeepSeek-V4's ``UnifiedRadixCache`` (FULL + SWA:
matched, full hit, branching, chunks, cached length, pool usage, evictions and tree dumps after every call).
"""

import json
from pathlib import Path

import pytest

from sim.app.cli import main
from sim.offline.calls import expand_tokens
from sim.offline.treecalls import compare, run_calls

DATA = Path(__file__).parents[2] / "data" / "sglang_vectors"
VECTORS = sorted(DATA.glob("*.jsonl")) + sorted((DATA / "v4").glob("*.jsonl"))


@pytest.mark.parametrize("path", VECTORS, ids=[p.stem for p in VECTORS])
def test_every_answer_matches_sglangs(path):
    checked = 0
    for lineno, answer, expect in run_calls(path):
        assert expect is not None
        assert compare(answer, expect) == [], f"{path.name}:{lineno}"
        checked += 1
    assert checked > 50


def test_token_runs_expand():
    assert expand_tokens([[1000, 3], 7]) == [1000, 1001, 1002, 7]


def test_cli_checks_a_recording_and_fails_on_a_changed_answer(tmp_path, capsys):
    src = (DATA / "v4" / "v4_scenarios.jsonl").read_text().splitlines()
    assert main(["tree", str(DATA / "v4" / "v4_scenarios.jsonl"), "--quiet"]) == 0
    assert "72/72 answers agree" in capsys.readouterr().err
    rec = json.loads(src[2])
    rec["expect"]["matched"] += 256  # a recording from a (hypothetical) SGLang that matched one page more
    bad = tmp_path / "calls.jsonl"
    bad.write_text("\n".join([src[0], src[1], json.dumps(rec)]) + "\n")
    assert main(["tree", str(bad), "--quiet"]) == 1
    assert "matched: got 0, expected 256" in capsys.readouterr().err


def test_cli_prints_one_answer_per_call_without_expects(tmp_path, capsys):
    calls = tmp_path / "calls.jsonl"
    calls.write_text('{"op": "request", "tokens": [[1, 600]], "output": [[900, 2]]}\n{"op": "state"}\n')
    assert main(["tree", str(calls)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(x)["op"] for x in lines] == ["request", "state"]
    assert json.loads(lines[0])["cached_len"] == 512


def test_cli_rejects_a_bad_line_in_one_line(tmp_path, capsys):
    calls = tmp_path / "calls.jsonl"
    calls.write_text('{"op": "request", "tokens": [[1, 600]]}\nnot json\n')
    assert main(["tree", str(calls), "--quiet"]) == 2
    assert f"{calls}:2: malformed JSON" in capsys.readouterr().err


@pytest.mark.parametrize("second, says", [
    ('{"op": "state", "typo": 1}', ":2: typo: not a field of state"),
    ('{"op": "match", "tokens": [[1, 600]], "admission": false}', ":2: admission: this format's match is the admission one"),
    ('{"op": "request", "tokens": "abcd"}', ":2: tokens:"),
])  # fmt: skip
def test_a_bad_call_is_refused_before_any_answer_is_printed(tmp_path, capsys, second, says):
    calls = tmp_path / "calls.jsonl"
    calls.write_text('{"op": "request", "tokens": [[1, 600]], "output": [[900, 2]]}\n' + second + "\n")
    assert main(["tree", str(calls)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and f"{calls}{says}" in err and len(err.strip().splitlines()) == 1


def test_a_stream_without_calls_is_refused(tmp_path, capsys):
    calls = tmp_path / "calls.jsonl"
    calls.write_text('{"page_size": 4}\n')
    assert main(["tree", str(calls)]) == 2
    assert "holds no calls" in capsys.readouterr().err


def test_a_recording_made_with_another_eviction_order_is_refused_not_answered_lru(tmp_path, capsys):
    calls = tmp_path / "calls.jsonl"
    calls.write_text('{"page_size": 4, "eviction_policy": "lfu"}\n{"call": {"op": "insert", "tokens": [1, 2, 3, 4]}}\n')
    assert main(["tree", str(calls), "--quiet"]) == 2
    assert f"{calls}:1: eviction_policy: the trees answer with SGLang's LRU eviction, got 'lfu'" in capsys.readouterr().err


def test_a_node_reference_the_recorder_could_not_name_compares_by_position():
    assert compare({"events": [{"demote": [0, 256, 5723]}]}, {"events": [{"demote": [0, 256, None]}]}) == []
    assert compare({"events": [{"demote": [0, 512, 5723]}]}, {"events": [{"demote": [0, 256, None]}]}) != []


def _evict(got: int, nodes: list) -> dict:
    return {"events": [{"host_evict": 128, "got": got, "nodes": nodes}]}


def test_a_host_eviction_may_leave_out_only_the_tokens_its_recording_freed_without_naming():
    # v228.68: SGLang freed 640 host tokens and named no node; the model names the 640-token node it freed
    assert compare(_evict(640, [[0, 640, 1979]]), _evict(640, [])) == []
    # v6.34-like: one named, one left out, the left-out one makes up the difference
    assert compare(_evict(384, [[0, 256, 7], [256, 384, 9]]), _evict(384, [[256, 384, 9]])) == []
    # the left-out node must make up exactly what the recording did not name
    assert compare(_evict(640, [[0, 512, 1979]]), _evict(640, [])) != []
    assert compare(_evict(384, [[0, 128, 7], [256, 384, 9]]), _evict(384, [[256, 384, 9]])) != []
    # a node the recording names is never excused, nor an omission where the recording names every token
    assert compare(_evict(256, [[0, 128, 7], [128, 256, 9]]), _evict(256, [[0, 128, 8], [128, 256, 9]])) != []
    assert compare(_evict(256, [[0, 128, 7], [128, 256, 9]]), _evict(256, [[0, 256, 9]])) != []

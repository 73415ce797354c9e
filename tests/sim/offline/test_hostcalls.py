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
VECTORS = sorted(DATA.glob("*.jsonl"))

# Answers the V4 model still gets wrong, by call id (docs/notes/host_tier_vectors.md says what differs). A fix
# that makes one agree fails its test until it leaves this list, so the list only shrinks.
KNOWN_V4 = {
    "hicache_v4_seed13": {"v13.33", "v13.34", "v13.35"},
}


@pytest.mark.parametrize("path", VECTORS, ids=[p.stem for p in VECTORS])
def test_every_answer_matches_sglangs(path):
    wrong, checked, unnamed = set(), 0, set()
    for _, answer, expect in run_calls(path):
        assert expect is not None
        if compare(answer, expect, unnamed):
            wrong.add(expect["id"])
        checked += 1
    assert checked > 50
    assert wrong == KNOWN_V4.get(path.stem, set())


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

"""The tree answers SGLang 0.5.23's ``RadixCache`` call sequences exactly (``shared/vectors``).

Each vector file replays insert / match / evict / state calls against a device-only tree and compares
every answer and the evictable / protected / total token counts after each call.
"""

import json
from pathlib import Path

import pytest

from sim.radix import RadixTree

VECTORS = sorted((Path(__file__).parent.parent / "data" / "sglang_vectors").glob("*.jsonl"))


def replay(path: Path):
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    tree = RadixTree(page_size=header["page_size"])
    for line in lines[1:]:
        rec = json.loads(line)
        call, expect = rec["call"], rec["expect"]
        op = call["op"]
        got: dict = {"op": op}
        if op == "insert":
            res = tree.insert(tree.page_keys(call["tokens"]))
            got["prefix_len"] = res.prefix_pages * tree.page_size
            got["inserted"] = res.inserted_pages * tree.page_size
        elif op == "match":
            got["matched"] = tree.match(tree.page_keys(call["tokens"])).device_pages * tree.page_size
        elif op == "evict":
            got["evicted"], got["freed_calls"] = tree.evict(call["n"])
        elif op == "state":
            paths = tree.paths()
            if tree.page_size > 1:
                paths = [[t for page in p for t in page] for p in paths]
            got["paths"] = paths
            got["num_nodes"] = tree.num_nodes - 1  # SGLang counts nodes below the root
        got["evictable"] = tree.evictable_tokens
        got["protected"] = tree.protected_tokens
        got["total"] = tree.device_tokens()
        yield call["id"], {k: got[k] for k in expect if k in got}, expect


@pytest.mark.parametrize("path", VECTORS, ids=[p.stem for p in VECTORS])
def test_tree_gives_sglang_answers(path):
    for call_id, got, expect in replay(path):
        assert got == expect, f"{path.name} call {call_id}"

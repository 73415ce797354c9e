"""``hicache-sim hisparse`` answers SGLang 0.5.23's HiSparse decisions: every recorded stream
(``shared/vectors/hisparse``, copied gzipped into tests/data) on every field, small hand-built streams that state
the coordinator's and the kernel's rules one by one, and bad calls refused in one line with exit 2."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from sim.app.cli import main
from sim.offline.hisparsecalls import HiSparseDriver, agreement, lru_hash, read_answers

VECTORS = Path(__file__).parents[2] / "data" / "sglang_vectors" / "hisparse"
STREAMS = sorted(p.name[: -len(".jsonl.gz")] for p in VECTORS.glob("stream_*[0-9].jsonl.gz"))


def unpacked(name: str, tmp_path: Path) -> tuple[Path, Path]:
    out = []
    for suffix in (".jsonl", ".answer.jsonl"):
        path = tmp_path / f"{name}{suffix}"
        path.write_bytes(gzip.decompress((VECTORS / f"{name}{suffix}.gz").read_bytes()))
        out.append(path)
    return out[0], out[1]


def answer(calls: list[dict]) -> list[dict]:
    driver = HiSparseDriver()
    return [row for call in calls for row in driver(call)]


def config(h: int = 4, k: int = 4, layers: int = 1) -> dict:
    return {"op": "config", "device_buffer_size": h, "top_k": k, "layers": layers}


def step(*rows: tuple[str, int, list]) -> dict:
    return {"op": "step", "reqs": [{"rid": rid, "seq_len": n, "topk": ids} for rid, n, ids in rows]}


# --- SGLang's recordings -----------------------------------------------------------------------------


def test_the_recordings_are_here():
    assert len(STREAMS) == 4


@pytest.mark.parametrize("name", STREAMS)
def test_every_recorded_stream_agrees_on_every_field(name, tmp_path, capsys):
    calls, answers = unpacked(name, tmp_path)
    assert main(["hisparse", str(calls), "--expect", str(answers), "--quiet"]) == 0
    err = capsys.readouterr().err
    n = len(read_answers(answers))
    assert f"{n}/{n} rows agree ({n} answered, {n} recorded)" in err
    assert f"lru_hash {n}/{n}" in err and f"loads {n}/{n}" in err


def test_one_changed_field_is_a_mismatch_named_with_its_row(tmp_path, capsys):
    calls, answers = unpacked(STREAMS[0], tmp_path)
    rows = read_answers(answers)
    rows[5]["misses"] += 1
    answers.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["hisparse", str(calls), "--expect", str(answers), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert f"{answers}:6:" in err and "misses: got" in err and f"misses {len(rows) - 1}/{len(rows)}" in err


def test_missing_rows_are_mismatches(tmp_path, capsys):
    calls, answers = unpacked(STREAMS[0], tmp_path)
    rows = read_answers(answers)
    per_field, wrong = agreement(answer([json.loads(x) for x in calls.read_text().splitlines()]), rows[:-2])
    assert [i for i, _ in wrong] == [len(rows) - 2, len(rows) - 1]
    answers.write_text("".join(json.dumps(r) + "\n" for r in rows[:-2]))
    assert main(["hisparse", str(calls), "--expect", str(answers), "--quiet"]) == 1
    n = len(rows)
    assert f"{n - 2}/{n} rows agree ({n} answered, {n - 2} recorded)" in capsys.readouterr().err


# --- the rules, on streams built by hand -------------------------------------------------------------


def test_the_fast_path_touches_nothing_so_the_buffer_crosses_in_slot_order():
    """A prompt whose compressed length fits keeps slot t = id t (preloaded); while seq_len // 4 <= the buffer
    every step is the kernel's fast path: no miss, and the LRU order untouched whatever the rows selected. At the
    crossing the order is slot order, so hits end in slot order, not in the order of the top-k or of recency."""
    fast = [step(("r0", n, ids)) for n, ids in [(12, [2, 0, 1]), (13, [1, 0]), (14, [0]), (15, [0]),
                                                 (16, [3, 1]), (17, [1, 0, 2]), (18, []), (19, [1])]]  # fmt: skip
    rows = answer([config(), {"op": "arrive", "rid": "r0", "prompt_len": 11}, *fast, step(("r0", 20, [4, 3, 1]))])
    assert all(r["fast"] and r["misses"] == 0 and r["loads"] == [] for r in rows[:-1])
    assert rows[0]["hits"] == 2 and rows[0]["newest_hit"] == 1 and rows[0]["resident"] == 2
    assert rows[0]["lru_hash"] == lru_hash([0, 1])  # the ids below the newest, in slot order
    crossing = rows[-1]
    assert not crossing["fast"] and crossing["c4_len"] == 5
    assert (crossing["hits"], crossing["misses"], crossing["newest_hit"]) == (2, 0, 1)  # 4 is the newest: reserved
    assert crossing["lru_hash"] == lru_hash([0, 2, 1, 3])  # [evictables 0, 2 | hits 1, 3 in old (slot) order]


def test_the_newest_token_is_served_from_the_reserved_slot_and_then_lives_on_the_host():
    """Id 4 is the newest at seq_len 20-23 (never a miss, never in the buffer); from seq_len 24 it is an old id
    only the host holds: selecting it misses, and it takes the least recently used evictable slot."""
    calls = [config(), {"op": "arrive", "rid": "r0", "prompt_len": 19}, step(("r0", 20, [4, 3, 1])),
             step(("r0", 21, [2, 0])), step(("r0", 22, [])), step(("r0", 23, [])), step(("r0", 24, [5, 4, 0, 3])),
             step(("r0", 25, [1, 2, 5]))]  # fmt: skip
    rows = answer(calls)
    assert [r["lru_hash"] for r in rows[:4]] == [lru_hash(o) for o in ([0, 2, 1, 3], [1, 3, 0, 2], [1, 3, 0, 2],
                                                                       [1, 3, 0, 2])]  # fmt: skip
    at24 = rows[4]
    assert (at24["newest_hit"], at24["hits"], at24["misses"]) == (1, 2, 1)
    assert at24["loads"] == [[4, 1]] and at24["evicted"] == [1]  # slot 1 (id 1) was the LRU evictable
    assert at24["lru_hash"] == lru_hash([2, 4, 3, 0])  # [stale 2 | miss 4 | hits 3, 0 in old order]
    at25 = rows[5]
    assert at25["loads"] == [[1, 1]] and at25["evicted"] == [4] and at25["lru_hash"] == lru_hash([3, 0, 1, 2])


def test_misses_take_the_least_recently_used_evictables_in_top_k_order_empty_slots_included():
    """A prompt that does not fit starts with every slot empty (and evictable) in slot order; the i-th miss of
    the row takes the i-th evictable from the LRU end."""
    calls = [config(), {"op": "arrive", "rid": "r1", "prompt_len": 40}, step(("r1", 41, [7, 2, 9, 5])),
             step(("r1", 42, [6, 5, 8, 0]))]  # fmt: skip
    first, second = answer(calls)
    assert first["loads"] == [[7, 0], [2, 1], [5, 2]] and first["evicted"] == [-1, -1, -1]
    assert first["resident"] == 3 and first["lru_hash"] == lru_hash([7, 2, 5])
    assert second["hits"] == 1 and second["loads"] == [[6, 3], [8, 0], [0, 1]] and second["evicted"] == [-1, 7, 2]
    assert second["resident"] == 4 and second["lru_hash"] == lru_hash([6, 8, 0, 5])


def test_the_eager_backup_copies_the_previous_newest_token_but_not_on_the_first_step():
    calls = [config(), {"op": "arrive", "rid": "r1", "prompt_len": 40}]
    calls += [step(("r1", n, [])) for n in range(41, 51)]
    backups = [r["backup"] for r in answer(calls)]
    # seq_len 41 is aligned ((41 - 1) % 4 == 0) but is the first step after admission: skipped.
    assert backups == [None, None, None, None, 10, None, None, None, 11, None]


def test_finish_resets_the_request_so_it_can_arrive_again_as_new():
    once = [{"op": "arrive", "rid": "r1", "prompt_len": 40}, step(("r1", 41, [7, 2, 9, 5])),
            step(("r1", 42, [6, 5, 8, 0]))]  # fmt: skip
    rows = answer([config(), *once, {"op": "finish", "rid": "r1"}, *once])
    assert [{k: v for k, v in r.items() if k != "step"} for r in rows[:2]] == \
           [{k: v for k, v in r.items() if k != "step"} for r in rows[2:]]  # fmt: skip
    assert [r["step"] for r in rows] == [0, 1, 2, 3]


def test_a_step_answers_layer_by_layer_each_over_the_batch_and_each_layer_keeps_its_own_buffers():
    """SGLang's forward runs its layers in turn, and each C4 layer's indexer makes one swap-in call over the
    whole batch (``models/deepseek_v4.py:4063``, ``layers/attention/dsv4/indexer.py:1132``): per step the
    answers come layer first, then request in batch order. Each (request, layer) has its own slots and LRU
    order (``hisparse_coordinator.py:1509-1519``); the eager backup covers all layers, so every layer's line
    carries it."""
    calls = [config(layers=2), {"op": "arrive", "rid": "a", "prompt_len": 40},
             {"op": "arrive", "rid": "b", "prompt_len": 40},
             {"op": "step", "reqs": [{"rid": "b", "seq_len": 41, "topk": [[1], [2, 3]]},
                                     {"rid": "a", "seq_len": 41, "topk": [[0], [5, 6]]}]},
             {"op": "step", "reqs": [{"rid": "b", "seq_len": 42, "topk": [[1, 4], [2]]},
                                     {"rid": "a", "seq_len": 42, "topk": [[0], [7]]}]}]  # fmt: skip
    rows = answer(calls)
    assert [(r["step"], r["layer"], r["rid"]) for r in rows] == [
        (0, 0, "b"), (0, 0, "a"), (0, 1, "b"), (0, 1, "a"), (1, 0, "b"), (1, 0, "a"), (1, 1, "b"), (1, 1, "a")]
    at = {(r["step"], r["rid"], r["layer"]): r for r in rows}
    assert at[0, "b", 0]["loads"] == [[1, 0]] and at[0, "b", 1]["loads"] == [[2, 0], [3, 1]]
    assert at[0, "a", 0]["loads"] == [[0, 0]] and at[0, "a", 1]["loads"] == [[5, 0], [6, 1]]
    # step 1: b's layer 0 hits 1 and loads 4 into its LRU empty slot 1; its layer 1, which never saw 1 or 4,
    # hits 2; a's layer 1 loads 7 into its own first empty slot, not b's.
    assert (at[1, "b", 0]["hits"], at[1, "b", 0]["loads"]) == (1, [[4, 1]])
    assert (at[1, "b", 1]["hits"], at[1, "b", 1]["misses"]) == (1, 0)
    assert (at[1, "a", 0]["hits"], at[1, "a", 0]["misses"]) == (1, 0) and at[1, "a", 1]["loads"] == [[7, 2]]
    assert at[1, "b", 0]["lru_hash"] == lru_hash([4, 1]) and at[1, "b", 1]["lru_hash"] == lru_hash([3, 2])
    assert len({r["backup"] for r in rows if r["step"] == 1}) == 1


# --- bad calls ---------------------------------------------------------------------------------------


BAD = [
    ([config(), step(("r0", 41, [1]))], 2, "reqs[0].rid: no request 'r0'"),
    ([config(k=2), {"op": "arrive", "rid": "r0", "prompt_len": 40}, step(("r0", 41, [1, 2, 3]))], 3,
     "reqs[0].topk: 3 ids, longer than top_k 2"),
    ([config(), {"op": "arrive", "rid": "r0", "prompt_len": 40}, step(("r0", 41, [1, 10]))], 3,
     "reqs[0].topk[1]: id 10 is outside the compressed length 10"),
    ([config(), {"op": "arrive", "rid": "r0", "prompt_len": 40}, step(("r0", 41, [3, 1, 3]))], 3,
     "reqs[0].topk: id 3 appears twice"),
    ([config(h=2, k=4)], 1, "device_buffer_size: 2 is smaller than top_k 4"),
    ([config(), {"op": "arrive", "rid": "r0", "prompt_len": 40}, step(("r0", 43, [1]))], 3,
     "reqs[0].seq_len: expected 41"),
    ([{"op": "arrive", "rid": "r0", "prompt_len": 40}], 1, "op: a HiSparse stream starts with a config call"),
    ([config(layers=2), {"op": "arrive", "rid": "r0", "prompt_len": 40}, step(("r0", 41, [[1], [2], [3]]))], 3,
     "reqs[0].topk: 3 rows for 2 layer(s)"),
    ([config(), {"op": "arrive", "rid": "r0", "prompt_len": 40, "priority": 1}], 2, "priority: not a field of arrive"),
]  # fmt: skip


@pytest.mark.parametrize("calls, line, message", BAD, ids=[b[2].split(":")[0] for b in BAD])
def test_a_bad_call_is_one_line_naming_its_line_and_field_and_exit_2(calls, line, message, tmp_path, capsys):
    path = tmp_path / "calls.jsonl"
    path.write_text("".join(json.dumps(c) + "\n" for c in calls))
    assert main(["hisparse", str(path)]) == 2
    out = capsys.readouterr()
    assert out.out == ""  # nothing answered before the refusal
    lines = out.err.strip().splitlines()
    assert len(lines) == 1 and f"{path}:{line}: {message}" in lines[0], lines

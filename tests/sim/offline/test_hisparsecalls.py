"""``hicache-sim hisparse`` answers SGLang 0.5.23's HiSparse decisions: every recorded stream
(``shared/vectors/hisparse``, copied gzipped into tests/data) on every field, small hand-built streams that state
the coordinator's and the kernel's rules one by one, and bad calls refused in one line with exit 2."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import pytest

from sim.app.cli import main
from sim.base.errors import InputError
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


# --- the DSA family (DeepSeek V3.2, GLM-5.x) ---------------------------------------------------------

SHARED = Path(os.environ.get("HICACHE_SIM_SHARED", Path(__file__).parents[4] / "shared")) / "vectors" / "hisparse"
SHARED_STREAMS = sorted(SHARED.glob("stream_*[0-9].jsonl")) + sorted(SHARED.glob("dsa/stream_*[0-9].jsonl"))
GENERATED = Path(__file__).parents[2] / "data" / "hisparse_dsa"


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared (SGLang's recorded vectors) is not here")
@pytest.mark.parametrize("calls", SHARED_STREAMS, ids=lambda p: p.name)
def test_every_shared_stream_agrees_on_every_field(calls, capsys):
    """Every row of every stream SGLang's coordinator answered, V4 and DSA, on every field (the DSA ones add
    ``kernel_len``, ``buffer_cap`` and, on IndexShare skip layers, ``replay_of`` and ``copied``)."""
    answers = calls.with_name(calls.name.replace(".jsonl", ".answer.jsonl"))
    assert main(["hisparse", str(calls), "--expect", str(answers), "--quiet"]) == 0
    err = capsys.readouterr().err
    rows = read_answers(answers)
    n = len(rows)
    assert f"{n}/{n} rows agree ({n} answered, {n} recorded)" in err
    for key in {k for r in rows for k in r}:
        have = sum(key in r for r in rows)
        assert f"{key} {have}/{have}" in err


@pytest.mark.skipif(not SHARED.is_dir(), reason="../shared is not here")
def test_the_shared_dsa_vectors_are_all_here():
    assert len(list(SHARED.glob("dsa/stream_*[0-9].jsonl"))) == 6
    assert sum(len(read_answers(p)) for p in SHARED.glob("dsa/*.answer.jsonl")) == 3108


def test_the_generated_dsa_stream_agrees_with_a_naive_statement_of_sglang_on_every_field(capsys):
    """Our own stream (tests/data/hisparse_dsa, gzipped and read as it is), answered by a second, list-based
    transcription of the coordinator and the kernel (``dsa_oracle.py``): PD direct and colocated staging, above
    and below the buffer, growth page by page, IndexShare skip layers, a finish and re-admissions."""
    from tests.sim.offline import dsa_oracle

    calls = GENERATED / f"{dsa_oracle.NAME}.jsonl.gz"
    answers = GENERATED / f"{dsa_oracle.NAME}.answer.jsonl.gz"
    stream = dsa_oracle.calls()
    assert [json.loads(x) for x in gzip.decompress(calls.read_bytes()).splitlines()] == stream  # the data is fresh
    assert read_answers(answers) == dsa_oracle.answers(stream)
    assert main(["hisparse", str(calls), "--expect", str(answers), "--quiet"]) == 0
    err = capsys.readouterr().err
    n = len(read_answers(answers))
    assert f"{n}/{n} rows agree" in err and "replay_of" in err and "buffer_cap" in err


def dsa(h: int = 8, k: int = 4, layers: int = 1, page: int = 4, **extra) -> dict:
    return {"op": "config", "family": "dsa", "device_buffer_size": h, "top_k": k, "layers": layers,
            "page_size": page, **extra}


def test_dsa_takes_the_fast_path_on_the_raw_length_and_backs_up_every_step_but_the_first():
    """DSA's kernel length is ``seq_len`` itself (compress_ratio 1): fast while seq_len <= H (V4 would divide by
    4), and each step backs up the previous newest position ``seq_len - 2`` except the first after admission."""
    rows = answer([dsa(), {"op": "arrive", "rid": "a", "prompt_len": 5},
                   *[step(("a", n, list(range(min(n, 4))))) for n in range(6, 12)]])
    assert [r["fast"] for r in rows] == [True, True, True, False, False, False]
    assert [r["kernel_len"] for r in rows] == list(range(6, 12))
    assert [r["backup"] for r in rows] == [None, 5, 6, 7, 8, 9]


def test_a_dsa_buffer_grows_page_by_page_then_jumps_to_its_size_plus_a_page():
    """``alloc_device_buffer`` takes whole pages of the prompt; ``_grow_device_buffers`` adds pages while seq_len
    <= H and pads to H + page as soon as the page-aligned length reaches H (H 8, page 4: 4, 8 -> 12)."""
    rows = answer([dsa(), {"op": "arrive", "rid": "a", "prompt_len": 2},
                   *[step(("a", n, [0])) for n in range(3, 11)]])
    assert [(r["seq_len"], r["buffer_cap"]) for r in rows] == [(3, 4), (4, 4), (5, 12), (6, 12), (7, 12), (8, 12),
                                                                (9, 12), (10, 12)]  # fmt: skip


def test_colocated_long_prompts_start_with_their_first_buffer_tokens_resident_where_pd_starts_empty():
    calls = [dsa(layers=1), {"op": "arrive", "rid": "pd", "prompt_len": 20},
             {"op": "arrive", "rid": "co", "prompt_len": 20, "admission": "staging"},
             step(("pd", 21, [0, 3, 15, 20]), ("co", 21, [0, 3, 15, 20]))]  # fmt: skip
    pd, co = answer(calls)
    assert (pd["misses"], pd["evicted"], pd["resident"]) == (3, [-1, -1, -1], 3)
    assert (co["hits"], co["misses"], co["loads"], co["evicted"]) == (2, 1, [[15, 1]], [1])  # 0, 3 held; 1 is LRU
    assert co["resident"] == 8 and co["buffer_cap"] == pd["buffer_cap"] == 12


def test_skip_layers_replay_their_anchor_and_never_touch_their_own_state():
    """GLM-5.2-style IndexShare (freq 2, offset 2 over 4 layers: anchors 0, 1, 3; layer 2 reuses 1): a skip
    layer answers its anchor's decisions with ``replay_of`` and ``copied`` (the anchor's misses), its row null or
    the anchor's; a different row is refused, and so is a null row on a layer that computes its own."""
    share = {"index_topk_freq": 2, "index_skip_topk_offset": 2}
    rows = answer([dsa(layers=4, index_share=share), {"op": "arrive", "rid": "a", "prompt_len": 20},
                   step(("a", 21, [[1], [2, 3], None, [4]])), step(("a", 22, [[1], [2, 5], [2, 5], [4]]))])
    at = {(r["step"], r["layer"]): r for r in rows}
    assert at[0, 2]["replay_of"] == 1 and at[0, 2]["copied"] == 2 and at[0, 2]["loads"] == at[0, 1]["loads"]
    assert at[1, 2]["copied"] == 1 and at[1, 2]["lru_hash"] == at[1, 1]["lru_hash"]
    assert "replay_of" not in at[0, 1] and "copied" not in at[0, 3]
    with pytest.raises(InputError, match=r"reqs\[0\].topk\[2\]: layer 2 reuses layer 1's top-k"):
        answer([dsa(layers=4, index_share=share), {"op": "arrive", "rid": "a", "prompt_len": 20},
                step(("a", 21, [[1], [2, 3], [9], [4]]))])
    with pytest.raises(InputError, match=r"reqs\[0\].topk\[3\]: null, but layer 3 computes its own"):
        answer([dsa(layers=4, index_share=share), {"op": "arrive", "rid": "a", "prompt_len": 20},
                step(("a", 21, [[1], [2, 3], None, None]))])


# --- bad input, round four (issue 44, class 3) -------------------------------------------------------


def run_cli(tmp_path: Path, calls: list | str, *extra: str, name: str = "calls.jsonl") -> tuple[int, str, str]:
    path = tmp_path / name
    path.write_text(calls if isinstance(calls, str) else "".join(json.dumps(c) + "\n" for c in calls))
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["hisparse", str(path), *extra])
    return code, out.getvalue(), err.getvalue()


ARRIVED = [config(layers=2), {"op": "arrive", "rid": "r0", "prompt_len": 40}]
BOUNDED = [
    ([*ARRIVED, step(("r0", 41, [1, [2]]))], 3, "reqs[0].topk[1]: [2] in a row of ids"),
    ([*ARRIVED, step(("r0", 41, [[1], 2]))], 3, "reqs[0].topk[1]: 2 in a row of per-layer rows"),
    ([*ARRIVED, step(("r0", 41, [1.5]))], 3, "reqs[0].topk[0]: 1.5 is not a token id"),
    ([*ARRIVED, step(("r0", 41, [True]))], 3, "reqs[0].topk[0]: True is not a token id"),
    ([*ARRIVED, step(("r0", 41, [2**70]))], 3, f"reqs[0].topk[0]: id {2**70} is outside the compressed length"),
    ([{**config(), "layers": 4_000_000}, ARRIVED[1]], 1, "layers: 4000000 is beyond 1024"),
    ([config(h=40_000, k=4)], 1, "device_buffer_size: 40000 is beyond the 32767 slots"),
    ([{**config(h=32_767), "layers": 1024, "max_reqs": 64}], 1, "max_reqs: 64 request(s) x 1024 layers"),
    ([{**config(), "page_size": 4_000_000, "layers": 1024}], 1, "page_size: 1 request(s) x 1024 layers"),
    ([config(), {"op": "arrive", "rid": "r0", "prompt_len": 40, "admission": "colocated"}], 2,
     "admission: expected one of direct, staging"),
    ([{**config(), "index_share": {"index_topk_freq": 2}}], 1, "index_share: IndexShare is a DSA model's"),
    ([dsa(layers=2, index_share={"index_topk_freq": 0})], 1, "index_share.index_topk_freq: expected a positive"),
    ([dsa(layers=2, index_share={"index_topk_pattern": "SD"})], 1, "index_share: layer 0 reuses the top-k of a"),
    ([dsa(layers=2, index_share={"freq": 2})], 1, "index_share.freq: not an IndexShare field"),
]  # fmt: skip


@pytest.mark.parametrize("calls, line, message", BOUNDED, ids=[b[2][:40] for b in BOUNDED])
def test_ragged_rows_and_configs_beyond_a_real_server_are_one_line_before_any_work(calls, line, message, tmp_path):
    """A ragged row is one line naming its field, not a numpy traceback; a config beyond what a GPU holds (an
    int16 LRU order, 13x the layers of any HiSparse model, the KV items one GPU's HBM backs) is refused before a
    buffer is allocated: ``layers: 4000000`` costs no memory."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    code, out, err = run_cli(tmp_path, calls)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and f"calls.jsonl:{line}: {message}" in lines[0], lines
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50_000  # KB


def test_arrivals_beyond_what_one_gpu_holds_are_refused_at_the_arrival(tmp_path):
    many = [{**config(h=32_767), "layers": 1024}] + [{"op": "arrive", "rid": f"r{i}", "prompt_len": 40}
                                                     for i in range(20)]  # fmt: skip
    code, _, err = run_cli(tmp_path, many)
    assert code == 2 and "calls.jsonl:16: prompt_len: with the 14 request(s) decoding" in err


def test_an_empty_stream_is_refused_as_tree_refuses_one(tmp_path):
    for text in ("", "\n\n"):
        code, out, err = run_cli(tmp_path, text)
        assert (code, out) == (2, "") and err.strip().endswith("calls.jsonl: holds no calls")


def test_an_answers_file_of_empty_rows_does_not_agree(tmp_path, capsys):
    calls, _ = unpacked(STREAMS[2], tmp_path)
    rows = read_answers(calls.with_name(calls.name.replace(".jsonl", ".answer.jsonl")))
    empty = tmp_path / "empty.answer.jsonl"
    empty.write_text("{}\n" * len(rows))
    assert main(["hisparse", str(calls), "--expect", str(empty), "--quiet"]) == 1
    err = capsys.readouterr().err
    assert f"0/{len(rows)} rows agree" in err and f"misses 0/{len(rows)}" in err


def test_gzipped_vectors_are_read_as_they_are(capsys):
    """``--help`` points at tests/data/sglang_vectors/hisparse, whose streams are gzipped."""
    name = STREAMS[2]
    calls, answers = VECTORS / f"{name}.jsonl.gz", VECTORS / f"{name}.answer.jsonl.gz"
    assert main(["hisparse", str(calls), "--expect", str(answers), "--quiet"]) == 0
    assert "rows agree" in capsys.readouterr().err


@pytest.mark.parametrize("errno_name", ["ENOSPC", "EFBIG"])
def test_a_stdout_that_refuses_the_answers_is_one_line_that_says_what_was_printed_is_incomplete(
        errno_name, tmp_path, monkeypatch, capsys):  # fmt: skip
    """A full disk or a ``ulimit -f`` under stdout: one line and exit 2, never "nothing half-written was kept"
    beside the part already written, and no traceback at the interpreter's exit."""
    import errno
    import os
    import sys

    calls, _ = unpacked(STREAMS[2], tmp_path)
    target = tmp_path / "out.jsonl"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT)
    saved = os.dup(1)

    class Refusing:
        written = 0

        def write(self, text):
            self.written += len(text)
            if self.written > 2000:
                raise OSError(getattr(errno, errno_name), os.strerror(getattr(errno, errno_name)))
            return len(text)

        def flush(self):
            pass

        def fileno(self):
            return fd

    monkeypatch.setattr(sys, "stdout", Refusing())
    try:
        code = main(["hisparse", str(calls)])
    finally:
        os.dup2(saved, 1)
        os.close(saved)
        os.close(fd)
    err = capsys.readouterr().err
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "standard output:" in err and "incomplete" in err and "nothing half-written" not in err


@pytest.mark.parametrize("redirect", ["full", "ulimit"], ids=["ENOSPC", "EFBIG"])
def test_a_real_full_disk_or_file_size_limit_under_stdout_is_one_line(redirect, tmp_path):
    """The same, end to end in a process of its own: ``/dev/full`` refuses every write with ENOSPC; ``ulimit -f 1``
    lets 1 KiB through, then EFBIG (Python ignores SIGXFSZ)."""
    import subprocess
    import sys

    calls, _ = unpacked(STREAMS[2], tmp_path)
    root = Path(__file__).parents[3]
    cmd = f"{sys.executable} -m sim.app.cli hisparse {calls}"
    script = f"{cmd} > /dev/full" if "full" in redirect else f"ulimit -f 1; {cmd} > out.jsonl"
    done = subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(root)})
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "standard output:" in lines[0] and "incomplete" in lines[0]

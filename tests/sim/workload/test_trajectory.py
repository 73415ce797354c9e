"""Agentic trace readers: Weka/AgentX trajectories and Qwen-Bailian records, blocks paged as SGLang sees them."""

import json
from pathlib import Path

import pytest

from sim.base.errors import InputError
from sim.workload.traces import detect_format, read_trace
from sim.workload.trajectory import (
    PageBudget,
    PageInterner,
    Subagent,
    WekaCorpus,
    read_bailian,
    read_weka,
    weka_trajectory,
)

DATA = Path(__file__).resolve().parents[3] / "data" / "agentic"


def call(t, n_in, ids, out=8, api=1.0, kind="n"):
    return {"t": t, "type": kind, "model": "m", "in": n_in, "out": out, "hash_ids": ids, "api_time": api}


def write_weka(path, *trajs):
    path.write_text("".join(json.dumps(t) + "\n" for t in trajs))
    return path


def traj(requests, tid="a", block=64):
    return {"id": tid, "models": ["m"], "block_size": block, "hash_id_scope": "local", "requests": requests}


class TestBlocksOntoPages:
    def test_a_page_of_64_token_blocks_hits_only_if_all_four_blocks_do(self):
        pi = PageInterner()
        a = pi.pages(list(range(12)), 64, 256, 768)
        b = pi.pages([0, 1, 2, 3, 4, 99, 6, 7, 8, 9, 10, 11], 64, 256, 768)  # block 5 differs: page 1
        assert a[0] == b[0] and a[1] != b[1]
        assert a[2] != b[2]  # page 2's blocks are equal, but its prefix is not: keys name the prefix

    def test_sixteen_token_blocks_page_by_sixteen(self):
        pi = PageInterner()
        a = pi.pages(list(range(32)), 16, 256, 512)
        b = pi.pages(list(range(15)) + [77] + list(range(16, 32)), 16, 256, 512)
        assert len(a) == 2 and a[0] != b[0] and a[1] != b[1]
        assert pi.pages(list(range(32)), 16, 256, 512) == a

    def test_a_partial_last_page_is_not_a_page(self):
        assert len(PageInterner().pages(list(range(7)), 64, 256, 400)) == 1

    def test_tokens_the_ids_do_not_cover_get_keys_nothing_shares(self):
        pi = PageInterner()
        a, b = pi.pages([1, 2, 3, 4], 64, 256, 1024), pi.pages([1, 2, 3, 4], 64, 256, 1024)
        assert a[0] == b[0] and len(a) == 4 and not set(a[1:]) & set(b[1:])

    def test_blocks_larger_than_pages_split_into_pages(self):
        pi = PageInterner()
        assert len(set(pi.pages([5, 6], 512, 256, 1024))) == 4


class TestWeka:
    def test_calls_and_subagent_groups_keep_their_recorded_order(self, tmp_path):
        path = write_weka(tmp_path / "w.jsonl", traj([
            call(0, 256, [1, 2, 3, 4]),
            {"t": 2.0, "type": "subagent", "agent_id": "x", "duration_ms": 3000,
             "requests": [call(0.5, 256, [9, 8, 7, 6])]},  # inner t before the spawn: relative to it
            call(6.0, 512, [1, 2, 3, 4, 5, 6, 7, 8]),
        ]))  # fmt: skip
        (tr,) = read_weka(path, page_size=256)
        group = tr.steps[1]
        assert isinstance(group, Subagent) and group.calls[0].t == 2.5 and group.end_t == 5.0
        assert tr.steps[2].joins == [1] and tr.steps[0].pages == tr.steps[2].pages[:1]

    def test_a_group_that_ends_after_the_next_call_runs_in_the_background(self, tmp_path):
        path = write_weka(tmp_path / "w.jsonl", traj([
            call(0, 256, [1]), {"t": 1.0, "type": "subagent", "duration_ms": 60_000, "requests": [call(1.0, 256, [5])]},
            call(5.0, 256, [1]), call(70.0, 256, [1]),
        ]))  # fmt: skip
        (tr,) = read_weka(path, page_size=256)
        assert tr.steps[2].joins == [] and tr.steps[3].joins == [1]

    def test_a_folder_of_json_files_is_one_trajectory_each(self, tmp_path):
        for i in range(3):
            (tmp_path / f"{i}.json").write_text(json.dumps(traj([call(0, 256, [1])], tid=str(i))))
        assert [t.id for t in read_weka(tmp_path, page_size=256)] == ["0", "1", "2"]
        assert detect_format(tmp_path) == "weka"

    def test_trace_replay_namespaces_hash_ids_per_trajectory(self, tmp_path):
        path = write_weka(tmp_path / "w.jsonl", traj([call(0, 512, [1, 2, 3, 4, 5, 6, 7, 8])], "a"),
                          traj([call(0, 512, [1, 2, 3, 4, 5, 6, 7, 8])], "b"))  # fmt: skip
        a, b = read_trace(path, fmt="weka", page_size=256)
        assert a.arrival_s == b.arrival_s == 0 and not set(a.keys) & set(b.keys)

    @pytest.mark.parametrize("bad, message", [
        ({"requests": [call(0, 256, [1])]}, "1: id: missing"),
        (traj([call(0, 256, [1]), {"t": 1, "type": "n", "model": "m", "out": 3}]), "1: requests[1].in: missing"),
        (traj([call(0, 0, [])]), "1: requests[0].in: must be >= 1, got 0"),
        (traj([call(0, 64, [1, 2])]), "1: requests[0].hash_ids: 2 block ids for 64 tokens"),
        (traj([call(5, 64, [1]), call(1, 64, [1])]), "1: requests[1].t: 1 s is before"),
        (traj([call(0, 64, [1]), {"t": 1, "type": "subagent", "requests": []}]), "requests[1].requests: a subagent"),
        (traj([call(0, 64, [1])], block=0), "1: block_size: must be > 0"),
        ({**traj([call(0, 64, [1])]), "hash_id_scope": "global"}, "hash_id_scope: only 'local'"),
    ])  # fmt: skip
    def test_a_bad_trajectory_is_one_line_naming_file_line_and_field(self, tmp_path, bad, message):
        path = write_weka(tmp_path / "w.jsonl", bad)
        with pytest.raises(InputError) as exc:
            read_weka(path, page_size=256)
        assert str(exc.value).startswith(f"{path}:") and message in str(exc.value)
        assert "\n" not in str(exc.value)

    def test_a_malformed_line_is_named(self, tmp_path):
        path = tmp_path / "w.jsonl"
        path.write_text(json.dumps(traj([call(0, 64, [1])])) + "\n{not json\n")
        with pytest.raises(InputError, match=r"w.jsonl:2: malformed JSON"):
            read_weka(path, page_size=256)

    def test_the_bundled_file_reads(self):
        trajs = read_weka(DATA / "weka_synthetic.jsonl", page_size=256)
        assert len(trajs) == 24 and any(isinstance(s, Subagent) for t in trajs for s in t.steps)


class TestWekaCorpus:
    """A lane replay's corpus: read through once, then each trajectory read again when a lane draws it."""

    def trajs(self):
        return [traj([call(0, 256 * (i + 1), list(range(4 * (i + 1)))),
                      {"t": 2.0, "type": "subagent", "duration_ms": 1000, "requests": [call(2.0, 256, [9, 8, 7, 6])]},
                      call(9.0, 512, list(range(8)))], tid=str(i)) for i in range(3)]  # fmt: skip

    def test_a_trajectory_read_again_equals_the_one_read_through(self, tmp_path):
        path = tmp_path / "w.jsonl"
        path.write_text("\n\n".join(json.dumps(t) for t in self.trajs()) + "\n")  # blank lines between records
        corpus = WekaCorpus(path, page_size=256)
        first = list(corpus)
        assert len(corpus) == 3 and [corpus[k] for k in (2, 0, 1)] == [first[2], first[0], first[1]]
        assert list(corpus) == first == read_weka(path, page_size=256)

    def test_a_folder_is_read_again_file_by_file(self, tmp_path):
        for i, t in enumerate(self.trajs()):
            (tmp_path / f"{i}.json").write_text(json.dumps(t))
        corpus = WekaCorpus(tmp_path, page_size=256, max_trajectories=2)
        first = list(corpus)
        assert len(corpus) == 2 and corpus[1] == first[1] and corpus[1] is not first[1]

    def test_it_has_no_size_before_it_is_read_through(self, tmp_path):
        corpus = WekaCorpus(write_weka(tmp_path / "w.jsonl", *self.trajs()), page_size=256)
        with pytest.raises(TypeError, match="read through"):
            len(corpus)

    def test_a_file_changed_after_the_read_through_is_refused_not_mixed_in(self, tmp_path):
        path = write_weka(tmp_path / "w.jsonl", *self.trajs())
        corpus = WekaCorpus(path, page_size=256)
        list(corpus)
        write_weka(path, *self.trajs()[1:])
        with pytest.raises(InputError, match=rf"^{path}: changed during the run"):
            corpus[0]


class TestBailian:
    def rec(self, chat, parent, ts, n_in, ids, turn=1):
        return {"chat_id": chat, "parent_chat_id": parent, "timestamp": ts, "input_length": n_in,
                "output_length": 4, "type": "text", "turn": turn, "hash_ids": ids}  # fmt: skip

    def test_chains_share_their_sixteen_token_blocks(self, tmp_path):
        path = tmp_path / "b.jsonl"
        path.write_text("\n".join(json.dumps(r) for r in [
            self.rec(0, -1, 0.0, 512, list(range(32))),
            self.rec(1, 0, 3.5, 600, list(range(32)) + [40, 41, 42, 43, 44, 45], turn=2),
        ]))  # fmt: skip
        a, b = read_bailian(path, page_size=256)
        assert b.keys[:2] == a.keys and b.arrival_s == 3.5 and a.session == b.session == 0 and b.round == 2
        assert detect_format(path) == "bailian"

    @pytest.mark.parametrize("field, value, message", [
        ("parent_chat_id", 7, "parent_chat_id: 7 names no earlier request"),
        ("input_length", -1, "input_length: must be >= 1, got -1"),
        ("turn", -2, "turn: must be >= 0, got -2"),
        ("hash_ids", "x", "hash_ids: unexpected value"),
        ("timestamp", None, "timestamp: unexpected value None"),
    ])  # fmt: skip
    def test_a_bad_record_is_named_by_file_line_and_field(self, tmp_path, field, value, message):
        good = self.rec(0, -1, 0.0, 32, [1, 2])
        bad = {**self.rec(1, 0, 1.0, 32, [1, 2]), field: value}
        path = tmp_path / "b.jsonl"
        path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
        with pytest.raises(InputError, match=f"b.jsonl:2: {message}"):
            read_bailian(path, page_size=256)

    def test_a_missing_field_is_named(self, tmp_path):
        rec = self.rec(0, -1, 0.0, 32, [1, 2])
        del rec["turn"]
        path = tmp_path / "b.jsonl"
        path.write_text(json.dumps(rec) + "\n")
        with pytest.raises(InputError, match=r"b.jsonl:1: turn: missing"):
            read_bailian(path, page_size=256)

    def test_a_block_size_the_page_size_does_not_divide_names_the_file_and_fields_before_any_record(self, tmp_path):
        path = tmp_path / "b.jsonl"
        path.write_text("not json\n")  # never read: the sizes are refused first
        with pytest.raises(InputError, match=r"b.jsonl: workload.block_size 48 and hicache.page_size 64: one must "
                                             r"divide the other"):  # fmt: skip
            read_bailian(path, page_size=64, block_size=48)


def test_a_timed_bailian_run_hits_what_replay_hits_on_the_same_requests(tmp_path, capsys):
    """The bundled Bailian calls, one at a time (timestamps 1,000 s apart, so no two overlap: fan-out calls
    that arrive together would each compute the prefix the other is still computing), through the timed
    engine and through ``hicache-sim replay`` at the same L1 and L2: the same device and host hit tokens."""
    from sim.app.cli import main
    from sim.app.run import run_scenario
    from sim.scenario.load import scenario_from_dict

    serial = tmp_path / "serial.jsonl"
    rows = [json.loads(line) for line in (DATA / "bailian_synthetic.jsonl").read_text().splitlines()]
    serial.write_text("".join(json.dumps({**r, "timestamp": 1000.0 * i}) + "\n" for i, r in enumerate(rows)))
    sc = scenario_from_dict({
        "name": "bailian", "seed": 1, "model": "deepseek-v4-flash", "hardware": {"kv_mem_gb": 1.0},
        "hicache": {"enabled": True, "hicache_ratio": 4.0},
        "workload": {"kind": "trace", "format": "bailian", "path": str(serial)},
    }, source="test")  # fmt: skip
    timed = run_scenario(sc).summary
    l1, l2 = timed["capacity_pages"]["l1"], timed["capacity_pages"]["l2"]
    out = tmp_path / "replay.json"
    assert main(["replay", str(serial), "--model", "deepseek-v4-flash", "--l1-pages", str(l1), "--l2-pages", str(l2),
                 "--json", str(out)]) == 0  # fmt: skip
    capsys.readouterr()
    replayed = json.loads(out.read_text())
    assert timed["tokens"]["host_hit_tokens"] > 0  # L2 plays a part
    assert replayed["metrics"]["cached_tokens_total"] == {
        "device": timed["tokens"]["device_hit_tokens"], "host": timed["tokens"]["host_hit_tokens"]}
    assert replayed["l1l2_hit_tokens"] == pytest.approx(timed["hit_rate"]["total"])


def test_trajectories_a_replay_holds_are_refused_at_the_call_that_passes_their_page_bound():
    """A lane replay holds every trajectory's keys for the whole run: a file whose ids expand past the bound
    (one call may be 4M tokens at one-token pages) is one line naming the line and call, not the memory."""
    rec = {"id": "a", "block_size": 64, "requests": [{"t": i, "type": "n", "in": 640, "out": 1} for i in range(3)]}
    budget = PageBudget(limit=50)
    weka_trajectory(rec, 64, "t.jsonl", 1, budget)  # 3 calls of 10 pages
    assert budget.used == 30  # shared by the trajectories of one replay: the next passes 50 at its third call
    with pytest.raises(InputError, match=r"^t.jsonl:2: requests\[2\]: the trajectories so far pass 50 page keys"):
        weka_trajectory(rec, 64, "t.jsonl", 2, budget)

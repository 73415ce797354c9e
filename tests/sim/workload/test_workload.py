"""Request sources: trace readers (Mooncake, token ids) and seeded synthetic workloads."""

import json
from pathlib import Path

import numpy as np
import pytest

from sim.base.errors import InputError
from sim.workload.synthetic import arrival_times, multi_turn_sessions, shared_prefix
from sim.workload.traces import detect_format, read_mooncake, read_token_trace, read_trace, token_page_keys

SHAREGPT = Path("/work/shared/traces/llmservingsim_sharegpt-llama-3.1-8b-300-sps10.jsonl")


def write_lines(path: Path, records) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records))
    return path


def mc(ts=0, n_in=1000, n_out=10, ids=(7, 8)):
    return {"timestamp": ts, "input_length": n_in, "output_length": n_out, "hash_ids": list(ids)}


class TestMooncake:
    def test_block_512_becomes_two_256_token_pages_per_hash_whole_pages_only(self, tmp_path):
        path = write_lines(tmp_path / "t.jsonl", [mc(n_in=1000, ids=(7, 8))])
        (req,) = read_mooncake(path, block_size=512, page_size=256)
        # 1000 tokens = 3 whole 256-token pages; the 232-token tail is never a page.
        assert req.keys == [(7, 0), (7, 1), (8, 0)]
        assert (req.input_len, req.output_len) == (1000, 10)

    def test_page_equal_to_block_uses_the_hash_ids_themselves(self, tmp_path):
        path = write_lines(tmp_path / "t.jsonl", [mc(n_in=1100, ids=(7, 8, 9))])
        (req,) = read_mooncake(path)
        assert req.keys == [7, 8]

    def test_a_page_of_several_blocks_keys_on_the_tuple_of_their_hashes(self, tmp_path):
        path = write_lines(tmp_path / "t.jsonl", [mc(n_in=2100, ids=(1, 2, 3, 4, 5))])
        (req,) = read_mooncake(path, block_size=512, page_size=1024)
        assert req.keys == [(1, 2), (3, 4)]

    def test_page_and_block_sizes_must_divide_one_another(self, tmp_path):
        path = write_lines(tmp_path / "t.jsonl", [mc()])
        with pytest.raises(InputError, match="one must divide the other"):
            read_mooncake(path, block_size=512, page_size=384)

    def test_timestamps_are_milliseconds_scaled_by_time_scale(self, tmp_path):
        path = write_lines(tmp_path / "t.jsonl", [mc(ts=0), mc(ts=1500)])
        reqs = read_mooncake(path, time_scale=2.0)
        assert [r.arrival_s for r in reqs] == [0.0, 3.0]
        assert [r.rid for r in reqs] == [0, 1]

    def test_max_requests_stops_early_and_blank_lines_are_skipped(self, tmp_path):
        path = write_lines(tmp_path / "t.jsonl", [mc(), "", mc(ts=1), mc(ts=2)])
        assert len(read_mooncake(path, max_requests=2)) == 2

    def test_the_bundled_conversation_trace_reads_whole(self):
        reqs = read_mooncake(Path(__file__).parents[3] / "data" / "mooncake_conversation_trace.jsonl")
        assert len(reqs) == 12_031
        assert all(len(r.keys) == r.input_len // 512 for r in reqs[:500])


class TestTokenTrace:
    def test_token_ids_become_chained_whole_page_keys_with_ns_arrivals(self, tmp_path):
        recs = [
            {"input_tok_ids": list(range(10)), "output_toks": 3, "arrival_time_ns": 5_000_000_000},
            {"input_ids": [1, 2, 3, 4], "output_length": 1, "timestamp": 6000},
        ]
        path = write_lines(tmp_path / "t.jsonl", recs)
        a, b = read_token_trace(path, page_size=4)
        assert a.keys == token_page_keys(list(range(8)), 4) and len(a.keys) == 2
        assert (a.input_len, a.output_len, a.arrival_s) == (10, 3, 5.0)
        assert b.keys == token_page_keys([1, 2, 3, 4], 4) and b.arrival_s == 6.0
        assert a.final_keys is None

    def test_output_token_ids_are_cached_with_the_input(self, tmp_path):
        rec = {"input_tok_ids": [1, 2, 3], "output_tok_ids": [4, 5], "arrival_time_ns": 0}
        (req,) = read_token_trace(write_lines(tmp_path / "t.jsonl", [rec]), page_size=2)
        assert req.output_len == 2
        assert len(req.keys) == 1 and req.final_keys[:1] == req.keys and len(req.final_keys) == 2

    def test_a_page_key_names_its_whole_prefix(self):
        """The same page after different prefixes gets different keys (content addressing for L3)."""
        a, b = token_page_keys([1, 2, 9, 9], 2), token_page_keys([3, 4, 9, 9], 2)
        assert a[1] != b[1]
        assert token_page_keys([9, 8, 7], 1) == token_page_keys([9, 8, 7, 6], 1)[:3]

    @pytest.mark.skipif(not SHAREGPT.exists(), reason="shared ShareGPT token trace not present")
    def test_the_sharegpt_token_trace_reads_in_arrival_order(self):
        assert detect_format(SHAREGPT) == "tokens"
        reqs = read_trace(SHAREGPT, page_size=16)
        assert len(reqs) == sum(1 for line in SHAREGPT.open() if line.strip())
        assert all(a.arrival_s <= b.arrival_s for a, b in zip(reqs, reqs[1:]))
        assert all(len(r.keys) == r.input_len // 16 and r.input_len > 0 for r in reqs)


class TestDetectFormat:
    def test_hash_ids_mean_mooncake_and_anything_else_tokens(self, tmp_path):
        assert detect_format(write_lines(tmp_path / "m.jsonl", [mc()])) == "mooncake"
        tok = {"input_tok_ids": [1], "output_toks": 1, "arrival_time_ns": 0}
        assert detect_format(write_lines(tmp_path / "t.jsonl", [tok])) == "tokens"

    def test_read_trace_rejects_an_unknown_format(self, tmp_path):
        with pytest.raises(InputError, match="unknown trace format 'csv'"):
            read_trace(write_lines(tmp_path / "m.jsonl", [mc()]), fmt="csv")


class TestMalformedTraces:
    """Every problem is an InputError whose message starts with ``FILE:LINE:``."""

    @pytest.mark.parametrize(
        ("bad", "message"),
        [
            ("{not json", "malformed JSON"),
            ("[1, 2]", "expected a JSON object"),
            ({"timestamp": 0, "input_length": 10, "output_length": 1}, "missing field 'hash_ids'"),
            ({**mc(), "input_length": "ten"}, "input_length: unexpected value 'ten'"),
            ({**mc(), "input_length": 10.5}, "input_length: unexpected value 10.5"),
            ({**mc(), "output_length": True}, "output_length: unexpected value True"),
            ({**mc(), "hash_ids": "7,8"}, "hash_ids: unexpected value"),
            (mc(n_in=1025, ids=(1, 2)), "need 3 ids for 1025 tokens"),
            (mc(ids=(1, "x")), "hash_ids: every id must be an integer, got 'x'"),
            (mc(ids=(1, True)), "hash_ids: every id must be an integer, got True"),
            (mc(n_in=0), "input_length > 0"),
            (mc(ts=-1), "must be >= 0"),
            (mc(n_out=-1), "must be >= 0"),
            ('{"timestamp": NaN, "input_length": 1000, "output_length": 1, "hash_ids": [1, 2]}', "NaN is not"),
            ('{"timestamp": Infinity, "input_length": 1000, "output_length": 1, "hash_ids": [1, 2]}',
             "Infinity is not"),
            ('{"timestamp": 1e999, "input_length": 1000, "output_length": 1, "hash_ids": [1, 2]}', "finite"),
            ({**mc(), "timestamp": 10**30}, "timestamp: ~1e30 is out of range"),
            (mc(n_out=10**12), "over the limit of 4,194,304 per request"),
        ],
    )
    def test_a_bad_mooncake_line_is_named_by_file_and_line(self, tmp_path, bad, message):
        path = write_lines(tmp_path / "t.jsonl", [mc(), mc(ts=1), bad])
        with pytest.raises(InputError, match=message) as info:
            read_mooncake(path)
        assert str(info.value).startswith(f"{path}:3: ")

    @pytest.mark.parametrize(
        ("bad", "message"),
        [
            ({"input_tok_ids": [], "output_toks": 1, "arrival_time_ns": 0}, "non-empty list of integer"),
            (
                {"input_tok_ids": [1, "a"], "output_toks": 1, "arrival_time_ns": 0},
                "non-empty list of integer",
            ),
            ({"input_tok_ids": [1], "arrival_time_ns": 0}, "missing field 'output_length'"),
            ({"input_tok_ids": [1], "output_toks": 1}, "missing field 'timestamp'"),
            ({"output_toks": 1, "arrival_time_ns": 0}, "missing field 'input_ids'"),
            ({"input_tok_ids": [1], "output_toks": -1, "arrival_time_ns": 0}, "must be >= 0"),
            ({"input_tok_ids": [1], "output_toks": 1, "arrival_time_ns": -5}, "must be >= 0"),
            ({"input_tok_ids": [1], "output_tok_ids": [1, "x"], "arrival_time_ns": 0}, "output_tok_ids"),
            ('{"input_tok_ids": [1], "output_toks": 1, "timestamp": NaN}', "NaN is not"),
        ],
    )
    def test_a_bad_token_line_is_named_by_file_and_line(self, tmp_path, bad, message):
        good = {"input_tok_ids": [1, 2], "output_toks": 1, "arrival_time_ns": 0}
        path = write_lines(tmp_path / "t.jsonl", [good, bad])
        with pytest.raises(InputError, match=message) as info:
            read_token_trace(path, page_size=1)
        assert str(info.value).startswith(f"{path}:2: ")

    def test_timestamps_going_backwards_are_an_input_error_naming_the_file(self, tmp_path):
        path = write_lines(tmp_path / "t.jsonl", [mc(ts=5), mc(ts=4)])
        with pytest.raises(InputError, match="timestamps go backwards") as info:
            read_mooncake(path)
        assert str(info.value).startswith(str(path))

    def test_timestamps_going_backwards_name_the_line(self, tmp_path):
        path = write_lines(tmp_path / "t.jsonl", [mc(ts=5), "", mc(ts=4)])
        with pytest.raises(InputError) as info:
            read_mooncake(path)
        assert str(info.value).startswith(f"{path}:3: ")

    @pytest.mark.parametrize("text", ["", "\n\n  \n"])
    def test_an_empty_file_holds_no_requests(self, tmp_path, text):
        path = tmp_path / "empty.jsonl"
        path.write_text(text)
        for read in (read_mooncake, lambda p: read_token_trace(p, page_size=1), detect_format):
            with pytest.raises(InputError, match=f"^{path}: the trace holds no requests"):
                read(path)

    def test_a_binary_file_is_an_input_error_naming_the_line(self, tmp_path):
        path = tmp_path / "t.jsonl"
        path.write_bytes(json.dumps(mc()).encode() + b"\n\xff\xfe\x00\x80\n")
        with pytest.raises(InputError, match="not a UTF-8 text file") as info:
            read_trace(path)
        assert str(info.value).startswith(f"{path}:2: ")

    def test_a_missing_file_is_an_input_error_not_an_oserror(self, tmp_path):
        with pytest.raises(InputError, match="cannot read trace"):
            read_mooncake(tmp_path / "absent.jsonl")


class TestMultiTurnSessions:
    def test_each_round_extends_the_previous_rounds_history(self):
        (rounds,) = multi_turn_sessions(1, 4, request_length=300, output_length=100, page_size=64)
        assert [r.input_len for r in rounds] == [300, 700, 1100, 1500]
        for prev, nxt in zip(rounds, rounds[1:]):
            # The previous question and answer are the next round's history, page for page.
            assert nxt.keys[: len(prev.final_keys)] == prev.final_keys
            assert prev.final_keys[: len(prev.keys)] == prev.keys
        assert [r.round for r in rounds] == [0, 1, 2, 3]

    def test_clients_share_only_the_system_prompt(self):
        a, b = multi_turn_sessions(2, 2, 256, 64, page_size=64, system_prompt_length=200)
        sys_pages = 200 // 64
        assert a[1].keys[:sys_pages] == b[1].keys[:sys_pages]
        assert not set(a[1].keys[sys_pages:]) & set(b[1].keys)
        assert len({r.rid for r in a + b}) == 4

    def test_sizes_must_be_positive(self):
        with pytest.raises(InputError):
            multi_turn_sessions(0, 2, 256, 64, page_size=64)


class TestSharedPrefix:
    def test_requests_of_one_group_share_the_prefix_pages_and_nothing_else(self):
        rng = np.random.default_rng(0)
        reqs = shared_prefix(40, 3, prefix_length=512, input_length=1024, output_length=8, page_size=128,
                             arrivals=np.arange(40.0), rng=rng)  # fmt: skip
        by_group: dict = {}
        for r in reqs:
            by_group.setdefault(r.session, []).append(r)
        assert set(by_group) <= {0, 1, 2} and len(by_group) > 1
        prefixes = {g: {tuple(r.keys[:4]) for r in rs} for g, rs in by_group.items()}
        assert all(len(p) == 1 for p in prefixes.values())
        assert len({next(iter(p)) for p in prefixes.values()}) == len(by_group)
        tails = [k for r in reqs for k in r.keys[4:]]
        assert len(tails) == len(set(tails)) == 40 * 4

    def test_the_prefix_cannot_exceed_the_input(self):
        with pytest.raises(InputError, match="shared_prefix_length"):
            shared_prefix(1, 1, 2048, 1024, 1, 128, np.zeros(1), np.random.default_rng(0))


class TestArrivalTimes:
    @pytest.mark.parametrize("process", ["poisson", "gamma", "uniform"])
    def test_the_same_seed_gives_the_same_arrivals(self, process):
        a = arrival_times(100, 5.0, np.random.default_rng(7), process=process, cv=2.0)
        b = arrival_times(100, 5.0, np.random.default_rng(7), process=process, cv=2.0)
        c = arrival_times(100, 5.0, np.random.default_rng(8), process=process, cv=2.0)
        assert np.array_equal(a, b) and not np.array_equal(a, c)
        assert np.all(np.diff(a) >= 0)

    @pytest.mark.parametrize("process", ["poisson", "gamma", "uniform"])
    def test_the_mean_gap_is_one_over_the_rate(self, process):
        t = arrival_times(20_000, 4.0, np.random.default_rng(1), process=process, cv=2.0)
        assert t[-1] / len(t) == pytest.approx(0.25, rel=0.05)

    def test_gamma_cv_sets_burstiness(self):
        gaps = np.diff(arrival_times(20_000, 1.0, np.random.default_rng(2), process="gamma", cv=3.0))
        assert gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.1)

    def test_bad_rate_or_process_is_an_input_error(self):
        with pytest.raises(InputError, match="rate"):
            arrival_times(10, 0, np.random.default_rng(0))
        with pytest.raises(InputError, match="unknown arrival process 'bursty'"):
            arrival_times(10, 1.0, np.random.default_rng(0), process="bursty")


class TestRandomIds:
    def test_lengths_lie_in_the_range_and_exact_at_ratio_one(self):
        from sim.workload.synthetic import random_ids_requests

        reqs = random_ids_requests(200, 1000, 50, 0.5, seed=1, page_size=64)
        assert all(500 <= r.input_len <= 1000 and 25 <= r.output_len <= 50 for r in reqs)
        exact = random_ids_requests(5, 1000, 50, 1.0, seed=1, page_size=64)
        assert {(r.input_len, r.output_len) for r in exact} == {(1000, 50)}

    def test_same_seed_same_prompts_and_no_shared_prefix_between_prompts(self):
        from sim.workload.synthetic import random_ids_requests

        a = random_ids_requests(4, 512, 8, 1.0, seed=3, page_size=64)
        b = random_ids_requests(4, 512, 8, 1.0, seed=3, page_size=64, step=1, first_rid=4)
        assert [r.keys for r in a] == [r.keys for r in b] and b[0].rid == 4 and b[0].round == 1
        assert a[0].keys[0] != a[1].keys[0]
        assert len(a[0].final_keys) == (512 + 8) // 64


def test_whole_blocks_make_the_partial_last_block_a_page_as_the_policy_simulator_counts(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"timestamp": 0, "input_length": 1100, "output_length": 4, "hash_ids": [7, 8, 9]}\n')
    (plain,) = read_mooncake(path)
    (whole,) = read_mooncake(path, whole_blocks=True)
    assert (plain.keys, plain.input_len) == ([7, 8], 1100)  # SGLang never caches a partial page
    assert (whole.keys, whole.input_len) == ([7, 8, 9], 1536)

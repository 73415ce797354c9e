"""Request-order replay, checked against the trace's published prefix reuse, and the ``hicache-sim``
commands that wrap it (``pools``, ``replay``): output, exit status 2 and one-line errors on bad input."""

import json
import math
from pathlib import Path

import pytest

from sim.app.cli import main
from sim.base.errors import InputError
from sim.cache.hicache import HiCache
from sim.cache.v4.swacache import v4_cache
from sim.model.pools import get_model
from sim.offline.replay import format_table, pages_for_bytes, parse_size, replay, replay_v4
from sim.workload.traces import read_mooncake

CONVERSATION = Path(__file__).parents[3] / "data" / "mooncake_conversation_trace.jsonl"
GENERIC = get_model("generic")


@pytest.fixture(scope="module")
def conversation():
    return read_mooncake(CONVERSATION)


@pytest.fixture(scope="module")
def unbounded(conversation):
    """The whole conversation trace through an unbounded, device-only generic cache (~1 s, run once)."""
    cache = HiCache(GENERIC, l1_pages=None, l2_pages=0, page_tokens=512)
    return replay(cache, conversation, str(CONVERSATION))


def run(argv, capsys):
    """``hicache-sim ARGV`` -> (exit status, stdout, stderr); --help and --version exit through SystemExit."""
    try:
        status = main(argv)
    except SystemExit as exc:
        status = exc.code
    out, err = capsys.readouterr()
    return status, out, err


def error_line(err: str) -> str:
    """The one line that says what is wrong."""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert lines, "nothing on stderr"
    return lines[-1]


class TestConversationTrace:
    def test_an_unbounded_cache_finds_the_traces_prefix_reuse(self, unbounded):
        """DESIGN.md section 4 gives 37.4% of input tokens for this trace with an unbounded cache; our
        whole-page count gives 37.34%. The 0.02-point gap is the trace's partial last blocks: a request's
        tail shorter than a 512-token block is never cached as a whole page (SGLang caches whole pages
        only), so it can never hit, while a block-level count credits it."""
        s = unbounded.cache.stats
        assert s.requests == 12_031
        assert 0.372 <= s.hit_rate() <= 0.375
        assert s.evictions == 0 and s.cached_tokens["host"] == 0
        assert s.cached_tokens["device"] + s.computed_tokens == s.input_tokens
        assert unbounded.summary()["l1_pages"] is None

    def test_l2_adds_hits_that_a_bounded_l1_loses(self, conversation, unbounded):
        best = unbounded.cache.stats.hit_rate()
        cache = HiCache(GENERIC, l1_pages=6000, l2_pages=12000, policy="write_through", page_tokens=512)
        summary = replay(cache, conversation).summary()
        l1, l1l2 = summary["l1_hit_tokens"], summary["l1l2_hit_tokens"]
        assert 0 < l1 < l1l2 <= best
        assert summary["demotions"] > 0 and summary["metrics"]["load_back_bytes_total"] > 0
        assert summary["l1_pages"] == 6000 and summary["l2_pages"] == 12000


class TestSizes:
    @pytest.mark.parametrize(
        ("text", "nbytes"),
        [("4096", 4096), ("60GiB", 60 * 2**30), ("1.5TB", 1_500_000_000_000), ("200 gb", 200_000_000_000),
         ("1e3", 1000)],
    )  # fmt: skip
    def test_sizes_read_with_decimal_and_binary_units(self, text, nbytes):
        assert parse_size(text) == nbytes

    @pytest.mark.parametrize("text", ["", "GB", "-5GB", "5 parsecs", "0", "0GB"])
    def test_a_bad_size_names_the_option(self, text):
        with pytest.raises(InputError, match="^--l1-bytes: "):
            parse_size(text, "--l1-bytes")

    def test_bytes_become_pages_through_the_models_pools(self):
        model = get_model("deepseek-v4-flash")
        per_page = 998_208 + 0.1 * 8_160_000  # kv group + a tenth of the swa group, per 256 tokens
        assert pages_for_bytes(model, int(per_page * 100), 256) == 100
        assert pages_for_bytes(model, int(per_page * 100), 512) == 50


class TestPoolsCommand:
    def test_prints_the_pool_table_with_the_total(self, capsys):
        status, out, err = run(["pools", "deepseek-v4-flash"], capsys)
        assert status == 0 and err == ""
        assert "7 pools" in out and "9,158,208" in out
        assert [line.split()[0] for line in out.splitlines() if "ALL_PAGES" in line or "TRAILING" in line] == [
            "kv", "swa", "c4", "c4_indexer", "c128", "c4_state", "c4_indexer_state",
        ]  # fmt: skip

    def test_an_unknown_model_is_exit_2_with_one_line(self, capsys):
        status, out, err = run(["pools", "deepseek-v9"], capsys)
        assert status == 2 and out == ""
        assert err.count("\n") == 1 and "Traceback" not in err
        assert err.startswith("hicache-sim: error: unknown model 'deepseek-v9'")

    def test_reads_a_model_yaml(self, tmp_path, capsys):
        path = tmp_path / "m.yaml"
        path.write_text(
            "model:\n  name: tiny\n  page_size: 16\n  pools:\n    - {name: kv, bytes_per_page: 1600}\n"
        )
        status, out, _ = run(["pools", str(path)], capsys)
        assert status == 0 and out.startswith("tiny: 1 pool, page_size 16") and "1,600" in out

    def test_a_model_yaml_missing_a_field_names_the_file(self, tmp_path, capsys):
        path = tmp_path / "m.yaml"
        path.write_text("page_size: 16\n")
        status, _, err = run(["pools", str(path)], capsys)
        assert status == 2 and err.count("\n") == 1
        assert error_line(err) == f"hicache-sim: error: {path}: model: missing field 'pools'"

    def test_a_model_yaml_failing_validation_names_the_file(self, tmp_path, capsys):
        path = tmp_path / "m.yaml"
        path.write_text("page_size: 16\npools: [{name: c4, anchor: c4, bytes_per_page: 1}]\n")
        status, _, err = run(["pools", str(path)], capsys)
        assert status == 2 and error_line(err).startswith(f"hicache-sim: error: {path}: ")


class TestReplayCommand:
    def test_prints_hit_rates_and_per_pool_bytes(self, capsys):
        argv = [
            "replay",
            str(CONVERSATION),
            "--l1-pages",
            "600",
            "--l2-pages",
            "1200",
            "--max-requests",
            "300",
        ]
        status, out, _ = run(argv, capsys)
        assert status == 0
        assert "deepseek-v4-flash (7 pools), 256-token pages, write_through" in out  # V4 always pages by 256
        assert "L1 600 pages" in out and "L1+L2 hit" in out
        for pool in ("swa", "c4", "c4_indexer", "c128", "c4_state", "c4_indexer_state"):
            assert any(line.split()[:1] == [pool] for line in out.splitlines()), pool

    def test_json_output_is_valid_and_written_atomically(self, tmp_path, capsys):
        out_dir = tmp_path / "results"
        target = out_dir / "run.json"
        argv = [
            "replay",
            str(CONVERSATION),
            "--model",
            "generic",
            "--max-requests",
            "200",
            "--json",
            str(target),
        ]
        status, _, _ = run(argv, capsys)
        assert status == 0
        data = json.loads(target.read_text())
        assert data["requests"] == 200 and data["model"] == "generic" and data["l1_pages"] is None
        assert 0 < data["l1_hit_tokens"] < 1 and math.isclose(data["l1_hit_tokens"], data["l1l2_hit_tokens"])
        assert [p.name for p in out_dir.iterdir()] == ["run.json"]  # no temp file left behind

    def test_capacity_in_bytes_is_converted_through_the_model(self, tmp_path, capsys):
        target = tmp_path / "run.json"
        argv = [
            "replay",
            str(CONVERSATION),
            "--l1-bytes",
            "10GB",
            "--max-requests",
            "50",
            "--json",
            str(target),
        ]
        assert run(argv, capsys)[0] == 0
        model = get_model("deepseek-v4-flash")
        assert json.loads(target.read_text())["l1_pages"] == pages_for_bytes(model, 10**10, 256)

    def test_the_same_replay_through_the_library_gives_the_same_table(self, conversation, capsys):
        cache = HiCache(GENERIC, l1_pages=None, l2_pages=0, page_tokens=512)
        table = format_table(replay(cache, conversation[:100], str(CONVERSATION)))
        _, out, _ = run(["replay", str(CONVERSATION), "--model", "generic", "--max-requests", "100"], capsys)
        hit = [line for line in out.splitlines() if line.startswith("L1 hit")]
        assert hit == [line for line in table.splitlines() if line.startswith("L1 hit")]


class TestReplayCommandErrors:
    """Bad input: exit status 2, the last stderr line names the file and line or the option, no traceback."""

    def test_a_malformed_trace_line_is_named_by_file_and_line(self, tmp_path, capsys):
        trace = tmp_path / "bad.jsonl"
        good = '{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}\n'
        trace.write_text(good + good + '{"timestamp": 1, "input_length": \n')
        status, out, err = run(["replay", str(trace)], capsys)
        assert status == 2 and out == ""
        assert err.count("\n") == 1
        assert error_line(err).startswith(f"hicache-sim: error: {trace}:3: malformed JSON")

    def test_a_trace_whose_largest_request_the_v4_pools_cannot_hold_is_refused_in_one_line(self, tmp_path, capsys):
        trace = tmp_path / "t.jsonl"
        trace.write_text(json.dumps({"timestamp": 0, "input_length": 6000, "output_length": 4, "hash_ids": list(range(12))}) + "\n")
        status, out, err = run(["replay", str(trace), "--model", "deepseek-v4-flash", "--l1-pages", "8"], capsys)
        assert status == 2 and out == "" and err.count("\n") == 1
        assert error_line(err).startswith(f"hicache-sim: error: {trace}: the trace's largest request (6,000 + 4 tokens) "
                                          "does not fit the empty device pools")  # before the replay: no progress

    def test_a_missing_trace_is_named(self, tmp_path, capsys):
        status, _, err = run(["replay", str(tmp_path / "absent.jsonl")], capsys)
        assert status == 2 and "absent.jsonl" in error_line(err) and "cannot read trace" in err

    @pytest.mark.parametrize(
        ("args", "option"),
        [
            (["--l1-pages", "0"], "--l1-pages"),
            (["--l1-pages", "-3"], "--l1-pages"),
            (["--l2-pages", "-1"], "--l2-pages"),
            (["--l1-bytes", "-5GB"], "--l1-bytes"),
            (["--l1-bytes=-5GB"], "--l1-bytes"),
            (["--l1-bytes", "0GB"], "--l1-bytes"),
            (["--l1-bytes", "1KB"], "--l1-bytes"),  # less than one page
            (["--l2-bytes", "lots"], "--l2-bytes"),
            (["--policy", "write_sometimes"], "--policy"),
            (["--max-requests", "0"], "--max-requests"),
        ],
    )
    def test_a_bad_option_is_named(self, args, option, capsys):
        status, out, err = run(["replay", str(CONVERSATION), "--max-requests", "5", *args], capsys)
        assert status == 2 and out == ""
        assert option in error_line(err)

    def test_an_unknown_model_is_one_line(self, capsys):
        status, _, err = run(["replay", str(CONVERSATION), "--model", "llama-9"], capsys)
        assert status == 2 and err.count("\n") == 1
        assert error_line(err).startswith("hicache-sim: error: unknown model 'llama-9'")

    def test_an_option_error_is_one_line(self, capsys):
        _, _, err = run(["replay", str(CONVERSATION), "--l1-pages", "0"], capsys)
        assert err.count("\n") == 1


class TestV4Replay:
    """A V4 model replays through SGLang's FULL + SWA cache (``sim.cache.v4.swacache``) on 256-token pages."""

    def test_shared_prefixes_become_match_ends_from_the_third_request(self, tmp_path, capsys):
        trace = tmp_path / "t.jsonl"
        lines = [{"timestamp": i, "input_length": 3000, "output_length": 16,
                  "hash_ids": [1, 2, 3, 4] + [100 + 10 * i, 101 + 10 * i]} for i in range(5)]  # fmt: skip
        trace.write_text("".join(json.dumps(x) + "\n" for x in lines))
        target = tmp_path / "r.json"
        assert run(["replay", str(trace), "--json", str(target)], capsys)[0] == 0
        d = json.loads(target.read_text())
        # The first two miss (the second only records the branching point); the last three hit 2,048 tokens.
        assert d["metrics"]["cached_tokens_total"]["device"] == 3 * 2048

    def test_l2_holds_what_l1_evicts_and_loads_it_back(self, capsys, tmp_path):
        target = tmp_path / "r.json"
        argv = ["replay", str(CONVERSATION), "--l1-pages", "1200", "--l2-pages", "24000", "--max-requests",
                "600", "--json", str(target)]  # fmt: skip
        assert run(argv, capsys)[0] == 0
        d = json.loads(target.read_text())
        assert d["l1l2_hit_tokens"] > d["l1_hit_tokens"] and d["demotions"] > 0
        assert d["metrics"]["load_back_tokens_total"]["kv"] > 0
        assert d["metrics"]["sim_load_back_bytes_by_pool"]["swa"] > 0  # window state comes back with its pages

    def test_token_counters_are_labelled_by_the_kv_and_swa_anchors_only(self):
        """Sidecars ride on their anchor's indices: SGLang counts tokens per index-owning pool
        (hybrid_cache_controller.py:953-963); only the bytes counters include every pool."""
        model = get_model("deepseek-v4-flash")
        requests = read_mooncake(CONVERSATION, block_size=512, page_size=256, max_requests=20)
        cache = v4_cache(model, l1_pages=2000, l2_pages=4000, policy="write_through", page=256,
                         load_back_threshold=10, swa_ratio=0.1)  # fmt: skip
        m = replay_v4(cache, model, requests).summary()["metrics"]
        tokens = m["hicache_backup_tokens_total"]
        assert set(tokens) == {"kv", "swa"} and 0 < tokens["swa"] < tokens["kv"]  # the window, not every page
        by_pool = m["sim_hicache_backup_bytes_by_pool"]
        assert "kv" not in by_pool  # the anchor holds no bytes
        assert by_pool["c4"] == tokens["kv"] // 256 * model.pool("c4").bytes_per_page
        assert by_pool["swa"] == tokens["swa"] // 256 * model.pool("swa").bytes_per_page
        assert m["hicache_backup_bytes_total"] == sum(by_pool.values())


def test_v4_replay_of_the_whole_conversation_trace_matches_sglangs_own_cache():
    """SGLang's UnifiedRadixCache, run over the same trace (tests/data/sglang_replay), matched exactly these
    tokens and held exactly this much Full and SWA state at the end, unbounded and with a bounded L1."""
    recorded = json.loads((Path(__file__).parents[2] / "data" / "sglang_replay" / "conversation_v4.json").read_text())
    model = get_model("deepseek-v4-flash")
    requests = read_mooncake(CONVERSATION, block_size=512, page_size=256)
    for run in recorded["runs"]:
        cache = v4_cache(model, l1_pages=run["full_pages"], l2_pages=0, policy="write_through", page=256,
                         load_back_threshold=10, swa_ratio=0.1)  # fmt: skip
        replay_v4(cache, model, requests)
        assert run["swa_pages"] is None or cache.swa_cap == run["swa_pages"] * 256
        assert cache.stats["device_hit_tokens"] == run["matched_tokens"]
        assert (cache.tree.full_tokens, cache.tree.swa_tokens) == (run["tree_full_tokens"], run["tree_swa_tokens"])


class TestReadingApartFromReplaying:
    """A replay times the reading of its requests apart from the cache's work, so its speed compares with a
    tree that is handed its requests ready (SGLang's, in bench/replay.py)."""

    @staticmethod
    def slow(requests, pause_s=0.002):
        """``requests`` as a reader that takes ``pause_s`` to read each."""
        import time

        for req in requests:
            time.sleep(pause_s)
            yield req

    def test_a_slow_readers_time_is_counted_as_reading_not_replaying(self, conversation):
        cache = HiCache(GENERIC, l1_pages=None, l2_pages=0, page_tokens=512)
        d = replay(cache, self.slow(conversation[:60]), read_s=0.5).summary()
        assert d["read_s"] >= 0.5 + 60 * 0.002 > d["replay_s"] > 0
        assert d["read_s"] + d["replay_s"] == pytest.approx(d["wall_s"] + 0.5)  # the pass before: not in the loop

    def test_the_v4_replay_splits_its_time_the_same_way(self):
        model = get_model("deepseek-v4-flash")
        requests = read_mooncake(CONVERSATION, block_size=512, page_size=256, max_requests=40)
        cache = v4_cache(model, l1_pages=None, l2_pages=0, policy="write_through", page=256,
                         load_back_threshold=10, swa_ratio=0.1)  # fmt: skip
        d = replay_v4(cache, model, self.slow(requests), read_s=0.25).summary()
        assert d["read_s"] >= 0.25 + 40 * 0.002 and d["replay_s"] > 0
        assert d["read_s"] + d["replay_s"] == pytest.approx(d["wall_s"] + 0.25)

    def test_the_command_prints_and_writes_both_times(self, tmp_path, capsys):
        target = tmp_path / "r.json"
        argv = ["replay", str(CONVERSATION), "--model", "generic", "--max-requests", "300", "--json", str(target)]
        status, out, _ = run(argv, capsys)
        d = json.loads(target.read_text())
        assert status == 0 and d["read_s"] > 0 and d["replay_s"] > 0
        assert f"reading the trace {d['read_s']:.2f} s (checking every record, then as replayed), replaying " \
               f"{d['replay_s']:.2f} s" in out  # fmt: skip

"""A run end to end: per-request records streamed to Parquet, a bounded time series, strict-JSON summary."""

import gc
import json
import math

import pandas as pd
import pytest

import sim.serve.metrics
from sim.app.run import build, check_startable, run_scenario, summary_json, write_outputs
from sim.scenario.load import scenario_from_dict
from sim.serve.metrics import MAX_TIMESERIES_ROWS
from sim.workload.request import Request


def scenario(**sections):
    base = {
        "name": "t",
        "seed": 2,
        "hardware": {"kv_mem_gb": 0.5},
        "workload": {"kind": "multi_turn", "num_clients": 12, "max_parallel": 4, "request_length": 300,
                     "output_length": 8, "num_rounds": 2, "request_rate": None},
    }  # fmt: skip
    base.update(sections)
    return scenario_from_dict(base, source="test")


class TestStreamedRecords:
    def test_streamed_records_are_the_records_kept_in_memory(self, tmp_path, monkeypatch):
        monkeypatch.setattr(sim.serve.metrics, "BATCH_ROWS", 5)  # several row groups
        in_memory = run_scenario(scenario())
        streamed = run_scenario(scenario(), requests_out=tmp_path / "requests.parquet")
        assert streamed.requests is None
        on_disk = pd.read_parquet(tmp_path / "requests.parquet")
        import pyarrow.parquet as pq

        assert pq.ParquetFile(tmp_path / "requests.parquet").num_row_groups == math.ceil(24 / 5)
        pd.testing.assert_frame_equal(on_disk, in_memory.requests)
        assert streamed.summary == in_memory.summary

    def test_a_recorder_with_a_sink_holds_at_most_one_batch(self, monkeypatch):
        monkeypatch.setattr(sim.serve.metrics, "BATCH_ROWS", 3)
        batches = []
        rec = sim.serve.metrics.Recorder(sink=lambda columns: batches.append(len(columns[0])))
        for i in range(10):
            rec.request((i, 0, -1, 0, 0.0, 0.0, 0.5, 1.0, 100, 4, 0, 0, 0, 100, 0.0, 0.0, 0.5, 1.0, 0, 0, 0))
            assert rec.held < 3
        rec.flush()
        assert batches == [3, 3, 3, 1] and rec.n_finished == 10
        assert rec.token_totals()["input_tokens"] == 1000 and len(rec.ttft) == 10

    def test_no_records_still_gives_a_file_with_the_columns(self, tmp_path):
        run_scenario(scenario(output={"record_requests": False}), requests_out=tmp_path / "r.parquet")
        df = pd.read_parquet(tmp_path / "r.parquet")
        assert df.empty and list(df.columns) == list(sim.serve.metrics.REQUEST_COLUMNS)

    def test_a_sweep_point_keeps_no_records(self):
        result = run_scenario(scenario(), keep_requests=False)
        assert result.requests.empty and result.summary["requests"]["finished"] == 24


class TestStreamedWorkload:
    def live_requests(self) -> int:
        gc.collect()
        return sum(isinstance(o, Request) for o in gc.get_objects())

    def test_build_of_a_million_requests_holds_none_of_them(self):
        sc = scenario(workload={"kind": "synthetic", "num_requests": 1_000_000, "rate": 5.0, "input_length": 2048,
                                "output_length": 64})  # fmt: skip
        before = self.live_requests()
        sim, arrivals, n = build(sc)
        assert n == 1_000_000 and self.live_requests() == before

    def test_a_run_holds_only_the_requests_in_flight(self):
        sc = scenario(workload={"kind": "synthetic", "num_requests": 400, "rate": 2.0, "input_length": 600,
                                "output_length": 4})  # fmt: skip
        sim, arrivals, n = build(sc)
        live = []

        def finished(req):
            if req.rid % 50 == 0:
                live.append(self.live_requests())

        sim.on_finish = finished
        sim.run(arrivals)
        assert sim.rec.n_finished == n == 400 and len(live) == 8 and max(live) < 100  # bounded: not the 400


class TestBoundedTimeSeries:
    def test_a_tiny_interval_is_widened_with_a_note_and_recorded(self):
        notes = []
        result = run_scenario(scenario(output={"timeseries_interval_s": 1e-6}), notify=notes.append)
        assert len(result.timeseries) <= MAX_TIMESERIES_ROWS
        assert notes and all(n.startswith("output.timeseries_interval_s: ") for n in notes)
        kept = result.scenario.output.timeseries_interval_s  # the resolved scenario says what ran
        assert kept > 1e-6
        assert result.timeseries["time_s"].diff().dropna().to_numpy() == pytest.approx(kept)

    def test_far_apart_arrivals_do_not_make_rows_by_the_billion(self):
        sc = scenario(workload={"kind": "synthetic", "rate": 1e-6, "num_requests": 3, "input_length": 512,
                                "output_length": 4})  # fmt: skip
        result = run_scenario(sc, notify=lambda _: None)
        assert result.summary["requests"]["finished"] == 3
        assert len(result.timeseries) <= MAX_TIMESERIES_ROWS

    def test_a_long_run_thins_its_samples_instead_of_growing(self, monkeypatch):
        monkeypatch.setattr(sim.serve.metrics.SampleBuffer.__init__, "__defaults__", (1, 40))
        notes = []
        fine = run_scenario(scenario(output={"timeseries_interval_s": 0.01}), notify=notes.append)
        assert len(fine.timeseries) <= 40 and "kept every" in notes[-1]
        kept = fine.scenario.output.timeseries_interval_s
        coarse = run_scenario(scenario(output={"timeseries_interval_s": kept}))
        # Thinning keeps what sampling at the wider interval gives (times, occupancy; same run).
        cols = ["time_s", "waiting", "running", "l1_kv_pages", "l2_kv_pages"]
        pd.testing.assert_frame_equal(fine.timeseries[cols], coarse.timeseries[cols].iloc[: len(fine.timeseries)])

    def test_an_ordinary_interval_is_left_alone(self):
        notes = []
        result = run_scenario(scenario(output={"timeseries_interval_s": 0.5}), notify=notes.append)
        assert notes == [] and result.scenario.output.timeseries_interval_s == 0.5


class TestSummaryJson:
    def test_unbounded_values_are_null_and_the_text_is_strict_json(self):
        text = summary_json({"a": float("inf"), "b": [1.5, float("-inf")]})
        assert json.loads(text, parse_constant=lambda c: pytest.fail(c)) == {"a": None, "b": [1.5, None]}

    def test_a_nan_is_a_bug_not_a_value(self):
        with pytest.raises(ValueError):
            summary_json({"ttft": float("nan")})

    def test_write_outputs_refuses_to_mix_with_an_earlier_run(self, tmp_path):
        result = run_scenario(scenario())
        write_outputs(result, tmp_path / "out")
        from sim.base.errors import InputError

        with pytest.raises(InputError, match="--overwrite"):
            write_outputs(result, tmp_path / "out")
        assert write_outputs(result, tmp_path / "out", overwrite=True)[0].name == "summary.json"


def test_check_startable_reads_what_a_run_reads_at_start(tmp_path):
    bad = tmp_path / "t.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [1, 2]}\n'
                   '{"timestamp": NaN, "input_length": 600, "output_length": 4, "hash_ids": [1, 2]}\n')  # fmt: skip
    from sim.base.errors import InputError

    with pytest.raises(InputError, match="t.jsonl:2: timestamp: NaN"):
        check_startable(scenario(workload={"kind": "trace", "path": str(bad)}))


def test_a_v4_setup_the_exact_cache_does_not_model_fails_at_start():
    from sim.app.run import check_startable
    from sim.base.errors import InputError
    from sim.scenario.load import scenario_from_dict

    sc = scenario_from_dict({"name": "t", "model": "deepseek-v4-flash",
                             "hicache": {"enabled": True, "write_policy": "boundary"}}, source="t")  # fmt: skip
    with pytest.raises(InputError, match="boundary write policy"):
        check_startable(sc)


class TestSWAPoolSizing:
    """DeepSeek V4's SWA pool: a share of the Full tokens, or SGLang's cap mode (pool_configurator.py:924-968,
    1328-1351)."""

    @staticmethod
    def v4(**hicache):
        from sim.scenario.load import scenario_from_dict

        return scenario_from_dict({"name": "t", "model": "deepseek-v4-flash", "hardware": {"kv_mem_gb": 40},
                                   "hicache": hicache, "scheduler": {"max_running_requests": 32,
                                                                     "chunked_prefill_size": 16384}}, source="t")  # fmt: skip

    def test_cap_mode_sizes_swa_from_the_request_cap_and_gives_the_rest_to_full(self):
        from sim.scenario.load import build_model_spec
        from sim.scenario.resolve import device_pools

        sc = self.v4(swa_full_tokens_ratio="cap")
        model = build_model_spec(sc)
        # per request 128 + 128 + 2 x 256 = 768; 32 requests, 2 chunks of 16384 in flight, a page; headroom
        # 4 x 32 prefix tails of 128 + 256 tokens: 24576 + 32768 + 256 + 49152 = 106752 (page-aligned)
        swa_tokens = 106752
        l1, share = device_pools(sc, model)
        assert round(l1 * share * 256) == swa_tokens
        swa_bytes = swa_tokens * model.group_bytes_per_page("swa") / model.page_size
        ratio_l1, _ = device_pools(self.v4(swa_full_tokens_ratio=0.1), model)
        assert l1 == model.device_pages_for_bytes((40e9 - swa_bytes) * model.page_size / 256, 0.0)
        assert l1 > ratio_l1  # 107K SWA tokens cost less than 0.1 x 5.6M

    def test_a_cap_that_leaves_no_full_pool_is_refused(self):
        from sim.base.errors import InputError
        from sim.scenario.load import build_model_spec
        from sim.scenario.resolve import device_pools

        sc = scenario_from_dict({"name": "t", "model": "deepseek-v4-flash", "hardware": {"kv_mem_gb": 1.5},
                                 "hicache": {"swa_full_tokens_ratio": "cap"}}, source="t")  # fmt: skip
        for start in (lambda: device_pools(sc, build_model_spec(sc)), lambda: check_startable(sc)):
            with pytest.raises(InputError, match="cap mode's SWA pool .* lower scheduler.max_running_requests"):
                start()

    @pytest.mark.parametrize("value", [0, 1.5, "half", True])
    def test_the_share_is_in_0_1_or_cap(self, value):
        from sim.base.errors import InputError

        with pytest.raises(InputError, match=r"hicache.swa_full_tokens_ratio: a share in \(0, 1\] or cap"):
            self.v4(swa_full_tokens_ratio=value)


def test_a_gpu_without_kernel_data_is_transferred_else_warned_about_until_calibrated():
    from sim.app.run import compute_line

    moved = run_scenario(scenario(hardware={"gpu": "MI355X", "kv_mem_gb": 0.5})).summary["compute"]
    assert "MI355X: B300 kernel efficiencies" in compute_line(moved) and "warning" not in moved
    qwen = {"name": "qwen3-14b", "config": "qwen3-14b"}  # a model aiconfigurator-core ships no config for
    guess = run_scenario(scenario(model=qwen, hardware={"gpu": "MI355X", "kv_mem_gb": 0.5})).summary["compute"]
    assert "hicache-sim calibrate compute --from" in guess["warning"]
    assert "\nwarning: MI355X is priced on the roofline" in compute_line(guess)
    chosen = run_scenario(scenario(hardware={"gpu": "H200", "kv_mem_gb": 0.5}, compute={"backend": "roofline"}))
    assert "warning" not in chosen.summary["compute"]  # a roofline the scenario asked for


def test_the_summary_names_each_capacitys_source():
    logged = run_scenario(scenario(hardware={"kv_mem_gb": 0.5, "max_total_num_tokens": 40 * 256},
                                   hicache={"host_pages": 100}))  # fmt: skip
    s = logged.summary
    assert s["capacity_pages"]["l1"] == 40 and s["capacity_pages"]["l2"] == 100
    assert s["capacity_sources"] == {"l1": "hardware.max_total_num_tokens (logged)",
                                     "swa": "hicache.swa_full_tokens_ratio (0.1)", "l2": "hicache.host_pages",
                                     "l2_swa": "the SWA share of hicache.host_pages"}  # fmt: skip
    assert "capacity_mismatches" in s  # 0.5 GB derives another pool than the logged 2,560 tokens


def test_the_summary_carries_the_resolved_budgets_precisions_and_backend_with_their_sources():
    from sim.app.run import format_summary

    result = run_scenario(scenario(hardware={"kv_mem_gb": 0.5}, scheduler={"max_running_requests": 16}))
    server = result.summary["server"]
    assert server["values"]["max_running_requests"] == 16 == result.sim.cfg.max_running_requests
    assert server["sources"]["max_running_requests"] == "scheduler.max_running_requests"
    assert server["values"]["kv_dtype"] == "fp8 nope + bf16 rope"
    text = format_summary(result)
    assert "budgets: max_running_requests 16 <- scheduler.max_running_requests; chunked_prefill_size" in text
    assert "\nprecision: kv fp8 nope + bf16 rope <- " in text and "\nstep time: roofline, " in text

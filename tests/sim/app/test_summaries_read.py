"""What users read in the summaries says what it is: the run's TTFT and the measured phase's apart, the logged L1
beside the derived memory that does not size it, a copy table of another GPU flagged, no "At None." and no search
cap passed off as a result."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.app.plan.report import _largest_ratio_text, _md_l3, _md_write_policy
from sim.app.run import cost_table_line, format_summary, run_scenario
from sim.model.costs import default_cost_table
from sim.model.hostmem import RATIO_SEARCH_CAP
from sim.scenario.load import scenario_from_dict

TINY = {"name": "tiny", "seed": 1, "hardware": {"kv_mem_gb": 0.2},
        "workload": {"kind": "multi_turn", "num_clients": 2, "max_parallel": 2, "request_length": 64,
                     "output_length": 4, "num_rounds": 2, "request_rate": None}}  # fmt: skip


def test_the_runs_ttft_says_it_is_every_request_and_the_lanes_report_says_measured_phase():
    from sim.serve.lanes import format_agentx_report

    text = format_summary(run_scenario(scenario_from_dict(TINY), progress=False))
    assert "TTFT mean / p50 / p90 / p99" in text and "(every request of the run, warm-up included;" in text
    report = {"lanes": 2, "requests": 10, "duration_s": 60.0, "sessions_started": 2, "tok_per_s_per_gpu": 1.0,
              "input_tok_per_s_per_gpu": 1.0, "output_tok_per_s_per_gpu": 0.0, "gpus": 1,
              "ttft_s": {"mean": 0.5, "p50": 0.4}, "itl_s": {"p90": 0.01}, "prefix_hit": 0.5, "gpu_hit": 0.5,
              "cpu_hit": 0.0, "storage_hit": 0.0, "queue_req": {"p50": 0, "p90": 1},
              "running_req": {"p50": 1, "p90": 2}, "full_token_usage": {"mean": 0.1, "p90": 0.2},
              "calls_per_lane_hour": 300.0, "isl": {"mean": 900.0, "p50": 800.0}, "osl": {"mean": 90.0, "p50": 80.0},
              "idle_gap_s": {"mean": 2.0, "p50": 1.0, "gaps": 8, "cap_s": None}, "warmup_end_s": 12.0}  # fmt: skip
    assert "TTFT of the measured phase: mean 0.500 s" in format_agentx_report(report)


@pytest.mark.parametrize("gpu, flagged", [("B200", True), ("B300", True), ("H200", False)])
def test_a_copy_table_of_another_gpu_is_flagged(gpu, flagged):
    sc = scenario_from_dict({**TINY, "model": "deepseek-v4-flash", "hardware": {"gpu": gpu, "tp_size": 8}})
    line = cost_table_line(default_cost_table(), sc)
    assert (f"not {gpu}'s (calibrate a table on {gpu})" in line) == flagged, line


def test_validate_says_the_logged_pool_sizes_l1_not_the_derived_memory(tmp_path):
    from sim.interop.fromsglang import from_sglang, to_yaml
    from sim.scenario.validate import validate_file

    log = str(Path(__file__).parents[2] / "data" / "server_logs" / "deepseek-v4-pro_h200_tp8_hicache.log")
    launch = ("python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Pro --tp-size 8 "
              "--enable-hierarchical-cache --hicache-ratio 2")  # fmt: skip
    out = tmp_path / "v4.yaml"
    out.write_text(to_yaml(from_sglang(launch, gpu="H200", server_log=log)))
    l1 = next(line for line in validate_file(out).splitlines() if line.startswith("  L1 "))
    assert l1.startswith("  L1        3,276,800 tokens as logged (hardware.max_total_num_tokens; the derived ")
    assert "GB KV does not size it)" in l1


def test_sections_without_a_startable_candidate_say_so_instead_of_at_none():
    rows = [{"policy": "write_through"}]
    for text in (_md_write_policy({"candidate": None, "rows": rows}), _md_l3({"candidate": None, "rows": rows})):
        assert "None" not in "\n".join(text) and "No candidate host size starts" in "\n".join(text)


def test_the_search_cap_is_not_reported_as_the_largest_ratio():
    text = _largest_ratio_text({"largest_fitting_ratio": RATIO_SEARCH_CAP})
    assert "1e+03" not in text and "where the search stops" in text
    assert "is 2.5 (per pool, per rank)" in _largest_ratio_text({"largest_fitting_ratio": 2.5})

"""``hicache-sim compare``: several policies and capacities over one trace, one table, one plot."""

from pathlib import Path

import pandas as pd
import pytest

from sim.app.cli import main
from sim.base.errors import InputError
from sim.model.pools import get_model
from sim.offline.compare import Policy, compare, parse_l2, parse_policies
from sim.workload.traces import read_mooncake

TRACE = Path(__file__).resolve().parents[3] / "data" / "mooncake_conversation_trace.jsonl"


def test_policies_combine_a_write_policy_and_an_eviction_order():
    assert parse_policies("boundary, lfu,write_back+slru,clairvoyant") == [
        Policy("boundary", "boundary", "lru"),
        Policy("lfu", "write_through", "lfu"),
        Policy("write_back+slru", "write_back", "slru"),
        Policy("clairvoyant"),
    ]
    with pytest.raises(InputError, match="unknown policy 'arc'"):
        parse_policies("write_through+arc")


def test_l2_capacities_are_pages_or_multiples_of_l1():
    assert parse_l2("0,0.5x,12000") == [("pages", 0), ("x", 0.5), ("pages", 12000)]
    for bad in ("1.5", "-2", "2y"):
        with pytest.raises(InputError, match="--l2-pages"):
            parse_l2(bad)


def test_one_row_per_policy_and_capacity_and_the_bound_on_top():
    reqs = read_mooncake(TRACE, block_size=512, max_requests=800)
    df = compare(reqs, get_model("generic"), parse_policies("write_through,boundary,slru,clairvoyant"),
                 [200, 800], parse_l2("0,2x"), page_tokens=512)  # fmt: skip
    assert len(df) == 16
    assert set(df.loc[df["l2"] == "2x", "l2_pages"]) == {400, 1600}
    for (_l1, _l2), part in df.groupby(["l1_pages", "l2_pages"]):
        by = part.set_index("policy")
        assert (by["l1l2_hit_pages"] <= by.loc["clairvoyant", "l1l2_hit_pages"] + 1e-12).all()
        assert (by["l1_hit_pages"] <= by.loc["clairvoyant", "l1_hit_pages"] + 1e-12).all()


def test_workers_give_the_same_table_in_the_same_order(tmp_path):
    """``--workers`` spreads the replays over processes; the table is the one a single process prints."""
    args = ["compare", str(TRACE), "--max-requests", "600", "--policies", "write_through,boundary,clairvoyant",
            "--l1-pages", "200,800", "--l2-pages", "0,2x", "--no-progress"]
    tables = []
    for workers in ("1", "2"):
        assert main([*args, "--workers", workers, "--csv", str(tmp_path / f"w{workers}.csv")]) == 0
        tables.append(pd.read_csv(tmp_path / f"w{workers}.csv").drop(columns="wall_s"))
    pd.testing.assert_frame_equal(tables[0], tables[1])
    assert list(tables[1]["policy"][:3]) == ["write_through", "boundary", "clairvoyant"]


def test_the_command_prints_the_table_and_writes_csv_and_plot(tmp_path, capsys):
    png, csv = tmp_path / "cmp.png", tmp_path / "cmp.csv"
    rc = main(["compare", str(TRACE), "--model", "generic", "--policies", "write_through,boundary,clairvoyant",
               "--l1-pages", "300,600", "--l2-pages", "0,1x", "--max-requests", "500", "--plot", str(png),
               "--csv", str(csv)])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    assert "L1+L2 hit" in out and "no server can implement" in out
    assert png.stat().st_size > 1000 and len(csv.read_text().splitlines()) == 1 + 3 * 4


def test_bad_options_exit_2_with_one_line(capsys):
    assert main(["compare", str(TRACE), "--policies", "lru+lfu+nope", "--l1-pages", "10"]) == 2
    assert main(["compare", str(TRACE), "--policies", "lru", "--l1-pages", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("hicache-sim: error:") for line in err)


def test_replay_prints_the_bound_and_the_boundary_counters(capsys):
    rc = main(["replay", str(TRACE), "--model", "generic", "--l1-pages", "300", "--l2-pages", "600",
               "--policy", "boundary", "--eviction-policy", "slru", "--max-requests", "500"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    for text in ("boundary, slru eviction", "failed host allocations", "duplicate pages", "clairvoyant bound",
                 "L1+L2 at 900 pages"):
        assert text in out
    main(["replay", str(TRACE), "--model", "generic", "--l1-pages", "300", "--max-requests", "50", "--no-bound"])
    assert "clairvoyant" not in capsys.readouterr().out


def test_replay_takes_the_eviction_config_as_json_and_rejects_bad_json(capsys):
    base = ["replay", str(TRACE), "--model", "generic", "--l1-pages", "300", "--max-requests", "50", "--no-bound",
            "--eviction-policy", "slru", "--eviction-config"]  # fmt: skip
    assert main(base + ['{"protected_threshold": 3}']) == 0
    assert main(base + ["{protected_threshold: 3}"]) == 2
    assert main(base + ['{"threshold": 3}']) == 2
    err = capsys.readouterr().err
    assert "--eviction-config:1: malformed JSON" in err and "slru takes no parameter 'threshold'" in err


def test_the_v4_cache_refuses_what_it_does_not_model_yet(capsys):
    for extra in (["--policy", "boundary"], ["--eviction-policy", "lfu"]):
        assert main(["replay", str(TRACE), "--max-requests", "5", *extra]) == 2
    assert main(["compare", str(TRACE), "--model", "deepseek-v4-flash", "--policies", "lru", "--l1-pages", "9"]) == 2
    err = capsys.readouterr().err
    assert "not yet to the V4 cache" in err and "single-pool residency model" in err


def test_the_plot_shares_one_percent_scale_from_zero_and_names_coinciding_policies():
    from sim.app.plot import compare_figure

    rows = [{"policy": p, "l1_pages": l1, "l2": l2, "l1l2_hit_pages": h}
            for l2 in ("0", "1x") for l1, base in ((300, 0.1), (600, 0.2))
            for p, h in (("write_through", base), ("boundary", base if l2 == "0" else base + 0.05),
                         ("clairvoyant", 0.4))]  # fmt: skip
    axes = compare_figure(pd.DataFrame(rows)).get_axes()
    assert {ax.get_ylim() for ax in axes} == {axes[0].get_ylim()} and axes[0].get_ylim()[0] == 0
    assert axes[0].yaxis.get_major_formatter()(0.2, 0) == "20%"
    assert "write_through = boundary (identical)" in [line.get_label() for line in axes[0].get_lines()]
    assert [t.get_text() for t in axes[0].get_xticklabels()] == ["300", "600"]

"""Pictures that tell the truth: a misses plot without misses says so and a cold first step does not set the scale;
occupancy names DP-attention ranks as ranks of one instance, marks the warm-up end and keeps a full pool's line
above its capacity line; ages read in plain seconds, the first bucket labelled as every age up to 1 ms; plan's
host pools stack on a linear axis."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg

from sim.app.plot import plot_misses, plot_occupancy
from sim.base.text import seconds_text

DOCS = Path(__file__).resolve().parents[3] / "docs"


def _misses(values: list[float]) -> pd.DataFrame:
    return pd.DataFrame({"step": np.arange(len(values)), "misses": values, "policy": "lru",
                         "device_buffer_size": 4096})  # fmt: skip


def _texts(fig) -> str:
    return " ".join(t.get_text() for ax in fig.axes for t in ax.texts)


def test_a_misses_plot_without_misses_says_why_it_is_empty():
    fig = plot_misses(_misses([0.0] * 20))
    assert "no misses" in _texts(fig)


def test_a_cold_first_step_does_not_set_the_misses_scale():
    fig = plot_misses(_misses([512.0, *([40.0] * 30)]))
    line_ax = fig.axes[0]
    assert line_ax.get_ylim()[1] < 100 and "off the scale" in _texts(fig)
    assert "off the scale" not in _texts(plot_misses(_misses([45.0, *([40.0] * 30)])))


def _occupancy(instances: int) -> pd.DataFrame:
    rows = [{"time_s": t, "instance": i, "waiting": 0, "running": 1, "l1_kv_pages": 10, "l1_swa_pages": 100,
             "l2_kv_pages": 0, "l2_swa_pages": 0} for t in range(5) for i in range(instances)]  # fmt: skip
    return pd.DataFrame(rows)


def test_occupancy_names_dp_ranks_as_ranks_of_one_instance_and_marks_the_warm_up():
    df = _occupancy(8)
    df.attrs.update(dp_ranks=8, warmup_end_s=2.0, capacity={"l1_swa": 100})
    fig = plot_occupancy(df)
    FigureCanvasAgg(fig).draw()
    assert "8 DP-attention ranks of 1 instance" in fig._suptitle.get_text()
    assert any(ln.get_label() == "warm-up ends" for ax in fig.axes for ln in ax.lines)


def test_a_full_pool_is_drawn_above_its_capacity_line():
    df = _occupancy(1)
    df.attrs["capacity"] = {"l1_swa": 100}
    ax = plot_occupancy(df).axes[0]
    swa = next(ln for ln in ax.lines if ln.get_label() == "swa")
    cap = next(ln for ln in ax.lines if ln.get_label().startswith("swa capacity"))
    assert swa.get_zorder() > cap.get_zorder()


def test_ages_read_in_plain_seconds():
    assert [seconds_text(x) for x in (610.3, 0.96, 1.8, 0.001)] == ["610 s", "0.96 s", "1.8 s", "1 ms"]


def test_the_first_age_bucket_is_labelled_as_every_age_up_to_1_ms():
    from sim.app.tierages import plot_ages
    from sim.cache.ages import EDGES, TierAges

    ages = TierAges()
    ages.hit["device"][0] = 100  # ages of 0 to 1 ms
    ages.hit["device"][len(EDGES) // 2] = 100
    assert "<= 1 ms" in _texts(plot_ages(ages))


def test_plans_host_pools_stack_on_a_linear_axis():
    from sim.app.plan.figures import draw

    fig = draw(json.loads((DOCS / "plan_example" / "plan.json").read_text()))["host_memory.png"]
    assert fig.axes[0].get_yscale() == "linear"


def test_a_tier_without_full_evictions_on_a_window_model_does_not_claim_no_evictions():
    from sim.app.tierages import plot_ages
    from sim.cache.ages import EDGES, TierAges

    ages = TierAges()
    ages.hit["host"][len(EDGES) // 2] = 100
    ages.window_pools = True
    labels = [t.get_text() for ax in plot_ages(ages).axes if ax.get_legend() for t in ax.get_legend().get_texts()]
    assert any("no Full-page evictions (window-pool" in t for t in labels), labels

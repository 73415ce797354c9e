"""Every picture the plan examples ship, redrawn from its plan.json, shows what a reader relies on: legends
outside the data, one x range where panels compare, no empty panel without a note, and no series hidden along
the frame or under another series without a note naming it."""

import json
import math
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.container import ErrorbarContainer

from sim.app.plan.figures import AT_EDGE, COINCIDE, NOTHING, draw

DOCS = Path(__file__).resolve().parents[4] / "docs"
EXAMPLES = ["plan_example", "plan_launch_example"]
FIGS = [(ex, name, fig) for ex in EXAMPLES for name, fig in draw(json.loads((DOCS / ex / "plan.json").read_text())).items()]


def _texts(ax) -> str:
    return " ".join(t.get_text() for t in ax.texts)


def _series(ax):
    out = [(ln.get_label(), ln.get_xdata(), ln.get_ydata()) for ln in ax.lines
           if ln.get_transform() == ax.transData and not ln.get_label().startswith("_")]
    out += [(c.get_label(), c.lines[0].get_xdata(), c.lines[0].get_ydata()) for c in ax.containers
            if isinstance(c, ErrorbarContainer) and c.lines[0] is not None]
    return [(label, list(map(float, x)), [float(v) for v in y]) for label, x, y in out]


@pytest.fixture(params=FIGS, ids=[f"{ex}/{name}" for ex, name, _ in FIGS])
def figure(request):
    ex, name, fig = request.param
    FigureCanvasAgg(fig).draw()
    return ex, name, fig


def test_every_shipped_picture_is_the_one_its_data_draws(figure):
    ex, name, _ = figure
    assert (DOCS / ex / name).exists()


def test_legends_sit_outside_every_panel(figure):
    _, _, fig = figure
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()] + list(fig.legends)
    for legend in legends:
        box = legend.get_window_extent()
        for ax in fig.axes:
            assert not box.overlaps(ax.get_window_extent()), "a legend covers a panel"


def test_no_panel_is_empty_without_saying_so(figure):
    _, _, fig = figure
    for ax in fig.axes:
        drawn = any(any(math.isfinite(v) for v in y) for _, _, y in _series(ax))
        drawn |= any(p.get_height() > 0 for p in ax.patches if hasattr(p, "get_height"))
        assert drawn or NOTHING in _texts(ax)


def test_no_axis_goes_below_zero(figure):
    _, _, fig = figure
    for ax in fig.axes:
        assert ax.get_yscale() == "log" or ax.get_ylim()[0] >= 0


def test_a_series_hidden_by_the_frame_or_another_series_is_named(figure):
    _, _, fig = figure
    for ax in fig.axes:
        lo, hi = ax.get_ylim()
        series = _series(ax)
        for label, _, y in series:
            finite = [v for v in y if math.isfinite(v)]
            if finite and (all(v == lo for v in finite) or all(v == hi for v in finite)):
                assert AT_EDGE in _texts(ax) and label in _texts(ax)
        for i, (la, xa, ya) in enumerate(series):
            for lb, xb, yb in series[i + 1:]:
                if len(ya) > 1 and xa == xb and ya == yb:
                    assert COINCIDE in _texts(ax) and la in _texts(ax) and lb in _texts(ax)


def test_panels_that_compare_host_sizes_share_one_x_range():
    for ex, name, fig in FIGS:
        if name == "value.png":
            assert len({ax.get_xlim() for ax in fig.axes}) == 1, ex


def test_the_host_picture_draws_the_pinnable_ceiling_and_names_what_it_refused():
    data = json.loads((DOCS / "plan_example" / "plan.json").read_text())
    h = data["host_memory"]
    last = h["candidates"][-1]
    h.update(pinnable_gb=last["bytes_per_node"] / 2e9, pinnable_source="ROCm default: half of the node DRAM")
    last.update(status="refused", reason="pins ... GB per node, past the ... GB the platform lets it pin")
    fig = draw(data)["host_memory.png"]
    ax = fig.axes[0]
    (line,) = [ln for ln in ax.lines if ln.get_label().startswith("pinnable")]
    assert float(line.get_ydata()[0]) == h["pinnable_gb"] and "ROCm default" in line.get_label()
    assert "past the\npinnable" in _texts(ax)

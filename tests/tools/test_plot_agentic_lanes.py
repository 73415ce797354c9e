"""docs/agentic_lanes.png, redrawn from the CSV shipped beside it: one colour per setup in every panel (and other
colours for the hit's tiers), legends outside the data, no axis below zero."""

import importlib.util
from pathlib import Path

import pandas as pd
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.colors import to_hex

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("plot_agentic_lanes", ROOT / "tools" / "plot_agentic_lanes.py")
tool = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tool)


def test_the_shipped_picture_redraws_from_its_csv_with_one_colour_per_thing():
    df = pd.read_csv(ROOT / "docs" / "agentic_lanes.csv")
    assert (ROOT / "docs" / "agentic_lanes.png").exists()
    fig = tool.draw(df)
    FigureCanvasAgg(fig).draw()
    meaning: dict[str, str] = {}
    for ax in fig.get_axes():
        for line in ax.get_lines():
            setup = line.get_label().split(":")[0]
            assert meaning.setdefault(setup, to_hex(line.get_color())) == to_hex(line.get_color()), setup
        for fill in ax.collections:
            assert to_hex(fill.get_facecolor()[0]) not in meaning.values()  # a tier is not a setup
        assert ax.get_ylim()[0] >= 0
        assert not ax.get_legend().get_window_extent().overlaps(ax.get_window_extent())
    assert set(meaning) == {"L1 only", "L1 + L2 (4x host)"}

"""The plan's tier-sizing section (``sim.app.plan.tierages``): the timed runs' page ages summed over seeds and
read into which tier is too small for which reuse window, per host size, and the line ``plan`` prints."""

import pytest

from sim.app.plan.tierages import headline, markdown, merged, section
from sim.cache.ages import TierAges


class Clock:
    now = 0.0


def ages_row(evict_l1_age: float, hit_l2_age: float, tokens: int = 100) -> dict:
    clock = Clock()
    ages = TierAges(clock)
    clock.now = evict_l1_age
    ages.evicted("device", 0.0, tokens, 1)
    ages.hit_at("host", 0.0, tokens, hit_l2_age)
    return {"ages": ages.metrics()}


def test_the_seeds_histograms_are_summed_and_runs_without_ages_skipped():
    total = merged([ages_row(1.0, 5.0), None, {"hit_total": 0.3}, ages_row(1.0, 5.0, tokens=50)])
    assert sum(total.evict["device"]) == 150 and sum(total.hit["host"]) == 150
    assert merged([None, {}]) is None


def test_each_host_size_gets_its_verdict_and_the_printed_line_follows_the_choice():
    runs = {("timed", "small", 1): ages_row(0.5, 4.0), ("timed", "large", 1): ages_row(9.0, 4.0)}
    sec = section([1], ["L1 only", "small", "large"], runs.get)
    assert [r["label"] for r in sec["rows"]] == ["small", "large"]  # L1 only failed here: no row
    assert sec["rows"][0]["verdict"][0].startswith("L1 is too small for the reuse window")
    assert sec["rows"][1]["verdict"][0].startswith("L1 holds the reuse window")
    assert headline(sec, "small")[0].startswith("tier sizing at small: L1 is too small")
    assert headline(sec, None)[0].startswith("tier sizing at large:")  # no choice: the largest size timed
    assert headline({"rows": []}, None) == []
    parts = markdown(sec)
    assert parts["intro"][0] == "## Which tier is too small" and len(parts["heads"]) == len(parts["rows"][0])
    assert [r[:2] for r in parts["rows"]] == [["small", "-"], ["large", "-"]]  # L1 served no hit


@pytest.mark.parametrize("rows", [[], [None]])
def test_no_ages_no_section(rows):
    assert markdown(section([1], ["x"], lambda key: rows[0] if rows else None)) is None

"""Progress off a terminal is plain lines with the total, percent and time left, never carriage-return frames;
a short run prints none."""

import io

from sim.base.progress import PlainProgress, progress_bar


def test_off_a_terminal_each_line_has_the_total_the_percent_and_what_is_left():
    out = io.StringIO()
    bar = progress_bar(200, desc="quickstart", unit="requests", stream=out, every_s=0.0)
    assert isinstance(bar, PlainProgress)
    for _ in range(50):
        bar.update(1)
    bar.close()
    lines = out.getvalue().splitlines()
    assert "\r" not in out.getvalue() and len(lines) == 51
    assert lines[49].startswith("quickstart: 50/200 requests (25%), ") and "left" in lines[49]
    assert "left" not in lines[-1]  # the closing line: where it stopped


def test_a_run_shorter_than_the_interval_prints_nothing():
    out = io.StringIO()
    bar = progress_bar(10, desc="x", unit="shapes", stream=out, every_s=3600.0)
    bar.update(10)
    bar.close()
    assert out.getvalue() == ""


def test_a_resumed_count_starts_where_it_was_and_the_estimate_counts_only_new_work():
    out = io.StringIO()
    bar = PlainProgress(10, desc="sweep", unit="points", initial=8, stream=out, every_s=0.0)
    bar.update(1)
    assert out.getvalue().startswith("sweep: 9/10 points (90%)")


def test_track_yields_every_item_and_counts_them():
    from sim.base.progress import track

    assert list(track([1, 2, 3], desc="replay", unit="requests")) == [1, 2, 3]


def test_a_line_comes_every_interval_even_while_no_work_ends():
    """One run of a plan or of ``--seeds`` can take minutes: the promised line comes without an update."""
    import time

    out = io.StringIO()
    bar = PlainProgress(4, desc="plan", unit="runs", stream=out, every_s=0.2)
    time.sleep(0.7)  # the first of four runs still going
    bar.close()
    lines = out.getvalue().splitlines()
    assert len(lines) >= 3 and lines[0].startswith("plan: 0/4 runs (0%), ")

"""Page keys held as runs read as the list they stand for, and grow and shrink as a chain's calls do."""

import pytest

from sim.workload.pagekeys import PageRuns


def test_runs_read_back_as_the_keys_they_hold():
    keys = [1, 2, 3, 7, 8, -5, -4, 20]
    runs = PageRuns.of(keys)
    assert runs.runs == ((1, 3), (7, 2), (-5, 2), (20, 1))
    assert list(runs) == keys and len(runs) == 8 and runs == keys
    assert [runs[i] for i in range(-8, 8)] == keys + keys and runs[2:5] == keys[2:5]
    with pytest.raises(IndexError):
        runs[8]


def test_a_call_keeps_a_prefix_of_its_chain_and_appends_fresh_keys_as_one_run():
    first = PageRuns().then(1, 4)
    second = first.then(5, 3)  # contiguous: the run grows
    assert second.runs == ((1, 7),)
    third = second.prefix(5).then(30, 2)
    assert list(third) == [1, 2, 3, 4, 5, 30, 31] and third.runs == ((1, 5), (30, 2))
    assert list(first) == [1, 2, 3, 4]  # runs are values: a later call leaves the earlier one as it was
    assert second.prefix(0) == [] and second.prefix(99) == second

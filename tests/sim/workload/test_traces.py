"""The Mooncake reader's check of hash ids, read a whole line at a time, against the plain per-id rule."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.base.errors import InputError
from sim.workload.traces import read_mooncake

IDS = st.lists(st.one_of(st.integers(-(2**63), 2**63 - 1), st.booleans(), st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=2),
                         st.none()), min_size=2, max_size=6)  # fmt: skip


@settings(max_examples=60, deadline=None)
@given(ids=IDS)
def test_a_line_is_refused_for_its_first_id_that_is_not_an_integer(tmp_path_factory, ids):
    path = tmp_path_factory.mktemp("t") / "t.jsonl"
    path.write_text(json.dumps({"timestamp": 0, "input_length": 1000, "output_length": 1, "hash_ids": ids}) + "\n")
    first = next((h for h in ids if not isinstance(h, int) or isinstance(h, bool)), None)
    if first is None:
        assert read_mooncake(path)[0].keys == ids[:1]
        return
    with pytest.raises(InputError) as info:
        read_mooncake(path)
    assert str(info.value) == f"{path}:1: hash_ids: every id must be an integer, got {first!r}"

"""Property: whatever bytes or JSON a user gives as a measured file, the readers return a run or raise one
InputError naming the file; never another exception."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sim.base.errors import InputError
from sim.interop.measured import read_measured

DATA = Path(__file__).resolve().parents[3] / "data" / "measured"
LEAF = st.one_of(st.none(), st.booleans(), st.integers(-5, 10**20), st.floats(allow_nan=False), st.text(max_size=5))
JSON = st.recursive(LEAF, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
                    max_leaves=12)  # fmt: skip
M1 = Path(__file__).resolve().parents[4] / "scenarios" / "validation" / "measured"
TEMPLATES = [DATA / "profile_export_aiperf.json", M1 / "inferencex_2718_c128.json",
             DATA / "m3_h800_l1l2_bench_multiturn.jsonl", DATA / "aiperf_profile_export.jsonl",
             M1 / "m1a_off_c1_bench_serving.jsonl"]  # (of a JSON-lines file: its second line, a measured one)


def _read(path: Path) -> None:
    try:
        read_measured([str(path)])
    except InputError as exc:
        assert str(path) in str(exc) and "\n" not in str(exc)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=200))
def test_random_bytes(tmp_path, body):
    path = tmp_path / "m.json"
    path.write_bytes(body)
    _read(path)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(template=st.sampled_from(TEMPLATES), key=st.text(min_size=1, max_size=30), value=JSON, data=st.data())
def test_a_field_of_a_real_export_set_to_anything(tmp_path, template, key, value, data):
    lines = template.read_text().splitlines()
    doc = json.loads(lines[1] if len(lines) > 1 and template.suffix == ".jsonl" else template.read_text())
    node = doc
    for _ in range(data.draw(st.integers(0, 3))):  # walk into a nested object, then set one of its fields
        children = [k for k, v in node.items() if isinstance(v, dict)]
        if not children:
            break
        node = node[data.draw(st.sampled_from(children))]
    node[data.draw(st.sampled_from([*node, key]))] = value
    path = tmp_path / template.name
    path.write_text(json.dumps(doc))
    _read(path)

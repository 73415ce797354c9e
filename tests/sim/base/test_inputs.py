"""The input-structure rules every reader goes through (``sim.base.inputs``), and the schema-wide number rule."""

import json
import os
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import Field, ValidationError

from sim.base.errors import InputError
from sim.base.inputs import (
    MAX_FILE_BYTES,
    TRACE_ID_FIELDS,
    check_input,
    check_trace_record,
    count_lines,
    iter_lines,
    number_problem,
    numbers_problem,
    parse_json,
    parse_yaml,
    read_text,
)
from sim.scenario.schema import _Section


def error_of(fn, *args) -> str:
    with pytest.raises(InputError) as info:
        fn(*args)
    return str(info.value)


class TestYaml:
    def test_an_alias_bomb_is_refused_before_it_expands(self):
        bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8))  # 9^9 values
        start = time.perf_counter()
        assert "once its aliases are expanded" in error_of(parse_yaml, bomb, "s.yaml")
        assert time.perf_counter() - start < 2

    def test_deep_nesting_and_recursive_aliases_are_one_line_errors(self):
        assert "nested deeper than 64" in error_of(parse_yaml, "[" * 100 + "]" * 100, "s.yaml")
        assert "nested deeper than 64" in error_of(parse_yaml, "[" * 100_000, "s.yaml")
        assert "refers to a node that holds it" in error_of(parse_yaml, "a: &a [*a]", "s.yaml")

    def test_merge_keys_work_and_a_merged_key_may_be_overridden(self):
        data = parse_yaml("base: &b {kv_mem_gb: 0.2, tp_size: 2}\nhardware:\n  <<: *b\n  tp_size: 4\n", "s.yaml")
        assert data["hardware"] == {"kv_mem_gb": 0.2, "tp_size": 4}

    def test_a_duplicate_key_is_still_refused(self):
        assert error_of(parse_yaml, "a: 1\na: 2\n", "s.yaml") == "s.yaml:2: malformed YAML: duplicate key 'a'"

    @pytest.mark.parametrize("text", ["{a: 1\n b: [", "a: b: c", "? [1]\n: 2", "a: \x00", "a: " + "1" * 5000, "'"])
    def test_every_yaml_error_is_one_line(self, text):
        message = error_of(parse_yaml, text, "s.yaml")
        assert message.startswith("s.yaml") and "\n" not in message

    def test_1e9_reads_as_a_number(self):
        assert parse_yaml("a: 1e9", "s") == {"a": 1e9}


class TestFiles:
    def test_lines_are_counted_with_a_last_one_that_has_no_newline(self, tmp_path):
        (tmp_path / "a").write_bytes(b"x\n\ny\n")
        (tmp_path / "b").write_bytes(b"x\ny")
        (tmp_path / "c").write_bytes(b"")
        assert [count_lines(tmp_path / n, "trace") for n in "abc"] == [3, 2, 0]


    @pytest.fixture
    def huge(self, tmp_path):
        """A file of 65 MiB of zeros and no newline, sparse: it costs no disk."""
        path = tmp_path / "huge"
        with open(path, "wb") as fh:
            fh.truncate(MAX_FILE_BYTES + (1 << 20))
        return path

    def test_a_file_past_the_limit_is_refused_once_the_limit_is_read(self, huge):
        assert f"larger than {MAX_FILE_BYTES >> 20} MiB" in error_of(read_text, huge, "scenario")

    def test_a_line_past_the_limit_is_refused(self, huge):
        with pytest.raises(InputError, match=f"{huge}:1: line longer than 64 MiB"):
            next(iter_lines(huge, "trace"))

    def test_a_device_a_pipe_or_a_dangling_link_is_refused_before_it_is_opened(self, tmp_path):
        os.mkfifo(tmp_path / "p")  # opening it would wait for a writer forever
        (tmp_path / "l").symlink_to(tmp_path / "gone")
        assert error_of(read_text, "/dev/zero", "scenario") == \
            "/dev/zero: cannot read scenario: a character device, not a regular file"  # fmt: skip
        assert "cannot read trace: a named pipe (FIFO), not a regular file" in error_of(read_text, tmp_path / "p", "trace")
        assert f"a symbolic link to {tmp_path / 'gone'}, which does not exist" in error_of(read_text, tmp_path / "l", "x")
        assert error_of(read_text, tmp_path, "trace") == f"{tmp_path}: cannot read trace: a folder, not a file"
        assert check_input(tmp_path, "corpus", folder=True) == tmp_path

    def test_json_nesting_constants_and_overflow_are_one_line_errors(self):
        assert "nested too deeply" in error_of(parse_json, "[" * 100_000 + "]" * 100_000, "t.jsonl", )
        assert "NaN is not a number JSON allows" in error_of(parse_json, '{"a": NaN}', "t")
        assert "too large" in error_of(parse_json, '{"a": 1e999}', "t")
        assert "over 4,300 digits" in error_of(parse_json, "1" * 5000, "t")


class TestNumbers:
    @pytest.mark.parametrize("value", [float("nan"), float("inf"), 1e308, 10**400, -1e16, 1e-300, -1e-7])
    def test_out_of_bounds_numbers_are_named(self, value):
        assert number_problem(value) is not None

    @pytest.mark.parametrize("value", [0, 0.0, 1, -1, 1e-6, 1e15, 2.6e10, True, "x", None])
    def test_real_quantities_and_non_numbers_pass(self, value):
        assert number_problem(value) is None

    def test_a_trace_names_a_nested_field_as_its_json_reads_and_a_set_key_as_it_is_typed(self):
        """Trace messages index lists as the Weka reader does (``requests[1].requests[0].t``); a scenario's
        numbers as a ``--set`` key spells them (``model.pools.0.bytes_per_page``)."""
        rec = {"requests": [{"t": 0}, {"requests": [{"t": 1e300}], "hash_ids": [2**70]}]}
        assert error_of(check_trace_record, rec, "w.jsonl", 3).startswith("w.jsonl:3: requests[1].requests[0].t: ")
        assert numbers_problem({"model": {"pools": [{"bytes_per_page": 1e300}]}})[0] == "model.pools.0.bytes_per_page"

    def test_a_measured_time_may_be_below_a_microsecond(self):
        assert number_problem(1e-8, floor=False) is None and number_problem(1e-8) is not None

    def test_a_section_field_added_later_is_bounded_with_no_change_to_the_rule(self):
        class NewSection(_Section):  # as another helper would add one: no bound of its own
            rate_per_s: float = Field(1.0, description="a new field")
            caps: dict[str, int] | None = None

        assert NewSection(rate_per_s=2.5).rate_per_s == 2.5
        for bad in ({"rate_per_s": 1e-300}, {"rate_per_s": 1e308}, {"caps": {"x": 10**20}}):
            with pytest.raises(ValidationError, match="out of range"):
                NewSection(**bad)

    def test_a_fields_own_bound_speaks_first(self):
        class Bounded(_Section):
            share: float = Field(0.5, ge=0.01, le=1)

        with pytest.raises(ValidationError, match="greater than or equal to 0.01"):
            Bounded(share=1e-9)


class TestTraceLineFastPaths:
    """A trace line's parse and number check take shortcuts (one shared decoder; flat records passed without
    the nested walk) that must agree with the plain rules on every line, good or bad."""

    SHIPPED = sorted(Path(__file__).resolve().parents[3].glob("data/*.jsonl"))
    SHARED = sorted(Path("/work/shared/traces").glob("*.jsonl"))

    @pytest.mark.parametrize("path", SHIPPED + SHARED, ids=lambda p: p.name)
    def test_every_line_of_the_shipped_traces_parses_as_json_loads_reads_it(self, path):
        for n, _, line in iter_lines(path, "trace"):
            rec = parse_json(line, str(path), line=n)
            assert rec == json.loads(line) and repr(rec) == repr(json.loads(line))
            check_trace_record(rec, str(path), n)

    def test_a_byte_order_mark_is_refused_as_json_loads_refuses_it(self):
        with pytest.raises(InputError) as info:
            parse_json('\ufeff{"a": 1}', "t.jsonl", line=2)
        assert str(info.value) == "t.jsonl:2: malformed JSON: Unexpected UTF-8 BOM (decode using utf-8-sig)"

    @given(st.dictionaries(
        st.sampled_from(["timestamp", "input_length", "hash_ids", "id", "arrival_time_ns", "x", "chat_id"]),
        st.one_of(st.integers(-(10**20), 10**20), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                  st.none(), st.text(max_size=3), st.lists(st.integers(-(10**20), 10**20), max_size=3),
                  st.dictionaries(st.sampled_from(["t", "id"]), st.floats(), max_size=2)),
        max_size=5))  # fmt: skip
    def test_a_record_is_refused_exactly_when_the_walk_finds_a_number_out_of_range(self, rec):
        found = numbers_problem(rec, floor=False, skip=TRACE_ID_FIELDS, brackets=True)
        if found is None:
            check_trace_record(rec, "t.jsonl", 1)
        else:
            assert error_of(check_trace_record, rec, "t.jsonl", 1) == f"t.jsonl:1: {found[0]}: {found[1]}"

"""``origins:`` (where ``scenario from-sglang`` says each value came from) is checked at every segment against the
schema, names only fields the scenario sets, and is printed through the one sanitiser."""

from __future__ import annotations

import pytest
import yaml

from sim.base.errors import InputError
from sim.scenario.load import scenario_from_dict
from sim.scenario.validate import validate_file

BASE = {"name": "o", "hardware": {"kv_mem_gb": 0.2, "tp_size": 1},
        "workload": {"kind": "multi_turn", "num_clients": 2, "max_parallel": 2, "request_length": 64,
                     "output_length": 4, "num_rounds": 2, "request_rate": None}}  # fmt: skip


def _with(origins: dict) -> dict:
    return {**BASE, "origins": origins}


@pytest.mark.parametrize("key", ["hardware.nonexistent_field", "hardware.tp_size.deeper", "workload.nope",
                                 "origins.x", "model.pools.0.bogus"])  # fmt: skip
def test_an_origin_for_no_field_of_the_schema_is_refused_at_any_segment(key):
    with pytest.raises(InputError, match=rf"origins.{key}: not a scenario field path"):
        scenario_from_dict(_with({key: "--tp 1"}), source="s.yaml")


@pytest.mark.parametrize("key", ["hardware.ep_size", "hicache.page_size", "hardware.gpu_mem_gb"])
def test_an_origin_for_a_field_left_at_its_default_is_refused(key):
    with pytest.raises(InputError, match=rf"origins.{key}: {key} is not set in this scenario"):
        scenario_from_dict(_with({key: "--flag"}), source="s.yaml")


def test_an_origin_for_a_field_the_scenario_sets_is_kept():
    assert scenario_from_dict(_with({"hardware.tp_size": "--tp 1"}), source="s.yaml").origins == {
        "hardware.tp_size": "--tp 1"}


def test_an_origin_holding_control_characters_prints_as_escapes(tmp_path):
    doc = {**BASE, "hardware": {**BASE["hardware"], "max_total_num_tokens": 4096},
           "origins": {"hardware.max_total_num_tokens": "log:1\n  pools    forged\x1b[2J\rX"}}  # fmt: skip
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    plain = {**doc, "origins": {"hardware.max_total_num_tokens": "log:1"}}
    path2 = tmp_path / "p.yaml"
    path2.write_text(yaml.safe_dump(plain))
    text = validate_file(path)
    assert "\x1b" not in text and "\r" not in text
    assert "\\x1b[2J" in text and "\\n  pools    forged" in text
    assert len(text.splitlines()) == len(validate_file(path2).splitlines())

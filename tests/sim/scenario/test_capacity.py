"""Where each capacity comes from: a logged pool replaces the derived one, --max-total-tokens caps it, and the
SWA pool's share follows SGLang's rule for the mode it is in."""

from __future__ import annotations

import pytest

from sim.base.errors import InputError
from sim.scenario.capacity import host_pages, logged_device_pools, logged_mismatches
from sim.scenario.load import build_model_spec, scenario_from_dict


def v4(hardware=None, hicache=None):
    return scenario_from_dict({"name": "c", "model": "deepseek-v4-flash", "hardware": {"kv_mem_gb": 40, **(hardware or {})},
                               "hicache": {"page_size": 256, **(hicache or {})}})  # fmt: skip


def test_without_a_logged_pool_the_derived_one_stands():
    assert logged_device_pools(v4(), 1000, 0.1) == (1000, 0.1)


def test_a_logged_full_pool_replaces_it_and_a_logged_swa_pool_gives_its_share():
    sc = v4({"max_total_num_tokens": 512_000, "swa_max_total_num_tokens": 25_600})
    assert logged_device_pools(sc, 1000, 0.1) == (2000, 0.05)


def test_in_ratio_mode_the_swa_pool_follows_the_full_pool_and_in_cap_mode_keeps_its_tokens():
    assert logged_device_pools(v4({"max_total_num_tokens": 512_000}), 1000, 0.1) == (2000, 0.1)
    cap = v4({"max_total_num_tokens": 512_000}, {"swa_full_tokens_ratio": "cap"})
    assert logged_device_pools(cap, 1000, 0.1) == (2000, 0.05)


def test_max_total_tokens_caps_only_a_larger_pool_rounded_down_to_pages():
    sc = v4({"max_total_tokens": 100_000})
    assert logged_device_pools(sc, 1000, 0.1) == (390, 0.1)
    assert logged_device_pools(sc, 300, 0.1) == (300, 0.1)


def test_a_logged_pool_under_one_page_is_refused_naming_the_field():
    with pytest.raises(InputError, match="hardware.max_total_num_tokens: 100 tokens is less than one 256-token page"):
        logged_device_pools(v4({"max_total_num_tokens": 100}), 1000, 0.1)


def test_logged_host_pages_are_taken_as_they_are():
    sc = v4(hicache={"host_pages": 5000, "host_swa_pages": 300})
    assert host_pages(sc, build_model_spec(sc), 1000, 0.1) == (5000, 300)
    sc = v4(hicache={"hicache_ratio": 3})
    assert host_pages(sc, build_model_spec(sc), 1000, 0.1) == (3000, 300)  # int(100 SWA device pages x 3)


def test_a_derivation_within_a_page_of_the_log_is_not_reported():
    sc = v4({"max_total_num_tokens": 256_000})
    assert logged_mismatches(sc, 1000, 0.1) == []
    assert logged_mismatches(sc, 1002, 0.1)[0].startswith("Full pool: derived 256,512 tokens")

"""The model catalog: which pools a model registers with HiCache and how many bytes each holds per page.

Figures are those of ``shared/reference/sglang_hicache.md`` (DESIGN.md section 1.1): bytes per 256-token page
per rank, V4-Flash matching the measured ``page_bytes=9158208``.
"""

import pytest

from sim.base.errors import InputError
from sim.model.pools import CATALOG, HitPolicy, get_model, model_from_dict, pool_table

V4_FLASH_PAGE_BYTES = {
    "kv": 0,
    "swa": 6_439_680,
    "c4": 786_240,
    "c4_indexer": 177_408,
    "c128": 34_560,
    "c4_state": 1_376_256,
    "c4_indexer_state": 344_064,
}

# V4-Flash described by its layer structure, as a model YAML would: no totals typed in.
V4_FLASH_AS_DICT = {
    "name": "v4-flash-from-yaml",
    "page_size": 256,
    "sliding_window": 128,
    "pools": [
        {"name": "kv", "layers": 0},
        {"name": "swa", "anchor": "swa", "layers": 43, "bytes_per_slot": 584, "align": 576},
        {"name": "c4", "layers": 21, "compress_ratio": 4, "bytes_per_slot": 584, "align": 576},
        {"name": "c4_indexer", "layers": 21, "compress_ratio": 4, "bytes_per_slot": 132},
        {"name": "c128", "layers": 20, "compress_ratio": 128, "bytes_per_slot": 584, "align": 576},
        {"name": "c4_state", "anchor": "swa", "layers": 21, "ring_rows": 8, "row_bytes": 2 * 2 * 512 * 4},
        {
            "name": "c4_indexer_state",
            "anchor": "swa",
            "layers": 21,
            "ring_rows": 8,
            "row_bytes": 2 * 2 * 128 * 4,
        },
    ],
}


def page_bytes(model):
    return {p.name: p.bytes_per_page for p in model.pools}


class TestV4Flash:
    model = get_model("deepseek-v4-flash")

    def test_registers_seven_pools_in_sglang_order(self):
        assert [p.name for p in self.model.pools] == list(V4_FLASH_PAGE_BYTES)

    def test_a_256_token_page_is_the_measured_9158208_bytes(self):
        assert self.model.page_size == 256
        assert self.model.bytes_per_page == 9_158_208

    def test_each_pool_matches_the_reference_table(self):
        assert page_bytes(self.model) == V4_FLASH_PAGE_BYTES

    def test_the_two_state_rings_sum_to_the_reference_figure(self):
        by = page_bytes(self.model)
        assert by["c4_state"] + by["c4_indexer_state"] == 1_720_320

    def test_the_kv_anchor_holds_no_bytes(self):
        kv = self.model.pool("kv")
        assert kv.is_anchor and kv.bytes_per_page == 0

    def test_swa_anchored_pools_judge_hits_by_trailing_pages_and_kv_anchored_by_all_pages(self):
        for pool in self.model.pools:
            expected = HitPolicy.TRAILING_PAGES if pool.anchor == "swa" else HitPolicy.ALL_PAGES
            assert pool.hit_policy is expected, pool.name
        assert {p.name for p in self.model.pools if p.anchor == "swa"} == {
            "swa",
            "c4_state",
            "c4_indexer_state",
        }

    def test_c128_state_is_not_registered(self):
        assert "c128_state" not in page_bytes(self.model)

    def test_has_a_128_token_sliding_window(self):
        assert self.model.has_swa and self.model.sliding_window == 128


class TestOtherCatalogModels:
    def test_v4_pro_page_is_13023168_bytes(self):
        model = get_model("deepseek-v4-pro")
        by = page_bytes(model)
        assert model.bytes_per_page == 13_023_168
        assert (by["swa"], by["c4"], by["c4_indexer"], by["c128"]) == (9_135_360, 1_123_200, 253_440, 53_568)
        assert by["c4_state"] + by["c4_indexer_state"] == 2_457_600

    def test_v41_flash_registers_eight_pools_and_no_state_rings(self):
        model = get_model("deepseek-v4.1-flash")
        names = [p.name for p in model.pools]
        assert names == [
            "kv",
            "swa",
            "c1",
            "c1_indexer",
            "c1_indexer_scale",
            "c2",
            "c2_indexer",
            "c2_indexer_scale",
        ]
        assert not any("state" in n for n in names)

    def test_v41_flash_page_is_5634560_bytes_and_890_bytes_per_token_kv_anchored(self):
        model = get_model("deepseek-v4.1-flash")
        by = page_bytes(model)
        assert model.bytes_per_page == 5_634_560
        assert by["swa"] == 5_406_720
        assert (by["c2"], by["c2_indexer"] + by["c2_indexer_scale"]) == (110_592, 26_112)
        assert (by["c1"], by["c1_indexer"] + by["c1_indexer_scale"]) == (73_728, 17_408)
        assert model.group_bytes_per_page("kv") / model.page_size == 890

    def test_v4_flash_keeps_3899_bytes_per_token_of_global_kv(self):
        # NOTE: 3,899.25 / 890 = 4.38x, not the seed's "3.9x": the seed's V4-Flash figure is not ours.
        v4 = get_model("deepseek-v4-flash")
        assert v4.group_bytes_per_page("kv") / v4.page_size == 3899.25

    def test_generic_is_one_kv_pool_with_bytes(self):
        model = get_model("generic", page_size=4, bytes_per_token=100)
        assert [(p.name, p.bytes_per_page) for p in model.pools] == [("kv", 400)]
        assert not model.has_swa

    def test_an_unknown_model_is_an_input_error_listing_the_known_ones(self):
        with pytest.raises(InputError, match="unknown model 'nope'.*deepseek-v4-flash"):
            get_model("nope")

    @pytest.mark.parametrize("name", sorted(CATALOG))
    def test_a_smaller_page_never_holds_more_bytes_in_any_pool(self, name):
        small, big = get_model(name, page_size=128), get_model(name, page_size=256)
        assert small.bytes_per_page < big.bytes_per_page
        for a, b in zip(small.pools, big.pools):
            assert a.bytes_per_page <= b.bytes_per_page, a.name


class TestDeviceSizing:
    def test_a_full_page_costs_its_kv_group_plus_a_tenth_of_its_swa_group(self):
        model = get_model("deepseek-v4-flash")
        per_page = 786_240 + 177_408 + 34_560 + 0.1 * (6_439_680 + 1_720_320)
        assert model.device_pages_for_bytes(per_page * 1000) == 1000
        assert model.device_pages_for_bytes(per_page * 1000 - 1) == 999

    def test_a_larger_swa_ratio_leaves_fewer_full_pages(self):
        model = get_model("deepseek-v4-flash")
        assert model.device_pages_for_bytes(60e9, 0.5) < model.device_pages_for_bytes(60e9, 0.1)

    def test_a_model_without_bytes_cannot_be_sized(self):
        model = model_from_dict({"page_size": 1, "pools": [{"name": "kv", "bytes_per_page": 0}]})
        with pytest.raises(InputError, match="no bytes per page"):
            model.device_pages_for_bytes(1e9)


class TestModelFromDict:
    def test_layer_structure_gives_the_catalog_bytes(self):
        model = model_from_dict(V4_FLASH_AS_DICT)
        assert page_bytes(model) == page_bytes(get_model("deepseek-v4-flash"))
        assert model.bytes_per_page == 9_158_208

    def test_hit_policy_defaults_follow_the_anchor(self):
        model = model_from_dict(V4_FLASH_AS_DICT)
        assert model.pool("c4_state").hit_policy is HitPolicy.TRAILING_PAGES
        assert model.pool("c4").hit_policy is HitPolicy.ALL_PAGES

    def test_explicit_bytes_per_page_and_flags_are_kept(self):
        model = model_from_dict({
            "page_size": 64,
            "pools": [{"name": "kv", "bytes_per_page": 1000, "backupable": False, "rank_replicated": False}],
        })  # fmt: skip
        kv = model.pool("kv")
        assert (kv.bytes_per_page, kv.backupable, kv.rank_replicated) == (1000, False, False)

    @pytest.mark.parametrize(
        ("bad", "message"),
        [
            ({"pools": [{"name": "kv", "bytes_per_page": 1}]}, "missing field 'page_size'"),
            ({"page_size": 256}, "missing field 'pools'"),
            ({"page_size": 256, "pools": [{"bytes_per_page": 1}]}, "missing field 'name'"),
            ({"page_size": 0, "pools": [{"name": "kv", "bytes_per_page": 1}]}, "page_size must be > 0"),
            ({"page_size": "big", "pools": []}, "model:"),
            (
                {"page_size": 256, "pools": [{"name": "c4", "anchor": "c4", "bytes_per_page": 1}]},
                "needs a 'kv' anchor",
            ),
            (
                {"page_size": 256, "pools": [{"name": "kv", "bytes_per_page": -1}]},
                r"pools\[0\].bytes_per_page",
            ),
            ({"page_size": 256, "pools": [{"name": "kv", "layers": -2}]}, "layers: must be >= 0"),
            ({"page_size": 256, "pools": [{"name": "kv", "layers": "many"}]}, "model:"),
            (
                {
                    "page_size": 256,
                    "pools": [{"name": "kv", "layers": 1, "compress_ratio": 3, "bytes_per_slot": 8}],
                },
                "not a multiple of compress_ratio 3",
            ),
            (
                {
                    "page_size": 256,
                    "pools": [{"name": "kv", "bytes_per_page": 0}, {"name": "kv", "bytes_per_page": 0}],
                },
                "duplicate pool names",
            ),
            (
                {
                    "page_size": 256,
                    "pools": [
                        {"name": "kv", "bytes_per_page": 0},
                        {"name": "s", "anchor": "swa", "bytes_per_page": 9},
                    ],
                },
                "unknown anchor 'swa'",
            ),  # fmt: skip
            (
                {
                    "page_size": 256,
                    "pools": [{"name": "kv", "bytes_per_page": 0, "hit_policy": "SOME_PAGES"}],
                },
                "SOME_PAGES",
            ),
        ],
    )
    def test_a_bad_description_is_an_input_error_naming_what_is_wrong(self, bad, message):
        with pytest.raises(InputError, match=message):
            model_from_dict(bad, source="model.yaml")

    def test_errors_name_the_source_file(self):
        with pytest.raises(InputError, match="^model.yaml: "):
            model_from_dict({"page_size": 256}, source="model.yaml")


class TestPoolTable:
    def test_lists_every_pool_and_the_total(self):
        text = pool_table(get_model("deepseek-v4-flash"))
        for name, nbytes in V4_FLASH_PAGE_BYTES.items():
            (row,) = [line for line in text.splitlines() if line.split()[:1] == [name]]
            assert f"{nbytes:,}" in row
        (total,) = [line for line in text.splitlines() if line.startswith("total")]
        assert "9,158,208" in total
        assert text.splitlines()[0].startswith("deepseek-v4-flash: 7 pools, page_size 256")

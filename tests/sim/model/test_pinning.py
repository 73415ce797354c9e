"""The pinnable ceiling of a platform, by rule: none beyond DRAM on CUDA, the GTT's half of DRAM on ROCm."""

import pytest

from sim.model.pinning import ROCM_GTT_SHARE, PinCeiling, platform_ceiling


def test_cuda_pins_any_free_page_so_only_dram_bounds_the_pools():
    c = platform_ceiling("cuda", 2048.0, "hardware.host_mem_gb")
    assert c.gb is None and c.fits(10**15)
    assert "CUDA" in c.source and "hardware.host_mem_gb (2048 GB)" in c.source


@pytest.mark.parametrize("dram", [2048.0, 3000.0, 12.5])
def test_rocm_pins_into_the_gtt_whose_default_is_half_of_the_nodes_dram(dram):
    c = platform_ceiling("rocm", dram, "--node-dram-gb")
    assert ROCM_GTT_SHARE == 0.5 and c.gb == dram / 2
    assert "ROCm" in c.source and "GTT" in c.source and "--node-dram-gb" in c.source


def test_a_ceiling_fits_up_to_its_bytes_and_not_one_past():
    c = PinCeiling(3.0, "hardware.pinnable_gb")
    assert c.fits(3 * 10**9) and not c.fits(3 * 10**9 + 1)
    assert c.as_dict() == {"pinnable_gb": 3.0, "source": "hardware.pinnable_gb"}

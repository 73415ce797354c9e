"""How much host memory a platform lets a node pin for HiCache's host pools: the default ceiling, by rule.

SGLang checks a host pool only against the memory it finds free (``mem_cache/pool_host/base.py:84-108``, 10 GiB
reserve); whether the pages can then be pinned is the driver's business, and a pool over the driver's limit
fails at start after that check passed (InferenceX #2146: ``cudaHostRegister failed (rc=1, invalid argument)``
for a 531 GB pool on an MI355X node of ~2.4 TiB). SGLang pins a host pool with ``cudaHostRegister``
(``hipHostRegister`` on ROCm), or, on ROCm with ``HSA_USERPTR_FOR_PAGED_MEM=0``, allocates it with
``hipHostMalloc`` (``mem_cache/pool_host/common.py:143-199, 263-350``).

- **CUDA**: the driver pins any free page (no ceiling beyond DRAM), so SGLang's own check is the bound: no
  default ceiling. One registration call of 512 GiB or more fails on R580+ drivers (a per-call page-table
  limit, NVIDIA open-gpu-kernel-modules #1234, vLLM #51080), which SGLang's chunking of large pools avoids
  (``SGLANG_HICACHE_HOST_REGISTER_CHUNK_GB`` = 256, ``srt/environ.py:819``; ``pool_host/common.py:143-171``).
- **ROCm**: pinned host memory is mapped into the GPU's GTT, whose size defaults to half the node's RAM
  (Linux ``ttm_device.c`` ``ttm_global_init``: the TTM page limit is half of total RAM; ``amdgpu_ttm.c``
  ``amdgpu_ttm_init``: ``gtt_size = ttm_tt_pages_limit()`` unless ``amdgpu.gttsize`` / ``ttm.pages_limit`` set
  it; ``amdgpu_gtt_mgr.c`` refuses past it). SGLang's own error for its GTT pools says all ranks on a node share
  ``mem_info_gtt_total`` (``pool_host/common.py:268-275``). KFD's userptr limit (``amdgpu_amdkfd_gpuvm.c``,
  RAM less 1/64 less 1.5 GiB) is looser. The default is therefore half of the node's DRAM, for all its ranks
  together: an assumption from the kernel's defaults, not a measurement; set the node's
  ``/sys/class/drm/card0/device/mem_info_gtt_total`` where it differs. #2146 is consistent with it without
  pinning it down: ratio 8 (531 GB a rank on 8 ranks) failed, and the recipe lowered its ratio.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PLATFORMS", "ROCM_GTT_SHARE", "PinCeiling", "platform_ceiling"]

PLATFORMS = ("cuda", "rocm")
ROCM_GTT_SHARE = 0.5  # the TTM page limit (and so amdgpu's default GTT size): half of total RAM, ttm_device.c


@dataclass(frozen=True)
class PinCeiling:
    """The host bytes one node (one instance: all its ranks) may pin, and the field or rule that set it.
    ``gb`` None: no ceiling beyond DRAM (SGLang's own check against the memory it finds free)."""

    gb: float | None
    source: str

    def fits(self, pinned_bytes: int) -> bool:
        return self.gb is None or pinned_bytes <= self.gb * 1e9

    def as_dict(self) -> dict:
        return {"pinnable_gb": self.gb, "source": self.source}


def platform_ceiling(platform: str, node_dram_gb: float, dram_field: str) -> PinCeiling:
    """The default ceiling of ``platform`` (cuda or rocm) on a node of ``node_dram_gb`` (named ``dram_field``
    where the user set it): none on CUDA, the GTT's default share of DRAM on ROCm."""
    if platform == "rocm":
        return PinCeiling(node_dram_gb * ROCM_GTT_SHARE,
                          f"ROCm default: half of {dram_field} ({node_dram_gb:g} GB), amdgpu's GTT size")  # fmt: skip
    return PinCeiling(None, f"CUDA default: none beyond {dram_field} ({node_dram_gb:g} GB)")

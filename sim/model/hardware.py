"""The GPU catalog, and the KV memory SGLang leaves for the pools on one of them.

Figures are datasheet numbers with their sources in ``sim/data/hardware.json`` (each GPU's ``source``): the dense
peak FLOPs and HBM bandwidth the roofline and the kernel transfer (:mod:`sim.model.transfer`) read come from
NVIDIA's H100/H200/H800 SXM, H20, DGX/HGX B200, HGX B300, GB200 NVL72 and Blackwell Ultra (GB300 NVL72)
datasheets, AMD's Instinct MI300X, MI325X and MI355X datasheets (their Infinity Fabric link counts and rates
give ``link_gbps``), and for the RTX PRO 6000 Server Edition from aiconfigurator-core 0.12.0's
``systems/rtx_pro_6000_server.yaml``, the host its kernels were timed on. The KV budget follows
SGLang 0.5.23: the static fraction of GPU memory (``--mem-fraction-static``, or the default rule of
``arg_groups/memory_hook.py:281-345``) holds weights and KV pools, so the pools get that fraction of the
memory minus the weights each rank holds (``mem_cache/kv_cache_configurator.py:2990-3007``: free memory
after loading, less ``(1 - mem_fraction_static)`` of the memory before loading).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

from sim.base.errors import InputError

__all__ = ["GPU", "NODE_DRAM_GB", "SGLANG_DEFAULTS", "default_mem_fraction_static", "get_gpu", "gpu_names", "kv_budget_bytes"]

# SGLang versions whose default memory rules are known here: 0.5.23 (the version modelled) and 0.5.2 (older
# published runs, e.g. Mooncake's HiCache benchmark), whose rules differ (``srt/server_args.py:452-518`` there).
SGLANG_DEFAULTS = ("0.5.23", "0.5.2")

MIB = 1 << 20

# Host DRAM available on a node, GB, where nothing says otherwise: the one default of every command (a scenario's
# hardware.host_mem_gb, plan's --node-dram-gb, from-sglang's --host-mem-gb). SGLang reads the node's available
# memory at start (``mem_cache/pool_host/base.py:84-108``), which a simulation has no node to read; 2 TB is an
# 8-GPU DGX H100 / H200 node's system memory. Set it for the node you run.
NODE_DRAM_GB = 2048.0


@dataclass(frozen=True)
class GPU:
    name: str
    hbm_gb: float
    memory_mib: float
    hbm_tbps: float
    tflops: dict[str, float]
    host_link: str
    host_link_gbps: float
    link_gbps: float  # GPU-to-GPU (scale-up) link, GB/s one way: what collectives ride
    source: str

    def peak_tflops(self, dtype: str) -> float:
        """Dense peak for a compute dtype; a dtype the GPU lacks (fp8 on an A10) runs at its bf16 rate."""
        return self.tflops.get(dtype) or self.tflops.get("bf16") or max(self.tflops.values())


@cache
def _catalog() -> dict[str, dict]:
    return json.loads(resources.files("sim").joinpath("data", "hardware.json").read_text())["gpus"]


def gpu_names() -> tuple[str, ...]:
    return tuple(_catalog())


def get_gpu(name: str) -> GPU:
    key = next((k for k in _catalog() if k.lower() == name.lower()), None)
    if key is None:
        raise InputError(f"unknown GPU {name!r} (known: {', '.join(_catalog())})")
    d = _catalog()[key]
    return GPU(key, d["hbm_gb"], d["memory_mib"], d["hbm_tbps"], dict(d["tflops"]), d["host_link"],
               d["host_link_gbps"], d["link_gbps"], d["source"])  # fmt: skip


def _decode_graph_max_bs(memory_mib: float, tp_size: int, max_running_requests: int | None) -> int:
    """Decode CUDA-graph max batch by memory tier (memory_hook.py:89-178), capped by max_running_requests."""
    if memory_mib < 20 * 1024:
        bs = 8
    elif memory_mib < 35 * 1024:
        bs = 48 if tp_size < 4 else 160
    elif memory_mib < 60 * 1024:
        bs = 32 if tp_size < 4 else 160
    elif memory_mib < 160 * 1024:
        bs = 256 if tp_size < 4 else 512
    else:
        bs = 512
    return min(bs, max_running_requests) if max_running_requests else bs


def default_chunked_prefill_size(memory_mib: float, version: str = "0.5.23") -> int:
    """SGLang's default ``--chunked-prefill-size`` by memory tier (memory_hook.py:89-170; 0.5.2:
    ``server_args.py:509-518``)."""
    if version == "0.5.2":
        return 2048 if memory_mib < 35 * 1024 else 8192 if memory_mib < 160 * 1024 else 16384
    if memory_mib < 20 * 1024:
        return 2048
    if memory_mib < 90 * 1024:
        return 4096 if memory_mib < 60 * 1024 else 8192
    return 8192 if memory_mib < 160 * 1024 else 16384


def _prefill_graph_sizes(max_bs: int) -> int:
    """How many prefill CUDA-graph token buckets are captured up to ``max_bs`` (cuda_graph_hook.py:480-497)."""
    sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64),
             *range(1280, 4097, 256), *range(4608, max_bs + 1, 512)]  # fmt: skip
    return sum(1 for s in sizes if s <= max_bs)


def default_mem_fraction_static(gpu: GPU, *, tp_size: int = 1, pp_size: int = 1, chunked_prefill_size: int | None = None,
                                max_running_requests: int | None = None, mla: bool = False,
                                version: str = "0.5.23", attn_dp_size: int = 1) -> float:  # fmt: skip
    """SGLang's ``mem_fraction_static`` when none is given.

    0.5.23 (memory_hook.py:281-345, 357-399), the CUDA path with its defaults: post-capture KV sizing off
    (environ.py:640), decode graphs on, the breakable prefill graphs on (cuda_graph_config.py:119-123), no DP
    attention, DeepEP or XPU terms. Reserved MiB = 512 + 1.5 x max(chunk, 2048) + TP x PP / 8 x 1024 + 2 x
    decode graph max bs + the prefill graphs (8 per bucket; 1.5 GiB with an MLA backend), at least 10 GiB
    above 60 GiB of memory. DP attention adds 3 x decode graph max bs x attention-DP ranks, and 1.5 x more
    above a max bs of 300 (memory_hook.py:370-378). 0.5.2 (``server_args.py:452-496``): a reserve by memory tier, no speculative
    decoding or DP attention.
    """
    mem = gpu.memory_mib
    if version == "0.5.2":
        parallel = tp_size * pp_size
        if mem < 35 * 1024:
            reserved = (2.8 + parallel / 10) * 1024
        elif mem < 90 * 1024:
            reserved = (9.5 + parallel / 2) * 1024
        elif mem < 160 * 1024:
            reserved = (12 + parallel / 2) * 1024
        else:
            reserved = 32 * 1024
        return round((mem - reserved) / mem, 3)
    chunk = chunked_prefill_size or default_chunked_prefill_size(mem)
    reserved = 512 + max(chunk, 2048) * 1.5 + tp_size * pp_size / 8 * 1024
    max_bs = _decode_graph_max_bs(mem, tp_size, max_running_requests)
    reserved += max_bs * 2
    if attn_dp_size > 1:
        reserved += max_bs * attn_dp_size * (3 + (1.5 if max_bs > 300 else 0))
    reserved += 1.5 * 1024 if mla else _prefill_graph_sizes(min(chunk, 8192) if mla else chunk) * 8
    if mem > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    return round((mem - reserved) / mem, 3)


def kv_budget_bytes(gpu: GPU, mem_fraction_static: float, weight_bytes_per_rank: float) -> float:
    """Bytes per rank SGLang gives the KV pools: the static share of memory, less the weights on the rank."""
    return gpu.memory_mib * MIB * mem_fraction_static - weight_bytes_per_rank

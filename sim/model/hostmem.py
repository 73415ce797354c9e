"""Pinned host memory of a HiCache setup, pool by pool, against the node's DRAM and SGLang's own checks.

The host pools are sized as the simulator sizes them (``sim.scenario.resolve.resolve``): Full-anchored pools hold
``int(L1 Full pages x --hicache-ratio)`` pages, or ``--hicache-size`` GB over the bytes of a page of all pools
(``sim.interop.fromsglang``); SWA-anchored pools the same share of theirs as on the device (``sim.offline.replay.v4_cache``).
A single-pool model's host pool also gets SGLang's padding page (``page_num = size // page_size + 1``,
``srt/mem_cache/pool_host/base.py:224-226``); DeepSeek-V4's paged host pools hold exactly
``int(device pages x ratio)`` pages, Full-anchored pools on the Full count and SWA-anchored on the SWA count
(``mem_cache/hybrid_cache/hybrid_pool_assembler.py:647-676``; ``memory_pool_host.py:276-279``). Every rank
pins its own copy: DeepSeek-V4's pools are replicated on every TP rank, and a model read from
``config.json`` is sized per rank already.

SGLang 0.5.23's guard rails (``srt/`` paths):

- a rank may pin the host's available memory less a 10 GiB reserve, split evenly over the ranks on the host
  (``mem_cache/pool_host/base.py:28, 84-108``); a pool past that raises "Not enough host memory available.
  Requesting X GB but only have Y GB free. Please reduce the size of the hierarchical cache."
  (``base.py:248-257``), and pools are booked one after another against one budget (``base.py:58-66, 98-102``);
- with neither ``--hicache-ratio`` nor ``--hicache-size`` the default ratio (2.0) is lowered until the pools
  fit ``--hicache-host-memory-fraction`` (0.8) of that budget, less 5% slack
  (``mem_cache/hicache_auto_size.py:86-118``; ``arg_groups/fields/memory.py:109-121``;
  ``arg_groups/hicache_hook.py:100-126``);
- a host pool no larger than its device pool starts with a warning that L2 is of little use
  (``base.py:238-246``; not for DeepSeek-V4, whose paged pools are built without it,
  ``memory_pool_host.py:236-296``);
- DeepSeek-V4 checks each paged pool as it pins it ("Not enough host memory for V4 paged pool NAME...",
  ``memory_pool_host.py:289-296``), refuses ``--hicache-size`` ("DeepSeek V4 HiCache currently does not
  support --hicache-size; use --hicache-ratio instead.", ``hybrid_pool_assembler.py:660-664``), and cannot be
  auto-sized: its pool is not one the auto-sizer knows, so HiCache without ``--hicache-ratio`` does not start
  ("HiCache auto-sizing does not support DeepSeekV4TokenToKVPool; set --hicache-ratio or --hicache-size
  explicitly.", ``mem_cache/hicache_auto_size.py:63-72``, entered at ``kv_cache_builder.py:456-460``).

The node's *available* memory is what the OS reports free at start; ``node_dram_gb`` stands for it (less
whatever else the node runs).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sim.model.hostpools import host_pools
from sim.model.pools import ModelSpec

__all__ = ["AUTO_FRACTION", "RESERVE_BYTES", "V4_AUTO_REFUSED", "V4_SIZE_REFUSED", "RATIO_SEARCH_CAP", "HostCandidate", "auto_ratio", "host_bytes", "host_candidate", "largest_fitting_ratio", "swa_host_pages",
           "swa_pages"]

RESERVE_BYTES = 10 * 1024**3  # HICACHE_HOST_MEMORY_RESERVE_BYTES, pool_host/base.py:28
AUTO_FRACTION = 0.8  # --hicache-host-memory-fraction default, arg_groups/fields/memory.py:117-121
AUTO_SLACK = 0.05  # _ALLOCATION_SLACK_FRACTION, hicache_auto_size.py:32-34
DEFAULT_RATIO = 2.0  # hicache_hook.py:119-122 (cache mode)


@dataclass(frozen=True)
class HostCandidate:
    """One ``--hicache-ratio`` or ``--hicache-size`` candidate: pages, bytes per pool per rank, totals, and
    whether SGLang would start with it (``status``: ok, warning or refused, with SGLang's message)."""

    label: str
    flag: str  # the launch flag that gives it
    ratio: float | None
    size_gb: float | None
    l1_pages: int
    l2_pages: int
    l2_swa_pages: int
    pool_bytes: dict[str, int] = field(default_factory=dict)  # per rank, padding page included
    ranks_per_node: int = 1
    nodes: int = 1
    budget_per_rank: int = 0
    status: str = "ok"
    reason: str = ""

    @property
    def per_rank(self) -> int:
        return sum(self.pool_bytes.values())

    @property
    def per_node(self) -> int:
        return self.per_rank * self.ranks_per_node

    def as_dict(self) -> dict:
        return {"label": self.label, "flag": self.flag, "ratio": self.ratio, "size_gb": self.size_gb,
                "l1_pages": self.l1_pages, "l2_pages": self.l2_pages, "l2_swa_pages": self.l2_swa_pages,
                "pool_bytes_per_rank": dict(self.pool_bytes), "bytes_per_rank": self.per_rank,
                "bytes_per_node": self.per_node, "ranks_per_node": self.ranks_per_node, "nodes": self.nodes,
                "budget_per_rank": self.budget_per_rank, "status": self.status, "reason": self.reason}  # fmt: skip


def _budget_per_rank(node_dram_gb: float, ranks_per_node: int) -> int:
    return max(0, int(node_dram_gb * 1e9) - RESERVE_BYTES) // max(1, ranks_per_node)


def _pool_bytes(model: ModelSpec, l2: int, l2_swa: int, page_tokens: int) -> dict[str, int]:
    return {p.name: p.nbytes for p in host_pools(model, l2, l2_swa, page_tokens)}  # sim.model.hostpools


V4_SIZE_REFUSED = ("DeepSeek V4 HiCache currently does not support --hicache-size; use --hicache-ratio instead. "
                   "(mem_cache/hybrid_cache/hybrid_pool_assembler.py:660-664)")  # fmt: skip
V4_AUTO_REFUSED = ("HiCache auto-sizing does not support DeepSeekV4TokenToKVPool; set --hicache-ratio or "
                   "--hicache-size explicitly. (mem_cache/hicache_auto_size.py:63-72, from "
                   "kv_cache_builder.py:456-460: HiCache on without --hicache-ratio)")  # fmt: skip


def swa_pages(full_pages: int, swa_ratio: float) -> int:
    """SWA pages beside ``full_pages`` Full pages on one tier: ``swa_ratio`` of them, at least one
    (``model_executor/pool_configurator.py:1046``)."""
    return max(1, int(round(full_pages * swa_ratio, 6)))


def swa_host_pages(l1_pages: int, l2_pages: int, swa_ratio: float, hicache_ratio: float | None = None) -> int:
    """SWA host pages beside ``l2_pages`` Full host pages: SGLang's V4 holds ``int(SWA device pages x
    hicache_ratio)`` (``hybrid_pool_assembler.py:647-667``), the SWA device pages being :func:`swa_pages` of
    ``l1_pages``; given a page count and no ratio, the same share of it."""
    if not l2_pages:
        return 0
    if hicache_ratio is not None:
        return int(swa_pages(l1_pages, swa_ratio) * hicache_ratio)
    return swa_pages(l2_pages, swa_ratio)


def host_bytes(model: ModelSpec, l1_pages: int, l2_pages: int, swa_ratio: float, page_tokens: int) -> int:
    """Pinned bytes per rank of host pools of ``l2_pages`` Full pages beside ``l1_pages`` on the device (0: no
    host pools): the SWA host pool as SGLang sizes it for the ratio ``l2_pages / l1_pages``
    (:func:`swa_host_pages`), so a size on the curve costs what the candidate of that ratio does."""
    if not l2_pages:
        return 0
    l2_swa = swa_host_pages(l1_pages, l2_pages, swa_ratio, l2_pages / l1_pages) if model.has_swa else 0
    return sum(_pool_bytes(model, l2_pages, l2_swa, page_tokens).values())


def host_candidate(model: ModelSpec, *, l1_pages: int, swa_ratio: float, page_tokens: int, tp_size: int,
                   node_dram_gb: float, gpus_per_node: int, ratio: float | None = None,
                   size_gb: float | None = None, label: str | None = None,
                   pinnable_gb: float | None = None) -> HostCandidate:  # fmt: skip
    """The host pools of one candidate, checked as SGLang checks them at start, then, all ranks of the node
    together, against ``pinnable_gb`` (the platform's pinnable ceiling, :mod:`sim.model.pinning`; None: none)."""
    scale = page_tokens / model.page_size
    if size_gb is not None:
        l2 = int(size_gb * 1e9 // (model.bytes_per_page * scale))
        flag = f"--hicache-size {size_gb:g}"
    else:
        l2 = int(l1_pages * ratio)
        flag = f"--hicache-ratio {ratio:g}"
    l2_swa = swa_host_pages(l1_pages, l2, swa_ratio, ratio) if model.has_swa else 0
    ranks = min(tp_size, gpus_per_node)
    nodes = -(-tp_size // gpus_per_node)
    pools = _pool_bytes(model, l2, l2_swa, page_tokens)
    budget = _budget_per_rank(node_dram_gb, ranks)
    cand = HostCandidate(label or flag, flag, ratio, size_gb, l1_pages, l2, l2_swa, pools, ranks, nodes, budget)
    need = cand.per_rank
    where = f"{node_dram_gb:g} GB on the node less the 10 GiB reserve, over {ranks} ranks"
    if model.paged_host and size_gb is not None:
        status, reason = "refused", V4_SIZE_REFUSED
    elif need > budget and model.paged_host:  # pool by pool, each against what the ones before it left
        left, over = budget, ("", 0)
        for item in pools.items():
            if item[1] > left:
                over = item
                break
            left -= item[1]
        status, reason = "refused", (
            f"Not enough host memory for V4 paged pool {over[0]}. Requesting {over[1] / 1e9:.2f} GB but only have "
            f"{left / 1e9:.2f} GB free. (memory_pool_host.py:289-296: {where})")  # fmt: skip
    elif need > budget:
        status, reason = "refused", (
            f"Not enough host memory available. Requesting {need / 1e9:.2f} GB but only have {budget / 1e9:.2f} "
            f"GB free. Please reduce the size of the hierarchical cache. (pool_host/base.py:248-257: {where})")  # fmt: skip
    elif pinnable_gb is not None and cand.per_node > pinnable_gb * 1e9:
        status, reason = "refused", (
            f"pins {cand.per_node / 1e9:.2f} GB per node, past the {pinnable_gb:g} GB the platform lets it pin: "
            "cudaHostRegister / hipHostRegister fails at start (sim/model/pinning.py)")  # fmt: skip
    elif l2 <= l1_pages and not model.paged_host:  # V4's paged host pools skip HostKVCache's sizing and warning
        status, reason = "warning", (f"host pool ({l2:,} pages) no larger than the device pool ({l1_pages:,}): "
                                     "SGLang warns that L2 is of little use (pool_host/base.py:238-246)")  # fmt: skip
    else:
        status, reason = "ok", ""
    return HostCandidate(cand.label, flag, ratio, size_gb, l1_pages, l2, l2_swa, pools, ranks, nodes, budget,
                         status, reason)  # fmt: skip


def auto_ratio(model: ModelSpec, *, l1_pages: int, swa_ratio: float, page_tokens: int, node_dram_gb: float,
               ranks_per_node: int) -> float | None:  # fmt: skip
    """The ratio SGLang's auto-sizing picks when the launch gives neither --hicache-ratio nor --hicache-size:
    min(2.0, fraction x budget x (1 - slack) / device bytes of the host-mirrored pools); None for DeepSeek-V4,
    which it cannot size (``V4_AUTO_REFUSED``)."""
    if model.paged_host:
        return None
    scale = page_tokens / model.page_size
    device = l1_pages * scale * (model.group_bytes_per_page("kv") + swa_ratio * model.group_bytes_per_page("swa"))
    budget = _budget_per_rank(node_dram_gb, ranks_per_node) * AUTO_FRACTION
    return min(DEFAULT_RATIO, budget * (1 - AUTO_SLACK) / device) if device else DEFAULT_RATIO


RATIO_SEARCH_CAP = 1000.0  # the largest ratio largest_fitting_ratio tries: reaching it is no bound of the node's


def largest_fitting_ratio(model: ModelSpec, *, l1_pages: int, swa_ratio: float, page_tokens: int, tp_size: int,
                          node_dram_gb: float, gpus_per_node: int, pinnable_gb: float | None = None,
                          step: float = 0.01, cap: float = RATIO_SEARCH_CAP) -> float:  # fmt: skip
    """The largest ``--hicache-ratio`` (a multiple of ``step``, 0.0 if none) whose host pools, priced pool by pool
    per rank as :func:`host_candidate` prices them, pass SGLang's start-up check and, all ranks of the node
    together, fit under ``pinnable_gb`` (the platform's pinnable ceiling; None: DRAM alone bounds them).
    Pool bytes grow with the ratio, so a bisection over multiples of ``step`` finds it."""

    def fits(k: int) -> bool:
        return host_candidate(model, l1_pages=l1_pages, swa_ratio=swa_ratio, page_tokens=page_tokens,
                              tp_size=tp_size, node_dram_gb=node_dram_gb, gpus_per_node=gpus_per_node,
                              ratio=k * step, pinnable_gb=pinnable_gb).status != "refused"  # fmt: skip

    lo, hi = 0, int(cap / step)
    if fits(hi):
        return hi * step
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return round(lo * step, 6)

"""Step times on a GPU the kernel database lacks: a measured GPU's kernels, each op scaled by the two datasheets.

aiconfigurator-core times SGLang's kernels on a handful of NVIDIA GPUs (:data:`MEASURED`). On another
GPU each op keeps the efficiency it reached on the nearest measured one (its ideal time over its measured time),
and the target's ideal time differs from the reference's by the datasheet ratio of what bounds that op, so its
time is the measured one times that ratio (:meth:`Transfer.ratio`):

- a prefill GEMM, attention or MoE op is compute-bound: peak FLOPs at its dtype (the experts' for MoE, the dense
  weights' for a GEMM, bf16 for attention), reference over target;
- every other prefill op (norms, elementwise, embedding) and every decode op (at the batches a server decodes
  its GEMMs, attention and experts stream weights and KV) is bound by HBM bandwidth, reference over target;
- a collective (all-reduce, MoE dispatch and combine, pipeline p2p) by the GPU-to-GPU link's one-way bandwidth.

The datasheet figures and their sources are in ``sim/data/hardware.json`` (:mod:`sim.model.hardware`). The nearest
measured GPU (:func:`references`) has the same low-precision formats in hardware (FP4 or not: the checkpoint's
kernels differ with it), an 8-GPU baseboard's node (the Grace-coupled GB200/GB300 trays are measured as racks),
and the least summed log distance in dense BF16 FLOPs, HBM bandwidth and HBM capacity. H800 lands on H100 at
distance 0 (same compute and memory, NVLink cut to 400 GB/s): only its collectives move. A transfer is an estimate
with a name on it; ``hicache-sim calibrate compute --from`` a run of your own is the way to a measured fit.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from sim.model.hardware import GPU, get_gpu

__all__ = ["COMM_OP", "MEASURED", "Transfer", "references"]

# Catalog GPUs whose kernels aiconfigurator-core 0.12.0 timed for SGLang, and their system names in its tables
# (systems/*.yaml; GB200/GB300 are the Grace-Blackwell trays, systems/gb200.yaml, gb300.yaml).
MEASURED = {"H100": "h100_sxm", "H200": "h200_sxm", "B200": "b200_sxm", "B300": "b300_sxm", "GB200": "gb200",
            "GB300": "gb300", "RTX PRO 6000": "rtx_pro_6000_server"}  # fmt: skip
_RACK = ("GB200", "GB300")  # Grace-coupled: never a reference for a baseboard GPU
COMM_OP = re.compile(r"(_ar(_\d+)?$|dispatch|all_?reduce|all_?to_?all|all_?gather|reduce_?scatter|_p2p$)")
_COMPUTE_OP = re.compile(r"^context_.*(gemm|attention|moe)$")
_BF16 = "bf16"


def _has_fp4(gpu: GPU) -> bool:
    return "fp4" in gpu.tflops


def _distance(a: GPU, b: GPU) -> float:
    return (abs(math.log(a.peak_tflops(_BF16) / b.peak_tflops(_BF16))) + abs(math.log(a.hbm_tbps / b.hbm_tbps))
            + abs(math.log(a.hbm_gb / b.hbm_gb)))  # fmt: skip


def references(target: str) -> list[str]:
    """The measured GPUs that may price ``target``, nearest first: itself where measured, then those with its
    FP4 support and node form by datasheet distance (ties by name)."""
    gpu = get_gpu(target)
    own = [gpu.name] if gpu.name in MEASURED else []
    rack = gpu.name in _RACK
    others = [get_gpu(n) for n in MEASURED if n != gpu.name and (n in _RACK) == rack]
    others = [g for g in others if _has_fp4(g) == _has_fp4(gpu)]
    return own + [g.name for g in sorted(others, key=lambda g: (_distance(g, gpu), g.name))]


def _dtype(quant: str | None) -> str:
    """A dtype of the datasheets from an aiconfigurator quantization mode or a schema dtype."""
    q = (quant or _BF16).lower()
    return "fp4" if "fp4" in q else "fp8" if "fp8" in q else _BF16


@dataclass(frozen=True)
class Transfer:
    """One measured GPU's op times carried to another by datasheet ratios (reference over target)."""

    target: str
    reference: str
    gemm_dtype: str
    moe_dtype: str
    flops: tuple[tuple[str, float], ...]  # (dtype, reference peak / target peak)
    memory: float  # reference HBM bandwidth / target's
    link: float  # reference GPU-to-GPU link bandwidth / target's

    @classmethod
    def between(cls, target: str, reference: str, gemm_dtype: str | None, moe_quant: str | None) -> Transfer:
        t, r = get_gpu(target), get_gpu(reference)
        dtypes = {_dtype(gemm_dtype), _dtype(moe_quant), _BF16}
        flops = tuple(sorted((d, r.peak_tflops(d) / t.peak_tflops(d)) for d in dtypes))
        return cls(t.name, r.name, _dtype(gemm_dtype), _dtype(moe_quant), flops, r.hbm_tbps / t.hbm_tbps,
                   r.link_gbps / t.link_gbps)  # fmt: skip

    def ratio(self, op: str) -> float:
        """The multiplier on a measured op's time (the estimator's op name, ``context_*`` or ``generation_*``)."""
        if COMM_OP.search(op):
            return self.link
        if _COMPUTE_OP.match(op):
            dtype = self.moe_dtype if op.endswith("moe") else _BF16 if op.endswith("attention") else self.gemm_dtype
            return dict(self.flops)[dtype]
        return self.memory

    def label(self) -> str:
        """What ``validate`` and the run summary say priced the passes."""
        flops = ", ".join(f"{d} x{r:.3g}" for d, r in self.flops)
        return (f"{self.target}: {self.reference} kernel efficiencies, scaled by datasheet FLOPs ({flops}), HBM "
                f"bandwidth (x{self.memory:.3g}) and GPU link bandwidth (collectives x{self.link:.3g}); a measured "
                "fit: hicache-sim calibrate compute --from a run of your own")  # fmt: skip

"""Move KV pages between a pinned host pool and a device pool, with SGLang's three io strategies.

A pool is one tensor in one of two layouts (:class:`KVPool`):

- ``layer_first`` ``[n_layers, n_pages, page_elems]``: the GPU layout; a page's rows are one per layer, far apart.
- ``page_first``  ``[n_pages, n_layers, page_elems]``: all layers of a page contiguous (SGLang's host option that
  makes L3 zero-copy).

A transfer copies, for every layer and every ``i``, the row ``(layer, src_indices[i])`` of the source pool to the
row ``(layer, dst_indices[i])`` of the destination pool. Direction is implied: host -> device is H2D. Backends:

- ``copy_engine``: one ``copy_(non_blocking=True)`` (one cudaMemcpyAsync) per maximal run that is contiguous in
  both pools; scattered indices therefore cost one call per row.
- ``batched``: one ``cudaMemcpyBatchAsync`` for all runs where cuda-python exposes it on a CUDA >= 12.8 runtime
  (torch has no binding); otherwise a gather into a staging buffer, one copy, and a scatter on the other side.
- ``kernel``: a Triton kernel, one program per (item, layer) row, that reads and writes both pools directly. On
  CUDA the host pool must be pinned: Triton's launcher resolves a tensor's ``data_ptr()`` with
  ``cuPointerGetAttribute(DEVICE_POINTER)``, and for pinned (cudaHostAlloc'd) memory under UVA on 64-bit Linux
  that is the same address, so the kernel's loads and stores go over PCIe (zero-copy), as SGLang's kernel io
  backend does. Under ``TRITON_INTERPRET=1`` both pools are CPU tensors and the copy is only functional.

:func:`transfer_reference` (plain torch indexing) defines the result; every backend must equal it bit for bit.
Rows are copied as raw bits (viewed as the widest integer dtype that divides the row), so bf16/fp8 pools work
on the GPU and the interpreter never sees a float it lacks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import Enum

import numpy as np
import torch
import triton
import triton.language as tl

__all__ = [
    "BACKENDS",
    "KVPool",
    "Layout",
    "TransferPlan",
    "batched_mechanism",
    "plan_transfer",
    "transfer",
    "transfer_reference",
]

BACKENDS = ("copy_engine", "batched", "kernel")


class Layout(str, Enum):
    LAYER_FIRST = "layer_first"
    PAGE_FIRST = "page_first"


@dataclass
class KVPool:
    """One pool tensor plus its layout; the tensor must be contiguous so rows have fixed strides."""

    data: torch.Tensor
    layout: Layout = Layout.LAYER_FIRST

    def __post_init__(self) -> None:
        self.layout = Layout(self.layout)
        if self.data.dim() != 3 or not self.data.is_contiguous():
            raise ValueError(f"a pool is a contiguous 3-d tensor, got shape {tuple(self.data.shape)}")

    @classmethod
    def allocate(
        cls,
        n_layers: int,
        n_pages: int,
        page_elems: int,
        *,
        layout: Layout | str = Layout.LAYER_FIRST,
        dtype: torch.dtype = torch.float32,
        device: str | torch.device = "cpu",
        pin: bool = False,
    ) -> KVPool:
        layout = Layout(layout)
        shape = (
            (n_layers, n_pages, page_elems)
            if layout is Layout.LAYER_FIRST
            else (n_pages, n_layers, page_elems)
        )
        data = torch.zeros(shape, dtype=dtype, device=device)
        return cls(data.pin_memory() if pin else data, layout)

    @property
    def n_layers(self) -> int:
        return self.data.shape[0] if self.layout is Layout.LAYER_FIRST else self.data.shape[1]

    @property
    def n_pages(self) -> int:
        return self.data.shape[1] if self.layout is Layout.LAYER_FIRST else self.data.shape[0]

    @property
    def page_elems(self) -> int:
        return self.data.shape[2]

    @property
    def row_bytes(self) -> int:
        return self.page_elems * self.data.element_size()

    def strides(self) -> tuple[int, int]:
        """(layer stride, page stride) in elements."""
        if self.layout is Layout.LAYER_FIRST:
            return self.data.stride(0), self.data.stride(1)
        return self.data.stride(1), self.data.stride(0)

    def rows(self) -> torch.Tensor:
        """A 2-d ``[layer-or-page major rows, page_elems]`` view; see :meth:`row_ids`."""
        return self.data.view(-1, self.page_elems)

    def row_ids(self, pages: torch.Tensor) -> torch.Tensor:
        """Row numbers in :meth:`rows` for every (layer, page), layer-major: shape ``[n_layers * len(pages)]``."""
        layer_stride, page_stride = self.strides()
        layers = torch.arange(self.n_layers, dtype=torch.int64, device=pages.device)
        ids = layers[:, None] * (layer_stride // self.page_elems) + pages[None, :] * (
            page_stride // self.page_elems
        )
        return ids.reshape(-1)


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The same memory viewed as the widest integer dtype whose size divides the last dimension's bytes."""
    row_bytes = t.shape[-1] * t.element_size()
    for dtype in (torch.int64, torch.int32, torch.int16, torch.uint8):
        size = torch.empty((), dtype=dtype).element_size()
        if row_bytes % size == 0:
            return t.view(dtype)
    raise AssertionError("uint8 always divides")


def _check(src: KVPool, dst: KVPool, src_indices: torch.Tensor, dst_indices: torch.Tensor) -> None:
    if (src.n_layers, src.page_elems, src.data.dtype) != (dst.n_layers, dst.page_elems, dst.data.dtype):
        raise ValueError("source and destination pools differ in layers, row size or dtype")
    if src_indices.shape != dst_indices.shape or src_indices.dim() != 1:
        raise ValueError("index lists must be 1-d and of equal length")
    if src_indices.numel() == 0:
        return
    for name, idx, pool in (("source", src_indices, src), ("destination", dst_indices, dst)):
        lo, hi = int(idx.min()), int(idx.max())
        if lo < 0 or hi >= pool.n_pages:
            raise ValueError(f"{name} index out of range [0, {pool.n_pages}): {lo if lo < 0 else hi}")
    if torch.unique(dst_indices).numel() != dst_indices.numel():
        raise ValueError("destination indices repeat; the result would depend on copy order")


def _as_index(indices: Sequence[int] | torch.Tensor) -> torch.Tensor:
    return torch.as_tensor(indices, dtype=torch.int64).reshape(-1)


def transfer_reference(
    src: KVPool,
    dst: KVPool,
    src_indices: Sequence[int] | torch.Tensor,
    dst_indices: Sequence[int] | torch.Tensor,
) -> None:
    """The definition: ``dst[(layer, dst_indices[i])] = src[(layer, src_indices[i])]`` for all layers and i."""
    s, d = _as_index(src_indices), _as_index(dst_indices)
    _check(src, dst, s, d)
    if s.numel() == 0:
        return
    rows = src.rows().index_select(0, src.row_ids(s.to(src.data.device)))
    dst.rows().index_copy_(0, dst.row_ids(d.to(dst.data.device)), rows.to(dst.data.device))


@triton.jit
def _copy_rows_kernel(
    src_ptr,
    dst_ptr,
    src_idx_ptr,
    dst_idx_ptr,
    src_layer_stride,
    src_page_stride,
    dst_layer_stride,
    dst_page_stride,
    row_elems,
    BLOCK: tl.constexpr,
):
    """One program per (item, layer): copy one row, BLOCK elements at a time."""
    item = tl.program_id(0)
    layer = tl.program_id(1).to(tl.int64)
    s = tl.load(src_idx_ptr + item).to(tl.int64)
    d = tl.load(dst_idx_ptr + item).to(tl.int64)
    src_row = src_ptr + layer * src_layer_stride + s * src_page_stride
    dst_row = dst_ptr + layer * dst_layer_stride + d * dst_page_stride
    for start in range(0, row_elems, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < row_elems
        tl.store(dst_row + offs, tl.load(src_row + offs, mask=mask), mask=mask)


def batched_mechanism() -> str:
    """``cudaMemcpyBatchAsync`` when cuda-python offers it on a CUDA >= 12.8 runtime, else ``staging``."""
    if not torch.cuda.is_available():
        return "staging"
    try:
        from cuda.bindings import runtime as cudart  # type: ignore[import-not-found]
    except ImportError:
        return "staging"
    err, version = cudart.cudaRuntimeGetVersion()
    ok = int(err) == 0 and version >= 12080 and hasattr(cudart, "cudaMemcpyBatchAsync")
    return "cudaMemcpyBatchAsync" if ok else "staging"


@dataclass
class TransferPlan:
    """A prepared transfer: :meth:`run` issues the copies and nothing else, so timing it measures the io path.

    Planning (run detection, index tensors, staging buffers) is done once up front, as a server does when it
    builds an op from page lists; the copies themselves are asynchronous on CUDA.
    """

    backend: str
    n_items: int
    row_bytes: int
    n_layers: int
    mechanism: str
    _run: Callable[[], None] = field(repr=False)

    @property
    def total_bytes(self) -> int:
        return self.n_items * self.n_layers * self.row_bytes

    def run(self) -> None:
        self._run()


def _contiguous_runs(src: KVPool, dst: KVPool, s: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``[n_runs, 3]`` (src_offset, dst_offset, elems): rows merged where both sides continue contiguously."""
    sl, sp = src.strides()
    dl, dp = dst.strides()
    layers = np.arange(src.n_layers, dtype=np.int64)[:, None]
    src_off = (layers * sl + s[None, :] * sp).reshape(-1)
    dst_off = (layers * dl + d[None, :] * dp).reshape(-1)
    order = np.argsort(src_off, kind="stable")
    src_off, dst_off = src_off[order], dst_off[order]
    n = src.page_elems
    breaks = np.ones(len(src_off), dtype=bool)
    breaks[1:] = (src_off[1:] != src_off[:-1] + n) | (dst_off[1:] != dst_off[:-1] + n)
    starts = np.flatnonzero(breaks)
    lengths = np.diff(np.append(starts, len(src_off))) * n
    return np.stack([src_off[starts], dst_off[starts], lengths], axis=1)


def _plan_copy_engine(
    src: KVPool, dst: KVPool, s: torch.Tensor, d: torch.Tensor
) -> tuple[Callable[[], None], int]:
    runs = _contiguous_runs(src, dst, s.cpu().numpy(), d.cpu().numpy())
    sflat, dflat = src.data.view(-1), dst.data.view(-1)
    pairs = [(dflat[do : do + n], sflat[so : so + n]) for so, do, n in runs.tolist()]

    def run() -> None:
        for dv, sv in pairs:
            dv.copy_(sv, non_blocking=True)

    return run, len(pairs)


def _plan_batch_api(src: KVPool, dst: KVPool, s: torch.Tensor, d: torch.Tensor) -> Callable[[], None]:
    """NOTE: written against the cuda-python 12.8/12.9 runtime binding and not run in this project's CI."""
    from cuda.bindings import runtime as cudart  # type: ignore[import-not-found]

    runs = _contiguous_runs(src, dst, s.cpu().numpy(), d.cpu().numpy())
    size = src.data.element_size()
    srcs = [src.data.data_ptr() + so * size for so in runs[:, 0].tolist()]
    dsts = [dst.data.data_ptr() + do * size for do in runs[:, 1].tolist()]
    sizes = [n * size for n in runs[:, 2].tolist()]
    attrs = cudart.cudaMemcpyAttributes()
    attrs.srcAccessOrder = cudart.cudaMemcpySrcAccessOrder.cudaMemcpySrcAccessOrderStream

    def run() -> None:
        stream = torch.cuda.current_stream().cuda_stream
        result = cudart.cudaMemcpyBatchAsync(dsts, srcs, sizes, len(sizes), [attrs], [0], 1, stream)
        if int(result[0]) != 0:
            raise RuntimeError(f"cudaMemcpyBatchAsync failed: {result}")

    return run


def _plan_staging(src: KVPool, dst: KVPool, s: torch.Tensor, d: torch.Tensor) -> Callable[[], None]:
    src_rows, dst_rows = src.rows(), dst.rows()
    src_ids = src.row_ids(s.to(src.data.device))
    dst_ids = dst.row_ids(d.to(dst.data.device))
    shape = (src_ids.numel(), src.page_elems)
    pin_src = src.data.device.type == "cpu" and dst.data.device.type == "cuda"
    pin_dst = dst.data.device.type == "cpu" and src.data.device.type == "cuda"
    stage_src = torch.empty(shape, dtype=src.data.dtype, device=src.data.device, pin_memory=pin_src)
    stage_dst = torch.empty(shape, dtype=dst.data.dtype, device=dst.data.device, pin_memory=pin_dst)

    def run() -> None:
        torch.index_select(src_rows, 0, src_ids, out=stage_src)
        stage_dst.copy_(stage_src, non_blocking=True)
        dst_rows.index_copy_(0, dst_ids, stage_dst)

    return run


def _plan_kernel(src: KVPool, dst: KVPool, s: torch.Tensor, d: torch.Tensor) -> Callable[[], None]:
    kernel_device = dst.data.device if dst.data.device.type == "cuda" else src.data.device
    s_dev, d_dev = s.to(kernel_device), d.to(kernel_device)
    src_bits, dst_bits = KVPool(_bits(src.data), src.layout), KVPool(_bits(dst.data), dst.layout)
    row_elems = src_bits.page_elems
    (sl, sp), (dl, dp) = src_bits.strides(), dst_bits.strides()
    block = min(triton.next_power_of_2(row_elems), 1024)
    num_warps = 1 if src.row_bytes <= 4096 else 4  # SGLang: one warp per small item
    grid = (s.numel(), src.n_layers)
    args = (src_bits.data, dst_bits.data, s_dev, d_dev, sl, sp, dl, dp, row_elems)

    def run() -> None:
        _copy_rows_kernel[grid](*args, BLOCK=block, num_warps=num_warps)

    return run


def plan_transfer(
    src: KVPool,
    dst: KVPool,
    src_indices: Sequence[int] | torch.Tensor,
    dst_indices: Sequence[int] | torch.Tensor,
    backend: str,
) -> TransferPlan:
    """Validate and prepare a transfer; raises ValueError on mismatched pools, bad or repeated indices."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; expected one of {BACKENDS}")
    s, d = _as_index(src_indices), _as_index(dst_indices)
    _check(src, dst, s, d)
    on_gpu = "cuda" in (src.data.device.type, dst.data.device.type)
    mechanism = ({"copy_engine": "cudaMemcpyAsync per run", "kernel": "triton"} if on_gpu else  # no GPU: host copies
                 {"copy_engine": "CPU memcpy per run", "kernel": "triton interpreter"}).get(backend, "")  # fmt: skip
    if s.numel() == 0:
        run: Callable[[], None] = lambda: None  # noqa: E731
    elif backend == "copy_engine":
        run, n_runs = _plan_copy_engine(src, dst, s, d)
        mechanism = f"{mechanism} ({n_runs} runs)"
    elif backend == "batched":
        mechanism = batched_mechanism()
        planner = _plan_batch_api if mechanism == "cudaMemcpyBatchAsync" else _plan_staging
        run = planner(src, dst, s, d)
    else:
        run = _plan_kernel(src, dst, s, d)
    return TransferPlan(backend, s.numel(), src.row_bytes, src.n_layers, mechanism, run)


def transfer(
    src: KVPool,
    dst: KVPool,
    src_indices: Sequence[int] | torch.Tensor,
    dst_indices: Sequence[int] | torch.Tensor,
    backend: str = "kernel",
) -> None:
    """Plan and run in one call (asynchronous on CUDA: synchronize before reading ``dst`` on the host)."""
    plan_transfer(src, dst, src_indices, dst_indices, backend).run()

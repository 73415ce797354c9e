"""The shape grids that ``hicache-sim calibrate`` times, per suite and device kind.

Item sizes come from the DeepSeek V4/V4.1 pools (DESIGN.md 1.1): a 584-B compressed row (the HiSparse unit), a
37,440-B C4 page, a 149,760-B SWA page, and a whole 256-token V4-Flash page across all pools (9,158,208 B).
Each item is timed as one row (one layer), so ``item_bytes`` is the unit one copy call or one kernel program
moves. Counts run from 1 to 65,536 in powers of 4, capped so that one timed transfer stays under ``max_bytes``
(the pools hold twice that, to scatter the indices).

CPU suites exist so CI exercises the whole pipeline: they are smaller, and the Triton ``kernel`` backend, which
runs under ``TRITON_INTERPRET=1`` there (a numpy simulation, ~1000x slower than a GPU), is capped at
``kernel_max_items`` items and ``kernel_max_bytes`` per transfer.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.base.errors import InputError

__all__ = ["ITEM_BYTES", "SUITES", "Suite", "SwapInShape", "get_suite"]

ITEM_BYTES = {"c4_row": 584, "c4_page": 37_440, "swa_page": 149_760, "v4_flash_page": 9_158_208}
SUITES = ("default", "quick")
_COUNTS = tuple(4**i for i in range(9))  # 1 .. 65,536
_MiB = 1 << 20


@dataclass(frozen=True)
class SwapInShape:
    """One HiSparse swap-in step: ``n_requests`` requests, each with ``top_k`` ids of which ``hit_ratio`` hit."""

    n_requests: int
    top_k: int
    hit_ratio: float
    buffer_slots: int
    row_bytes: int = ITEM_BYTES["c4_row"]

    @property
    def misses_per_request(self) -> int:
        return self.top_k - round(self.hit_ratio * self.top_k)


@dataclass(frozen=True)
class Suite:
    """A grid plus a timing policy (warm-up, repeat bounds, time budget per shape)."""

    name: str
    item_bytes: tuple[int, ...]
    counts: tuple[int, ...]
    max_bytes: int
    swap_in: tuple[SwapInShape, ...]
    ceiling_bytes: int
    warmup: int
    min_repeats: int
    max_repeats: int
    budget_s: float
    kernel_max_items: int | None = None
    kernel_max_bytes: int | None = None

    def transfer_shapes(self, backend: str) -> list[tuple[int, int]]:
        """(item_bytes, n_items) pairs for one backend, in grid order."""
        shapes = []
        for size in self.item_bytes:
            for n in self.counts:
                limit_n = self.kernel_max_items if backend == "kernel" else None
                limit_b = self.kernel_max_bytes if backend == "kernel" else None
                if n * size > min(self.max_bytes, limit_b or self.max_bytes) and n > 1:
                    continue
                if limit_n is not None and n > limit_n:
                    continue
                shapes.append((size, n))
        return shapes


def _swap_grid(
    requests: tuple[int, ...], top_ks: tuple[int, ...], hits: tuple[float, ...], slots: int
) -> tuple:
    return tuple(SwapInShape(r, k, h, slots) for r in requests for k in top_ks for h in hits)


def get_suite(name: str, device: str) -> Suite:
    """The suite ``name`` for ``device`` (``cuda`` or ``cpu``); raises InputError for an unknown name."""
    if name not in SUITES:
        raise InputError(f"unknown suite {name!r}; expected one of {', '.join(SUITES)}")
    sizes = tuple(ITEM_BYTES.values())
    if device == "cuda":
        if name == "default":
            swap = _swap_grid((1, 16, 64), (512, 1024), (0.0, 0.5, 0.9, 1.0), 4096)
            return Suite(name, sizes, _COUNTS, 1024 * _MiB, swap, 256 * _MiB, 3, 10, 200, 1.0)
        swap = _swap_grid((1, 16), (512,), (0.0, 1.0), 4096)
        return Suite(name, sizes, _COUNTS[::2], 256 * _MiB, swap, 64 * _MiB, 2, 5, 50, 0.3)
    if name == "default":
        swap = _swap_grid((1, 4), (64,), (0.0, 0.5, 1.0), 256)
        return Suite(name, sizes, _COUNTS, 32 * _MiB, swap, 32 * _MiB, 2, 5, 50, 0.3, 64, 2 * _MiB)
    swap = _swap_grid((1, 2), (16,), (0.0, 0.5, 1.0), 32)
    return Suite(name, sizes[:3], (1, 16, 256), 4 * _MiB, swap, 4 * _MiB, 1, 3, 10, 0.05, 16, 256 * 1024)

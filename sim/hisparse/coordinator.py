"""One request's HiSparse hot buffers on a PD decode instance, as SGLang 0.5.23's ``HiSparseCoordinator`` drives
them: how they start at admission, which steps take the swap-in kernel's fast path, which C4 token each step
backs up, and what each step decides per C4 layer. The kernel's replacement decision itself is
:class:`sim.hisparse.buffer.LruBuffer`.

Paths are the 0.5.23 wheel's, under ``sglang/``: ``srt/managers/hisparse_coordinator.py`` (the coordinator),
``kernels/jit/csrc/kvcacheio/hisparse.cuh`` (the kernel), ``srt/mem_cache/sparsity/factory.py`` (the config).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sim.hisparse.hot import INITIAL_FILLS, HotBuffer, InitialFill, Policy, make_buffer
from sim.hisparse.topk import C4_RATIO, StreamTrace

__all__ = ["HiSparseRequest", "StreamResult", "backup_position", "eager_backups", "run_stream", "step_ids"]


def step_ids(row: np.ndarray, newest: int) -> np.ndarray:
    """The ids one top-k row asks the hot buffer for, in top-k order: padding (-1) and the newest compressed
    token dropped (the kernel binds the newest to the reserved slot and counts it a hit, hisparse.cuh:480-498),
    a repeated id kept once (SGLang's indexer never repeats one)."""
    row = row[(row >= 0) & (row != newest)]
    if row.size < 2:
        return row.astype(np.int64)
    _, first = np.unique(row, return_index=True)
    if first.size == row.size:
        return row.astype(np.int64)
    return row[np.sort(first)].astype(np.int64)


def backup_position(seq_len: int) -> int:
    """The C4 position ``_eager_backup_previous_token`` copies device-to-host at a decode step of ``seq_len``
    (the previous newest compressed token), or -1 where the step made no new one
    (hisparse_coordinator.py:1191-1215)."""
    return (seq_len - 1) // C4_RATIO - 1 if (seq_len - 1) % C4_RATIO == 0 else -1


def eager_backups(prompt_len: int, n_steps: int) -> int:
    """Backups a request admitted with ``prompt_len`` makes over ``n_steps`` decode steps: one at each step
    after the first whose ``seq_len - 1`` is a multiple of 4 (:func:`backup_position`)."""
    lo, hi = prompt_len + 1, prompt_len + n_steps - 1  # seq_len - 1 over steps 1 .. n_steps - 1
    return max(hi // C4_RATIO - (lo - 1) // C4_RATIO, 0)


class HiSparseRequest:
    """A request's hot buffers, one per C4 layer, from admission to its last decode step.

    At admission (``admit_request_direct``, hisparse_coordinator.py:878-910) ``alloc_device_buffer`` writes
    slot t = id t into every slot (:976-980); a PD decode request whose compressed prompt (its allocated length
    // 4, :912-915) does not fit the buffer has them reset to empty (:899-905), one that fits keeps them (its
    prompt is preloaded, :917-935). A request staged from a local prefill keeps them either way: they hold its
    oldest ids (``collect_ready_reqs``, :1063-1090). The order starts as slot order. The first step after
    admission backs nothing up (:1186-1194)."""

    def __init__(self, buffers: Sequence[HotBuffer], prompt_len: int, initial_fill: InitialFill = "direct") -> None:
        if initial_fill not in INITIAL_FILLS:
            raise ValueError(f"unknown initial_fill {initial_fill!r}; expected one of {', '.join(INITIAL_FILLS)}")
        self.buffers = list(buffers)
        self.size = self.buffers[0].size
        if initial_fill == "staging" or prompt_len // C4_RATIO <= self.size:
            for buf in self.buffers:
                buf.preload()
        self.skip_first_backup = True
        self.fast = True
        self.newest = -1
        self.ids: list[np.ndarray] = [np.empty(0, dtype=np.int64)] * len(self.buffers)
        self.misses = [0] * len(self.buffers)

    def step(self, seq_len: int, rows: Sequence[np.ndarray], step: int) -> int:
        """One decode step at ``seq_len`` (prompt + steps so far + 1) with one top-k row per layer; returns the
        C4 position backed up this step, or -1. ``fast``, ``newest``, ``ids`` and ``misses`` describe the step.

        The kernel sees the compressed length ``seq_len // 4`` (``map_last_loc_to_buffer`` then the swap-in,
        :1100-1163, :1467-1529). While it is at most the buffer, slot t serves id t and the kernel returns
        before any lookup: no miss, the order untouched (hisparse.cuh:418-440)."""
        backup = -1
        if self.skip_first_backup:
            self.skip_first_backup = False
        else:
            backup = backup_position(seq_len)
        c4_len = seq_len // C4_RATIO
        self.newest = c4_len - 1
        self.fast = c4_len <= self.size
        for j, buf in enumerate(self.buffers):
            ids = step_ids(np.asarray(rows[j]), self.newest)
            self.ids[j] = ids
            self.misses[j] = 0 if self.fast else buf.access(ids, step)
        return backup


@dataclass
class StreamResult:
    """Misses per step of one stream, and what was needed to serve it."""

    misses: np.ndarray  # int64 (n_steps,)
    accesses: np.ndarray  # distinct non-newest ids per step
    backups: int  # eager D2H backups of C4 tokens (rows per layer)
    buffer: HotBuffer


def run_stream(stream: StreamTrace, buffer_size: int, policy: Policy = "lru",
               initial_fill: InitialFill = "direct") -> StreamResult:
    """Replay one (request, layer) stream through a hot buffer, as SGLang's coordinator drives it.

    The request is admitted with the prompt ``seq_len[0] - 1`` (:class:`sim.hisparse.coordinator.HiSparseRequest`
    says how the buffer starts for each ``initial_fill``); each row is one decode step of that layer.
    """
    buf = make_buffer(policy, buffer_size, stream)
    n_steps = stream.n_steps
    misses = np.zeros(n_steps, dtype=np.int64)
    accesses = np.zeros(n_steps, dtype=np.int64)
    if n_steps == 0:
        if initial_fill not in INITIAL_FILLS:
            raise ValueError(f"unknown initial_fill {initial_fill!r}; expected one of {', '.join(INITIAL_FILLS)}")
        return StreamResult(misses, accesses, 0, buf)
    req = HiSparseRequest([buf], int(stream.seq_len[0]) - 1, initial_fill)
    backups = 0
    for s in range(n_steps):
        backups += req.step(int(stream.seq_len[s]), (stream.ids[s],), s) >= 0
        accesses[s] = req.ids[0].size
        misses[s] = req.misses[0]
    return StreamResult(misses, accesses, backups, buf)

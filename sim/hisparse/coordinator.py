"""One request's HiSparse hot buffers, as SGLang 0.5.23's ``HiSparseCoordinator`` drives them, for both layouts
of its one swap-in kernel: DeepSeek V4's C4 path (a kernel token is 4 raw tokens, PD decode) and the DSA path
(DeepSeek V3.2, GLM-5.x: a kernel token is a raw token, PD decode or colocated). How the buffers start at
admission, how a DSA buffer grows, which steps take the kernel's fast path, which token each step backs up, and
what each step decides per kernel layer. The kernel's replacement decision itself is
:class:`sim.hisparse.hot.LruBuffer`; which layers run the kernel is :class:`sim.hisparse.indexshare.SwapInPlan`.

Paths are the 0.5.23 wheel's, under ``sglang/``: ``srt/managers/hisparse_coordinator.py`` (the coordinator),
``kernels/jit/csrc/kvcacheio/hisparse.cuh`` (the kernel), ``srt/mem_cache/sparsity/factory.py`` (the config).

MTP (speculative decoding, DSA only) swaps in through ``HiSparseSpecSwapManager`` (:142-530) and its CLOCK
kernel (``kernels/jit/csrc/kvcacheio/hisparse_spec.cuh``), which is not modelled: which slot a miss takes there is
decided by GPU thread races, not by the inputs. A miss's ordinal is the order in which threads win
``atomicAdd(req_work_count, 1)`` (hisparse_spec.cuh:540), the victim is sampled from the ring partition of that
ordinal (:762-781) or claimed by ``atomicCAS`` (:800, :823), and the approximate admission budget goes to the
threads that win ``atomicAdd(req_union_hit_count, 1)`` (:727); no replay of the inputs gives SGLang's slots,
and after the first step not its misses either. The streams also carry no draft or accept counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from sim.hisparse.hot import INITIAL_FILLS, HotBuffer, InitialFill, Policy, make_buffer
from sim.hisparse.topk import C4_RATIO, StreamTrace

__all__ = ["DSA", "FAMILIES", "V4", "Family", "HiSparseRequest", "StreamResult", "backup_position", "buffer_slots",
           "eager_backups", "run_stream", "step_ids"]


def step_ids(row: np.ndarray, newest: int) -> np.ndarray:
    """The ids one top-k row asks the hot buffer for, in top-k order: padding (-1) and the newest kernel
    token dropped (the kernel binds the newest to the reserved slot and counts it a hit, hisparse.cuh:480-498),
    a repeated id kept once (SGLang's indexer never repeats one)."""
    row = row[(row >= 0) & (row != newest)]
    if row.size < 2:
        return row.astype(np.int64)
    _, first = np.unique(row, return_index=True)
    if first.size == row.size:
        return row.astype(np.int64)
    return row[np.sort(first)].astype(np.int64)


@dataclass(frozen=True)
class Family:
    """What the two layouts of the one swap-in kernel differ in (hisparse_coordinator.py:937-1058, 1168-1263).

    ``ratio`` is the allocator's ``compress_ratio``: raw tokens per kernel token (V4's C4: 4; DSA: 1,
    ``mem_cache/allocator/hisparse.py:36``). The kernel sees ``seq_len // ratio`` (V4:
    ``compressed_seq_lens``; DSA: ``forward_batch.seq_lens`` itself, ``layers/attention/dsa_backend.py:2623-2628``),
    a token is backed up each time the kernel length grows, and the prompt is preloaded where its kernel length
    fits the buffer (:893-906). ``grows``: a DSA buffer is allocated page by page (:943-955, :987-1058); V4's
    is ``device_buffer_size + page`` slots from admission (:940-942)."""

    name: str
    ratio: int
    grows: bool


V4 = Family("v4", C4_RATIO, grows=False)
DSA = Family("dsa", 1, grows=True)
FAMILIES = {f.name: f for f in (V4, DSA)}


def backup_position(seq_len: int, ratio: int = C4_RATIO) -> int:
    """The kernel position ``_eager_backup_previous_token`` copies device-to-host at a decode step of ``seq_len``
    (the previous newest kernel token), or -1 where the step made no new one (hisparse_coordinator.py:1191-1215).
    V4 (ratio 4): one step in four; DSA (ratio 1): every step, ``seq_len - 2``."""
    return (seq_len - 1) // ratio - 1 if (seq_len - 1) % ratio == 0 else -1


def eager_backups(prompt_len: int, n_steps: int, ratio: int = C4_RATIO) -> int:
    """Backups a request admitted with ``prompt_len`` makes over ``n_steps`` decode steps: one at each step
    after the first whose ``seq_len - 1`` is a multiple of ``ratio`` (:func:`backup_position`)."""
    lo, hi = prompt_len + 1, prompt_len + n_steps - 1  # seq_len - 1 over steps 1 .. n_steps - 1
    return max(hi // ratio - (lo - 1) // ratio, 0)


def buffer_slots(length: int, size: int, page_size: int) -> int:
    """Device-buffer slots a DSA request holds once its length is ``length`` (``alloc_device_buffer`` :943-955,
    ``_grow_device_buffers`` :1014-1020): whole pages up to the buffer size, and the buffer plus its extra page
    (the newest token's reserved slot and what is left of its page) as soon as that reaches the buffer size."""
    cap = min(-(-length // page_size) * page_size, size)
    return size + page_size if cap == size else cap


class HiSparseRequest:
    """A request's hot buffers, one per kernel layer, from admission to its last decode step.

    At admission ``alloc_device_buffer`` writes slot t = token t into every slot (hisparse_coordinator.py:976-980).
    A PD decode request (``admit_request_direct``, :878-910) whose prompt's kernel length does not fit the buffer
    has them reset to empty (:900-906); one that fits keeps them (its prompt is preloaded, :894-899). A colocated
    request staged from its own prefill keeps them either way: they hold its first tokens, whose prefill slots
    became the buffer (``collect_ready_reqs`` :1063-1090, ``allocator/hisparse.py:160-194``). The order starts as
    slot order. The first step after either admission backs nothing up (:909, :1086)."""

    def __init__(self, buffers: Sequence[HotBuffer], prompt_len: int, initial_fill: InitialFill = "direct",
                 family: Family = V4, page_size: int = 64) -> None:  # fmt: skip
        if initial_fill not in INITIAL_FILLS:
            raise ValueError(f"unknown initial_fill {initial_fill!r}; expected one of {', '.join(INITIAL_FILLS)}")
        self.buffers = list(buffers)
        self.size = self.buffers[0].size
        self.family = family
        self.page_size = page_size
        if initial_fill == "staging" or prompt_len // family.ratio <= self.size:
            for buf in self.buffers:
                buf.preload()
        self.skip_first_backup = True
        self.fast = True
        self.newest = -1
        self.kernel_len = 0
        self.buffer_cap = buffer_slots(prompt_len, self.size, page_size) if family.grows else self.size + page_size
        self.ids: list[np.ndarray] = [np.empty(0, dtype=np.int64)] * len(self.buffers)
        self.misses = [0] * len(self.buffers)

    def step(self, seq_len: int, rows: Sequence[np.ndarray], step: int) -> int:
        """One decode step at ``seq_len`` (prompt + steps so far + 1) with one top-k row per kernel layer; returns
        the position backed up this step, or -1. ``fast``, ``newest``, ``kernel_len``, ``buffer_cap``, ``ids``
        and ``misses`` describe the step.

        The kernel sees ``seq_len // ratio`` (``map_last_loc_to_buffer`` then the swap-in, :1100-1166,
        :1467-1529). While it is at most the buffer, slot t serves token t and the kernel returns before any
        lookup: no miss, the order untouched (hisparse.cuh:418-440). A DSA buffer grows first, while the raw
        length is at most the buffer size (:996-997)."""
        backup = -1
        if self.skip_first_backup:
            self.skip_first_backup = False
        else:
            backup = backup_position(seq_len, self.family.ratio)
        if self.family.grows and self.buffer_cap < seq_len <= self.size:
            self.buffer_cap = buffer_slots(seq_len, self.size, self.page_size)
        self.kernel_len = seq_len // self.family.ratio
        self.newest = self.kernel_len - 1
        self.fast = self.kernel_len <= self.size
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
    backups: int  # eager D2H backups of kernel tokens (rows per layer)
    buffer: HotBuffer


def run_stream(stream: StreamTrace, buffer_size: int, policy: Policy = "lru",
               initial_fill: InitialFill = "direct", family: Family = V4) -> StreamResult:
    """Replay one (request, kernel layer) stream through a hot buffer, as SGLang's coordinator drives it.

    The request is admitted with the prompt ``seq_len[0] - 1`` (:class:`HiSparseRequest` says how the buffer
    starts for each ``initial_fill``); each row is one decode step of that layer, its ids kernel tokens of
    ``family`` (C4 ids for V4, raw positions for DSA: :class:`sim.hisparse.topk.ParametricAccess` ``ratio``).
    A DSA skip layer has no stream of its own: it replays its anchor's (:class:`sim.hisparse.indexshare.SwapInPlan`).
    """
    buf = make_buffer(policy, buffer_size, stream)
    n_steps = stream.n_steps
    misses = np.zeros(n_steps, dtype=np.int64)
    accesses = np.zeros(n_steps, dtype=np.int64)
    if n_steps == 0:
        if initial_fill not in INITIAL_FILLS:
            raise ValueError(f"unknown initial_fill {initial_fill!r}; expected one of {', '.join(INITIAL_FILLS)}")
        return StreamResult(misses, accesses, 0, buf)
    req = HiSparseRequest([buf], int(stream.seq_len[0]) - 1, initial_fill, family)
    backups = 0
    for s in range(n_steps):
        backups += req.step(int(stream.seq_len[s]), (stream.ids[s],), s) >= 0
        accesses[s] = req.ids[0].size
        misses[s] = req.misses[0]
    return StreamResult(misses, accesses, backups, buf)

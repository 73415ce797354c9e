"""HiSparse hot buffers: one (request, kernel layer)'s ``device_buffer_size`` GPU slots of KV (V4's C4 rows or a
DSA model's tokens) and the policy that picks the slots a step's misses take.

- ``lru``: SGLang 0.5.23's swap-in kernel, decision for decision (:class:`LruBuffer`). How the coordinator starts
  the buffer, takes the fast path and backs tokens up: :mod:`sim.hisparse.coordinator`.
- ``clock``: second chance. Hits set the reference bit, a miss takes the first slot after the hand whose bit
  is clear (clearing set bits on the way), loaded slots get the bit set; this step's hits are never taken.
  Generic CLOCK, not checked against an upstream kernel.
- ``belady``: offline optimum (evict the resident id whose next use is furthest); needs the whole stream.

The newest kernel token lives in a reserved slot outside these (never a miss, never in the order).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from sim.hisparse.topk import StreamTrace

__all__ = ["INITIAL_FILLS", "POLICIES", "BeladyBuffer", "ClockBuffer", "HotBuffer", "InitialFill", "LruBuffer",
           "Policy", "make_buffer"]

Policy = Literal["lru", "clock", "belady"]
POLICIES: tuple[Policy, ...] = ("lru", "clock", "belady")
InitialFill = Literal["direct", "staging"]
INITIAL_FILLS: tuple[InitialFill, ...] = ("direct", "staging")
_BIG = np.iinfo(np.int64).max
_NONE = np.empty(0, dtype=np.int64)


class HotBuffer:
    """Slots and the id<->slot maps shared by all policies. Ids are kernel-token positions (C4 or raw).

    After each :meth:`access`, ``loaded`` holds the missed ids in top-k order, ``victims`` the slot each took
    and ``displaced`` the id each slot held (-1: empty), so a caller can report the step's loads."""

    def __init__(self, size: int, n_ids: int) -> None:
        if size < 1:
            raise ValueError(f"device_buffer_size must be >= 1, got {size}")
        self.size = size
        self.slot_of_id = np.full(max(n_ids, size, 1), -1, dtype=np.int32)
        self.id_of_slot = np.full(size, -1, dtype=np.int64)
        self.n_empty = size
        self.loaded = self.victims = self.displaced = _NONE

    def resident(self) -> set[int]:
        return {int(i) for i in self.id_of_slot if i >= 0}

    def preload(self) -> None:
        """Slot t holds id t, every slot: what ``alloc_device_buffer`` writes (``device_buffer_tokens =
        arange(device_buffer_size)``, managers/hisparse_coordinator.py:976-980). Ids the sequence has not
        reached yet are written there by the compressor as they appear (:1149-1163)."""
        ids = np.arange(self.size)
        self.id_of_slot[:] = ids
        self.slot_of_id[: self.size] = ids
        self.n_empty = 0
        self._touch_preloaded()

    def access(self, ids: np.ndarray, step: int) -> int:
        """Serve one step's distinct ids (newest excluded, top-k order); return the number of misses."""
        if ids.size and int(ids.max()) >= self.slot_of_id.size:
            grown = np.full(max(int(ids.max()) + 1, 2 * self.slot_of_id.size), -1, dtype=np.int32)
            grown[: self.slot_of_id.size] = self.slot_of_id
            self.slot_of_id = grown
        slots = self.slot_of_id[ids]
        hit = slots >= 0
        miss_ids = ids[~hit]
        m = int(miss_ids.size)
        if m > self.size - int(hit.sum()):
            raise ValueError(f"top-k of {ids.size} distinct ids exceeds the buffer of {self.size} slots")
        self.loaded = miss_ids
        if not m:
            self.victims = self.displaced = _NONE
        self._step(ids, slots[hit], hit, miss_ids, step)
        return m

    def _place(self, victims: np.ndarray, miss_ids: np.ndarray) -> None:
        old = self.id_of_slot[victims]
        self.victims, self.displaced = victims, old
        self.n_empty -= int((old < 0).sum())
        self.slot_of_id[old[old >= 0]] = -1
        self.id_of_slot[victims] = miss_ids
        self.slot_of_id[miss_ids] = victims

    def _touch_preloaded(self) -> None:
        raise NotImplementedError

    def _step(self, ids: np.ndarray, hit_slots: np.ndarray, hit: np.ndarray, miss_ids: np.ndarray,
              step: int) -> None:
        raise NotImplementedError


class LruBuffer(HotBuffer):
    """SGLang's swap-in kernel (``load_cache_to_device_buffer_kernel``, kvcacheio/hisparse.cuh:343-722).

    ``lru`` lists the slots from least to most recently used; it starts in slot order (``lru_slots =
    arange``, hisparse_coordinator.py:690-697, and again at ``request_finished``, :1463). One step: walk the
    order and split it stably into hits and evictables (an empty slot is evictable, :552-608); the i-th miss
    in top-k order takes the i-th evictable from the LRU end (:610-664); the new order is [evictables not
    reused | the misses' slots | the hits] (:673-707)."""

    def __init__(self, size: int, n_ids: int) -> None:
        super().__init__(size, n_ids)
        self.lru = np.arange(size, dtype=np.int64)
        self._is_hit = np.zeros(size, dtype=bool)

    def lru_order(self) -> list[int]:
        """Resident ids from LRU to MRU."""
        return [int(i) for i in self.id_of_slot[self.lru] if i >= 0]

    def _touch_preloaded(self) -> None:
        pass  # the order stays as it was: slot order for a buffer just allocated

    def _step(self, ids, hit_slots, hit, miss_ids, step) -> None:
        m = miss_ids.size
        is_hit = self._is_hit
        is_hit[hit_slots] = True
        in_order = is_hit[self.lru]
        is_hit[hit_slots] = False
        evictable = self.lru[~in_order]
        victims = evictable[:m]
        self._place(victims, miss_ids)
        self.lru = np.concatenate([evictable[m:], victims, self.lru[in_order]])


class ClockBuffer(HotBuffer):
    """Second-chance CLOCK with one reference bit per slot and a hand."""

    def __init__(self, size: int, n_ids: int) -> None:
        super().__init__(size, n_ids)
        self.ref = np.zeros(size, dtype=bool)
        self.hand = 0
        self._base = np.arange(size)

    def _touch_preloaded(self) -> None:
        self.ref[:] = True

    def _step(self, ids, hit_slots, hit, miss_ids, step) -> None:
        self.ref[hit_slots] = True
        m = miss_ids.size
        if not m:
            return
        order = self._base + self.hand
        order[order >= self.size] -= self.size
        free = np.ones(self.size, dtype=bool)
        free[hit_slots] = False
        free_rot = free[order]
        ref_rot = self.ref[order]
        first = np.flatnonzero(free_rot & ~ref_rot)
        if first.size >= m:
            last = int(first[m - 1])
            victims_pos = first[:m]
            swept = order[:last][free_rot[:last]]
            self.ref[swept] = False
        else:  # a full turn clears every free slot's bit; the second turn takes the first of them.
            self.ref[order[free_rot]] = False
            second = np.flatnonzero(free_rot & ref_rot)[: m - first.size]
            victims_pos = np.concatenate([first, second])
            last = int(second[-1])
        victims = order[victims_pos]
        self._place(victims, miss_ids)
        self.ref[victims] = True
        self.hand = (self.hand + last + 1) % self.size


class BeladyBuffer(HotBuffer):
    """Belady's MIN over a known stream: evict the id whose next use is furthest (never used: first)."""

    def __init__(self, size: int, n_ids: int, stream: StreamTrace) -> None:
        super().__init__(size, n_ids)
        self.nxt = np.full(size, _BIG, dtype=np.int64)
        self._span = np.int64(stream.n_steps + 1)
        self._rows = stream.ids
        valid = stream.ids >= 0
        rows, _ = np.nonzero(valid)
        full = stream.ids[valid].astype(np.int64) * self._span + rows
        keys = np.sort(full)
        self._keys = keys[np.concatenate([[True], keys[1:] != keys[:-1]])] if keys.size else keys
        # Next use of every (step, id) selection, precomputed in one pass: the next key of the same id.
        after = np.append(self._keys[1:], -1)
        nxt_key = np.where(after // self._span == self._keys // self._span, after % self._span, _BIG - 1)
        self._next_full = np.full(stream.ids.shape, _BIG - 1, dtype=np.int64)
        self._next_full[valid] = nxt_key[np.searchsorted(self._keys, full)]
        self._scratch = np.zeros(max(n_ids, size, 1), dtype=np.int64)
        self._stale = False

    def next_use(self, ids: np.ndarray, after: int) -> np.ndarray:
        """First step > ``after`` at which each id is selected; ``_BIG - 1`` if never."""
        ids = np.asarray(ids, dtype=np.int64)
        if not self._keys.size:
            return np.full(ids.shape, _BIG - 1, dtype=np.int64)
        pos = np.searchsorted(self._keys, ids * self._span + after, side="right")
        found = np.where(pos < self._keys.size, self._keys[np.minimum(pos, self._keys.size - 1)], -1)
        ok = (pos < self._keys.size) & (found // self._span == ids)
        return np.where(ok, found % self._span, _BIG - 1)

    def _touch_preloaded(self) -> None:
        self._stale = True  # next uses are read at the first lookup: the fast path's steps before it do not count

    def _step(self, ids, hit_slots, hit, miss_ids, step) -> None:
        if self._stale:
            self.nxt[:] = self.next_use(self.id_of_slot, step - 1)
            self._stale = False
        row = self._rows[step]
        valid = row >= 0
        self._scratch[row[valid]] = self._next_full[step][valid]
        nu = self._scratch[ids]
        m = miss_ids.size
        if m:
            self.nxt[hit_slots] = -1
            victims = np.argpartition(self.nxt, self.size - m)[self.size - m:]
            self._place(victims, miss_ids)
            self.nxt[victims] = nu[~hit]
        self.nxt[hit_slots] = nu[hit]


def make_buffer(policy: Policy, size: int, stream: StreamTrace | None = None) -> HotBuffer:
    """A hot buffer of ``size`` slots; ``stream`` sizes its id map (Belady needs it whole). Its ids are kernel
    tokens of either layout (C4 ids, or DSA's raw positions), so the map is sized by the largest id it holds."""
    n_ids = int(stream.ids.max(initial=-1)) + 1 if stream is not None else size
    if policy == "lru":
        return LruBuffer(size, n_ids)
    if policy == "clock":
        return ClockBuffer(size, n_ids)
    if policy == "belady":
        if stream is None:
            raise ValueError("the belady policy needs the whole stream")
        return BeladyBuffer(size, n_ids, stream)
    raise ValueError(f"unknown policy {policy!r}; expected one of {', '.join(POLICIES)}")

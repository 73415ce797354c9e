"""HiSparse swap-in for a batch of decode requests: a Triton kernel and the plain-torch reference it must equal.

Each request owns a GPU hot buffer of ``S`` slots of compressed-token rows (584 B each for DeepSeek V4's C4 KV)
and a :class:`HotBufferState`. Every decode step the indexer picks ``K <= S`` top-k compressed-token ids per
request (``-1`` pads a short list); the swap-in then, per request:

1. looks each id up; ids already in a slot are **hits**, the others **misses** (a repeated id counts once: its
   first occurrence decides; later copies get the same slot);
2. takes the least recently used slots that were not hit, one per distinct miss in order of first occurrence
   (empty slots hold ``-1`` and sit at the LRU end, so they are used first);
3. copies each missed row from the host mirror into its slot and updates both maps;
4. rewrites the LRU order as ``stale -> misses -> hits``: untouched slots keep their order at the LRU end,
   then the slots just filled (in miss order), then the hit slots (in their previous relative order) at the MRU
   end. Treating the step's hits as touched at once, tie-broken by previous recency, needs no de-duplication of
   hits, which keeps the kernel free of a k x k comparison;
5. returns, for every top-k position, the local slot that holds the id (``-1`` for padding).

NOTE: the state keeps an inverse map ``token_to_slot`` (4-8 B per compressed token, about 1% of the 584-B rows)
so that hit detection is a gather; SGLang's CUDA kernel finds hits by a warp all-to-all compare or a
shared-memory hash instead. Distinct misses are found with ``atomic_min`` claims on that map, which makes the
kernel deterministic with repeated ids.

The Triton kernel runs one program per request (SGLang: one CUDA block per request). Under ``TRITON_INTERPRET=1``
all tensors are CPU tensors; on CUDA the host mirror must be pinned and is read through UVA (see
``kernels/transfer.py`` for the pointer mechanism).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.transfer import _bits

__all__ = ["HotBufferState", "swap_in", "swap_in_reference"]


@dataclass
class HotBufferState:
    """Per-request hot-buffer bookkeeping; invariants: ``lru[b]`` is a permutation of ``range(S)`` and the two
    maps are inverse of each other on resident tokens."""

    slot_to_token: torch.Tensor  # int64 [B, S]; -1 = empty
    token_to_slot: torch.Tensor  # int64 [B, T]; -1 = not resident
    lru: torch.Tensor  # int64 [B, S]; slot numbers, least recently used first

    @classmethod
    def empty(
        cls, n_requests: int, buffer_slots: int, max_tokens: int, device: str | torch.device = "cpu"
    ) -> HotBufferState:
        return cls(
            torch.full((n_requests, buffer_slots), -1, dtype=torch.int64, device=device),
            torch.full((n_requests, max_tokens), -1, dtype=torch.int64, device=device),
            torch.arange(buffer_slots, dtype=torch.int64, device=device).repeat(n_requests, 1),
        )

    @property
    def n_requests(self) -> int:
        return self.slot_to_token.shape[0]

    @property
    def buffer_slots(self) -> int:
        return self.slot_to_token.shape[1]

    @property
    def max_tokens(self) -> int:
        return self.token_to_slot.shape[1]

    def clone(self) -> HotBufferState:
        return HotBufferState(self.slot_to_token.clone(), self.token_to_slot.clone(), self.lru.clone())

    def copy_(self, other: HotBufferState) -> None:
        """Restore from ``other`` in place (used to reset the state between timed repeats)."""
        self.slot_to_token.copy_(other.slot_to_token)
        self.token_to_slot.copy_(other.token_to_slot)
        self.lru.copy_(other.lru)


def _check(
    state: HotBufferState,
    topk: torch.Tensor,
    host_mirror: torch.Tensor,
    host_base: torch.Tensor,
    device_buffer: torch.Tensor,
) -> None:
    b, s = state.slot_to_token.shape
    if topk.dim() != 2 or topk.shape[0] != b:
        raise ValueError(f"topk must be [n_requests={b}, K], got {tuple(topk.shape)}")
    if topk.shape[1] > s:
        raise ValueError(f"top_k {topk.shape[1]} exceeds the hot buffer ({s} slots)")
    if topk.numel() and (int(topk.min()) < -1 or int(topk.max()) >= state.max_tokens):
        raise ValueError(f"top-k ids must lie in [-1, {state.max_tokens})")
    if device_buffer.shape[:2] != (b, s) or device_buffer.shape[2] != host_mirror.shape[1]:
        raise ValueError("device_buffer must be [n_requests, buffer_slots, row] with the host mirror's row")
    if host_base.shape != (b,):
        raise ValueError("host_base must hold one row offset per request")


def swap_in_reference(
    state: HotBufferState,
    topk: torch.Tensor,
    host_mirror: torch.Tensor,
    host_base: torch.Tensor,
    device_buffer: torch.Tensor,
) -> torch.Tensor:
    """The definition, one request at a time; mutates ``state`` and ``device_buffer``, returns ``[B, K]`` slots.

    ``host_mirror`` is ``[rows, row_elems]``; request ``b``'s token ``t`` lives at row ``host_base[b] + t``.
    """
    _check(state, topk, host_mirror, host_base, device_buffer)
    out = torch.full(topk.shape, -1, dtype=torch.int64, device=topk.device)
    for b in range(state.n_requests):
        s2t, t2s, lru = state.slot_to_token[b], state.token_to_slot[b], state.lru[b]
        ids = topk[b].tolist()
        hit_slots = {int(t2s[t]) for t in ids if t >= 0 and int(t2s[t]) >= 0}
        misses = list(dict.fromkeys(t for t in ids if t >= 0 and int(t2s[t]) < 0))
        order = lru.tolist()
        not_hit = [slot for slot in order if slot not in hit_slots]
        victims, stale = not_hit[: len(misses)], not_hit[len(misses) :]
        for token, slot in zip(misses, victims, strict=True):
            old = int(s2t[slot])
            if old >= 0:
                t2s[old] = -1
            t2s[token] = slot
            s2t[slot] = token
            device_buffer[b, slot] = host_mirror[int(host_base[b]) + token]
        lru.copy_(torch.tensor(stale + victims + [slot for slot in order if slot in hit_slots]))
        out[b] = torch.tensor([int(t2s[t]) if t >= 0 else -1 for t in ids], dtype=torch.int64)
    return out


@triton.jit
def _swap_in_kernel(
    topk_ptr,
    s2t_ptr,
    t2s_ptr,
    lru_ptr,
    host_ptr,
    host_base_ptr,
    dev_ptr,
    out_ptr,
    hitmask_ptr,
    victims_ptr,
    order_ptr,
    K,
    S,
    T,
    row_elems,
    BLOCK_K: tl.constexpr,
    BLOCK_S: tl.constexpr,
    BLOCK_R: tl.constexpr,
):
    """One program per request; scratch rows (hitmask, victims, order) are per request. Barriers separate each
    scatter from the gathers that read it, since different threads of the block touch the same addresses."""
    b = tl.program_id(0).to(tl.int64)
    ks = tl.arange(0, BLOCK_K)
    kmask = ks < K
    ss = tl.arange(0, BLOCK_S)
    smask = ss < S
    t2s_row = t2s_ptr + b * T

    # 1. hits: a gather through the inverse map; mark the hit slots.
    ids = tl.load(topk_ptr + b * K + ks, mask=kmask, other=-1)
    valid = kmask & (ids >= 0)
    slot = tl.load(t2s_row + ids, mask=valid, other=-1)
    hit = valid & (slot >= 0)
    miss = valid & (slot < 0)
    tl.store(hitmask_ptr + b * S + ss, tl.zeros([BLOCK_S], dtype=tl.int32), mask=smask)
    tl.debug_barrier()
    tl.store(hitmask_ptr + b * S + slot, tl.full([BLOCK_K], 1, dtype=tl.int32), mask=hit)

    # 2. distinct misses: the smallest position claims an id (claims are < -1, so they never look resident).
    claim = (ks - K - 2).to(tl.int64)
    tl.atomic_min(t2s_row + ids, claim, mask=miss)
    tl.debug_barrier()
    first = tl.load(t2s_row + ids, mask=miss, other=0) + K + 2
    is_first = miss & (first == ks)
    miss_rank = tl.cumsum(is_first.to(tl.int32), axis=0) - 1
    n_miss = tl.sum(is_first.to(tl.int32), axis=0)
    tl.store(order_ptr + b * K + ks, miss_rank.to(tl.int64), mask=is_first)

    # 3. walk the LRU order: not-hit slots in order are victims (first n_miss) or stale; hits go to the end.
    lru_slots = tl.load(lru_ptr + b * S + ss, mask=smask, other=0)
    was_hit = smask & (tl.load(hitmask_ptr + b * S + lru_slots, mask=smask, other=0) != 0)
    not_hit = smask & ~was_hit
    rank = tl.cumsum(not_hit.to(tl.int32), axis=0) - 1
    hit_rank = tl.cumsum(was_hit.to(tl.int32), axis=0) - 1
    n_hit = tl.sum(was_hit.to(tl.int32), axis=0)
    victim = not_hit & (rank < n_miss)
    tl.store(victims_ptr + b * S + rank, lru_slots, mask=victim)
    new_pos = tl.where(
        was_hit, S - n_hit + hit_rank, tl.where(rank < n_miss, S - n_hit - n_miss + rank, rank - n_miss)
    )
    old_token = tl.load(s2t_ptr + b * S + lru_slots, mask=victim, other=-1)
    tl.debug_barrier()

    # 4. evict the victims' old tokens (resident, so disjoint from the claimed miss ids), assign and report.
    tl.store(t2s_row + old_token, tl.full([BLOCK_S], -1, dtype=tl.int64), mask=victim & (old_token >= 0))
    tl.store(lru_ptr + b * S + new_pos, lru_slots, mask=smask)
    my_rank = tl.load(order_ptr + b * K + first, mask=miss, other=0)
    miss_slot = tl.load(victims_ptr + b * S + my_rank, mask=miss, other=-1)
    tl.store(out_ptr + b * K + ks, tl.where(hit, slot, tl.where(miss, miss_slot, -1)), mask=kmask)
    tl.store(t2s_row + ids, miss_slot, mask=is_first)
    tl.store(s2t_ptr + b * S + miss_slot, ids, mask=is_first)

    # 5. copy the missed rows host -> hot buffer (zero-copy reads of the pinned host mirror on CUDA).
    host_row = tl.load(host_base_ptr + b) + ids
    dev_row = b * S + miss_slot
    for start in range(0, row_elems, BLOCK_R):
        rs = start + tl.arange(0, BLOCK_R)
        m = is_first[:, None] & (rs < row_elems)[None, :]
        rows = tl.load(host_ptr + host_row[:, None] * row_elems + rs[None, :], mask=m)
        tl.store(dev_ptr + dev_row[:, None] * row_elems + rs[None, :], rows, mask=m)


@dataclass
class _Scratch:
    hitmask: torch.Tensor
    victims: torch.Tensor
    order: torch.Tensor


def swap_in(
    state: HotBufferState,
    topk: torch.Tensor,
    host_mirror: torch.Tensor,
    host_base: torch.Tensor,
    device_buffer: torch.Tensor,
    *,
    validate: bool = True,
) -> torch.Tensor:
    """The Triton kernel: same contract and results as :func:`swap_in_reference`, LRU order included."""
    if validate:
        _check(state, topk, host_mirror, host_base, device_buffer)
    b, s = state.slot_to_token.shape
    k = topk.shape[1]
    out = torch.full((b, k), -1, dtype=torch.int64, device=topk.device)
    if b == 0 or k == 0:
        return out
    dev = topk.device
    scratch = _Scratch(
        torch.empty((b, s), dtype=torch.int32, device=dev),
        torch.empty((b, s), dtype=torch.int64, device=dev),
        torch.empty((b, k), dtype=torch.int64, device=dev),
    )
    host_bits, dev_bits = _bits(host_mirror), _bits(device_buffer)
    row_elems = host_bits.shape[-1]
    block_k = triton.next_power_of_2(k)
    block_r = max(1, min(triton.next_power_of_2(row_elems), max(16, 8192 // block_k)))
    _swap_in_kernel[(b,)](
        topk.to(torch.int64),
        state.slot_to_token,
        state.token_to_slot,
        state.lru,
        host_bits,
        host_base.to(torch.int64),
        dev_bits,
        out,
        scratch.hitmask,
        scratch.victims,
        scratch.order,
        k,
        s,
        state.max_tokens,
        row_elems,
        BLOCK_K=block_k,
        BLOCK_S=triton.next_power_of_2(s),
        BLOCK_R=block_r,
        num_warps=4,
    )
    return out

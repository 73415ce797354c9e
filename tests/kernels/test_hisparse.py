"""kernels.hisparse: the Triton swap-in equals the torch reference exactly, LRU order included."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kernels.hisparse import HotBufferState, swap_in, swap_in_reference

ROW = 6  # elements per compressed row in these tests (V4's is 584 B)


def _mirror(n_requests, max_tokens, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    shape = (n_requests * max_tokens, ROW)
    if dtype.is_floating_point:
        host = torch.randn(shape, generator=g, dtype=dtype)
    else:
        host = torch.randint(-(2**30), 2**30, shape, generator=g, dtype=dtype)
    return host, torch.arange(n_requests, dtype=torch.int64) * max_tokens


def run_both(state, topk, host, base):
    """Run kernel and reference from the same state; assert identical slots, maps, LRU and buffer; return them."""
    b, s = state.slot_to_token.shape
    ref_state, ker_state = state.clone(), state.clone()
    ref_buf = torch.zeros((b, s, ROW), dtype=host.dtype)
    ker_buf = ref_buf.clone()
    ref_out = swap_in_reference(ref_state, topk, host, base, ref_buf)
    ker_out = swap_in(ker_state, topk, host, base, ker_buf)
    assert torch.equal(ker_out, ref_out)
    assert torch.equal(ker_state.slot_to_token, ref_state.slot_to_token)
    assert torch.equal(ker_state.token_to_slot, ref_state.token_to_slot)
    assert torch.equal(ker_state.lru, ref_state.lru)
    assert torch.equal(ker_buf.view(torch.uint8), ref_buf.view(torch.uint8))
    return ref_out, ref_state, ref_buf


def test_the_definition_on_a_small_example():
    """4 slots holding tokens 10..13 (LRU order 0,1,2,3); top-k [12, 20, 10]: 12 and 10 hit, 20 takes slot 1."""
    state = HotBufferState.empty(1, 4, 32)
    state.slot_to_token[0] = torch.tensor([10, 11, 12, 13])
    state.token_to_slot[0, 10:14] = torch.arange(4)
    host, base = _mirror(1, 32, torch.float32)
    out, after, buf = run_both(state, torch.tensor([[12, 20, 10]]), host, base)
    assert out.tolist() == [[2, 1, 0]]
    assert after.lru.tolist() == [[3, 1, 0, 2]]  # stale (3) -> miss (1) -> hits in previous order (0, 2)
    assert after.slot_to_token.tolist() == [[10, 20, 12, 13]]
    assert int(after.token_to_slot[0, 11]) == -1
    assert torch.equal(buf[0, 1], host[20])


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32, torch.int64])
def test_random_steps_agree(dtype):
    """Several decode steps over a batch, state carried from step to step."""
    b, s, t, k = 3, 8, 24, 6
    host, base = _mirror(b, t, dtype, seed=1)
    g = torch.Generator().manual_seed(2)
    state = HotBufferState.empty(b, s, t)
    for _ in range(4):
        topk = torch.randint(-1, t, (b, k), generator=g)
        _, state, _ = run_both(state, topk, host, base)


def test_duplicate_ids_share_one_slot_and_copy_once():
    state = HotBufferState.empty(1, 4, 16)
    host, base = _mirror(1, 16, torch.float32)
    out, after, _ = run_both(state, torch.tensor([[5, 7, 5, 5]]), host, base)
    assert out.tolist() == [[0, 1, 0, 0]]
    assert after.slot_to_token.tolist() == [[5, 7, -1, -1]]
    out, after, _ = run_both(after, torch.tensor([[7, 9, 7, 9]]), host, base)
    assert out.tolist() == [[1, 2, 1, 2]]


def test_all_hits_only_reorder():
    state = HotBufferState.empty(2, 4, 16)
    host, base = _mirror(2, 16, torch.int32)
    _, warm, buf = run_both(state, torch.tensor([[0, 1, 2, 3], [4, 5, 6, 7]]), host, base)
    out, after, _ = run_both(warm, torch.tensor([[3, 1], [6, 4]]), host, base)
    assert torch.equal(after.slot_to_token, warm.slot_to_token)
    assert out.tolist() == [[3, 1], [2, 0]]
    assert after.lru.tolist() == [[0, 2, 1, 3], [1, 3, 0, 2]]


def test_all_misses_evict_the_least_recently_used():
    state = HotBufferState.empty(1, 4, 16)
    host, base = _mirror(1, 16, torch.int64)
    _, warm, _ = run_both(state, torch.tensor([[0, 1, 2, 3]]), host, base)
    out, after, buf = run_both(warm, torch.tensor([[8, 9]]), host, base)
    assert out.tolist() == [[0, 1]]
    assert after.slot_to_token.tolist() == [[8, 9, 2, 3]]
    assert after.lru.tolist() == [[2, 3, 0, 1]]
    assert torch.equal(buf[0, :2], host[8:10])


def test_a_buffer_larger_than_the_sequence_fills_empty_slots_first():
    """8 slots, a 5-token sequence: nothing is ever evicted, every token ends resident."""
    state = HotBufferState.empty(1, 8, 5)
    host, base = _mirror(1, 5, torch.float32)
    _, state, _ = run_both(state, torch.tensor([[4, 0, -1]]), host, base)
    _, state, _ = run_both(state, torch.tensor([[1, 2, 3, 4, 0]]), host, base)
    assert sorted(state.slot_to_token[0].tolist()) == [-1, -1, -1, 0, 1, 2, 3, 4]
    assert state.slot_to_token[0, :2].tolist() == [4, 0]


def test_empty_top_k_and_padding_change_nothing():
    state = HotBufferState.empty(2, 4, 8)
    host, base = _mirror(2, 8, torch.float32)
    out, after, _ = run_both(state, torch.empty((2, 0), dtype=torch.int64), host, base)
    assert out.shape == (2, 0)
    out, after, _ = run_both(state, torch.full((2, 3), -1), host, base)
    assert out.tolist() == [[-1] * 3] * 2
    assert torch.equal(after.lru, state.lru)


def test_top_k_larger_than_the_buffer_is_rejected():
    state = HotBufferState.empty(1, 2, 8)
    host, base = _mirror(1, 8, torch.float32)
    with pytest.raises(ValueError, match="exceeds the hot buffer"):
        swap_in(state, torch.tensor([[0, 1, 2]]), host, base, torch.zeros((1, 2, ROW)))


@settings(max_examples=15, deadline=None)
@given(
    data=st.data(),
    b=st.integers(1, 3),
    s=st.integers(1, 9),
    t=st.integers(1, 20),
)
def test_any_sequence_of_steps_agrees(data, b, s, t):
    """Property: from any reachable state, kernel and reference agree on every output and state field."""
    k = data.draw(st.integers(0, s))
    host, base = _mirror(b, t, torch.float32)
    state = HotBufferState.empty(b, s, t)
    for _ in range(2):
        ids = data.draw(
            st.lists(st.lists(st.integers(-1, t - 1), min_size=k, max_size=k), min_size=b, max_size=b)
        )
        _, state, _ = run_both(state, torch.tensor(ids, dtype=torch.int64).reshape(b, k), host, base)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_on_a_gpu_with_a_pinned_host_mirror():
    b, s, t, k = 4, 64, 256, 32
    host, base = _mirror(b, t, torch.float32, seed=3)
    g = torch.Generator().manual_seed(4)
    state = HotBufferState.empty(b, s, t)
    for _ in range(3):
        topk = torch.randint(-1, t, (b, k), generator=g)
        ref_state, ref_buf = state.clone(), torch.zeros((b, s, ROW))
        ref = swap_in_reference(ref_state, topk, host, base, ref_buf)
        gpu_state = HotBufferState(*(x.cuda() for x in (state.slot_to_token, state.token_to_slot, state.lru)))
        buf = torch.zeros((b, s, ROW), device="cuda")
        out = swap_in(gpu_state, topk.cuda(), host.pin_memory(), base.cuda(), buf)
        torch.cuda.synchronize()
        assert torch.equal(out.cpu(), ref) and torch.equal(gpu_state.lru.cpu(), ref_state.lru)
        assert torch.equal(buf.cpu(), ref_buf)
        state = ref_state

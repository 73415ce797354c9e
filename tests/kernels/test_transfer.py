"""kernels.transfer: every backend equals the plain-torch reference bit for bit."""

import os

import pytest
import torch

from kernels.transfer import BACKENDS, KVPool, Layout, plan_transfer, transfer, transfer_reference

LAYOUTS = [Layout.LAYER_FIRST, Layout.PAGE_FIRST]
DTYPES = [torch.float32, torch.int32, torch.int64]


def _random_pool(layout, dtype, *, n_layers=3, n_pages=12, elems=10, seed=0, device="cpu", pin=False):
    g = torch.Generator().manual_seed(seed)
    pool = KVPool.allocate(n_layers, n_pages, elems, layout=layout, dtype=dtype)
    if dtype.is_floating_point:
        pool.data.copy_(torch.randn(pool.data.shape, generator=g))
    else:
        pool.data.copy_(torch.randint(-(2**30), 2**30, pool.data.shape, generator=g, dtype=dtype))
    data = pool.data.pin_memory() if pin else pool.data.to(device)
    return KVPool(data, layout)


def _bits(t):
    return t.cpu().view(torch.int32) if t.element_size() == 4 else t.cpu().view(torch.int64)


def _scattered(n, pages, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randperm(pages, generator=g)[:n], torch.randperm(pages, generator=g)[:n]


def test_kernel_tests_run_under_the_interpreter_without_cuda():
    """On a CPU-only machine the Triton kernels are interpreted, not skipped."""
    if not torch.cuda.is_available():
        assert os.environ.get("TRITON_INTERPRET") == "1"


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("src_layout", LAYOUTS)
@pytest.mark.parametrize("dst_layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_backend_equals_the_reference(backend, src_layout, dst_layout, dtype):
    """Random pools, random scattered indices, any layout pair: the destination is bit-identical."""
    src = _random_pool(src_layout, dtype, seed=1)
    expected = _random_pool(dst_layout, dtype, n_pages=16, seed=2)
    actual = KVPool(expected.data.clone(), dst_layout)
    src_idx, _ = _scattered(7, 12, seed=3)
    _, dst_idx = _scattered(7, 16, seed=4)
    transfer_reference(src, expected, src_idx, dst_idx)
    transfer(src, actual, src_idx, dst_idx, backend)
    assert torch.equal(_bits(actual.data), _bits(expected.data))


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_empty_index_list_copies_nothing(backend):
    src = _random_pool(Layout.LAYER_FIRST, torch.float32, seed=5)
    dst = _random_pool(Layout.PAGE_FIRST, torch.float32, seed=6)
    before = dst.data.clone()
    transfer(src, dst, [], [], backend)
    assert torch.equal(dst.data, before)


@pytest.mark.parametrize("backend", BACKENDS)
def test_one_page_covers_every_layer(backend):
    """A page's rows in all layers move together, whatever the layouts."""
    src = _random_pool(Layout.PAGE_FIRST, torch.int64, seed=7)
    dst = KVPool.allocate(3, 12, 10, layout=Layout.LAYER_FIRST, dtype=torch.int64)
    transfer(src, dst, [4], [9], backend)
    for layer in range(3):
        assert torch.equal(dst.data[layer, 9], src.data[4, layer])


def test_copy_engine_merges_pages_contiguous_on_both_sides():
    """Consecutive pages in two layer-first pools: one copy per layer, not one per page."""
    src = _random_pool(Layout.LAYER_FIRST, torch.float32, seed=8)
    dst = KVPool.allocate(3, 12, 10, dtype=torch.float32)
    assert plan_transfer(src, dst, [2, 3, 4, 5], [6, 7, 8, 9], "copy_engine").mechanism.endswith("(3 runs)")
    assert plan_transfer(src, dst, [2, 3, 4, 5], [6, 8, 7, 9], "copy_engine").mechanism.endswith("(12 runs)")


def test_page_first_pools_merge_across_layers():
    """Page-first to page-first: a page's layers are adjacent on both sides, so a run spans all of them."""
    src = _random_pool(Layout.PAGE_FIRST, torch.float32, seed=9)
    dst = KVPool.allocate(3, 12, 10, layout=Layout.PAGE_FIRST, dtype=torch.float32)
    assert plan_transfer(src, dst, [0, 1], [5, 6], "copy_engine").mechanism.endswith("(1 runs)")


@pytest.mark.parametrize(
    ("src_idx", "dst_idx", "message"),
    [([0, 1], [3, 3], "repeat"), ([12], [0], "out of range"), ([0, 1], [0], "equal length")],
)
def test_bad_indices_are_rejected(src_idx, dst_idx, message):
    src = _random_pool(Layout.LAYER_FIRST, torch.float32)
    dst = KVPool.allocate(3, 12, 10)
    with pytest.raises(ValueError, match=message):
        plan_transfer(src, dst, src_idx, dst_idx, "kernel")


def test_pools_must_agree_on_row_shape():
    src = _random_pool(Layout.LAYER_FIRST, torch.float32)
    with pytest.raises(ValueError, match="differ"):
        transfer(src, KVPool.allocate(3, 12, 11), [0], [0], "copy_engine")


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("backend", BACKENDS)
def test_pinned_host_to_device_on_a_gpu(backend):
    """H2D and D2H between a pinned host pool and a GPU pool (the kernel reads host memory through UVA)."""
    host = _random_pool(Layout.PAGE_FIRST, torch.float32, pin=True, seed=10)
    dev = _random_pool(Layout.LAYER_FIRST, torch.float32, device="cuda", seed=11)
    expected = KVPool(dev.data.clone(), dev.layout)
    transfer_reference(host, expected, [1, 5, 7], [0, 2, 11])
    transfer(host, dev, [1, 5, 7], [0, 2, 11], backend)
    torch.cuda.synchronize()
    assert torch.equal(dev.data, expected.data)
    back = KVPool(host.data.clone().pin_memory(), host.layout)
    transfer(dev, back, [0, 2], [3, 4], backend)
    torch.cuda.synchronize()
    assert torch.equal(back.data[3], dev.data[:, 0].cpu())

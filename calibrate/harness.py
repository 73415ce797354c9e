"""Run a calibration suite: environment metadata, link ceilings, every kernel over the grid, fits -> CostTable.

torch/triton are imported inside functions: ``calibrate.cli`` is imported by ``sim.app.cli`` to build its parser.
On a machine without CUDA everything runs on CPU tensors (``device: cpu``), the Triton kernels under
``TRITON_INTERPRET=1``; that is a pipeline test, and its numbers say nothing about a GPU.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from calibrate.fit import fit_cost
from calibrate.suites import Suite, SwapInShape
from calibrate.timing import Timer, Timing
from sim.model.costs import CostEntry, CostTable, TableSource

__all__ = ["CalibrationRun", "environment", "measure_ceilings", "resolve_device", "run_suite"]

TRANSFER_BACKENDS = ("copy_engine", "batched", "kernel")


@dataclass
class CalibrationRun:
    """The table plus what the printout needs: the io mechanism each backend used."""

    table: CostTable
    mechanisms: dict[str, str] = field(default_factory=dict)


def resolve_device(requested: str) -> str:
    """``auto`` -> ``cuda`` when torch sees a GPU, else ``cpu``; ``cuda`` without one raises InputError."""
    import torch

    from sim.base.errors import InputError

    if requested == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if requested == "cuda" and not torch.cuda.is_available():
        raise InputError("--device cuda: torch sees no CUDA device")
    return requested


def _import_kernels(device: str):
    """Import the kernels, turning on the Triton interpreter first for CPU runs; None when Triton can't run."""
    if device == "cpu" and "kernels.transfer" not in sys.modules:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from kernels import hisparse, transfer

    usable = device == "cuda" or os.environ.get("TRITON_INTERPRET") == "1"
    return transfer, hisparse, usable


def _nvidia_smi(index: int, fields: str) -> list[str] | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={fields}", "--format=csv,noheader,nounits", f"--id={index}"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    return [v.strip() for v in out.strip().split(",")]


def _copy_engines(index: int, props) -> int | None:
    """``cudaDeviceProp.asyncEngineCount``: from torch if it exposes it, else cuda-python, else unknown."""
    for name in ("async_engine_count", "asyncEngineCount"):
        if hasattr(props, name):
            return int(getattr(props, name))
    try:
        from cuda.bindings import runtime as cudart  # type: ignore[import-not-found]

        err, value = cudart.cudaDeviceGetAttribute(cudart.cudaDeviceAttr.cudaDevAttrAsyncEngineCount, index)
        return int(value) if int(err) == 0 else None
    except (ImportError, AttributeError):
        return None


def environment(device: str, suite: Suite, notes: list[str]) -> TableSource:
    """Who measured: device, driver, CUDA, torch, triton, PCIe link, copy engines, date."""
    import torch
    import triton

    date = dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%d")
    notes = [f"suite {suite.name}", *notes]
    if device == "cpu":
        cpu = platform.processor() or platform.machine()
        notes.append(f"CPU run ({cpu}, {os.cpu_count()} cores): a pipeline check, not GPU timings")
        return TableSource(
            "measured", "cpu", None, None, torch.__version__, triton.__version__, {}, None, date, tuple(notes)
        )
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    smi = _nvidia_smi(
        index,
        "driver_version,pcie.link.gen.current,pcie.link.width.current,pcie.link.gen.max,pcie.link.width.max,utilization.gpu",
    )
    pcie: dict[str, object] = {}
    driver = None
    if smi and len(smi) == 6:
        driver = smi[0]
        pcie = {"gen_current": smi[1], "width_current": smi[2], "gen_max": smi[3], "width_max": smi[4]}
        notes.append(f"GPU utilization before the run: {smi[5]}% (calibrate on an idle GPU)")
        notes.append("PCIe gen_current may read low at idle (link power saving); gen_max is the trained link")
    else:
        notes.append("nvidia-smi unavailable: driver and PCIe link unknown")
    return TableSource(
        "measured",
        props.name,
        driver,
        torch.version.cuda,
        torch.__version__,
        triton.__version__,
        pcie,
        _copy_engines(index, props),
        date,
        tuple(notes),
    )


def _buffers(device: str, nbytes: int):
    import torch

    host = torch.empty(nbytes, dtype=torch.uint8, pin_memory=device == "cuda")
    dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
    return host, dev


def measure_ceilings(device: str, nbytes: int, timer: Timer) -> dict[str, float]:
    """GB/s of one large pinned copy each way, and of each direction while the other runs concurrently."""
    host, dev = _buffers(device, nbytes)
    host2, dev2 = _buffers(device, nbytes)
    h2d = timer.time(lambda: dev.copy_(host, non_blocking=True)).median_s
    d2h = timer.time(lambda: host2.copy_(dev2, non_blocking=True)).median_s
    bi_h2d, bi_d2h = _bidirectional(device, host, dev, host2, dev2, timer)
    gb = nbytes / 1e9
    return {"h2d": gb / h2d, "d2h": gb / d2h, "h2d_bidir": gb / bi_h2d, "d2h_bidir": gb / bi_d2h}


def _bidirectional(device, host, dev, host2, dev2, timer: Timer) -> tuple[float, float]:
    """Median seconds of each direction when both run at once (two CUDA streams, or two CPU threads)."""
    import torch

    h2d_s, d2h_s = [], []
    for _ in range(timer.warmup + max(timer.min_repeats, 5)):
        if device == "cuda":
            s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
            ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
            torch.cuda.synchronize()
            with torch.cuda.stream(s1):
                ev[0].record()
                dev.copy_(host, non_blocking=True)
                ev[1].record()
            with torch.cuda.stream(s2):
                ev[2].record()
                host2.copy_(dev2, non_blocking=True)
                ev[3].record()
            torch.cuda.synchronize()
            h2d_s.append(ev[0].elapsed_time(ev[1]) / 1e3)
            d2h_s.append(ev[2].elapsed_time(ev[3]) / 1e3)
        else:
            times = _concurrent_cpu_copies({"h2d": (dev, host), "d2h": (host2, dev2)})
            h2d_s.append(times["h2d"])
            d2h_s.append(times["d2h"])
    skip = timer.warmup
    return float(np.median(h2d_s[skip:])), float(np.median(d2h_s[skip:]))


def _concurrent_cpu_copies(copies: dict) -> dict[str, float]:
    """Seconds each ``name: (dst, src)`` copy took, all started together on their own threads (torch copies
    release the GIL)."""
    import time

    times: dict[str, float] = {}
    barrier = threading.Barrier(len(copies))

    def copy(name: str, dst, src) -> None:
        barrier.wait()
        t0 = time.perf_counter()
        dst.copy_(src)
        times[name] = time.perf_counter() - t0

    threads = [threading.Thread(target=copy, args=(name, *pair)) for name, pair in copies.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return times


def _transfer_points(suite: Suite, device: str, transfer_mod, timer: Timer, rng, kernel_ok: bool, progress):
    """Yield (op, backend, item_bytes, n, Timing, mechanism) for every transfer shape of the suite."""
    import torch

    backends = [b for b in TRANSFER_BACKENDS if b != "kernel" or kernel_ok]
    for size in suite.item_bytes:
        shapes = {b: [n for s, n in suite.transfer_shapes(b) if s == size] for b in backends}
        max_n = max((max(ns) for ns in shapes.values() if ns), default=0)
        if not max_n:
            continue
        pages = 2 * max_n
        elems = size // 8  # every V4 item size is a multiple of 8 B, as SGLang's io kernels require
        host = transfer_mod.KVPool.allocate(1, pages, elems, dtype=torch.int64, pin=device == "cuda")
        dev = transfer_mod.KVPool.allocate(1, pages, elems, dtype=torch.int64, device=device)
        for backend in backends:
            for n in shapes[backend]:
                host_idx = torch.as_tensor(rng.permutation(pages)[:n])
                dev_idx = torch.as_tensor(rng.permutation(pages)[:n])
                for op, (src, dst, si, di) in (
                    ("h2d", (host, dev, host_idx, dev_idx)),
                    ("d2h", (dev, host, dev_idx, host_idx)),
                ):
                    plan = transfer_mod.plan_transfer(src, dst, si, di, backend)
                    yield op, backend, size, n, timer.time(plan.run), plan.mechanism.split(" (")[0]
                    progress(1)
        del host, dev


def _swap_in_point(shape: SwapInShape, device: str, hisparse, timer: Timer, rng) -> tuple[Timing, int]:
    """Time one swap-in step from a full buffer: hits are resident ids, misses fresh ones; state reset per repeat."""
    import torch

    b, s, k = shape.n_requests, shape.buffer_slots, shape.top_k
    tokens = 2 * s + k
    elems = shape.row_bytes // 8
    host = torch.from_numpy(rng.integers(0, 1 << 40, size=(b * tokens, elems)))
    host = host.pin_memory() if device == "cuda" else host
    base = torch.arange(b, dtype=torch.int64, device=device) * tokens
    state = hisparse.HotBufferState.empty(b, s, tokens, device=device)
    topk = torch.empty((b, k), dtype=torch.int64)
    n_miss = shape.misses_per_request
    for r in range(b):
        resident = rng.permutation(tokens)[:s]
        state.slot_to_token[r] = torch.as_tensor(resident, device=device)
        state.token_to_slot[r, torch.as_tensor(resident, device=device)] = torch.arange(s, device=device)
        state.lru[r] = torch.as_tensor(rng.permutation(s), device=device)
        absent = np.setdiff1d(np.arange(tokens), resident)
        topk[r] = torch.as_tensor(
            np.concatenate(
                [rng.choice(resident, k - n_miss, replace=False), rng.choice(absent, n_miss, replace=False)]
            )
        )
    topk = topk.to(device)
    buffer = torch.zeros((b, s, elems), dtype=torch.int64, device=device)
    saved = state.clone()
    timing = timer.time(
        lambda: hisparse.swap_in(state, topk, host, base, buffer, validate=False),
        setup=lambda: state.copy_(saved),
    )
    return timing, b * n_miss


def run_suite(suite: Suite, device: str, *, seed: int = 0, show_progress: bool = True) -> CalibrationRun:
    """Time the whole suite on ``device`` and return the fitted table (not yet written)."""
    import torch

    threads = torch.get_num_threads()
    if device == "cpu":
        torch.set_num_threads(1)  # NOTE: intra-op thread pools stall for ms when another process holds a core
    try:
        return _run_suite(suite, device, seed, show_progress)
    finally:
        torch.set_num_threads(threads)


def _run_suite(suite: Suite, device: str, seed: int, show_progress: bool) -> CalibrationRun:
    from sim.base.progress import progress_bar

    transfer_mod, hisparse, kernel_ok = _import_kernels(device)
    rng = np.random.default_rng(seed)
    timer = Timer(device, suite.warmup, suite.min_repeats, suite.max_repeats, suite.budget_s)
    notes = [
        "transfers: one row per item (n_layers=1), indices scattered at random over pools twice the size"
    ]
    if device == "cpu":
        notes.append("CPU run on one intra-op thread (stable medians on a shared machine)")
        notes.append(
            f"kernel backend under TRITON_INTERPRET=1, capped at {suite.kernel_max_items} items / "
            f"{suite.kernel_max_bytes} B per transfer"
            if kernel_ok
            else "kernel backend skipped: Triton cannot run here"
        )
    backends = [b for b in TRANSFER_BACKENDS if b != "kernel" or kernel_ok]
    total = 2 * sum(len(suite.transfer_shapes(b)) for b in backends) + (
        len(suite.swap_in) if kernel_ok else 0
    )
    bar = progress_bar(total, desc=f"calibrate {suite.name} ({device})", unit="shapes", enabled=show_progress)
    ceilings = measure_ceilings(device, suite.ceiling_bytes, timer)
    entries: list[CostEntry] = []
    mechanisms: dict[str, str] = {}
    for op, backend, size, n, t, mech in _transfer_points(
        suite, device, transfer_mod, timer, rng, kernel_ok, bar.update
    ):
        mechanisms[backend] = mech
        entries.append(CostEntry(op, backend, size, n, t.median_s, t.p10_s, t.p90_s))
    if kernel_ok:
        for shape in suite.swap_in:
            t, misses = _swap_in_point(shape, device, hisparse, timer, rng)
            entries.append(
                CostEntry(
                    "swap_in",
                    "kernel",
                    shape.row_bytes,
                    misses,
                    t.median_s,
                    t.p10_s,
                    t.p90_s,
                    shape.n_requests,
                    shape.top_k,
                    shape.hit_ratio,
                    shape.buffer_slots,
                )
            )
            bar.update(1)
        mechanisms["swap_in"] = "triton" if device == "cuda" else "triton interpreter"
    bar.close()
    notes.append("batched backend mechanism: " + mechanisms.get("batched", "n/a"))
    source = environment(device, suite, notes)
    return CalibrationRun(CostTable(source, ceilings, tuple(entries), fit_entries(entries)), mechanisms)


def fit_entries(entries: list[CostEntry]) -> dict:
    """One fit per (op, backend). Transfers: items and bytes; swap-in: lookups (requests x top-k) and missed bytes."""
    groups: dict[tuple[str, str], list[CostEntry]] = {}
    for e in entries:
        groups.setdefault((e.op, e.backend), []).append(e)
    fits = {}
    for key, group in groups.items():
        if key[0] == "swap_in":
            items: Callable[[CostEntry], int] = lambda e: e.n_requests * e.top_k  # noqa: E731
        else:
            items = lambda e: e.n_items  # noqa: E731
        try:
            fits[key] = fit_cost(
                [items(e) for e in group],
                [e.n_items * e.item_bytes for e in group],
                [e.median_s for e in group],
            )
        except ValueError:
            continue  # e.g. swap-in measured only at 100% hits: no bytes moved, nothing to fit a bandwidth on
    return fits

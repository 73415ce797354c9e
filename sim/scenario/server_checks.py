"""The rules a scenario must keep that need the server it describes: the pools SGLang would size
(:func:`sim.scenario.resolve.server_pools`) inside the host memory and the platform's pinnable ceiling.

They sit above the schema, beside the resolution they read; the loader hands them to the schema's validator
(:func:`sim.scenario.load.scenario_from_dict`), after the structural rules of :mod:`sim.scenario.schema.checks`.
"""

from __future__ import annotations

from collections.abc import Callable

from sim.model.hostmem import RESERVE_BYTES
from sim.model.hostpools import host_pool_bytes
from sim.scenario.pinned import pinned_over
from sim.scenario.resolve import NoFullPool, server_pools
from sim.scenario.schema import Scenario, build_model_spec
from sim.scenario.schema.section import _field_error


def pools_fit(sc: Scenario) -> None:
    """At least one device page in ``kv_mem_gb``, and host pools of at least one page inside ``host_mem_gb`` less
    SGLang's 10 GiB reserve, the rule ``plan`` prices candidates by (``mem_cache/pool_host/base.py:28, 84-108``),
    each pool at the pages the run gets (:func:`sim.scenario.resolve.server_pools`; bytes: :mod:`sim.model.hostpools`)."""
    hc, hw = sc.hicache, sc.hardware
    page_bytes = sc.model.page_bytes(hc.page_size, hw.tp_size, hw.attn_dp_size)
    if not page_bytes:
        return
    if hw.max_total_num_tokens is None and int(hw.kv_mem_gb * 1e9 // page_bytes) < 1:
        raise _field_error("hardware.kv_mem_gb", f"smaller than one page ({page_bytes:,} B)")
    if not hc.enabled:
        return
    model = build_model_spec(sc)
    try:
        _, swa_ratio, l2, l2_swa = server_pools(sc, model)  # the pools the run gets (sim.scenario.resolve)
    except NoFullPool:
        return  # SGLang would not start: the run's start check (and validate) names it
    field = _l2_field(sc)
    if l2 < 1:
        raise _field_error(field, "host pool smaller than one page")
    if l2_swa is None and model.has_swa:  # a page count given: the SWA pools at their device share
        l2_swa = max(1, int(l2 * swa_ratio))
    host_gb = host_pool_bytes(model, l2, l2_swa or 0, hc.page_size) * hw.tp_size / 1e9
    _host_fits(sc, host_gb, field, "host pools", "a smaller pool", derived_note(sc))


def _l2_field(sc: Scenario) -> str:
    """The field that sized the host pool: the one a refusal of it names."""
    return "hicache.host_pages" if sc.hicache.host_pages is not None else "hicache.hicache_ratio"


def _host_fits(sc: Scenario, host_gb: float, field: str, what: str, fix: str, note: str = "") -> None:
    """``host_gb`` over all ranks inside ``host_mem_gb`` less SGLang's 10 GiB reserve, or a field error naming
    ``field`` (``mem_cache/pool_host/base.py:28, 84-108``)."""
    hw = sc.hardware
    if host_gb > hw.host_mem_gb - RESERVE_BYTES / 1e9:
        raise _field_error(field, f"{what} ({host_gb:,.1f} GB over {hw.tp_size} ranks) exceed hardware.host_mem_gb "
                           f"({hw.host_mem_gb:g}) less SGLang's 10 GiB reserve: {fix} or more host memory "
                           "(scenario from-sglang: --host-mem-gb)" + note)  # fmt: skip


def derived_note(sc: Scenario) -> str:
    """Why a host pool sized off a derived device pool may be refused wrongly: the device pool is the memory
    rule's, not the server's, and on ROCm that rule (it has no ROCm branch) runs about 2x over a logged pool
    (docs/notes/server_facts.md: +108% on the MI355X fixture). Empty where the pool is logged or given."""
    hw, hc = sc.hardware, sc.hicache
    if hw.max_total_num_tokens is not None or hc.host_pages is not None:
        return ""
    off = ("; on ROCm that rule runs about 2x over what the server allocates (it has no ROCm branch)"
           if hw.platform == "rocm" else "")  # fmt: skip
    return (f"; the host pool is hicache_ratio x a device pool derived from hardware.kv_mem_gb by SGLang's memory "
            f"rule, not logged{off}: the server's startup log (scenario from-sglang --server-log FILE) settles it")


def pinned_pools_fit(sc: Scenario) -> None:
    """The host pools, all ranks, inside the platform's pinnable ceiling (``hardware.pinnable_gb`` or the
    platform's rule, :mod:`sim.model.pinning`): past it the driver refuses to pin them at start."""
    if (why := pinned_over(sc)) is not None:
        raise _field_error(_l2_field(sc), why + derived_note(sc))


def hisparse_host_fits(sc: Scenario) -> None:
    """A DSA model's HiSparse host pool (:func:`sim.hisparse.dsa.dsa_pools`), on every rank, inside ``host_mem_gb``
    less SGLang's reserve: past it the pool refuses to allocate (``mem_cache/pool_host/base.py:84-108, 242-252``)."""
    if not sc.hisparse.enabled:
        return
    from sim.hisparse.dsa import dsa_pools
    from sim.hisparse.dsadecode import dsa_layout_of

    lay, hw = dsa_layout_of(sc), sc.hardware
    if lay is None:
        return
    host_gb = dsa_pools(lay, hw.kv_mem_gb * 1e9, sc.hisparse.host_to_device_ratio).host_bytes * hw.tp_size / 1e9
    _host_fits(sc, host_gb, "hisparse.host_to_device_ratio", "HiSparse's host pools", "a smaller ratio")


SERVER_CHECKS: tuple[Callable[[Scenario], None], ...] = (pools_fit, pinned_pools_fit, hisparse_host_fits)

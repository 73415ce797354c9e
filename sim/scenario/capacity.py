"""Where each pool capacity of a scenario comes from: the server's log, a launch flag, or the derivation.

SGLang sizes its pools from the memory it finds at start (``kv_cache_configurator.py``); the simulator derives the
same from ``hardware.kv_mem_gb`` (:func:`sim.scenario.resolve.derived_device_pools`). A capacity the server logged
(``hardware.max_total_num_tokens``, ``hardware.swa_max_total_num_tokens``, ``hicache.host_pages``,
``hicache.host_swa_pages``) replaces the derivation, ``--max-total-tokens`` (``hardware.max_total_tokens``) caps
it, and a derived capacity more than a page away from a logged one is reported, since the difference is what the
derivation gets wrong about that server.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.base.errors import InputError

if TYPE_CHECKING:
    from sim.model.pools import ModelSpec
    from sim.scenario.schema import Scenario

__all__ = ["capacity_sources", "host_pages", "logged_device_pools", "logged_mismatches"]


def logged_device_pools(sc: Scenario, l1: int, swa_ratio: float) -> tuple[int, float]:
    """(Full pages, SWA share) with the logged pool, or the --max-total-tokens cap, in place of the derived ``l1``.

    A logged SWA pool gives its own share; else the share keeps SGLang's rule: in ratio mode the SWA pool follows the
    Full pool (``pool_configurator.py:880-884``), in cap mode it is a fixed token count (so its share of fewer Full
    pages is larger)."""
    hw, page = sc.hardware, sc.hicache.page_size
    tokens = hw.max_total_num_tokens
    if tokens is None and hw.max_total_tokens is not None and hw.max_total_tokens < l1 * page:
        tokens = hw.max_total_tokens  # kv_cache_configurator.py:3096-3105, page-aligned after
    if tokens is None:
        return l1, swa_ratio
    pages = tokens // page
    if pages < 1:
        field = "max_total_num_tokens" if hw.max_total_num_tokens is not None else "max_total_tokens"
        raise InputError(f"hardware.{field}: {tokens:,} tokens is less than one {page}-token page")
    if hw.swa_max_total_num_tokens is not None:
        return pages, hw.swa_max_total_num_tokens / (pages * page)
    if sc.hicache.swa_full_tokens_ratio == "cap" and l1:
        return pages, swa_ratio * l1 / pages
    return pages, swa_ratio


def host_pages(sc: Scenario, model: ModelSpec, l1: int, swa_ratio: float) -> tuple[int, int | None]:
    """(Full host pages, SWA host pages or None for a model without a window) beside ``l1`` device pages:
    the logged or given counts, else ``--hicache-ratio``'s (:mod:`sim.model.hostpools`); (0, None) with
    HiCache off."""
    from sim.model.hostmem import swa_host_pages

    hc = sc.hicache
    if not hc.enabled:
        return 0, None
    l2 = hc.host_pages if hc.host_pages is not None else int(l1 * hc.hicache_ratio)
    if not model.has_swa:
        return l2, None
    if hc.host_swa_pages is not None:
        return l2, hc.host_swa_pages
    if hc.host_pages is None:
        return l2, swa_host_pages(l1, l2, swa_ratio, hc.hicache_ratio)
    return l2, None  # the engine's own share of the given page count


def capacity_sources(sc: Scenario, model: ModelSpec) -> dict[str, str]:
    """Each capacity's source, by the field that set it: what the summary and ``validate`` print."""
    hw, hc = sc.hardware, sc.hicache
    if hw.max_total_num_tokens is not None:
        l1 = "hardware.max_total_num_tokens (logged)"
    elif hw.max_total_tokens is not None:
        l1 = "hardware.kv_mem_gb (derived), capped by hardware.max_total_tokens"
    else:
        l1 = "hardware.kv_mem_gb (derived)"
    out = {"l1": l1}
    if model.has_swa:
        out["swa"] = ("hardware.swa_max_total_num_tokens (logged)" if hw.swa_max_total_num_tokens is not None
                      else f"hicache.swa_full_tokens_ratio ({hc.swa_full_tokens_ratio})")  # fmt: skip
    if hc.enabled:
        out["l2"] = "hicache.host_pages" if hc.host_pages is not None else f"hicache.hicache_ratio ({hc.hicache_ratio:g})"
        if model.has_swa:
            out["l2_swa"] = ("hicache.host_swa_pages" if hc.host_swa_pages is not None
                             else "the SWA share of hicache.host_pages" if hc.host_pages is not None
                             else "the SWA device pool x hicache.hicache_ratio")  # fmt: skip
    return out


def logged_mismatches(sc: Scenario, derived_l1: int, derived_swa_ratio: float) -> list[str]:
    """Where the derivation from ``hardware.kv_mem_gb`` misses a logged pool by more than a page."""
    hw, page = sc.hardware, sc.hicache.page_size
    out = []
    if hw.max_total_num_tokens is not None:
        derived = derived_l1 * page
        if abs(derived - hw.max_total_num_tokens) > page:
            out.append(_line("Full pool", derived, hw.max_total_num_tokens, "hardware.max_total_num_tokens"))
        if hw.swa_max_total_num_tokens is not None:
            swa = int(derived * derived_swa_ratio)
            if abs(swa - hw.swa_max_total_num_tokens) > page:
                out.append(_line("SWA pool", swa, hw.swa_max_total_num_tokens, "hardware.swa_max_total_num_tokens"))
    return out


def _line(what: str, derived: int, logged: int, field: str) -> str:
    return (f"{what}: derived {derived:,} tokens from hardware.kv_mem_gb, the server logged {logged:,} "
            f"({(derived - logged) / logged:+.1%}); the logged {field} is used")  # fmt: skip

"""An instance's pinned host pools against its platform's pinnable ceiling (``hardware.pinnable_gb`` or the
platform's rule, :mod:`sim.model.pinning`): what the scenario check refuses, ``validate`` lists and the run's
summary reports."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.base.errors import InputError
from sim.base.text import plural
from sim.model.hostmem import swa_pages
from sim.model.hostpools import host_pool_bytes

if TYPE_CHECKING:
    from sim.scenario.resolve import ServerConfig
    from sim.scenario.schema import Scenario

__all__ = ["pinned_bytes", "pinned_lines", "pinned_over", "pinned_summary"]


def pinned_bytes(sc: Scenario, server: ServerConfig) -> int:
    """Host bytes the instance pins, all ranks: each rank's pools at the pages SGLang gives them
    (:mod:`sim.model.hostpools`; a given page count's SWA pool at the engine's own share) times ``tp_size``
    (V4's pools are replicated on every rank, a config.json model is sized per rank already); 0 without HiCache."""
    l2, l2_swa = server.l2_pages, server.l2_swa_pages
    if l2_swa is None:
        l2_swa = swa_pages(l2, server.swa_ratio) if server.model.has_swa and l2 else 0
    return host_pool_bytes(server.model, l2, l2_swa, sc.hicache.page_size) * sc.hardware.tp_size


def _instance_pinned(sc: Scenario, server: ServerConfig | None = None) -> int | None:
    """:func:`pinned_bytes` of the scenario's server (``server``, when already resolved); None without HiCache, on
    a decode instance (HiSparse sizes its own host pool) or where the pools cannot be sized (the run reports that
    where it sizes them)."""
    from sim.scenario.resolve import resolve

    if not sc.hicache.enabled or sc.cluster.role == "decode":
        return None
    try:
        return pinned_bytes(sc, server if server is not None else resolve(sc))
    except InputError:
        return None


def pinned_over(sc: Scenario) -> str | None:
    """Why the instance's host pools cannot all be pinned (the ceiling and where it came from), or None."""
    ceiling = sc.hardware.pin_ceiling
    pinned = None if ceiling.gb is None else _instance_pinned(sc)
    if pinned is None or ceiling.fits(pinned):
        return None
    return (f"host pools pin {pinned / 1e9:,.1f} GB ({plural(sc.hardware.tp_size, 'rank')}), past the pinnable ceiling of "
            f"{ceiling.gb:,.1f} GB ({ceiling.source}): a smaller pool, or hardware.pinnable_gb for this node "
            "(cudaHostRegister / hipHostRegister would fail at start, InferenceX #2146)")  # fmt: skip


def pinned_summary(sc: Scenario, server: ServerConfig) -> dict:
    """The summary's ``pinned_host``: bytes pinned (all ranks) and the ceiling that applied, with its source."""
    return {"bytes": pinned_bytes(sc, server), **sc.hardware.pin_ceiling.as_dict()}


def pinned_lines(sc: Scenario, server: ServerConfig | None = None) -> list[str]:
    """``validate``'s line: the pinned host bytes beside the ceiling and its source; none without host pools.
    ``server``: the scenario's, when ``validate`` has resolved it already."""
    pinned = _instance_pinned(sc, server)
    if pinned is None:
        return []
    ceiling = sc.hardware.pin_ceiling
    limit = "" if ceiling.gb is None else f" {ceiling.gb:,.1f} GB"
    return [f"  pinned    {pinned / 1e9:,.1f} GB host pools ({plural(sc.hardware.tp_size, 'rank')}); ceiling{limit} <- "
            f"{ceiling.source}"]

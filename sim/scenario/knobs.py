"""Knobs a scenario leaves without effect, so that a sweep or a ``--set`` over one says so instead of printing
identical rows in silence.

Each rule names the fields it covers (a dotted prefix or a field) and what in the scenario stops them acting.
The rules follow what the engine reads: the host tier's knobs need HiCache, the storage tier's need L3, the
decode hot buffer's need HiSparse, the pinnable ceiling needs host pools to pin (HiCache), two-batch overlap's split
threshold needs the overlap on and the prefill delayer's knobs the delayer, and DeepSeek-V4's load-back runs whatever its threshold (SGLang skips a load
below ``load_back_threshold`` only when no component's state must come from host, and a V4 host hit always brings
its window state: ``mem_cache/unified_radix_cache.py:1878-1884``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from sim.scenario.schema import Scenario, build_model_spec

__all__ = ["inert_notes", "why_inert"]

# HiCache fields that act on L1 alone (the radix tree's page and eviction order, V4's device SWA pool).
_L1_FIELDS = ("hicache.enabled", "hicache.page_size", "hicache.swa_full_tokens_ratio", "hicache.radix_eviction_policy")
_PREFETCH = ("hicache.prefetch_",)


@dataclass(frozen=True)
class _Rule:
    covers: Callable[[str], bool]
    why: Callable[[Scenario], str | None]


def _under(*prefixes: str, but: Sequence[str] = ()) -> Callable[[str], bool]:
    return lambda key: key.startswith(prefixes) and not key.startswith(tuple(but))


def _no_l2(sc: Scenario) -> str | None:
    return None if sc.hicache.enabled else "HiCache is off (hicache.enabled: false), so there is no L2"


def _no_l3(sc: Scenario) -> str | None:
    return _no_l2(sc) or (None if sc.l3.enabled else "L3 is off (l3.enabled: false)")


def _v4_loads_always(sc: Scenario) -> str | None:
    if _no_l2(sc) or not build_model_spec(sc).has_swa:
        return None
    return ("a model with window pools always loads its host hits, whatever the threshold "
            "(unified_radix_cache.py:1878-1884)")  # fmt: skip


def _no_hisparse(sc: Scenario) -> str | None:
    return None if sc.hisparse.enabled else "HiSparse is off (hisparse.enabled: false)"


def _no_tbo(sc: Scenario) -> str | None:
    return None if sc.scheduler.enable_two_batch_overlap else \
        "two-batch overlap is off (scheduler.enable_two_batch_overlap: false)"


def _no_delayer(sc: Scenario) -> str | None:
    return None if sc.scheduler.enable_prefill_delayer else \
        "the prefill delayer is off (scheduler.enable_prefill_delayer: false)"


_RULES = (
    _Rule(_under("hicache.", "hardware.pinnable_gb", but=_L1_FIELDS), _no_l2),  # pinned memory: the host pools'
    _Rule(_under("scheduler.tbo_"), _no_tbo),
    _Rule(_under("scheduler.prefill_delayer_"), _no_delayer),
    _Rule(_under("l3.", *_PREFETCH, but=("l3.enabled",)), _no_l3),
    _Rule(_under("hicache.load_back_threshold"), _v4_loads_always),
    _Rule(_under("hisparse.", but=("hisparse.enabled",)), _no_hisparse),
)


def why_inert(key: str, sc: Scenario) -> str | None:
    """Why ``key`` cannot change this scenario's run, or None when it can (or no rule knows)."""
    for rule in _RULES:
        if rule.covers(key) and (why := rule.why(sc)):
            return why
    return None


def inert_notes(keys: Iterable[str], scenarios: Sequence[Scenario], how: str) -> list[str]:
    """One line per knob that cannot act in some of ``scenarios``: ``how`` is how the user gave it (``--grid``)."""
    notes = []
    for key in keys:
        whys = [w for sc in scenarios if (w := why_inert(key, sc))]
        if not whys:
            continue
        where = "at any point" if len(whys) == len(scenarios) else f"at {len(whys)} of {len(scenarios)} points"
        what = "rows differing only in it are identical" if how == "--grid" else "it changes nothing"
        notes.append(f"{how} {key} cannot act {where}: {whys[0]}; {what}" if len(scenarios) > 1
                     else f"{how} {key} cannot act here: {whys[0]}; {what}")  # fmt: skip
    return notes

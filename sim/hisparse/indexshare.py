"""Which layers of a DSA model run HiSparse's swap-in kernel each decode step, and which replay an anchor's plan.

DSA models with IndexShare (GLM-5.2-style ``index_topk_freq`` + ``index_skip_topk_offset``, LongCat's
``cli_factor``, an ``index_topk_pattern`` or ``indexer_types``) compute fresh top-k indices only on some layers; the
others reuse the previous layer's. SGLang 0.5.23 turns that into a prefetch plan: an anchor layer runs the swap-in
kernel synchronously and records its miss plan; each skip layer after it replays that plan with an IO-only copy
kernel on a side stream, overlapped with the compute in between, and never touches its own LRU or token state.
Without sharing every layer runs the kernel. Paths are the 0.5.23 wheel's, under ``sglang/srt/``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sim.base.errors import InputError
from sim.model.dsa import skips_topk as model_skips_topk

__all__ = ["INDEX_SHARE_FIELDS", "SwapInPlan", "shared_index_layers", "skips_topk"]

INDEX_SHARE_FIELDS = ("index_topk_freq", "index_skip_topk_offset", "index_topk_pattern", "indexer_types", "cli_factor")
"""The HF-config fields SGLang reads the skip pattern from (``configs/model_config.py:488-522``)."""


def _positive(share: Mapping, name: str, default: int | None) -> int | None:
    value = share.get(name, default)
    if value is None:
        return default
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InputError(f"index_share.{name}: expected a positive integer, got {value!r} "
                         "(SGLang asserts it: configs/model_config.py:502, 513, 516)")  # fmt: skip
    return value


def skips_topk(share: Mapping, layer: int) -> bool:
    """``dsa_layer_skips_topk`` (configs/model_config.py:488-522) on fields a stream gives: each field the rule
    reads is checked as SGLang asserts it, in the rule's order, then :func:`sim.model.dsa.skips_topk` answers."""
    types = share.get("indexer_types")
    if types is not None:
        if not isinstance(types, list) or not all(isinstance(t, str) for t in types):
            raise InputError(f"index_share.indexer_types: expected a list of names, got {types!r}"[:200])
    elif (_positive(share, "cli_factor", 1) or 1) <= 1:
        pattern = share.get("index_topk_pattern")
        if pattern is None:
            _positive(share, "index_topk_freq", 1)
            _positive(share, "index_skip_topk_offset", None)
        elif not isinstance(pattern, str):
            raise InputError(f"index_share.index_topk_pattern: expected a string of letters, got {pattern!r}"[:200])
    return model_skips_topk(share, layer)


def shared_index_layers(share: Mapping, n_layers: int) -> list[bool] | None:
    """``resolve_shared_index_layers`` (managers/hisparse_coordinator.py:80-114): the skip pattern over
    ``n_layers``, or None where no layer skips. ``cli_factor`` > 1 is read before ``indexer_types`` here (:93-96),
    as SGLang does. (SGLang also returns None under pipeline parallelism or ``SGLANG_DISABLE_HISPARSE_PREFETCH``:
    every layer then runs the kernel, :meth:`SwapInPlan.every_layer`.)"""
    unknown = next((k for k in share if k not in INDEX_SHARE_FIELDS), None)
    if unknown is not None:
        raise InputError(f"index_share.{unknown}: not an IndexShare field (known: {', '.join(INDEX_SHARE_FIELDS)})")
    cli = _positive(share, "cli_factor", 1)
    pattern = [i % cli != 0 for i in range(n_layers)] if cli > 1 else [skips_topk(share, i) for i in range(n_layers)]
    return pattern if any(pattern) else None


@dataclass(frozen=True)
class SwapInPlan:
    """Per layer, the layer whose swap-in kernel serves it: itself (a kernel layer) or its anchor (a skip layer,
    ``_build_prefetch_groups``, hisparse_coordinator.py:117-139: the nearest kernel layer before it)."""

    anchor_of: tuple[int, ...]

    @classmethod
    def every_layer(cls, n_layers: int) -> SwapInPlan:
        """No sharing (or the prefetch off): every layer runs the kernel on its own buffers (:1599-1605)."""
        return cls(tuple(range(n_layers)))

    @classmethod
    def from_pattern(cls, skip: Sequence[bool] | None, n_layers: int) -> SwapInPlan:
        """From a skip pattern (None: every layer); a first layer that skips is refused, as SGLang asserts (:132-135)."""
        if skip is None:
            return cls.every_layer(n_layers)
        anchors: list[int] = []
        anchor = None
        for i, is_skip in enumerate(skip):
            if not is_skip:
                anchor = i
            elif anchor is None:
                raise InputError(f"index_share: layer {i} reuses the top-k of a layer before it, and there is none "
                                 "(SGLang asserts it: managers/hisparse_coordinator.py:132-135)")  # fmt: skip
            anchors.append(anchor)
        return cls(tuple(anchors))

    @classmethod
    def from_index_share(cls, share: Mapping | None, n_layers: int) -> SwapInPlan:
        """The plan SGLang builds for a DSA model's IndexShare fields (None or {}: every layer)."""
        return cls.from_pattern(shared_index_layers(share or {}, n_layers), n_layers)

    @property
    def kernel_layers(self) -> tuple[int, ...]:
        return tuple(i for i, a in enumerate(self.anchor_of) if a == i)

    @property
    def skip_layers(self) -> tuple[int, ...]:
        return tuple(i for i, a in enumerate(self.anchor_of) if a != i)

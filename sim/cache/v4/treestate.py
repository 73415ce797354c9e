"""What the unified tree's parts share: the state :class:`~sim.cache.v4.unified.UnifiedTree` sets up and the
calls one part makes into another, declared once so that each part type-checks (and compiles) on its own."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import TYPE_CHECKING

from mypy_extensions import trait

from sim.cache.v4.leaforder import LeafOrder
from sim.cache.v4.node import PageKey, UNode

if TYPE_CHECKING:
    from sim.cache.ages import TierAges
    from sim.cache.v4.swa import SWAComponent

__all__ = ["TreeState"]


@trait
class TreeState:
    """The base of the tree's parts (device eviction, the host tier, the Full component): a trait, since a
    compiled class takes one concrete base."""

    root: UNode
    page: int
    window: int
    hicache: bool
    swa: SWAComponent
    num_nodes: int
    full_evictable: int
    full_protected: int
    host_tokens: int
    host_swa_tokens: int
    order: LeafOrder  # device leaves
    host_order: LeafOrder
    counts: Counter
    events: list[dict] | None
    ages: TierAges | None
    duplicates: dict[UNode, None] | None
    evict_unbacked: Callable[[UNode, list[int]], None] | None
    back_up_window: Callable[[UNode], None] | None

    # Each is defined by one part (the Full component, host tier, eviction or the tree itself).
    def update_leaf(self, node: UNode) -> None:
        raise NotImplementedError

    def pop_leaf(self) -> UNode | None:
        raise NotImplementedError

    def pop_host_leaf(self) -> UNode | None:
        raise NotImplementedError

    def _compact(self) -> None:
        raise NotImplementedError

    def _free_host(self, node: UNode) -> None:
        raise NotImplementedError

    def _remove(self, node: UNode, tracker: list[int]) -> None:
        raise NotImplementedError

    def _node(self, key: list[PageKey], parent: UNode | None) -> UNode:
        raise NotImplementedError

    def _split(self, child: UNode, pages: int) -> UNode:
        raise NotImplementedError

    def ref(self, node: UNode) -> list[int]:
        raise NotImplementedError

"""A matched request of the single-pool cache: what :meth:`sim.cache.hicache.HiCache.lookup` found, which its
controller's load-back (:mod:`sim.cache.controller`) reads; it lives below both."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sim.cache.node import Node

__all__ = ["Lookup"]


@dataclass
class Lookup:
    """A matched request. Its matched path stays locked until :meth:`~sim.cache.hicache.HiCache.release`."""

    keys: Sequence
    input_tokens: int
    device_pages: int
    host_pages: int  # host hit beyond the device prefix, in pages
    load: bool  # the host hit is loaded back (>= load_back_threshold), else recomputed
    device_node: Node
    best_node: Node

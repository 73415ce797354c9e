"""The router's consistent hashing, DP-aware: each attention-DP rank of each server is a node of one hash
ring, and a request goes to the node after its session's point on the ring.

AgentX's recipes run sglang-router with consistent hashing on the request's correlation id (aiperf sends one
per session) and DP awareness: the router picks the rank itself and the server's DP controller honours it
(``routed_dp_rank``: ``sglang/srt/managers/data_parallel_controller.py:865-879``), so every call of a session
lands on one rank and finds its own prefix there, whatever the controller's ``--load-balance-method``. The
ring has ``VIRTUAL_NODES`` points a rank so that sessions spread evenly; the hash function is this module's
(BLAKE2b), so *which* rank a given session lands on differs from the router's, not how sessions spread or
that a session keeps its rank. A request without a session (``session`` < 0) is keyed by its own id.
"""

from __future__ import annotations

import bisect
import hashlib

__all__ = ["VIRTUAL_NODES", "HashRing"]

VIRTUAL_NODES = 160  # points per rank on the ring


def _point(text: str) -> int:
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


class HashRing:
    """Nodes ``0 .. n - 1`` (the ranks of every server, in order) on one ring."""

    def __init__(self, n: int, virtual_nodes: int = VIRTUAL_NODES) -> None:
        ring = sorted((_point(f"rank-{i}-{v}"), i) for i in range(n) for v in range(virtual_nodes))
        self._points = [p for p, _ in ring]
        self._nodes = [i for _, i in ring]

    def node(self, session: int, rid: int) -> int:
        """The node a request of ``session`` goes to (by ``rid`` when it has no session)."""
        key = f"session-{session}" if session >= 0 else f"request-{rid}"
        k = bisect.bisect_right(self._points, _point(key))
        return self._nodes[k % len(self._nodes)]

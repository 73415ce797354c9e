"""The SGLang router's consistent hashing (``sglang_router --policy consistent_hashing --dp-aware``), as the
AgentX recipes front a DP-attention server with it: each attention-DP rank is a worker of its own, and a request
goes to the rank its routing key hashes to, so a session's calls stay on the rank that holds its prefix.

The policy (sgl-model-gateway ``src/policies/consistent_hashing.rs``, ``select_worker_impl``) hashes the
``X-SMG-Routing-Key`` header, which aiperf fills with the conversation's correlation id
(``AIPERF_HTTP_X_SMG_ROUTING_KEY_FROM_CORRELATION_ID=true``), onto a ring built once from the workers
(``src/core/worker_registry.rs``, ``HashRing``): 150 virtual nodes a worker, each at the hash of
``url#vnode``, and a key goes to the first worker at or after its own hash, clockwise. With ``--dp-aware`` the
router registers each rank as a worker (``url@rank``) and sends the request to that rank (``routed_dp_rank``),
so the server's own DP controller (``--load-balance-method``) is bypassed. A request with no key falls back
to a uniform pick (``RandomFallback``).

Here the routing key is the request's session (a trajectory and its subagents, a multi-turn client), and a
request without one (session < 0) is keyed by its id: a deterministic stand-in for the uniform fallback. The
ring hashes with BLAKE2b instead of the gateway's BLAKE3 (not in Python's standard library), and the worker
URLs are stand-ins: which rank a given session lands on differs from a real run's, but the ring's structure,
and so how evenly (or not) it spreads sessions over the ranks, is the gateway's.
"""

from __future__ import annotations

import bisect
import hashlib

VIRTUAL_NODES_PER_WORKER = 150  # worker_registry.rs, HashRing::new


def ring_position(data: bytes) -> int:
    """A 64-bit ring position: the first 8 bytes of the digest, little-endian (``hash_position``)."""
    return int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little")


class HashRing:
    """Workers on a consistent-hash ring; :meth:`pick` maps a routing key to a worker's index."""

    def __init__(self, urls: list[str]) -> None:
        entries = sorted((ring_position(f"{url}#".encode() + vnode.to_bytes(8, "little")), w)
                         for w, url in enumerate(urls) for vnode in range(VIRTUAL_NODES_PER_WORKER))  # fmt: skip
        self.positions = [p for p, _ in entries]
        self.workers = [w for _, w in entries]

    def pick(self, key: str) -> int:
        """The worker at or after the key's position, clockwise (``find_healthy_url``; every worker is healthy)."""
        i = bisect.bisect_left(self.positions, ring_position(key.encode()))
        return self.workers[i % len(self.workers)]


def dp_aware_urls(servers: int, dp_size: int) -> list[str]:
    """The workers ``--dp-aware`` registers: each server's ranks as ``url@rank``, in the engine's rank order."""
    return [f"http://server-{s}:30000@{r}" for s in range(servers) for r in range(dp_size)]


def routing_key(session: int, rid: int) -> str:
    """The request's stand-in correlation id: its session's, or its own when it has none."""
    return f"session-{session}" if session >= 0 else f"request-{rid}"

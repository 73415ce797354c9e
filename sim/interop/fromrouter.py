"""``scenario from-sglang``: an ``sglang_router.launch_router`` command (given as a ``--bench`` command, in front
of the server as AgentX runs it), read onto ``cluster.router``.

The policy is what is modelled: ``consistent_hashing`` with ``--dp-aware`` (each attention-DP rank a worker,
:mod:`sim.serve.hashring`), ``round_robin``, and ``cache_aware`` (the simulator's longest-device-prefix
router). Every other option is listed as ignored, with why; the other policies are refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.base.errors import InputError

if TYPE_CHECKING:
    from sim.interop.conversion import Conversion

POLICIES = ("consistent_hashing", "round_robin", "cache_aware")
ROUTER_WHY = {
    "--worker-urls": "the servers behind the router are --launch's (cluster.instances)",
    "--request-id-headers": "the header the router takes the request id from, for its logs and tracing; the "
    "routing key is X-SMG-Routing-Key, which aiperf fills from the correlation id "
    "(AIPERF_HTTP_X_SMG_ROUTING_KEY_FROM_CORRELATION_ID=true)",
    "--host": "network endpoint", "--port": "network endpoint",
    "--prometheus-host": "metrics endpoint: reporting only", "--prometheus-port": "metrics endpoint: reporting only",
    "--connect-timeout-secs": "a timeout no simulated request reaches", "--request-timeout-secs":
    "a timeout no simulated request reaches",
    "--disable-health-check": "every simulated worker is healthy", "--disable-retries": "no simulated request fails",
}  # fmt: skip
OTHER_WHY = "a router option (network, reliability, logging) with no effect on where a request goes here"


def router_flags(argv: list[str]) -> list[tuple[str, str | None, str]]:
    """(flag, value or None, as written): a flag takes the tokens up to the next ``--flag`` (``--worker-urls``
    takes several)."""
    out, i = [], 0
    while i < len(argv):
        tok = argv[i]
        if not tok.startswith("--"):
            raise InputError(f"sglang_router: unexpected argument {tok!r} (expected --flag)")
        flag, eq, value = tok.partition("=")
        i += 1
        if not eq:
            words = []
            while i < len(argv) and not argv[i].startswith("--"):
                words.append(argv[i])
                i += 1
            value = " ".join(words)
        out.append((flag, value or None, tok if eq or not value else f"{tok} {value}"))
    return out


def map_router(conv: Conversion, argv: list[str]) -> None:
    """The router's policy onto ``cluster.router``; the other options listed as ignored."""
    flags = router_flags(argv)
    dp_aware = any(f == "--dp-aware" for f, _, _ in flags)
    hw = conv.scenario.get("hardware", {})
    dp_attention = hw.get("enable_dp_attention") and hw.get("dp_size", 1) > 1
    policies = [(v, t) for f, v, t in flags if f == "--policy"]
    policy = policies[-1] if policies else None  # argparse keeps the last of a repeated option
    for _, text in policies[:-1]:
        conv.ignored.append(f"{text}: overridden by the later {policy[1]} (the router takes the last, as argparse does)")
    for flag, _value, text in flags:
        if flag in ("--policy", "--dp-aware"):
            continue
        conv.ignored.append(f"{text}: {ROUTER_WHY.get(flag, OTHER_WHY)}")
    if policy is None:
        conv.ignored.append("sglang_router without --policy: its default (cache_aware) is not mapped; "
                            "cluster.router stays round_robin")  # fmt: skip
        return
    value, text = policy
    if value not in POLICIES:
        raise InputError(f"sglang_router {text}: not modelled (the simulator has {', '.join(POLICIES)})")
    if value == "consistent_hashing" and dp_attention and not dp_aware:
        raise InputError(f"sglang_router {text} without --dp-aware on a DP-attention server: modelled with "
                         "--dp-aware only (each rank a worker on the ring)")  # fmt: skip
    conv.scenario.setdefault("cluster", {})["router"] = value
    extra = " --dp-aware" if dp_aware else ""
    conv.mapped.append(f"{text}{extra} -> cluster.router: {value}"
                       + (" (the session is the routing key: aiperf's correlation id)"
                          if value == "consistent_hashing" else ""))  # fmt: skip

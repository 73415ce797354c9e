"""``scenario from-sglang``: an ``sglang_router.launch_router`` command (given as a ``--bench`` command, in front
of the server as AgentX runs it), read onto ``cluster.router``.

The policy is what is modelled: ``consistent_hashing`` with ``--dp-aware`` (each attention-DP rank a worker,
:mod:`sim.serve.hashring`), ``round_robin``, and ``cache_aware`` (the router's tree and in-flight counts,
:mod:`sim.serve.cacheaware`) with the five options that steer it onto ``cluster.router_*``. Every other option is
listed as ignored, with why; the other policies are refused.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.base.errors import InputError
from sim.base.inputs import number_problem

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
# sglang-router 0.3.2's cache_aware options (sglang_router/router_args.py:273-308) -> (cluster field, kind);
# argparse takes an unambiguous prefix of a flag, as --eviction-interval for --eviction-interval-secs.
CACHE_AWARE_FLAGS = {
    "--cache-threshold": ("router_cache_threshold", float),
    "--balance-abs-threshold": ("router_balance_abs_threshold", int),
    "--balance-rel-threshold": ("router_balance_rel_threshold", float),
    "--eviction-interval-secs": ("router_eviction_interval_s", int),
    "--eviction-interval": ("router_eviction_interval_s", int),
    "--max-tree-size": ("router_max_tree_size", int),
}
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
    """The router's policy onto ``cluster.router`` and cache_aware's options onto ``cluster.router_*``; the other
    options listed as ignored."""
    flags = router_flags(argv)
    dp_aware = any(f == "--dp-aware" for f, _, _ in flags)
    hw = conv.scenario.get("hardware", {})
    dp_attention = hw.get("enable_dp_attention") and hw.get("dp_size", 1) > 1
    policies = [(v, t) for f, v, t in flags if f == "--policy"]
    # argparse keeps the last of a repeated option; none given: the launcher's default
    # (sglang_router/router_args.py:28)
    value, text = policies[-1] if policies else ("cache_aware", "--policy cache_aware (the router's default)")
    for _, earlier in policies[:-1]:
        conv.ignored.append(f"{earlier}: overridden by the later {text} (the router takes the last, as argparse does)")
    if value not in POLICIES:
        raise InputError(f"sglang_router {text}: not modelled (the simulator has {', '.join(POLICIES)})")
    if not dp_aware and dp_attention:  # one worker, the server: its DP controller picks the rank
        for _, _, written in flags:
            conv.ignored.append(f"{written}: without --dp-aware the router's only worker is the launch's server")
        conv.mapped.append("sglang_router without --dp-aware -> cluster.router: round_robin (every request goes to "
                           "the one server, whose DP controller picks the rank: scheduler.load_balance_method)")  # fmt: skip
        conv.scenario.setdefault("cluster", {})["router"] = "round_robin"
        return
    for flag, arg, written in flags:
        if flag in ("--policy", "--dp-aware"):
            continue
        if flag in CACHE_AWARE_FLAGS and value == "cache_aware":
            _cache_aware_option(conv, flag, arg, written)
        elif flag in CACHE_AWARE_FLAGS:
            conv.ignored.append(f"{written}: an option of --policy cache_aware only")
        else:
            conv.ignored.append(f"{written}: {ROUTER_WHY.get(flag, OTHER_WHY)}")
    conv.scenario.setdefault("cluster", {})["router"] = value
    extra = " --dp-aware" if dp_aware else ""
    conv.mapped.append(f"{text}{extra} -> cluster.router: {value}"
                       + (" (the session is the routing key: aiperf's correlation id)"
                          if value == "consistent_hashing" else ""))  # fmt: skip


def _cache_aware_option(conv: Conversion, flag: str, value: str | None, text: str) -> None:
    """One cache_aware option onto its ``cluster.router_*`` field, its origin the flag (the field's bounds blame
    it when the scenario is checked)."""
    field, kind = CACHE_AWARE_FLAGS[flag]
    try:
        number = kind(value or "")
    except ValueError:
        raise InputError(f"sglang_router {flag}: expected {'an integer' if kind is int else 'a number'}, "
                         f"got {(value or '')[:80]!r}") from None  # fmt: skip
    problem = number_problem(number)
    if problem:
        raise InputError(f"sglang_router {flag}: {problem}")
    conv.put(f"cluster.{field}", number, origin=text)
    conv.mapped.append(f"{text} -> cluster.{field}: {number}")

"""Layer 2, workload: where requests come from. The request itself, trace readers of every format, seeded
synthetic workloads, agentic trajectories and their generator.

May import: ``sim.base``, ``sim.model``.
"""

_SPLIT = {"Request": "request", "arrival_times": "synthetic", "multi_turn_sessions": "synthetic",
          "random_ids_requests": "synthetic", "shared_prefix": "synthetic", "detect_format": "traces",
          "read_mooncake": "traces", "read_token_trace": "traces", "read_trace": "traces", "token_page_keys": "traces"}


def __getattr__(name: str):
    """The flat layout's ``sim.workload`` held these names: say where each is now."""
    if name in _SPLIT:
        raise ImportError(f"sim.workload.{name} is now sim.workload.{_SPLIT[name]}.{name}", name=name)
    raise AttributeError(f"module 'sim.workload' has no attribute {name!r}")

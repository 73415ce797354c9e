"""The plan's base scenario from what the user has: a launch command (+ bench commands) or a scenario file,
and optionally a trace that replaces the workload."""

from __future__ import annotations

from sim.base.errors import InputError
from sim.base.inputs import check_input
from sim.scenario.load import Scenario, apply_overrides, load_scenario, scenario_from_dict

__all__ = ["base_scenario"]


def base_scenario(*, scenario: str | None, launch: str | None, gpu: str | None, benches: list[str],
                  trace: str | None, overrides: list[str]) -> Scenario:  # fmt: skip
    """Validated base scenario. The host-memory check is left to the plan's own section (a candidate that
    would not start is reported, not an error): hardware.host_mem_gb is only the default node DRAM."""
    sets = list(overrides)
    if trace is not None:
        from sim.workload.traces import detect_format

        path = check_input(trace, "trace", folder=True)
        sets = ["workload.kind=trace", f"workload.path={path.resolve()}", f"workload.format={detect_format(path)}",
                *sets]  # fmt: skip
    if scenario is not None:
        if benches or gpu:
            raise InputError("--bench and --gpu go with --launch, not --scenario")
        return load_scenario(scenario, sets)
    from sim.interop.fromsglang import from_sglang

    if gpu is None:
        raise InputError("--launch needs --gpu (the catalog GPU the server runs on: H20, H200, ...)")
    conv = from_sglang(launch, benches, gpu=gpu, host_mem_gb=1e9)  # no limit here: the plan checks DRAM itself
    return scenario_from_dict(apply_overrides(conv.scenario, sets), source="--launch")

"""Engine speed: simulated requests per wall second, and events per second against bare SimPy.

    python bench/engine.py [--trace PATH] [--instances 4]

Runs, side by side in one process: (1) SimPy alone, a process yielding timeouts (the ceiling any SimPy
model can reach here); (2) the multi-turn scenario (V4-Flash, L1+L2); (3) the whole Mooncake conversation
trace in time (12,031 requests, one hour of traffic). With the ``aic`` extra installed, (2) and (3) run
again with their passes priced by aiconfigurator-core (``compute.backend=aiconfigurator``, V4-Flash's FP8
checkpoint on H200, as the scenarios' GPU label says), and the wall time is shown against the roofline's
(the ``vs roofline`` column; a different clock also changes the batches, so part of the ratio is the run
itself). Absolute times on shared machines are noisy: read the ratios.
"""

from __future__ import annotations

import argparse
import importlib.util
import time
from pathlib import Path

import simpy

from sim.app.run import build, summarise
from sim.app.scenario import load_scenario

ROOT = Path(__file__).resolve().parent.parent


def bare_simpy(n: int = 500_000) -> float:
    env = simpy.Environment()

    def ticker():
        for _ in range(n):
            yield env.timeout(1.0)

    env.process(ticker())
    start = time.perf_counter()
    env.run()
    return n / (time.perf_counter() - start)


def timed_run(path: Path, overrides: list[str]) -> dict:
    sc = load_scenario(path, overrides)
    sim, arrivals, _ = build(sc)
    env = sim.env
    events = 0
    step = env.step

    def counting_step():
        nonlocal events
        events += 1
        step()

    env.step = counting_step
    start = time.perf_counter()
    sim.run(arrivals)
    wall = time.perf_counter() - start
    s = summarise(sc, sim)
    return {"name": sc.name, "requests": s["requests"]["finished"], "wall_s": wall, "events": events,
            "simulated_s": s["simulated_s"]}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--instances", type=int, default=4, help="instances serving the conversation trace")
    args = p.parse_args()
    simpy_eps = bare_simpy()
    cases = [
        (ROOT / "scenarios/dsv4_flash_multiturn_l1l2.yaml", []),
        (ROOT / "scenarios/mooncake_conversation.yaml",
         ["workload.max_requests=null", "workload.time_scale=1.0", f"cluster.instances={args.instances}",
          "cluster.router=cache_aware"]),
    ]  # fmt: skip
    backends = [("roofline", [])]
    if importlib.util.find_spec("aiconfigurator_core") is not None:
        backends.append(("aiconfigurator", ["compute.backend=aiconfigurator", "model.config=deepseek-v4-flash",
                                            "model.expert_dtype=fp8"]))
    runs = [(b, timed_run(path, over + extra)) for path, over in cases for b, extra in backends]
    print(f"bare SimPy: {simpy_eps:,.0f} timeouts/s"
          + ("" if len(backends) > 1 else "  (aiconfigurator backend: extra not installed, skipped)"))
    print(f"{'run':<30}{'backend':<16}{'requests':>10}{'sim s':>10}{'wall s':>9}{'req/wall s':>12}{'events/s':>12}"
          f"{'vs SimPy':>10}{'vs roofline':>13}")  # fmt: skip
    roof_wall = {}
    for backend, r in runs:
        eps = r["events"] / r["wall_s"]
        roof_wall.setdefault(r["name"], r["wall_s"])
        print(f"{r['name']:<30}{backend:<16}{r['requests']:>10,}{r['simulated_s']:>10,.0f}{r['wall_s']:>9.2f}"
              f"{r['requests'] / r['wall_s']:>12,.0f}{eps:>12,.0f}{eps / simpy_eps:>10.2f}"
              f"{r['wall_s'] / roof_wall[r['name']]:>12.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()

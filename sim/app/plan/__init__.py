"""``hicache-sim plan``: from a launch command (or a scenario) and a workload to the report operators ask for."""

from sim.app.plan.build import PlanSpec, make_plan, parse_slo

__all__ = ["PlanSpec", "make_plan", "parse_slo"]

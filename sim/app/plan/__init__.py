"""``hicache-sim plan``: from a launch command (or a scenario) and a workload to the report operators ask for.
:mod:`sim.app.plan.build` makes the plan, :mod:`sim.app.plan.report` writes it."""

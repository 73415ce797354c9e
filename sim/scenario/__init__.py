"""Layer 7, scenario: the scenario language and the server it describes. The YAML schema and its loader (pydantic
lives only here, where YAML comes in), ``origins:``, and the resolution of a scenario into the server SGLang would
start (:func:`sim.scenario.resolve.resolve` -> ``ServerConfig``: pools, budgets, precisions, the step-time
backend, pinning, knob notes) that ``run``, ``plan``, ``validate`` and the summaries read.

May import: every layer below.
"""

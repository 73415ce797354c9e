"""Layer 7, app: the edge where users come in. The scenario schema and loader (pydantic lives only here),
``from-sglang`` and its inverse, building and running a scenario, sweeps, seeds, ``plan``, plots, the CLI.

May import: every layer below.
"""

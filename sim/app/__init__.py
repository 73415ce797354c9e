"""Layer 9, app: the edge where users come in. The CLI and the orchestration behind it: building and running a
scenario, seeds, sweeps and their workers, ``plan``, plots.

May import: every layer below.
"""

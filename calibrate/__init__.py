"""Calibration: time ``kernels/`` over a grid of V4 shapes and write the cost table that ``sim.model.costs`` reads.

Modules: ``suites`` (grids), ``timing`` (CUDA-event / perf_counter timers), ``harness`` (runs a suite, metadata,
ceilings), ``fit`` (latency + bytes/bandwidth), ``plot``, ``check`` (regression check), ``spec`` (the bundled
spec-derived table), ``cli`` (``hicache-sim calibrate``).
"""

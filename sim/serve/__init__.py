"""Layer 4, serve: the server in time. The SimPy engine (scheduler, admission, chunked prefill, the write path,
L3 prefetch), the benchmark clients and agentic lanes that drive it, the shared L3 store, what a run records.

May import: ``sim.base``, ``sim.model``, ``sim.workload``, ``sim.cache``.
"""

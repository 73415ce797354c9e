"""Layer 6, offline: the caches without a clock. Trace replay, policy comparison, and the call-stream drivers that
answer SGLang's own recorded tree and host-tier calls (``hicache-sim tree``).

May import: ``sim.base``, ``sim.model``, ``sim.workload``, ``sim.cache``, ``sim.serve``, ``sim.hisparse``.
"""

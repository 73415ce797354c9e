"""Layer 5, hisparse: the decode side. Per-request GPU hot buffers of C4 KV and their misses, the top-k access
streams that drive them, the decode instance in time.

May import: ``sim.base``, ``sim.model``, ``sim.workload``, ``sim.cache``, ``sim.serve``.
"""

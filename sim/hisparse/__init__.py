"""Layer 5, hisparse: the decode side. Per-request GPU hot buffers of sparse-attention KV (DeepSeek V4's C4 rows,
or a DSA model's raw tokens) and their misses, which layers swap in (IndexShare), the top-k access streams that
drive them, the decode instance in time.

May import: ``sim.base``, ``sim.model``, ``sim.workload``, ``sim.cache``, ``sim.serve``.
"""

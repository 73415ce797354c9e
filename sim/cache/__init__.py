"""Layer 3, cache: SGLang's prefix caches, no clock. The single-pool radix tree and its HiCache (host tier,
write policies, eviction orders, the boundary policy), the clairvoyant bound and the LRU curve; DeepSeek-V4's
unified FULL + SWA tree in :mod:`sim.cache.v4`; the interface both caches give the engine, :mod:`sim.cache.protocol`.

May import: ``sim.base``, ``sim.model``, ``sim.workload``.
"""

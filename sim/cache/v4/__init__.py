"""DeepSeek-V4's cache: the unified tree with its SWA component, the paged FULL + SWA pools, the V4 HiCache.

Part of layer 3, ``sim.cache``; may import what it may.
"""

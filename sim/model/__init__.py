"""Layer 1, model: what the hardware and the model are. Pools and their bytes, model configs, the hardware
catalog, host memory sizing, step-time backends (roofline, aiconfigurator, the datasheet transfer between GPUs, and
``auto``'s choice among them), cost tables, speculative decoding's arithmetic.

May import: ``sim.base``.
"""

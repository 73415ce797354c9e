"""hicache-sim: a discrete-event model of SGLang's hierarchical KV cache for multi-pool models.

Layers, each importing only those to its left: ``pools -> radix -> hicache -> engine -> cli``.
Nothing under ``sim`` imports torch or triton.
"""

__version__ = "0.1.0"

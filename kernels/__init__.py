"""torch + Triton kernels: KV page transfer (copy engine, batched, Triton UVA) and the HiSparse swap-in.

Each kernel sits beside a plain-torch reference with the same signature, which defines its result. Import with
``TRITON_INTERPRET=1`` set to run the Triton kernels on CPU tensors (CI); ``sim/`` never imports this package.
"""

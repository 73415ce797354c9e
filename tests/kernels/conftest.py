"""Kernel tests run the Triton kernels under the interpreter on CPU tensors unless a GPU is present.

``TRITON_INTERPRET`` is read when ``@triton.jit`` decorates a kernel, so it is set here, before any test module
imports ``kernels``.
"""

import os

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")


@pytest.fixture
def device() -> str:
    """Where the pools live: CUDA when present (host pools pinned), else the interpreter's CPU tensors."""
    return "cuda" if torch.cuda.is_available() else "cpu"

"""Calibration tests run the CPU suite; the Triton kernels there need the interpreter, set before import."""

import os

import pytest

torch = pytest.importorskip("torch")
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")

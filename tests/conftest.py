"""Fixtures every test shares."""

import signal

import pytest


@pytest.fixture(autouse=True)
def _sigint_restored():
    """An interrupted command run in-process ignores SIGINT while it ends (``sim.app.cli.main``), as a process
    that is about to exit should; the test process goes on, so its handler is restored. Left ignored, every later
    subprocess would inherit the ignored SIGINT and never be interrupted."""
    handler = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, handler)

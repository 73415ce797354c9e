"""Fixtures the command-line tests share."""

import contextlib
import os
import threading
from pathlib import Path

import pytest


@pytest.fixture
def fifo(tmp_path):
    """Make named pipes that cannot hang a test: a reader still waiting after 5 s (a regression that opens
    one) is given a writer that closes at once, so it reads an empty file and the test fails, not hangs."""
    made: list[Path] = []
    done = threading.Event()

    def unblock() -> None:
        while not done.wait(5.0):
            for path in made:
                with contextlib.suppress(OSError):  # succeeds only while a reader has it open
                    os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))

    def make(name: str = "pipe") -> Path:
        path = tmp_path / name
        os.mkfifo(path)
        made.append(path)
        return path

    watcher = threading.Thread(target=unblock, daemon=True)
    watcher.start()
    yield make
    done.set()
    watcher.join()

"""Atomic output: results appear whole at their final path or not at all.

Single files go to a temporary name beside the target and are renamed over it. A run's folder is built
under a hidden staging folder in the same parent (``.NAME.partial-PID-XXXX``) and renamed into place once
every file is written, so a reader never sees a folder that mixes two runs or lacks a file. Output targets
are checked before any work starts, so a bad ``--out`` costs a one-line error, not a finished simulation.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from sim.errors import InputError

__all__ = ["atomic_path", "check_output_file", "check_output_folder", "new_run_dir", "staged_dir", "write_text_atomic"]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` only if the block succeeds."""
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; results are ordinary files
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        os.replace(tmp_path, final)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def _check_parents(path: Path, option: str) -> None:
    """The nearest existing ancestor of ``path`` must be a folder we can create things in: tried for real
    (a probe folder made and removed), since permission bits do not tell for root or special file systems."""
    for parent in path.absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise InputError(f"{option}: {parent} is a file, not a folder", source=str(path))
            try:
                os.rmdir(tempfile.mkdtemp(prefix=".hicache-sim-probe-", dir=parent))
            except OSError as exc:
                raise InputError(f"{option}: cannot write into {parent}: {exc.strerror or exc}",
                                 source=str(path)) from None  # fmt: skip
            return


def check_output_file(path: str | os.PathLike, option: str = "--out") -> Path:
    """Fail now, in one line, if ``path`` cannot be written as a file (a folder there, a file above it,
    a read-only place); creates nothing."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{option}: is a folder, expected a file name", source=str(path))
    _check_parents(path, option)
    return path


def check_output_folder(path: str | os.PathLike, option: str = "--out") -> Path:
    """Fail now if ``path`` cannot become a folder (a file there or above it, a read-only place)."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError(f"{option}: is a file, expected a folder", source=str(path))
    _check_parents(path / "x" if path.is_dir() else path, option)
    return path


def new_run_dir(root: str | os.PathLike, name: str) -> Path:
    """A fresh folder name for a run: ``root/name/YYYYMMDD-HHMMSS`` (local time), ``-2``, ``-3``... if taken.
    ``name`` is a validated scenario name (no separators), so the folder stays under ``root``."""
    base = Path(root) / name / time.strftime("%Y%m%d-%H%M%S")
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove_stale(parent: Path, name: str) -> None:
    """Staging folders left by a killed process (SIGKILL, power loss): their owner is gone."""
    for kind in ("partial", "old"):
        for stale in parent.glob(f".{name}.{kind}-*"):
            pid = stale.name[len(f".{name}.{kind}-") :].split("-", 1)[0]
            if pid.isdigit() and not _pid_alive(int(pid)):
                shutil.rmtree(stale, ignore_errors=True)


@contextlib.contextmanager
def staged_dir(final: str | os.PathLike, *, overwrite: bool = False, option: str = "--out",
               marker: str = "summary.json") -> Iterator[Path]:  # fmt: skip
    """Yield an empty staging folder; on success it becomes ``final`` whole, else it is removed.

    ``final`` may be absent or an empty folder. A non-empty one is replaced only with ``overwrite`` and only
    if it holds ``marker`` (an earlier run's output), so a mistyped ``--out`` cannot wipe unrelated files.
    """
    final = check_output_folder(final, option)
    if final.is_dir() and any(final.iterdir()):
        if not overwrite:
            raise InputError(f"{option}: already holds results; pass --overwrite to replace them, or choose "
                             "another folder", source=str(final))  # fmt: skip
        if not (final / marker).is_file():
            raise InputError(f"{option}: not a hicache-sim output folder (no {marker}); refusing to replace it",
                             source=str(final))  # fmt: skip
    parent = final.absolute().parent
    created = [p for p in (parent, *parent.parents) if not p.exists()]  # removed again if the run fails
    try:
        parent.mkdir(parents=True, exist_ok=True)
        _remove_stale(parent, final.name)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.partial-{os.getpid()}-", dir=parent))
    except OSError as exc:
        raise InputError(f"{option}: cannot create the output folder: {exc.strerror or exc}",
                         source=str(final)) from None  # fmt: skip
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700; results are ordinary folders
        yield tmp
        old = None
        if final.is_dir():
            old = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-{os.getpid()}-", dir=parent))
            os.replace(final, old / final.name)
        os.replace(tmp, final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
            for folder in created:  # innermost first; stops at the first one that is not empty
                try:
                    folder.rmdir()
                except OSError:
                    break

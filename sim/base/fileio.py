"""Atomic output: results appear whole at their final path or not at all.

Single files go to a temporary name beside the target and are renamed over it. A run's folder is built
under a hidden staging folder in the same parent (``.NAME.partial-PID-XXXX``) and renamed into place once
every file is written, so a reader never sees a folder that mixes two runs or lacks a file. Output targets
are checked before any work starts, so a bad ``--out`` costs a one-line error, not a finished simulation.
Every write goes through :func:`atomic_path` or :func:`staged_dir`, which turn any ``OSError`` while they write
(a full disk, a file-size limit, a folder gone) into one line naming the output and removing what was staged.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from sim.base.errors import InputError, os_error_text
from sim.base.inputs import pipe_or_device

__all__ = ["WriteError", "atomic_path", "check_image_file", "claim_folder", "check_output_file", "check_output_folder", "new_run_dir", "run_folder", "staged_dir",
           "write_text_atomic"]


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it over ``path`` only if the block succeeds. A device,
    pipe or socket at ``path`` is refused: the rename would replace the node itself (``/dev/null`` with a file)."""
    final = Path(path)
    _check_not_special(final, "output")
    with _writing(final):
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


class WriteError(InputError):
    """An output that could not be written (a full disk, a file-size limit): the command that ends on it says
    what it kept (a sweep its finished points, any other command nothing), since only it knows."""


@contextlib.contextmanager
def _writing(final: Path) -> Iterator[None]:
    """Any ``OSError`` of the block, one line naming ``final`` (the callers remove what they staged)."""
    try:
        yield
    except OSError as exc:
        raise WriteError(f"cannot write: {os_error_text(exc)}", source=str(final)) from None


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


_STAGING_AFFIX = 40  # what a staging name adds to the output's name: ".NAME.partial-PID-RANDOM"


def _check_name(path: Path, option: str) -> None:
    """The name, with the staging affix, must fit the file system's limit on one name (255 bytes on most)."""
    try:
        limit = os.pathconf(next((p for p in path.absolute().parents if p.exists()), Path("/")), "PC_NAME_MAX")
    except (OSError, ValueError, AttributeError):
        limit = 255
    longest = max((len(os.fsencode(part)) for part in path.parts), default=0)
    if longest + _STAGING_AFFIX > limit:
        raise InputError(f"{option}: a name of {longest} bytes in the path is too long (at most "
                         f"{limit - _STAGING_AFFIX} here)", source=str(path)[:80] + "...")  # fmt: skip


def check_output_file(path: str | os.PathLike, option: str = "--out") -> Path:
    """Fail now, in one line, if ``path`` cannot be written as a file (a folder there, a file above it,
    a read-only place, a name too long); creates nothing."""
    path = Path(path)
    _check_name(path, option)
    if path.is_dir():
        raise InputError(f"{option}: is a folder, expected a file name", source=str(path))
    _check_not_special(path, option)
    _check_parents(path, option)
    return path


def _check_not_special(path: Path, option: str) -> None:
    """Results are written whole to a new file renamed into place, which would replace a device or a pipe, or
    a symbolic link whose target is missing (the user meant the target, which the rename would not write)."""
    if path.is_symlink() and not path.exists():
        raise InputError(f"{option}: a symbolic link to {os.readlink(path)}, which does not exist; remove the link "
                         "or give another name", source=str(path))  # fmt: skip
    if pipe_or_device(path):
        raise InputError(f"{option}: a device or a pipe, not a file (results are written to a new file renamed "
                         "into place, which would replace it)", source=str(path))  # fmt: skip


def check_output_folder(path: str | os.PathLike, option: str = "--out") -> Path:
    """Fail now if ``path`` cannot become a folder (a file there or above it, a read-only place, a name
    too long)."""
    path = Path(path)
    _check_name(path, option)
    _check_not_special(path, option)
    if path.exists() and not path.is_dir():
        raise InputError(f"{option}: is a file, expected a folder", source=str(path))
    _check_parents(path / "x" if path.is_dir() else path, option)
    return path


def check_image_file(path: str | os.PathLike, option: str) -> Path:
    """An image output: a writable file whose name ends in .png or .svg."""
    path = Path(path)
    if path.suffix.lower() not in (".png", ".svg"):
        raise InputError(f"{option} must end in .png or .svg, got {path.name!r}")
    return check_output_file(path, option)


@contextlib.contextmanager
def new_run_dir(root: str | os.PathLike, name: str) -> Iterator[tuple[Path, Path]]:
    """Claim a fresh run folder, ``root/name/YYYYMMDD-HHMMSS`` (local time), ``-2``, ``-3``... if taken, and
    stage into it: yields (staging folder, final folder). The name is claimed by ``mkdir``, which only one
    process can win, so runs started at the same moment get distinct folders; the claimed (empty) folder
    is replaced in one rename on success and removed on failure. ``name`` is a validated scenario name (no
    separators), so the folder stays under ``root``."""
    base = Path(root) / name / time.strftime("%Y%m%d-%H%M%S")
    check_output_folder(base)
    created = [p for p in (base.parent, *base.parent.parents) if not p.exists()]
    try:
        base.parent.mkdir(parents=True, exist_ok=True)
        path, n = base, 1
        while True:
            try:
                path.mkdir()
                break
            except FileExistsError:
                n += 1
                path = base.with_name(f"{base.name}-{n}")
    except OSError as exc:
        raise InputError(f"cannot create the run folder: {exc.strerror or exc}", source=str(base)) from None
    try:
        with staged_dir(path) as tmp:
            yield tmp, path
    except BaseException:
        for folder in (path, *created):  # innermost first; stops at the first one that is not empty
            try:
                folder.rmdir()
            except OSError:
                break
        raise


@contextlib.contextmanager
def run_folder(out: str | os.PathLike | None, root: str | os.PathLike, name: str, *,
               overwrite: bool = False) -> Iterator[tuple[Path, Path]]:  # fmt: skip
    """(staging folder, final folder) of a run: ``out`` if given (see :func:`staged_dir`), else a new one."""
    if out is None:
        with new_run_dir(root, name) as staged:
            yield staged
    else:
        with staged_dir(out, overwrite=overwrite) as tmp:
            yield tmp, Path(out)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_STAGING = re.compile(r"^\..+\.(?:partial|old)-(\d+)-[^-/]+$")


def _remove_stale(parent: Path) -> None:
    """Staging folders in ``parent`` left by a killed process (SIGKILL, power loss), whatever output they were
    for (a run folder of another time stamp included): their owner is gone."""
    for stale in parent.glob(".*.*-*"):
        match = _STAGING.match(stale.name)
        if match and stale.is_dir() and not _pid_alive(int(match.group(1))):
            shutil.rmtree(stale, ignore_errors=True)


@contextlib.contextmanager
def staged_dir(final: str | os.PathLike, *, overwrite: bool = False, option: str = "--out",
               marker: str = "summary.json") -> Iterator[Path]:  # fmt: skip
    """Yield an empty staging folder; on success it becomes ``final`` whole, else it is removed.

    ``final`` may be absent or an empty folder. A non-empty one is replaced only with ``overwrite`` and only
    if it holds ``marker`` (an earlier run's output), so a mistyped ``--out`` cannot wipe unrelated files.
    ``final`` is claimed (:func:`_claimed`) before it is looked at, so of two commands started together into
    one folder the second stops at once instead of both writing and one result being lost.
    """
    final = check_output_folder(final, option)
    parent = final.absolute().parent
    created = [p for p in (parent, *parent.parents) if not p.exists()]  # removed again if the run fails
    tmp: Path | None = None
    try:
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"{option}: cannot create the output folder: {os_error_text(exc)}",
                             source=str(final)) from None  # fmt: skip
        with claim_folder(final, option):
            if final.is_dir() and any(final.iterdir()):
                if not (final / marker).is_file():
                    raise InputError(f"{option}: holds other files, not a hicache-sim output folder (no {marker}); "
                                     "choose an empty or new folder", source=str(final))  # fmt: skip
                if not overwrite:
                    raise InputError(f"{option}: already holds results; pass --overwrite to replace them, or choose "
                                     "another folder", source=str(final))  # fmt: skip
            with _writing(final):
                _remove_stale(parent)
                tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.partial-{os.getpid()}-", dir=parent))
                umask = os.umask(0)
                os.umask(umask)
                os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes 0700; results are ordinary folders
                yield tmp
                old = None
                if final.is_dir() and any(final.iterdir()):  # an empty one (a claimed run folder) is renamed over
                    old = Path(tempfile.mkdtemp(prefix=f".{final.name}.old-{os.getpid()}-", dir=parent))
                    os.replace(final, old / final.name)
                os.replace(tmp, final)
            if old is not None:
                shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp is not None and tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        if not final.exists():
            for folder in created:  # innermost first; stops at the first one that is not empty
                try:
                    folder.rmdir()
                except OSError:
                    break


@contextlib.contextmanager
def claim_folder(final: Path, option: str) -> Iterator[None]:
    """Hold ``final`` for this process: an exclusive ``flock`` on ``.NAME.lock`` beside it, which the kernel
    drops when the process ends however it ends (a SIGKILLed writer leaves no claim, at most an empty file that
    the next writer takes over). A second writer gets one line naming the folder, and exit status 2."""
    lock = final.absolute().parent / f".{final.name}.lock"
    while True:
        try:
            fd = os.open(lock, os.O_CREAT | os.O_RDWR, 0o644)
        except OSError as exc:
            raise InputError(f"{option}: cannot write: {os_error_text(exc)}", source=str(final)) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise InputError(f"{option}: another command is writing this folder now; wait for it to end or choose "
                             "another folder", source=str(final)) from None  # fmt: skip
        except OSError:  # a file system without locks (some network ones): nothing to claim with, write unclaimed
            break
        try:  # the holder before may have removed the file it locked: hold the one at the path
            if os.stat(lock).st_ino == os.fstat(fd).st_ino:
                break
        except FileNotFoundError:
            pass
        os.close(fd)
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            os.unlink(lock)
        os.close(fd)

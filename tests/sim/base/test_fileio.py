"""Output targets: checked before work starts; a run's folder appears whole or not at all."""

import os
import sys
from pathlib import Path

import pytest

from sim.base.errors import InputError
from sim.base.fileio import check_output_file, check_output_folder, new_run_dir, staged_dir, write_text_atomic


class TestStagedDir:
    def test_the_folder_appears_only_when_the_block_finishes(self, tmp_path):
        final = tmp_path / "runs" / "x"
        with staged_dir(final) as tmp:
            (tmp / "summary.json").write_text("{}")
            assert not final.exists() and tmp.parent == final.parent
        assert sorted(p.name for p in final.iterdir()) == ["summary.json"]
        assert [p.name for p in final.parent.iterdir()] == ["x"]  # no staging folder left

    @pytest.mark.parametrize("error", [RuntimeError, KeyboardInterrupt])
    def test_a_failure_leaves_nothing_not_even_the_parents_it_made(self, tmp_path, error):
        final = tmp_path / "runs" / "x"
        with pytest.raises(error), staged_dir(final) as tmp:
            (tmp / "summary.json").write_text("{}")
            raise error
        assert list(tmp_path.iterdir()) == []

    def test_earlier_results_are_kept_unless_replacing_is_asked_for(self, tmp_path):
        final = tmp_path / "x"
        final.mkdir()
        (final / "summary.json").write_text("old")
        (final / "misses.parquet").write_text("old")
        with pytest.raises(InputError, match="--overwrite"), staged_dir(final):
            pass
        with staged_dir(final, overwrite=True) as tmp:
            (tmp / "summary.json").write_text("new")
        # The new set replaces the old one whole: no stale misses.parquet beside the new summary.
        assert [p.name for p in final.iterdir()] == ["summary.json"]
        assert (final / "summary.json").read_text() == "new"

    @pytest.mark.parametrize("overwrite", [False, True])
    def test_a_folder_that_is_not_an_earlier_output_is_refused_without_offering_overwrite(self, tmp_path, overwrite):
        (tmp_path / "notes.txt").write_text("mine")
        with pytest.raises(InputError, match="holds other files, not a hicache-sim output folder") as exc, \
                staged_dir(tmp_path, overwrite=overwrite):  # fmt: skip
            pass
        assert "--overwrite" not in str(exc.value) and (tmp_path / "notes.txt").read_text() == "mine"

    def test_an_empty_folder_is_used_as_is(self, tmp_path):
        (tmp_path / "x").mkdir()
        with staged_dir(tmp_path / "x") as tmp:
            (tmp / "a").write_text("1")
        assert (tmp_path / "x" / "a").exists()

    def test_staging_left_by_a_killed_process_is_removed(self, tmp_path):
        dead = tmp_path / ".x.partial-999999999-abc"  # no such pid
        dead.mkdir()
        alive = tmp_path / f".x.partial-{os.getpid()}-abc"
        alive.mkdir()
        with staged_dir(tmp_path / "x"):
            pass
        assert not dead.exists() and alive.exists()


class TestTargets:
    def test_a_file_where_a_folder_goes_and_a_file_above_it_are_refused(self, tmp_path):
        (tmp_path / "f").write_text("")
        with pytest.raises(InputError, match="is a file, expected a folder"):
            check_output_folder(tmp_path / "f")
        with pytest.raises(InputError, match="is a file, not a folder"):
            check_output_folder(tmp_path / "f" / "sub")
        with pytest.raises(InputError, match="is a file, not a folder"):
            check_output_file(tmp_path / "f" / "x.png")
        with pytest.raises(InputError, match="is a folder"):
            check_output_file(tmp_path)

    @pytest.mark.skipif(not sys.platform.startswith("linux"), reason="needs /proc")
    def test_a_place_nothing_can_be_written_is_refused_even_for_root(self):
        with pytest.raises(InputError, match="cannot write into /proc"):
            check_output_file("/proc/hicache-sim-test.json", "--json")
        with pytest.raises(InputError, match="cannot write into /proc"):
            check_output_folder("/proc/hicache-sim-test")

    @pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root writes anywhere")
    def test_a_read_only_folder_is_refused(self, tmp_path):
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o555)
        try:
            with pytest.raises(InputError, match="cannot write into"):
                check_output_folder(ro / "x")
        finally:
            ro.chmod(0o755)

    def test_a_pipe_or_device_is_refused_not_replaced_by_a_file(self, tmp_path):
        fifo = tmp_path / "out.fifo"
        os.mkfifo(fifo)
        with pytest.raises(InputError, match=r"--csv: a device or a pipe, not a file"):
            check_output_file(fifo, "--csv")
        with pytest.raises(InputError, match=r"output: a device or a pipe"):
            write_text_atomic(fifo, "x")
        assert not fifo.is_file() and fifo.exists()

    def test_checks_create_nothing(self, tmp_path):
        check_output_folder(tmp_path / "a" / "b")
        check_output_file(tmp_path / "c" / "d.json")
        assert list(tmp_path.iterdir()) == []


def test_new_run_folders_never_collide(tmp_path):
    with new_run_dir(tmp_path, "quickstart") as (_, first), new_run_dir(tmp_path, "quickstart") as (_, second):
        assert first.parent == second.parent == tmp_path / "quickstart" and first != second


def test_runs_started_at_once_in_processes_each_keep_their_folder(tmp_path):
    """Folders are claimed by mkdir, which one process wins, not by a look at what exists."""
    import subprocess

    code = ("import sys, time; from sim.base.fileio import new_run_dir\n"
            "with new_run_dir(sys.argv[1], 'q') as (tmp, out):\n"
            "    time.sleep(0.2); (tmp / 'summary.json').write_text(str(out))\n")  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], env=env) for _ in range(4)]
    assert [p.wait() for p in procs] == [0] * 4
    folders = sorted((tmp_path / "q").iterdir())
    assert len(folders) == 4 and all((f / "summary.json").read_text() == str(f) for f in folders)


def test_a_failed_run_leaves_no_claimed_folder(tmp_path):
    with pytest.raises(RuntimeError), new_run_dir(tmp_path / "runs", "q"):
        raise RuntimeError
    assert list(tmp_path.iterdir()) == []


def test_staging_of_a_dead_run_is_removed_in_the_default_layout(tmp_path):
    dead = tmp_path / "q" / ".20200101-000000.partial-999999999-abc"  # another time stamp, no such pid
    dead.mkdir(parents=True)
    with new_run_dir(tmp_path, "q") as (tmp, _):
        (tmp / "summary.json").write_text("{}")
    assert not dead.exists()

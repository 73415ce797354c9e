"""Fuzzing what stands at a path a command reads or writes, and the process around it, through the real command
line: pipes, devices, dangling links and loops, folders, binary files, a second writer, a file-size limit. The
contract is the input fuzzer's (:func:`tests.sim.app.test_fuzz_inputs.command`): exit 0 with a whole result, or
exit 2 with one line naming the path; nothing left behind (no staging folder, no claim).

FIFOs come from the ``fifo`` fixture (``conftest.py``), which gives a reader still waiting after 5 s an empty
writer, so a regression that opens one fails instead of hanging CI; file-size limits run in one child process
(``under_limit``), as ``resource.setrlimit`` would limit the test runner too.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import assume, event, given
from hypothesis import strategies as st

from sim.app.cli import main
from tests.sim.app.test_fuzz_inputs import TINY, command, fuzz_settings


def _run_folder(d: Path) -> Path:
    (d / "s.yaml").write_text(TINY)
    assert main(["run", str(d / "s.yaml"), "--out", str(d / "r"), "--no-progress"]) == 0
    return d / "r"


READERS = [["validate", "{p}"], ["validate", "{s}", "--set", "model.config={p}"],
           ["validate", "{s}", "--set", "workload.kind=trace", "--set", "workload.path={p}"],
           ["replay", "{p}", "--no-progress"], ["tree", "{p}", "--quiet"], ["hisparse", "{p}", "--quiet"],
           ["diff", "{r}", "{p}"],
           ["plan", "--scenario", "{s}", "--trace", "{p}", "--out", "{o}"],
           ["calibrate", "check", "{p}", "--baseline", "{p}"],
           ["calibrate", "compute", "{p}", "--scenario", "{s}", "--out", "{o}.json"],
           ["calibrate", "compute", "--from", "{p}", "--scenario", "{s}", "--out", "{o}.json"],
           ["score", "{p}", "--scenario", "{s}", "--out", "{o}", "--no-progress"],
           ["plot", "rounds", "{p}", "--out", "{o}.png"],
           ["sweep", "{p}", "--grid", "seed=1,2", "--out", "{o}", "--no-progress"]]  # fmt: skip
NOT_FILES = ["fifo", "/dev/zero", "/dev/null", "dangling link", "link loop", "binary", "missing", "empty folder"]


def _hostile_path(d: Path, kind: str, fifo) -> str:
    target = d / "in"
    if kind == "fifo":
        return str(fifo(f"in-{d.name}"))
    if kind.startswith("/dev/"):
        return kind
    if kind == "dangling link":
        target.symlink_to(d / "gone")
    elif kind == "link loop":
        target.symlink_to(target)
    elif kind == "binary":
        target.write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4)
    elif kind == "empty folder":
        target.mkdir()
    return str(target)


@fuzz_settings(40)
@given(reader=st.sampled_from(READERS), kind=st.sampled_from(NOT_FILES))
def test_anything_but_a_file_where_a_file_is_read_is_one_line_naming_it(fresh, capsys, rss, fifo, reader, kind):
    d = fresh()
    run = _run_folder(d)
    capsys.readouterr()
    path = _hostile_path(d, kind, fifo)
    out = d / "out"
    argv = [a.format(p=path, s=d / "s.yaml", r=run, o=out) for a in reader]
    outputs = [Path(a) for a in argv if a.startswith(str(out))]
    assert command(argv, capsys, origins=[path], outputs=outputs) == 2


WRITERS = [["run", "{s}", "--out", "{o}", "--no-progress"],
           ["run", "{s}", "--seeds", "2", "--workers", "1", "--out", "{o}", "--no-progress"],
           ["sweep", "{s}", "--grid", "seed=1,2", "--workers", "1", "--out", "{o}", "--no-progress"],
           ["plot", "rounds", "{r}", "--out", "{o}"], ["diff", "{r}", "{r}", "--json", "{o}"],
           ["replay", "{t}", "--json", "{o}", "--l1-pages", "100", "--no-progress"],
           ["scenario", "from-sglang", "--gpu", "H200", "--launch",
            "python -m sglang.launch_server --model-path Qwen/Qwen3-14B", "--out", "{o}"]]  # fmt: skip
AT_OUTPUT = ["dangling link", "fifo", "/dev/null", "a folder holding a file", "a file above it", "another writer"]


@fuzz_settings(30)
@given(writer=st.sampled_from(WRITERS), kind=st.sampled_from(AT_OUTPUT))
def test_anything_in_the_way_of_an_output_is_one_line_naming_it_and_nothing_is_left(fresh, capsys, rss, fifo,
                                                                                    writer, kind):  # fmt: skip
    from sim.base.fileio import claim_folder

    d = fresh()
    run = _run_folder(d)
    (d / "t.jsonl").write_text("".join(f'{{"timestamp": {i}, "input_length": 600, "output_length": 4, '
                                       f'"hash_ids": [{i}, {i + 100}]}}\n' for i in range(10)))  # fmt: skip
    capsys.readouterr()
    out = d / ("o.png" if writer[0] == "plot" else "o")
    if kind == "dangling link":
        out.symlink_to(d / "gone" / "x")
    elif kind == "fifo":
        out = fifo(f"{d.name}-{out.name}")
    elif kind == "/dev/null":
        out = Path("/dev/null")
    elif kind == "a folder holding a file":
        out.mkdir()
        (out / "keep.txt").write_text("mine")
    elif kind == "a file above it":
        (d / "f").write_text("a file")
        out = d / "f" / out.name
    argv = [a.format(s=d / "s.yaml", r=run, t=d / "t.jsonl", o=out) for a in writer]
    before = sorted(p.name for p in d.iterdir())
    if kind == "another writer":  # a folder being written by another command right now
        assume(writer[0] in ("run", "sweep"))
        with claim_folder(out, "--out"):
            assert command(argv, capsys, origins=[str(out)]) == 2
    else:  # the path, or the option where its name is wrong (``/dev/null`` for an image)
        assert command(argv, capsys, origins=[str(out), "--out must", "--json must"]) == 2
    assert sorted(p.name for p in d.iterdir()) == before  # nothing written, no staging left


@fuzz_settings(3)
@given(fsize=st.sampled_from([1, 100, 2_000, 20_000, 200_000]), writers=st.lists(st.sampled_from(WRITERS), min_size=2,
                                                                                   max_size=4, unique_by=str))
def test_a_file_size_limit_gives_whole_outputs_or_one_line_naming_each(fresh, under_limit, fsize, writers):
    """``ulimit -f``: every write past the limit fails with EFBIG, wherever it falls in a command's writing."""
    d = fresh()
    run = _run_folder(d)
    (d / "t.jsonl").write_text("".join(f'{{"timestamp": {i}, "input_length": 600, "output_length": 4, '
                                       f'"hash_ids": [{i}, {i + 100}]}}\n' for i in range(10)))  # fmt: skip
    work = d / "work"
    work.mkdir()
    outs = [f"o{i}.png" if w[0] == "plot" else f"o{i}" for i, w in enumerate(writers)]
    argvs = [[a.format(s=d / "s.yaml", r=run, t=d / "t.jsonl", o=o) for a in w] for w, o in zip(writers, outs)]
    for out, (code, err) in zip(outs, under_limit(argvs, work, fsize=fsize), strict=True):
        lines = [line for line in err.splitlines() if not line.startswith("hicache-sim: note: ")]
        assert code in (0, 2) and "Traceback" not in err, err
        event(f"limit {fsize}: exit {code}")
        if code == 2:
            assert len(lines) == 1 and lines[0].startswith(f"hicache-sim: error: {out}"), lines
            kept = "finished point(s)" in lines[0]  # a sweep keeps its finished points, and says so
            assert kept == any((work / out / "points").glob("*.json")), lines
            assert kept or not (work / out).exists()
        else:
            assert (work / out).exists()
    assert not [p.name for p in work.iterdir() if p.name.startswith(".")]  # no staging file or claim left

"""``scenario from-sglang`` never writes what it cannot read back: a command pasted over lines is taken as a shell
takes it, no newline or control character can end a header comment, a string the loader would read as a number is
quoted, every text is read back before it is written, and an existing file it did not write is never replaced."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sim.app.cli import main
from sim.base.inputs import parse_yaml
from sim.interop.fromsglang import from_sglang, to_yaml
from sim.scenario.load import load_scenario

LAUNCH = "python -m sglang.launch_server --model-path Qwen/Qwen3-14B --tp-size 2 --enable-hierarchical-cache"
BENCH = "python -m sglang.bench_serving --num-prompts 10 --random-input-len 512"
ROUTER = "python -m sglang_router.launch_router --policy cache_aware"


def _continued(command: str, newline: str = "\n") -> str:
    """``command`` as pasted from a shell script: one flag a line, each line but the last ending in a backslash."""
    words = command.split(" --")
    return f" \\{newline}  --".join(words)


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_commands_continued_over_lines_are_the_commands_on_one_line(newline):
    one = from_sglang(LAUNCH, [BENCH, ROUTER], gpu="H200")
    many = from_sglang(_continued(LAUNCH, newline), [_continued(BENCH, newline), _continued(ROUTER, newline)],
                       gpu="H200")  # fmt: skip
    assert many.scenario == one.scenario
    assert many.mapped == one.mapped


def test_a_newline_between_words_is_a_space_as_shlex_takes_it():
    assert from_sglang(LAUNCH.replace(" --tp-size", "\n--tp-size"), gpu="H200").scenario == \
        from_sglang(LAUNCH, gpu="H200").scenario


@pytest.mark.parametrize("junk", ["\n", "\r", "\x1b[2J", "\u2028", "\x85", "\n  max_total_num_tokens: 1"])
def test_no_character_in_a_command_can_end_a_header_comment(tmp_path, junk):
    conv = from_sglang(f"{LAUNCH} --served-model-name 'a{junk}b'", [f"{BENCH} --tag 'x{junk}y'"], gpu="H200")
    text = to_yaml(conv)
    assert parse_yaml(text, "out") == conv.scenario
    out = tmp_path / "s.yaml"
    out.write_text(text)
    load_scenario(out)
    assert all(line.startswith("#") for line in text.split("\nname:")[0].splitlines())


def test_a_log_whose_file_name_holds_a_newline_stays_in_its_comment(tmp_path):
    logs = Path(__file__).parents[2] / "data" / "server_logs"
    odd = tmp_path / "server\nmax_total_num_tokens: 1.log"
    odd.write_text((logs / "qwen3-14b_a10_tp2_hicache.log").read_text())
    conv = from_sglang(LAUNCH + " --hicache-ratio 2", gpu="A10", server_log=str(odd))
    doc = yaml.safe_load(to_yaml(conv))
    assert doc["hardware"]["max_total_num_tokens"] == 41283
    assert doc == conv.scenario


def test_a_name_the_loader_would_read_as_a_number_is_quoted(tmp_path):
    out = tmp_path / "s.yaml"
    assert main(["scenario", "from-sglang", "--gpu", "H200", "--name", "1e5", "--launch", LAUNCH, "--out", str(out)]) == 0
    assert load_scenario(out).name == "1e5"


def test_an_existing_file_from_sglang_did_not_write_is_never_replaced(tmp_path, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    assert main(["scenario", "from-sglang", "--gpu", "H200", "--launch", LAUNCH, "--out", str(notes)]) == 2
    assert notes.read_text() == "my notes\n"
    assert "notes.txt: --out: the file exists and is not a scenario from-sglang wrote" in capsys.readouterr().err


def test_a_scenario_from_sglang_wrote_is_written_again(tmp_path):
    out = tmp_path / "s.yaml"
    assert main(["scenario", "from-sglang", "--gpu", "H200", "--launch", LAUNCH, "--out", str(out)]) == 0
    assert main(["scenario", "from-sglang", "--gpu", "H200", "--launch", LAUNCH + " --tp-size 4",
                 "--out", str(out)]) == 0  # fmt: skip
    assert load_scenario(out).hardware.tp_size == 4


def test_an_error_quoting_a_value_with_a_newline_is_one_line(capsys):
    assert main(["scenario", "from-sglang", "--gpu", "H200", "--launch", LAUNCH + " --page-size 'a\nb\x1b[2J'"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "\x1b" not in err and "\\x1b[2J" in err, err

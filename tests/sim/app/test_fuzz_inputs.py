"""Fuzzing every input kind through the real command line, in process: whatever a user feeds a command, the
answer is exit 0 with a whole result, or exit 2 with exactly one line that names where the bad input came
from; never a traceback, never a partial output or a staging folder left behind, and within bounded time and
memory.

The hostile values come from the inputs' own declarations, not from a hand list: the scenario's pydantic models
(every field of every section, each workload kind's and each list item's fields, their declared bounds), the
config.json fields :data:`sim.model.modelcfg.CONFIG_INTS` says the derivation reads, the tree calls' declarations
(:data:`sim.offline.treecalls.CALL_FIELDS` and the host tier's ``HOST_CALL_FIELDS``), the HiSparse calls'
(:data:`sim.offline.hisparsecalls.CALL_FIELDS`, V4 and DSA), the fields of the bundled cost table, SGLang's flag
table, the trace and bench-result formats' fields. A field added to any of these is fuzzed with no change here.

``HYPOTHESIS_PROFILE=long`` runs ten times as many examples (by hand; CI runs the default profile).
"""

from __future__ import annotations

import json
import math
import os
import signal
import time
import types
import typing
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from sim.app.cli import main
from sim.app.run import LONG_RUN_REQUESTS, build
from sim.base.inputs import MAX_MAGNITUDE, MIN_MAGNITUDE
from sim.hisparse.indexshare import INDEX_SHARE_FIELDS
from sim.interop.fromsglang import _LAUNCH
from sim.model.modelcfg import CONFIG_INTS
from sim.offline.calls import _problem as problem_of
from sim.offline.hisparsecalls import CALL_FIELDS as HISPARSE_CALL_FIELDS
from sim.offline.treecalls import CALL_FIELDS, HOST_CALL_FIELDS, RADIX_CALL_FIELDS
from sim.scenario.load import Scenario, load_scenario

SCALE = 10 if os.environ.get("HYPOTHESIS_PROFILE") == "long" else 1
# Hypothesis's own warnings (a large repr) must not be read as the command's second line of stderr.
pytestmark = pytest.mark.filterwarnings("ignore::hypothesis.errors.HypothesisWarning")


def fuzz_settings(examples: int):
    return settings(max_examples=examples * SCALE, deadline=None, derandomize=SCALE == 1, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large])  # fmt: skip


TINY = """name: tiny
seed: 1
hardware: {kv_mem_gb: 0.2}
workload: {kind: multi_turn, num_clients: 2, max_parallel: 2, request_length: 64, output_length: 4,
           num_rounds: 2, request_rate: null}
"""
# A model by its config.json on a catalog GPU: what the derivation fills in (GPU figures, chunk size, KV budget,
# the roofline's inputs) is computed from the raw values before the sections check them.
DERIVED = """name: derived
seed: 1
model: {name: deepseek-v4-flash, config: deepseek-v4-flash}
hardware: {gpu: H200, tp_size: 8}
hicache: {hicache_ratio: 0.5}
workload: {kind: multi_turn, num_clients: 2, max_parallel: 2, request_length: 64, output_length: 4,
           num_rounds: 2, request_rate: null}
"""
RUN_OUTPUTS = {"requests.parquet", "scenario.yaml", "summary.json", "timeseries.parquet"}
SECONDS_PER_COMMAND = 30.0  # the slowest accepted example is a sub-second run; a hang or a 1e300-s run is not
# CPU seconds, not wall: on a loaded machine (CI's two cores, helpers, a long profile beside other work) a sub-second
# run can wait its turn for longer than that. A wall bound 10x as long still catches a command that sleeps.
WALL_SECONDS_PER_COMMAND = 10 * SECONDS_PER_COMMAND
# A valid workload may be large (a count at its declared bound: 10M requests), and a run's time grows with its
# requests (~2,000-5,000 a CPU second, bench/engine.py). So a run's bound grows by 1 ms of CPU a request, and one
# the command line announces as long (LONG_RUN_REQUESTS and more: "expect a minute or more") is validated, not run
# here; bench/engine.py measures those.
CPU_SECONDS_PER_REQUEST = 1e-3


# ------------------------------------------------------------------------------------- hostile values


class Raw(str):
    """YAML text used as it is (what no Python value dumps to: a 5,000-digit integer, an alias, a merge)."""


RAW_YAML = [Raw(t) for t in (
    "1" * 5000, "&a [*a]", "{<<: {a: 1}, b: 2}", "[" * 200 + "]" * 200, "!!python/object/apply:os.system [ls]",
    "1e1", "0x10", "0o17", "1_000", "~", "'", '"', "{a: 1, a: 2}", ".NaN", "-.inf", "1e-300", "1.7976931348623157e308",
    "2e308", "-0.0", "0", "'1'", "[1, [2, [3]]]", "{? [1]: 2}", "\u00e9", "a: b: c",
)]  # fmt: skip
TEXT = st.sampled_from(["", "x", "a b", "../../x", "/dev/zero", "x" * 300, "~", "\u00e9t\u00e9", "cap", "auto",
                        "deepseek-v4-flash", "generic", "H200", "null", "1", "true"])  # fmt: skip


def _edges(bounds: list[float]) -> list[Any]:
    """Numbers at and just beside each declared bound, and at the bounds every input has (sim.base.inputs)."""
    out: list[Any] = [0, 1, -1, 2, 7, 255, 256, 1024, 2**31, 2**63, 2**64, 10**20, 0.5, -0.5, 1e-300, 1e-9,
                      MIN_MAGNITUDE, MIN_MAGNITUDE / 2, MAX_MAGNITUDE, MAX_MAGNITUDE * 2, 1e308, math.nan, math.inf,
                      -math.inf, 1e12]  # fmt: skip
    for b in bounds:
        out += [b, b - 1, b + 1, b * (1 - 1e-9), b * (1 + 1e-9), b / 2, b * 2, -b]
        if float(b).is_integer():
            out += [int(b), int(b) - 1, int(b) + 1]
    return out


def _bounds(info) -> list[float]:
    return [float(v) for m in info.metadata for a in ("ge", "gt", "le", "lt") if (v := getattr(m, a, None)) is not None]


def _types(annotation: Any) -> list[Any]:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _types(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return [t for arg in typing.get_args(annotation) for t in _types(arg)]
    return [annotation]


def hostile(info, depth: int = 0) -> st.SearchStrategy:
    """Values for one field: its own kinds at and beside its bounds, every other kind, and raw YAML."""
    kinds = _types(info.annotation)
    parts: list[st.SearchStrategy] = [st.sampled_from(RAW_YAML), TEXT, st.none(), st.booleans(),
                                      st.sampled_from(_edges(_bounds(info))), st.lists(st.integers(), max_size=3),
                                      st.dictionaries(st.sampled_from(["a", "kind", "name"]), st.integers(), max_size=2)]  # fmt: skip
    default = info.default
    if isinstance(default, int | float) and not isinstance(default, bool):  # near the default: runs that go on
        plausible = [default, default * 2, default // 2 if isinstance(default, int) else default / 2, default + 1]
        parts += [st.sampled_from(plausible)] * 6
    elif isinstance(default, str | bool) or default is None:
        parts += [st.just(default)] * 6
    for kind in kinds:
        if typing.get_origin(kind) is Literal:
            parts += [st.sampled_from(list(typing.get_args(kind)))] * 6
        elif kind in (int, float):
            parts += [st.integers(-(2**70), 2**70), st.floats(allow_nan=True, allow_infinity=True)]
        elif typing.get_origin(kind) is list:
            (item,) = typing.get_args(kind)
            if isinstance(item, type) and issubclass(item, BaseModel) and depth < 2:
                parts.append(st.lists(model_dict(item, depth + 1), max_size=3))
        elif isinstance(kind, type) and issubclass(kind, BaseModel) and depth < 2:
            parts.append(model_dict(kind, depth + 1))
    return st.one_of(parts)


def model_dict(model: type[BaseModel], depth: int = 0) -> st.SearchStrategy:
    """A mapping of some of ``model``'s fields to hostile values (a list item, a nested section)."""
    fields = {name: hostile(info, depth) for name, info in model.model_fields.items()}
    return st.fixed_dictionaries({}, optional=fields)


def scenario_leaves() -> list[tuple[str, Any, str | None]]:
    """(dotted path, field info, the workload kind it belongs to) for every field of the scenario schema."""
    out: list[tuple[str, Any, str | None]] = []

    def walk(model: type[BaseModel], prefix: str, kind: str | None) -> None:
        for name, info in model.model_fields.items():
            subs = [t for t in _types(info.annotation) if isinstance(t, type) and issubclass(t, BaseModel)]
            if subs:
                for sub in subs:
                    sub_kind = sub.model_fields["kind"].default if "kind" in sub.model_fields else kind
                    walk(sub, f"{prefix}{name}.", sub_kind if prefix + name == "workload" else kind)
                if typing.get_origin(info.annotation) is not None and str not in _types(info.annotation):
                    continue
            out.append((f"{prefix}{name}", info, kind))

    walk(Scenario, "", None)
    return out


LEAVES = scenario_leaves()


class _Dumper(yaml.SafeDumper):
    """Dumps a Raw inside a list or mapping as the plain string it is."""


_Dumper.add_representer(Raw, lambda dumper, value: dumper.represent_str(str(value)))


def as_yaml(value: Any) -> str:
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if math.isnan(value) else (".inf" if value > 0 else "-.inf")
    return yaml.dump(value, Dumper=_Dumper, default_flow_style=True, width=10**9).strip().removesuffix("...").strip()


@st.composite
def overrides(draw) -> list[str]:
    """1-3 ``--set`` overrides of fields anywhere in the schema; a workload kind's field comes with its kind."""
    items = []
    for path, info, kind in draw(st.lists(st.sampled_from(LEAVES), min_size=1, max_size=2)):
        if kind is not None and path != "workload.kind":
            items.append(f"workload.kind={kind}")
        items.append(f"{path}={as_yaml(draw(hostile(info)))}")
    return items


# ------------------------------------------------------------------------------------------ the contract


def command(argv: list[str], capsys, *, origins: list[str], outputs: list[Path] = (),
            folder_outputs: set[str] | None = None, seconds: float = SECONDS_PER_COMMAND) -> int:  # fmt: skip
    """Run ``argv``; assert exit 0 with every output whole, or exit 2 with one error line naming an origin and
    no output at all; never a traceback, never a staging file left, within the time bound."""
    start, cpu = time.perf_counter(), time.process_time()
    code = main(argv)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    err = capsys.readouterr().err
    assert code in (0, 2), err  # anything else raised out of main with its traceback, failing the test
    assert "Traceback" not in err, err
    assert cpu < seconds and elapsed < 10 * seconds, (argv, cpu, elapsed)
    lines = [line for line in err.splitlines() if not line.startswith("hicache-sim: note: ")]
    event(f"{' '.join(a for a in argv[:2] if not a.startswith('/'))}: exit {code}")  # the mix, in the statistics
    if code == 0:
        for out in outputs:
            assert out.exists(), argv
            if folder_outputs is not None and out.is_dir():
                assert {p.name for p in out.iterdir()} >= folder_outputs, argv
                json.loads((out / "summary.json").read_text())  # strict JSON, whole
    else:
        assert len(lines) == 1 and lines[0].startswith("hicache-sim: error: "), err
        assert any(o in lines[0] for o in origins), (lines[0], origins)
        for out in outputs:
            assert not out.exists(), (argv, lines[0])
    for out in outputs:
        left = [p.name for p in out.parent.iterdir() if p.name.startswith(".")] if out.parent.exists() else []
        assert not left, left  # no staging file or folder
    return code


def run_unless_announced_long(path: Path, sets: list[str], capsys, **kwargs) -> None:
    """``run`` a validated scenario within a bound that grows with the requests ``build`` counts before any
    work; a run the command line announces as long is left to the benchmarks."""
    requests = build(load_scenario(path, sets))[2] or 0  # None: the run decides (lanes, bounded by a duration)
    if requests >= LONG_RUN_REQUESTS:
        event("run: announced as long, validated only")
        return
    args = [x for s in sets for x in ("--set", s)]
    command(["run", str(path), *args, "--out", str(path.parent / "out"), "--no-progress"], capsys,
            outputs=[path.parent / "out"], folder_outputs=RUN_OUTPUTS,
            seconds=SECONDS_PER_COMMAND + requests * CPU_SECONDS_PER_REQUEST, **kwargs)  # fmt: skip


# ------------------------------------------------------------------------------------------ scenarios


@fuzz_settings(150)
@given(sets=overrides())
def test_any_field_set_to_anything_gives_a_whole_run_or_one_line(fresh, capsys, rss, sets):
    d = fresh()
    (d / "s.yaml").write_text(TINY)
    args = [str(d / "s.yaml"), *(x for s in sets for x in ("--set", s))]
    if command(["validate", *args], capsys, origins=["--set "]) == 0:
        run_unless_announced_long(d / "s.yaml", sets, capsys, origins=[str(d / "s.yaml"), "--set "])


def test_the_bases_are_valid_scenarios(tmp_path, capsys):
    for text in (TINY, DERIVED):
        (tmp_path / "s.yaml").write_text(text)
        assert main(["validate", str(tmp_path / "s.yaml")]) == 0, capsys.readouterr().err


def _derivation_inputs() -> list[str]:
    """Every scalar field of the sections a derivation reads (model, hardware, scheduler), from the schema."""
    return [f"{name}.{key}" for name in ("model", "hardware", "scheduler")
            for key, info in Scenario.model_fields[name].annotation.model_fields.items()
            if not (isinstance(info.annotation, type) and issubclass(info.annotation, BaseModel))]  # fmt: skip


@pytest.mark.parametrize("path", _derivation_inputs())
def test_a_mistyped_field_a_derivation_reads_is_one_line_naming_it(tmp_path, capsys, path):
    (tmp_path / "s.yaml").write_text(DERIVED)
    for value in ("x", "{a: 1}", "[1]", "../nope.json"):
        code = main(["validate", str(tmp_path / "s.yaml"), "--set", f"{path}={value}"])
        err = capsys.readouterr().err
        assert code == 0 or (code == 2 and len(err.strip().splitlines()) == 1 and "--set " in err), err


@fuzz_settings(60)
@given(sets=overrides())
def test_any_field_set_on_a_derived_scenario_gives_what_it_resolves_to_or_one_line(fresh, capsys, rss, sets):
    d = fresh()
    (d / "s.yaml").write_text(DERIVED)
    command(["validate", str(d / "s.yaml"), *(x for s in sets for x in ("--set", s))], capsys, origins=["--set "])


@st.composite
def scenario_documents(draw) -> str:
    """A scenario file: the tiny one with hostile values written into its YAML, or a hostile structure."""
    doc = yaml.safe_load(TINY)
    raws: list[Raw] = []
    for path, info, kind in draw(st.lists(st.sampled_from(LEAVES), min_size=1, max_size=3)):
        node = doc
        parts = path.split(".")
        if kind is not None:
            doc["workload"] = {"kind": kind} if doc["workload"].get("kind") != kind else doc["workload"]
        for part in parts[:-1]:
            child = node.get(part) if isinstance(node, dict) else None
            node[part] = child = child if isinstance(child, dict) else {}
            node = child
        value = draw(hostile(info))
        if isinstance(value, Raw):  # placed as text after the dump, since no Python value dumps to it
            raws.append(value)
            value = f"__RAW{len(raws) - 1}__"
        node[parts[-1]] = value
    text = yaml.dump(doc, Dumper=_Dumper, default_flow_style=False, width=10**9)
    for i, raw in enumerate(raws):
        text = text.replace(f"__RAW{i}__", raw)
    structure = draw(st.sampled_from(["none", "bomb", "deep", "merge", "duplicate", "binary", "control", "huge"]))
    return {
        "none": text,
        "bomb": "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(8)) + text,
        "deep": text + "description: " + "[" * 5000 + "]" * 5000 + "\n",
        "merge": "base: &b {kv_mem_gb: 0.2}\n" + text.replace("hardware:\n", "hardware:\n  <<: *b\n", 1),
        "duplicate": text + "seed: 2\n",
        "binary": text + "description: \"\\xff\"\n\udcff",
        "control": text + "description: a\x00b\n",
        "huge": text + "description: '" + "x" * (70 << 20) + "'\n",
    }[structure]


@fuzz_settings(60)
@given(text=scenario_documents())
def test_any_scenario_file_gives_a_whole_run_or_one_line(fresh, capsys, rss, text):
    d = fresh()
    path = d / "s.yaml"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    if command(["validate", str(path)], capsys, origins=[str(path)]) == 0:
        run_unless_announced_long(path, [], capsys, origins=[str(path)])


GRID_LEAVES = [leaf for leaf in LEAVES if leaf[2] is None]


@fuzz_settings(12)
@given(axis=st.sampled_from(GRID_LEAVES), values=st.data())
def test_any_grid_gives_a_whole_sweep_or_one_line(fresh, capsys, rss, axis, values):
    path, info, _ = axis
    vals = values.draw(st.lists(hostile(info), min_size=1, max_size=3, unique_by=as_yaml))
    spec = f"{path}={','.join(as_yaml(v) for v in vals)}"
    d = fresh()
    (d / "s.yaml").write_text(TINY)
    code = main(["sweep", str(d / "s.yaml"), "--grid", spec, "--out", str(d / "sw"), "--workers", "1", "--no-progress"])
    err = capsys.readouterr().err
    assert code in (0, 2) and "Traceback" not in err, err
    if code == 0 or (d / "sw" / "sweep.parquet").exists():  # some points may fail with their reasons recorded
        import pandas as pd

        assert len(pd.read_parquet(d / "sw" / "sweep.parquet")) >= 1
    else:
        lines = err.strip().splitlines()
        assert len(lines) == 1 and ("--grid " in lines[0] or str(d) in lines[0]), err
        assert not (d / "sw").exists()


# --------------------------------------------------------------------------------------------- traces


MOONCAKE = {"timestamp": float, "input_length": int, "output_length": int, "hash_ids": list}
TOKENS = {"input_ids": list, "output_length": int, "timestamp": float, "arrival_time_ns": int,
          "output_tok_ids": list, "input_tok_ids": list, "output_toks": int}  # fmt: skip
def _containers(kids: st.SearchStrategy) -> st.SearchStrategy:
    return st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=3), kids, max_size=3)


ANY_JSON = st.recursive(st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=5),
                        _containers, max_leaves=8)  # fmt: skip


def record_values(kind) -> st.SearchStrategy:
    if kind is list:
        return st.one_of(st.lists(st.integers(-(2**64), 2**64), max_size=12), ANY_JSON,
                         st.just([[[[[[1]]]]]]))  # fmt: skip
    return st.one_of(st.sampled_from(_edges([0, 1e13])), ANY_JSON)


@st.composite
def trace_lines(draw) -> bytes:
    fmt = draw(st.sampled_from([MOONCAKE, TOKENS]))
    good = ({"timestamp": 0, "input_length": 600, "output_length": 4, "hash_ids": [1, 2]} if fmt is MOONCAKE
            else {"input_ids": list(range(300)), "output_length": 4, "timestamp": 0})  # fmt: skip
    lines = []
    for i in range(draw(st.integers(1, 4))):
        rec = {**good, "timestamp": i}
        for name in draw(st.lists(st.sampled_from(sorted(fmt)), max_size=2)):
            rec[name] = draw(record_values(fmt[name]))
        lines.append(json.dumps(rec, allow_nan=True).encode())
    tail = draw(st.sampled_from([b"", b"{", b"\xff\xfe", b"[" * 100000, b"NaN", b'{"timestamp": 1e999}', b"1" * 5000]))
    return b"\n".join(lines + [tail]) + b"\n"


@fuzz_settings(100)
@given(body=trace_lines())
def test_any_trace_gives_a_whole_replay_and_run_or_one_line(fresh, capsys, rss, body):
    d = fresh()
    trace = d / "t.jsonl"
    trace.write_bytes(body)
    command(["replay", str(trace), "--model", "generic", "--no-bound", "--json", str(d / "r.json")], capsys,
            origins=[str(trace)], outputs=[d / "r.json"])  # fmt: skip
    (d / "s.yaml").write_text(f"name: tr\nhardware: {{kv_mem_gb: 0.2}}\nworkload: {{kind: trace, path: {trace}}}\n")
    if command(["validate", str(d / "s.yaml")], capsys, origins=[str(trace), str(d / "s.yaml")]) == 0:
        command(["run", str(d / "s.yaml"), "--out", str(d / "out"), "--no-progress"], capsys,
                origins=[str(trace), str(d / "s.yaml")], outputs=[d / "out"], folder_outputs=RUN_OUTPUTS)  # fmt: skip


# ----------------------------------------------------------------------------------------- config.json


QWEN = json.loads(resources.files("sim").joinpath("data", "models", "qwen3-14b.json").read_text())


@fuzz_settings(60)
@given(changes=st.dictionaries(st.sampled_from(sorted(CONFIG_INTS) + ["compress_ratios", "quantization_config",
                                                                       "text_config", "torch_dtype"]),
                               st.one_of(st.sampled_from(_edges([1, 1e9])), ANY_JSON), min_size=1, max_size=3))
def test_any_config_json_gives_a_whole_run_or_one_line(fresh, capsys, rss, changes):
    d = fresh()
    cfg = d / "config.json"
    cfg.write_text(json.dumps({**QWEN, **changes}, allow_nan=True))
    (d / "s.yaml").write_text(TINY.replace("hardware: {kv_mem_gb: 0.2}", f"model: {{name: m, config: {cfg}}}\n"
                                           "hardware: {kv_mem_gb: 2, tp_size: 2}\nhicache: {page_size: 16}"))
    if command(["validate", str(d / "s.yaml")], capsys, origins=[str(cfg)]) == 0:
        command(["run", str(d / "s.yaml"), "--out", str(d / "out"), "--no-progress"], capsys,
                origins=[str(d / "s.yaml")], outputs=[d / "out"], folder_outputs=RUN_OUTPUTS)  # fmt: skip


# ----------------------------------------------------------------------------------------- cost tables


SPEC = json.loads(resources.files("sim").joinpath("data", "h200_spec.json").read_text())


def json_leaves(value: Any, path: tuple = ()) -> list[tuple]:
    """Every path into a decoded JSON document, containers included."""
    out = [path]
    if isinstance(value, dict):
        out += [p for k, v in value.items() for p in json_leaves(v, (*path, k))]
    elif isinstance(value, list):
        out += [p for i, v in enumerate(value[:3]) for p in json_leaves(v, (*path, i))]
    return out


SPEC_PATHS = json_leaves(SPEC)[1:]


def replaced(doc: Any, path: tuple, value: Any) -> Any:
    doc = json.loads(json.dumps(doc))
    node = doc
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = value
    return doc


@fuzz_settings(60)
@given(path=st.sampled_from(SPEC_PATHS), value=st.one_of(st.sampled_from(_edges([0, 1])), ANY_JSON, st.just([])))
def test_any_cost_table_gives_a_whole_check_and_run_or_one_line(fresh, capsys, rss, path, value):
    d = fresh()
    table = d / "t.json"
    table.write_text(json.dumps(replaced(SPEC, path, value), allow_nan=True))
    base = d / "base.json"
    base.write_text(json.dumps(SPEC))
    code = main(["calibrate", "check", str(table), "--baseline", str(base)])
    err = capsys.readouterr().err
    assert code in (0, 1, 2) and "Traceback" not in err, err  # 1: a regression, as documented
    if code == 2:
        named = str(table) in err or str(base) in err or "incompatible" in err or "nothing to check" in err
        assert len(err.strip().splitlines()) == 1 and named, err
    (d / "s.yaml").write_text(TINY.replace("hardware: {kv_mem_gb: 0.2}", f"hardware: {{kv_mem_gb: 0.2, cost_table: {table}}}"))
    command(["run", str(d / "s.yaml"), "--out", str(d / "out"), "--no-progress"], capsys,
            origins=[str(table), str(d / "s.yaml")], outputs=[d / "out"], folder_outputs=RUN_OUTPUTS)  # fmt: skip


# ------------------------------------------------------------------------------------ bench result files


BENCH_FIELDS = {"input_lens": list, "output_lens": list, "ttfts": list, "itls": list, "cached_tokens": list,
                "max_concurrency": int}  # fmt: skip
GOOD_RUNS = [  # runs the spec-derived model fits (concurrency 1: prefill and decode points; 4: decode)
    {"input_lens": [1000, 2000, 8000], "output_lens": [10, 10, 10], "ttfts": [0.05, 0.1, 0.45],
     "itls": [[0.006, 0.006], [0.0061, 0.0062], [0.0065, 0.0066]], "max_concurrency": 1},
    {"input_lens": [20000] * 4, "output_lens": [10] * 4, "ttfts": [1] * 4, "itls": [[0.02]] * 4, "max_concurrency": 4},
]  # fmt: skip
GOOD_POINTS = ("kind,tokens,context,batch,seconds\nprefill,2000,0,1,0.1\nprefill,8000,0,1,0.45\ndecode,0,1000,1,0.006\n"
               "decode,0,200000,8,0.02\ndecode,0,1000000,32,0.06\n")  # fmt: skip


@fuzz_settings(60)
@given(changes=st.dictionaries(st.sampled_from(sorted(BENCH_FIELDS)),
                               st.one_of(ANY_JSON, st.lists(st.sampled_from(_edges([0, 1])), max_size=3)), max_size=2),
       csv_row=st.sampled_from(["prefill,100,0,1,0.01", "decode,0,100,nan,0.01", "prefill,1e400,0,1,1",
                                "bogus,1,1,1,1", "prefill,,,,", "decode,0,10,4,inf", "prefill,10,0,1,-1"]))
def test_any_bench_result_gives_a_whole_fit_or_one_line(fresh, capsys, rss, changes, csv_row):
    d = fresh()
    res = d / "r.jsonl"
    res.write_text("".join(json.dumps(r) + "\n" for r in GOOD_RUNS) + (json.dumps({**GOOD_RUNS[0], **changes},
                                                                                   allow_nan=True) + "\n" if changes else ""))
    pts = d / "p.csv"
    pts.write_text(GOOD_POINTS + f"{csv_row}\n")
    (d / "s.yaml").write_text(TINY)
    for measured in (res, pts):
        out = d / f"fit-{measured.stem}.json"
        command(["calibrate", "compute", str(measured), "--scenario", str(d / "s.yaml"), "--out", str(out)], capsys,
                origins=[str(measured), "prefill points", "decode points"], outputs=[out])  # fmt: skip


@fuzz_settings(30)
@given(key=st.sampled_from(["mfu", "mbu", "step_overhead_ms", "attn_flops_scale", "bogus", ""]),
       value=st.sampled_from(["5", "0", "-1", "nan", "inf", "1e-300", "0.5", "x", "", "1e308"]))
def test_any_fix_gives_a_whole_fit_or_one_line(fresh, capsys, rss, key, value):
    d = fresh()
    pts = d / "p.csv"
    pts.write_text(GOOD_POINTS)
    (d / "s.yaml").write_text(TINY)
    out = d / "fit.json"
    command(["calibrate", "compute", str(pts), "--scenario", str(d / "s.yaml"), "--out", str(out),
             "--fix", f"{key}={value}"], capsys, origins=["--fix ", str(pts)], outputs=[out])  # fmt: skip


# ----------------------------------------------------------------------------------------- tree calls


def call_value(kind: str, least: int) -> st.SearchStrategy:
    """A value for a declared call field: one of its kind (near its least value, at the edges), or as often anything
    JSON holds."""
    if "|" in kind:  # a choice of names
        return st.sampled_from(kind.split("|")) | st.sampled_from(["", "x", kind]) | ANY_JSON
    own = {
        "int": st.integers(least - 2, least + 600) | st.sampled_from(_edges([least])),
        "int?": st.none() | st.integers(least - 2, least + 40),
        "bool": st.booleans(),
        "tokens": st.lists(st.integers(0, 5000) | st.tuples(st.integers(0, 5000), st.integers(-1, 2000)).map(list),
                           max_size=4) | st.just([[0, 10**15]]),
        "ids": st.lists(st.integers(0, 50), max_size=40),
        "rid": st.sampled_from(["r1", "r2", 1]),
        "num": st.floats(least - 1, least + 4) | st.sampled_from(_edges([least])),
        "object": st.dictionaries(st.sampled_from([*INDEX_SHARE_FIELDS, "x"]), ANY_JSON | st.integers(-1, 9),
                                  max_size=3),
    }[kind]
    return st.one_of(own, ANY_JSON)


def legal_value(kind: str, least: int) -> st.SearchStrategy:
    """A value its declaration allows, small enough for a stream to run many calls on."""
    if "|" in kind:
        return st.sampled_from(kind.split("|"))
    if kind in ("int", "int?"):
        low = max(least, -2)
        ints = st.integers(low, low + 16) | st.integers(low, max(least, 0) + 4096)
        return ints | st.none() if kind == "int?" else ints
    if kind == "num":
        return st.floats(least, least + 4)
    if kind == "rid":
        return st.sampled_from(["r1", "r2"])
    return call_value(kind, least).filter(lambda v: not problem_of(v, kind, least))


@st.composite
def call_streams(draw) -> str:
    v4 = draw(st.booleans())
    fields = CALL_FIELDS if v4 else RADIX_CALL_FIELDS
    lines = [json.dumps({"page_size": draw(st.sampled_from([1, 4, 16, 256, 0, -1, "x"])), **({"window": 128} if v4 else {})})]
    for _ in range(draw(st.integers(1, 8))):
        op = draw(st.sampled_from([*fields, "bogus"]))
        call = {"op": op}
        for name, (kind, least, _) in fields.get(op, {}).items():
            if draw(st.integers(0, 4)):  # mostly present
                call[name] = draw(call_value(kind, least))
        lines.append(json.dumps(call if draw(st.integers(0, 3)) else {"call": call, "expect": {"op": op}}))
    return "\n".join(lines + [draw(st.sampled_from(["", "{", "[1]", '{"x": 1}', "\xff"]))]) + "\n"


@st.composite
def host_call_streams(draw) -> str:
    """A host-tier stream: a config call, then calls of every op on a few rids, every field from its declaration
    (:data:`HOST_CALL_FIELDS`): mostly values it allows, so that streams run many calls deep, one field in forty
    anything :func:`call_value` draws, one in forty left out, and now and then an unknown op."""
    fields = HOST_CALL_FIELDS
    lines = []
    if draw(st.booleans()):  # a header naming the model, as the recordings have
        lines.append(json.dumps({"model": draw(st.sampled_from(["plain", "v4"]))}))
    lifecycle = ["admit", "extend", "decode", "finish"]  # the ops on a rid, as often as all the others
    ops = ["config"] + draw(st.lists(st.sampled_from([*fields]) | st.sampled_from(lifecycle), min_size=1, max_size=16))
    ops += draw(st.sampled_from([[], [], [], ["bogus"]]))
    admitted: list = []
    for i, op in enumerate(ops):
        if op in lifecycle and not admitted and draw(st.integers(0, 9)):
            op = "admit"  # mostly on a request admitted before
        call = {"op": op}
        for name, (kind, least, required) in fields.get(op, {}).items():
            odds = draw(st.integers(0, 39))
            if (odds == 0 and i) or (not required and op != "config" and odds < 20):
                continue  # left out (optional fields often; the first config sets every key)
            if name == "page_size" and odds < 30:
                call[name] = draw(st.sampled_from([1, 4, 16, 256]))
            elif name == "chunked_prefill_size" and odds < 30:  # whole pages, or chunking off
                call[name] = draw(st.integers(-1, 16)) * call.get("page_size", 1)
            elif name == "rid" and odds > 1 and op != "admit" and admitted:  # mostly a rid admitted before
                call[name] = draw(st.sampled_from(admitted))
            else:
                call[name] = draw(call_value(kind, least) if odds == 1 else legal_value(kind, least))
        if op == "admit" and isinstance(call.get("rid"), str):
            admitted.append(call["rid"])
        lines.append(json.dumps(call if draw(st.integers(0, 3)) else {"call": call, "expect": {"op": op}}))
    return "\n".join(lines) + "\n"


@fuzz_settings(150)
@given(text=call_streams())
def test_any_call_stream_gives_answers_or_one_line(fresh, capsys, rss, text):
    _tree_answers_or_one_line(fresh, capsys, text)


@fuzz_settings(150)
@given(text=host_call_streams())
def test_any_host_tier_stream_gives_answers_or_one_line(fresh, capsys, rss, text):
    _tree_answers_or_one_line(fresh, capsys, text)


def odds(n: int) -> st.SearchStrategy:
    """True one time in ``n`` (hypothesis leans to a list's first item, so the rare case comes last)."""
    return st.sampled_from([False] * (n - 1) + [True])


@st.composite
def index_share(draw) -> dict:
    """IndexShare fields as a DSA config writes them: mostly small legal values, one in eight anything."""
    if draw(odds(8)):
        return draw(call_value("object", 0))
    return draw(st.fixed_dictionaries({}, optional={
        "index_topk_freq": st.integers(1, 4), "index_skip_topk_offset": st.integers(1, 4),
        "index_topk_pattern": st.text("DS", max_size=6), "cli_factor": st.integers(1, 3),
        "indexer_types": st.lists(st.sampled_from(["full", "shared"]), max_size=6)}))  # fmt: skip


@st.composite
def topk_rows(draw, seq_len: int, layers: int, k: int, ratio: int):
    """A step's top-k for one request: mostly what the indexer gives (distinct ids below ``seq_len // ratio``, -1
    padding; one row, the same row for every layer, or a row per layer); one in six anything near it (ids out of
    range, repeated, ragged, null rows, rows for the wrong number of layers, not ids at all)."""
    span = max(seq_len // ratio, 0)
    ids = st.lists(st.integers(0, max(span - 1, 0)), max_size=min(k, span), unique=True).map(
        lambda r: r + [-1] * min(draw(st.integers(0, 2)), k - len(r)))
    if not draw(odds(6)):
        row = draw(ids)
        return draw(st.sampled_from([row, [row] * layers, [draw(ids) for _ in range(layers)]]))
    wild = st.lists(st.integers(-2, seq_len + 1), max_size=k + 1)
    row = ids | wild | st.none()
    return draw(wild | st.lists(row, min_size=layers, max_size=layers) | st.lists(row, max_size=layers + 1) | ANY_JSON)


@st.composite
def hisparse_call_streams(draw) -> str:
    """A HiSparse stream (:data:`HISPARSE_CALL_FIELDS`): a config of either family with small legal sizes (one in
    eight with a field drawn from its declaration's kind instead), arrivals and finishes on a few rids, steps whose
    rows mostly follow each request's seq_len, their top-k from :func:`topk_rows`; one call in twenty is hostile."""
    fields = HISPARSE_CALL_FIELDS
    cfg = {"op": "config", "family": draw(st.sampled_from(["dsa", "v4"])), "device_buffer_size": draw(st.integers(1, 24)),
           "layers": draw(st.integers(1, 4)), "page_size": draw(st.sampled_from([4, 16, 64, 1]))}  # fmt: skip
    cfg["top_k"] = draw(st.integers(1, cfg["device_buffer_size"]))
    if cfg["family"] == "dsa" and draw(st.booleans()):
        cfg["index_share"] = draw(index_share())
    layers, k = cfg["layers"], cfg["top_k"]  # what the rows are drawn for, whatever the line below does to them
    if draw(odds(8)):
        name, (kind, least, _) = draw(st.sampled_from(sorted(fields["config"].items())))
        cfg[name] = draw(call_value(kind, least))
    lines, seq = [cfg], {}
    for _ in range(draw(st.integers(0, 16))):
        op = "bogus" if draw(odds(40)) else draw(st.sampled_from(["step"] * 8 + ["arrive"] * 3 + ["finish"] * 2))
        if op != "bogus" and not seq and not draw(odds(10)):
            op = "arrive"  # mostly on a request that arrived before
        hostile = draw(odds(20))
        if op == "arrive":
            free = [r for r in "abc" if r not in seq] or ["a"]
            rid = draw(st.sampled_from(free if not hostile else ["a", "b", "c", 1]))
            call = {"op": op, "rid": rid, "prompt_len": draw(call_value("int", 1) if hostile else st.integers(1, 120))}
            if draw(st.booleans()):
                call["admission"] = draw(call_value("direct|staging", 0) if hostile else st.sampled_from(["direct", "staging"]))
            if isinstance(call["prompt_len"], int) and call["prompt_len"] > 0:
                seq[rid] = call["prompt_len"] + 1
        elif op == "step":
            rows = []
            for rid in draw(st.lists(st.sampled_from(sorted(seq) or ["a"]), min_size=1, max_size=3, unique=True)):
                n = seq.get(rid, 2) + (draw(st.sampled_from([1, -1, 2])) if hostile else 0)
                rows.append({"rid": rid, "seq_len": n, "topk": draw(topk_rows(n, layers, k, 1 if cfg["family"] == "dsa" else 4))})
                seq[rid] = seq.get(rid, 2) + 1
            call = {"op": op, "reqs": rows}
        else:
            call = {"op": op, "rid": draw(st.sampled_from(sorted(seq) or ["a"]))}
            seq.pop(call["rid"], None)
        lines.append(call)
    return "\n".join(json.dumps(c) for c in lines) + "\n"


@fuzz_settings(150)
@given(text=hisparse_call_streams())
def test_any_hisparse_stream_gives_answers_or_one_line(fresh, capsys, rss, text):
    _tree_answers_or_one_line(fresh, capsys, text, command="hisparse")


def _tree_answers_or_one_line(fresh, capsys, text: str, command: str = "tree") -> None:
    d = fresh()
    calls = d / "c.jsonl"
    calls.write_text(text, errors="surrogateescape")
    start, cpu = time.perf_counter(), time.process_time()

    def hung(*_):
        raise TimeoutError(f"{command} ran over {WALL_SECONDS_PER_COMMAND} s on:\n{text[:2000]}")

    previous = signal.signal(signal.SIGALRM, hung)  # a loop that never returns fails here instead of hanging CI
    signal.alarm(int(WALL_SECONDS_PER_COMMAND))
    try:
        code = main([command, str(calls), "--quiet"])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    err = capsys.readouterr().err
    assert code in (0, 1, 2) and "Traceback" not in err, err  # 1: answers that disagree with the expects
    assert time.process_time() - cpu < SECONDS_PER_COMMAND and time.perf_counter() - start < WALL_SECONDS_PER_COMMAND
    if code == 2:
        assert len(err.strip().splitlines()) == 1 and f"{calls}:" in err, err


# ------------------------------------------------------------------------------------ SGLang commands


SGLANG_FLAGS = json.loads(resources.files("sim").joinpath("data", "sglang_flags.json").read_text())
FLAG = st.sampled_from(sorted(SGLANG_FLAGS["launch_server"])) | st.sampled_from(sorted(_LAUNCH))  # mapped ones often
BENCH_FLAG = st.sampled_from(sorted(SGLANG_FLAGS["bench_serving"]) + ["--num-clients", "--num-rounds", "--request-length",
                                                                     "--policy", "--dp-aware"])  # fmt: skip
FLAG_VALUE = st.sampled_from(["", "1", "0", "-1", "1e308", "nan", "x", "'", '"a', "8192", "100", "0.5", "{bad", "lpm",
                              "true", "1" * 5000, "1e5", "\\\n", "\\\r\n", "'a\nb'", "\n", "\r", "'\x1b[2J'",
                              "'\u2028'"])  # fmt: skip


@fuzz_settings(80)
@given(flags=st.lists(st.tuples(FLAG, FLAG_VALUE), max_size=4),
       bench=st.lists(st.tuples(BENCH_FLAG, FLAG_VALUE), max_size=3),
       client=st.sampled_from(["python -m sglang.bench_serving", "python bench_multiturn.py --disable-auto-run",
                               "python -m sglang_router.launch_router --policy consistent_hashing --policy",
                               "python -m sglang_router.launch_routr", "python -m sglang.bench_servin"]))
def test_any_sglang_command_gives_a_whole_scenario_or_one_line(fresh, capsys, rss, flags, bench, client):
    d = fresh()
    launch = "python -m sglang.launch_server --model-path Qwen/Qwen3-14B " + " ".join(f"{f} {v}" for f, v in flags)
    bench = f"{client} " + " ".join(f"{f} {v}" for f, v in bench) if bench else ""
    out = d / "m.yaml"
    argv = ["scenario", "from-sglang", "--gpu", "H200", "--launch", launch, "--out", str(out)]
    command(argv + (["--bench", bench] if bench else []), capsys, origins=["--launch", "--bench", "from-sglang", "--"],
            outputs=[out])  # fmt: skip
    if out.exists():
        command(["validate", str(out)], capsys, origins=[str(out)])


# ------------------------------------------------------------------------------------ server logs


LOGS = Path(__file__).parents[2] / "data" / "server_logs"
LOG_LAUNCHES = {  # each fixture with the launch it is from, and each with the other's
    "qwen3-14b_a10_tp2_hicache.log": "python -m sglang.launch_server --model-path Qwen/Qwen3-14B --tp-size 2 "
                                     "--enable-hierarchical-cache --hicache-ratio 2",
    "deepseek-v4-pro_h200_tp8_hicache.log": "python -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Pro "
                                            "--tp-size 8 --enable-hierarchical-cache --hicache-ratio 2",
}  # fmt: skip
LOG_NUMBERS = st.sampled_from(["0", "-1", "3.2768e6", "3,276,800", "3276800.5", "28.7.5", "1" * 400, "1e999", "nan",
                               "x", "2", "99999999"])  # fmt: skip
LOG_WRAPS = st.sampled_from(["{}", "2026-03-02T10:14:05+0000 node python3[1]: {}", "2026-03-02T10:14:05.1Z {}",
                             "[pod/sglang-0/server] {}", "\x1b[32m{}\x1b[0m", "{}\r"])  # fmt: skip


@st.composite
def server_logs(draw) -> tuple[str, str]:
    """(launch, log text): a fixture's lines, some numbers replaced, some lines repeated, dropped or given
    another rank, each line wrapped as an operator's tool holds it; with its own launch or the other's."""
    import re

    name = draw(st.sampled_from(sorted(LOG_LAUNCHES)))
    lines = (LOGS / name).read_text().splitlines()
    out = []
    for line in lines:
        if draw(st.integers(0, 9)) == 0:
            continue
        if draw(st.integers(0, 3)) == 0:
            spans = [m.span() for m in re.finditer(r"\d[\d.]*", line)]
            a, b = draw(st.sampled_from(spans))
            line = line[:a] + draw(LOG_NUMBERS) + line[b:]
        if draw(st.integers(0, 9)) == 0:
            line = line.replace("TP0", draw(st.sampled_from(["TP1", "TP9", "DP3 TP0"])))
        out += [draw(LOG_WRAPS).format(line)] * draw(st.sampled_from([1, 1, 1, 2]))
    launch = LOG_LAUNCHES[draw(st.sampled_from([name, name, *sorted(LOG_LAUNCHES)]))]
    return launch, "\n".join(out) + "\n"


@fuzz_settings(60)
@given(case=server_logs())
def test_any_server_log_gives_a_scenario_that_validates_or_one_line(fresh, capsys, rss, case):
    d = fresh()
    launch, text = case
    log, out = d / "server.log", d / "m.yaml"
    log.write_text(text)
    gpu = "H200" if "V4" in launch else "A10"
    argv = ["scenario", "from-sglang", "--gpu", gpu, "--host-mem-gb", "4000", "--launch", launch,
            "--server-log", str(log), "--out", str(out)]  # fmt: skip
    command(argv, capsys, origins=[str(log), "--launch", "--server-log", "--hicache-ratio"], outputs=[out])
    if out.exists():
        command(["validate", str(out)], capsys, origins=[str(out)])


# ------------------------------------------------------------------------------------ origins


def _field_path_list() -> list[str]:
    from sim.scenario.load import field_paths

    return sorted(field_paths())


ORIGIN_KEYS = st.sampled_from(_field_path_list()) | st.builds(
    lambda p, tail: f"{p}.{tail}", st.sampled_from(_field_path_list()), st.sampled_from(["0", "x", "0.name", ""]))
ORIGIN_TEXT = st.text(st.sampled_from("ab:-\n\r\x1b[2J\u2028\x85 "), max_size=20)


@fuzz_settings(60)
@given(origins=st.dictionaries(ORIGIN_KEYS, ORIGIN_TEXT, max_size=3))
def test_any_origins_give_a_validated_summary_on_its_own_lines_or_one_line(fresh, capsys, rss, origins):
    d = fresh()
    doc = yaml.safe_load(TINY)
    doc["origins"] = origins
    path = d / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    bare = d / "bare.yaml"
    bare.write_text(TINY)
    if command(["validate", str(path)], capsys, origins=[str(path)]) == 0:
        main(["validate", str(path)])
        out = capsys.readouterr().out
        main(["validate", str(bare)])
        assert "\x1b" not in out and len(out.splitlines()) == len(capsys.readouterr().out.splitlines())

"""Regenerate ``sim/data/sglang_flags.json``: every flag SGLang's launch_server and bench_serving accept.

    python tools/extract_sglang_flags.py /path/to/sglang/srt sim/data/sglang_flags.json [--older 0.5.2=/path/to/old/sglang/srt]

Reads the source statically (no SGLang import, so none of its dependencies are needed): the ServerArgs
fields (``arg_groups/fields/*.py``: ``A[type, Arg(...)]`` annotations with ``cli_name``, ``aliases`` and
``no_cli``), the manual ``add_argument`` registrations of ``server_args.py``, and ``benchmark/serving.py``.
Each flag maps to whether it takes a value (``"optional"``: ``nargs='?'``); ``launch_server_groups`` names
each field flag's group (its ``fields/*.py`` file), ``launch_server_aliases`` each alias's flag. ``environ``
lists the environment variables SGLang reads (``environ.py``). ``--older VERSION=SRT`` adds the launch_server flags of an older version (its
``server_args.py`` with ``add_argument`` registrations, e.g. the 0.5.2 wheel) that 0.5.23 no longer has.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
from collections.abc import Iterator
from pathlib import Path


def field_flags(fields_dir: Path, groups: dict[str, str] | None = None,
                aliases: dict[str, str] | None = None) -> dict[str, bool | str]:  # fmt: skip
    out: dict[str, bool | str] = {}
    for path in sorted(fields_dir.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
                continue
            ann = node.annotation
            if not (isinstance(ann, ast.Subscript) and getattr(ann.value, "id", None) == "A"):
                continue
            elts = ann.slice.elts if isinstance(ann.slice, ast.Tuple) else [ann.slice]
            meta = elts[1] if len(elts) > 1 else None
            kw = {k.arg: k.value for k in meta.keywords} if isinstance(meta, ast.Call) else {}
            if "no_cli" in kw and ast.unparse(kw["no_cli"]) == "True":
                continue
            cli = ast.literal_eval(kw["cli_name"]) if "cli_name" in kw else "--" + node.target.id.replace("_", "-")
            action = ast.unparse(kw["action"]) if "action" in kw else ""
            is_switch = (ast.unparse(elts[0]) == "bool" and not action) or "store_" in action
            optional = "nargs" in kw and ast.unparse(kw["nargs"]) == "'?'"
            for name in [cli, *(ast.literal_eval(kw["aliases"]) if "aliases" in kw else [])]:
                out[name] = "optional" if optional else not is_switch
                if groups is not None:
                    groups[name] = path.stem.rstrip("_")
                if aliases is not None and name != cli:
                    aliases[name] = cli
    return out


def _static_value(node: ast.AST, names: dict[str, list]) -> list | None:
    """A ``choices=`` expression's list, where the source states it: a literal, a list named in ``choices.py``,
    or a sum of those; None for one computed at run time (``Backend.ALL``), which is then not checked."""
    if isinstance(node, ast.Name):
        return names.get(node.id)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _static_value(node.left, names), _static_value(node.right, names)
        return None if left is None or right is None else left + right
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return None
    return list(value) if isinstance(value, list | tuple | set | frozenset) else None


def field_choices(arg_groups: Path) -> dict[str, dict]:
    """Each field flag whose ``choices`` the source states: {flag: {"choices": [...], "at": "file:line"}}, so
    a value SGLang's argparse refuses is refused here too."""
    names: dict[str, list] = {}
    for node in ast.parse((arg_groups / "choices.py").read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            value = _static_value(node.value, names)
            if value is not None:
                names[node.targets[0].id] = value
    out: dict[str, dict] = {}
    for path in sorted((arg_groups / "fields").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                    and isinstance(node.annotation, ast.Subscript) and isinstance(node.annotation.slice, ast.Tuple)):
                continue  # fmt: skip
            meta = node.annotation.slice.elts[-1]
            kw = {k.arg: k.value for k in meta.keywords} if isinstance(meta, ast.Call) else {}
            if "choices" not in kw or (choices := _static_value(kw["choices"], names)) is None:
                continue
            cli = ast.literal_eval(kw["cli_name"]) if "cli_name" in kw else "--" + node.target.id.replace("_", "-")
            at = f"arg_groups/fields/{path.name}:{kw['choices'].lineno}"
            for name in [cli, *(ast.literal_eval(kw["aliases"]) if "aliases" in kw else [])]:
                out[name] = {"choices": choices, "at": at}
    return dict(sorted(out.items()))


def _add_argument_calls(text: str) -> Iterator[str]:
    for m in re.finditer(r"add_argument\(", text):
        depth, i = 1, m.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        yield text[m.end() : i - 1]


def add_argument_flags(text: str) -> dict[str, bool]:
    out = {}
    for call in _add_argument_calls(text):
        head = re.match(r'\s*((?:"-{1,2}[a-zA-Z0-9-]+",\s*)+)', call)
        if not head:
            continue
        body = call[head.end() :]
        takes_value = not ("store_true" in body or "store_false" in body or "StoreTrue" in body
                           or ("StoreConst" in body and "nargs=None" not in body))  # fmt: skip
        for name in re.findall(r'"(--[a-zA-Z0-9-]+)"', head.group(1)):
            out[name] = takes_value
    return out


def environ_names(text: str) -> list[str]:
    """The variables ``environ.py`` declares (``NAME = EnvBool(...)`` and the like)."""
    return sorted(set(re.findall(r"^\s+([A-Z][A-Z0-9_]+) = Env[A-Za-z]+\(", text, re.M)))


def main(srt: Path, out_path: Path, older: dict[str, Path]) -> None:
    groups: dict[str, str] = {}
    aliases: dict[str, str] = {}
    launch = {**field_flags(srt / "arg_groups" / "fields", groups, aliases),
              **add_argument_flags((srt / "server_args.py").read_text())}  # fmt: skip
    serving = add_argument_flags((srt.parent / "benchmark" / "serving.py").read_text())
    old, old_serving = {}, {}
    for version, old_srt in older.items():
        flags = add_argument_flags((old_srt / "server_args.py").read_text())
        old[version] = {k: v for k, v in sorted(flags.items()) if k not in launch}
        bench = old_srt.parent / "bench_serving.py"  # the 0.5.2 wheel's client lives at sglang/bench_serving.py
        if bench.exists():
            flags = add_argument_flags(bench.read_text())
            old_serving[version] = {k: v for k, v in sorted(flags.items()) if k not in serving}
    out = {
        "_source": "extracted by tools/extract_sglang_flags.py from SGLang 0.5.23's source: ServerArgs fields "
        "(arg_groups/fields/*.py) plus server_args.py's add_argument registrations; bench_serving from "
        "benchmark/serving.py; environment variables from environ.py; older_launch_server: flags of older "
        "versions' server_args.py (and bench_serving.py) that 0.5.23 lacks. true: the flag takes a value. "
        "launch_server_choices: the values a field flag's argparse choices allow, where the source lists them.",
        "launch_server": dict(sorted(launch.items())),
        "launch_server_groups": dict(sorted(groups.items())),
        "launch_server_aliases": dict(sorted(aliases.items())),
        "launch_server_choices": field_choices(srt / "arg_groups"),
        "bench_serving": dict(sorted(serving.items())),
        "environ": environ_names((srt / "environ.py").read_text()),
        "older_launch_server": old,
        "older_bench_serving": old_serving,
    }
    out_path.write_text(json.dumps(out, indent=0) + "\n")
    print(f"wrote {out_path}: {len(launch)} launch_server flags, {len(serving)} bench_serving flags, "
          f"{len(out['environ'])} environment variables, older: "
          + ", ".join(f"{v} {len(f)}" for v, f in old.items()))  # fmt: skip


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("srt", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--older", action="append", default=[], metavar="VERSION=SRT")
    args = ap.parse_args()
    main(args.srt, args.out, {v: Path(p) for v, _, p in (o.partition("=") for o in args.older)})

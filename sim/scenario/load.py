"""Scenario files in and out: a strict YAML loader, ``--set`` overrides, and pydantic errors turned into
one-line :class:`~sim.base.errors.InputError` messages naming the file (or ``--set`` override) and the dotted
field path. The schema itself is :mod:`sim.scenario.schema`; its names are re-exported here.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BaseModel, ValidationError

from sim.base.errors import InputError
from sim.base.inputs import numbers_problem, parse_yaml, read_text
from sim.scenario import schema
from sim.scenario.schema import Scenario
from sim.scenario.schema.checks import CROSS_CHECKS
from sim.scenario.schema.section import model_paths
from sim.scenario.schema.workload import _WORKLOAD_CLASSES, _WORKLOAD_KINDS
from sim.scenario.server_checks import SERVER_CHECKS

__all__ = sorted(["FILE_FIELDS", "apply_overrides", "dump_resolved", "field_paths", "field_problem", "load_scenario",
                  "reblame", "rebase_paths", "scenario_from_dict", *schema.__all__])  # fmt: skip

# The fields that name a file (each validated by schema.section._resolve_file: beside the scenario, else the CWD).
FILE_FIELDS = ("workload.path", "hardware.cost_table", "hisparse.trace_path", "model.config")


def __getattr__(name: str):
    """The schema's names, re-exported: ``from sim.scenario.load import HiCacheConfig`` keeps working."""
    if name in schema.__all__:
        return getattr(schema, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# ------------------------------------------------------------------------------------------ YAML and errors


def _num(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _describe(err: dict[str, Any]) -> str:
    """One short phrase for one pydantic error."""
    kind, ctx, value = err["type"], err.get("ctx") or {}, err.get("input")
    got = f", got {value!r}" if not isinstance(value, dict | list) else ""
    simple = {
        "extra_forbidden": "unknown field",
        "missing": "required field missing",
        "greater_than_equal": f"must be >= {_num(ctx.get('ge'))}",
        "greater_than": f"must be > {_num(ctx.get('gt'))}",
        "less_than_equal": f"must be <= {_num(ctx.get('le'))}",
        "less_than": f"must be < {_num(ctx.get('lt'))}",
        "too_short": "must not be empty",
    }
    if kind in simple:
        return simple[kind]
    if kind.startswith("int_"):
        return f"expected an integer{got}"
    if kind == "finite_number":
        return f"must be a finite number{got}"
    if kind.startswith("float_"):
        return f"expected a number{got}"
    if kind.startswith("bool_"):
        return f"expected true or false{got}"
    if kind == "string_pattern_mismatch":
        return f"use letters, digits, '.', '_' or '-' (at most 100; it names the output folder){got}"
    if kind.startswith("string_"):
        return f"expected a string{got}"
    if kind in ("model_type", "model_attributes_type", "dict_type"):
        return f"expected a mapping{got}"
    if kind == "list_type":
        return f"expected a list{got}"
    if kind == "literal_error":
        return f"expected one of {ctx.get('expected')}{got}"
    if kind == "union_tag_invalid":
        return f"expected one of {', '.join(repr(k) for k in _WORKLOAD_KINDS)}, got {ctx.get('tag')!r}"
    if kind == "union_tag_not_found":
        return f"expected a mapping{got}"
    msg = err["msg"]
    return msg[0].lower() + msg[1:] if msg else kind


def field_problem(section: type[BaseModel], key: str, value: Any) -> str | None:
    """What the schema says is wrong with ``value`` as ``key`` of ``section`` by itself (None: nothing): its
    type and declared bounds, then the bounds every number has; cross-field checks are left to the whole
    scenario. So a command-line option that sets a scenario quantity is held to the YAML field's bounds."""
    from pydantic import ConfigDict, TypeAdapter

    info = section.model_fields[key]
    try:
        TypeAdapter(Annotated[info.annotation, info],
                    config=ConfigDict(strict=True, allow_inf_nan=False)).validate_python(value)  # fmt: skip
    except ValidationError as exc:
        return _describe(exc.errors()[0])
    found = numbers_problem(value)
    return found[1] if found else None


def _error_path(err: dict[str, Any]) -> str:
    """Dotted YAML path of an error, without pydantic's union-member segments."""
    loc = list(err["loc"])
    out: list[str] = []
    for i, part in enumerate(loc):
        if i > 0 and loc[i - 1] == "workload" and part in _WORKLOAD_KINDS and len(out) == 1:
            continue
        out.append(str(part))
    if err["type"] == "union_tag_invalid":
        out.append("kind")
    if err["type"] == "scenario_field" and err.get("ctx") and err["ctx"]["path"]:
        out.append(err["ctx"]["path"])
    return ".".join(out)


def _validation_to_input_error(exc: ValidationError, source: str, overridden: dict[str, str]) -> InputError:
    """The first error as one line, blaming the ``--set`` that introduced the bad value when there is one."""
    errors = exc.errors()
    err = errors[0]
    path = _error_path(err)
    message = err["ctx"]["message"] if err["type"] == "scenario_field" else _describe(err)
    if err["type"] == "extra_forbidden":
        name = path.rsplit(".", 1)[-1]
        owners = [c.model_fields["kind"].default for c in _WORKLOAD_CLASSES if name in c.model_fields]
        close = difflib.get_close_matches(name, [p for p in _siblings(path) if p != name], n=1)
        if path.startswith("workload.") and path.count(".") == 1 and owners:
            message += f" for this kind (it belongs to workload.kind {' or '.join(owners)})"
        elif close:
            message += f" (did you mean {close[0]}?)"
    blame = next((src for p, src in overridden.items() if path == p or path.startswith(p + ".")), source)
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return InputError(f"{path}: {message}{more}" if path else f"{message}{more}", source=blame)


def _siblings(path: str) -> list[str]:
    parent = path.rsplit(".", 1)[0] + "." if "." in path else ""
    depth = parent.count(".")
    return [p[len(parent) :] for p in field_paths(Scenario) if p.startswith(parent) and p.count(".") == depth]


# --------------------------------------------------------------------------------------------- public API


def field_paths(model: type[BaseModel] = Scenario) -> set[str]:
    """Every valid dotted path in ``model`` (:func:`sim.scenario.schema.section.model_paths`)."""
    return set(model_paths(model))


def _override_path_ok(path: str) -> bool:
    return ".".join(p for p in path.split(".") if not p.isdigit()) in field_paths(Scenario)


def _parse_override(item: str) -> tuple[str, Any]:
    key, sep, raw = item.partition("=")
    key = key.strip()
    if not sep or not key:
        raise InputError("expected key.path=value", source=f"--set {item}")
    if not _override_path_ok(key):
        raise InputError(f"{key}: unknown field", source=f"--set {item}")
    return key, parse_yaml(raw, f"--set {item}") if raw.strip() else None


def apply_overrides(data: dict[str, Any], overrides: Iterable[str]) -> dict[str, Any]:
    """Return a copy of ``data`` with each ``key.path=value`` applied in order (value parsed as YAML).

    Changing ``workload.kind`` starts that section afresh, since other kinds' fields would be unknown.
    Raises InputError naming the override when its path names no field.
    """
    out = _deep_copy(data)
    for item in overrides:
        key, value = _parse_override(item)
        parts = key.split(".")
        node: Any = out
        for depth, part in enumerate(parts[:-1]):
            child = _get(node, part)
            if isinstance(child, str) and part == "model" and depth == 0:
                child = {"name": child}  # model: name  ->  model: {name: ...}
            if not isinstance(child, dict | list):
                child = {}
            _put(node, part, child, item)
            node = child
        if (
            parts == ["workload", "kind"]
            and isinstance(node, dict)
            and node.get("kind", "multi_turn") != value
        ):
            node.clear()
        if key in FILE_FIELDS and isinstance(value, str):  # typed on the command line: the CWD's, if there
            value = _rebased(value, Path.cwd(), None)
        _put(node, parts[-1], value, item)
    return out


def rebase_paths(doc: dict[str, Any], here: Path, there: Path | None) -> dict[str, Any]:
    """``doc`` with each relative file path it names (:data:`FILE_FIELDS`) that exists under ``here`` rewritten
    relative to ``there`` (absolute if None): a scenario written into ``there`` then runs from any folder, since
    its paths resolve against its own folder first. A path found nowhere (a Hugging Face id) is kept."""
    out = _deep_copy(doc)
    for key in FILE_FIELDS:
        section, name = key.split(".")
        node = out.get(section)
        if isinstance(node, dict) and isinstance(node.get(name), str):
            node[name] = _rebased(node[name], here, there)
    return out


def _rebased(value: str, here: Path, there: Path | None) -> str:
    try:
        path = Path(value).expanduser()
        if path.is_absolute() or not (here / path).exists():
            return value
        found = (here / path).resolve()
        return str(found) if there is None else os.path.relpath(found, there.resolve())
    except (OSError, ValueError):  # a name the system refuses is the field's error when it is validated
        return value


def _deep_copy(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _deep_copy(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_deep_copy(v) for v in value]
    return value


def _get(node: Any, part: str) -> Any:
    if isinstance(node, list):
        return node[int(part)] if part.isdigit() and int(part) < len(node) else None
    return node.get(part)


def _put(node: Any, part: str, value: Any, item: str) -> None:
    if isinstance(node, list):
        if not (part.isdigit() and int(part) < len(node)):
            raise InputError(f"{part}: no such list item", source=f"--set {item}")
        node[int(part)] = value
    else:
        node[part] = value


def scenario_from_dict(
    data: Any,
    *,
    source: str = "<scenario>",
    base_dir: str | Path | None = None,
    check_files: bool = True,
    overridden: dict[str, str] | None = None,
) -> Scenario:
    """Validate ``data`` into a Scenario; relative paths resolve against ``base_dir`` (then the CWD).

    Raises InputError (one line: source, dotted path, problem). ``overridden`` maps dotted paths to the
    ``--set`` text that supplied them, so errors there blame the override.
    """
    if not isinstance(data, dict):
        raise InputError("expected a mapping of scenario sections at the top level", source=source)
    context = {"base_dir": str(base_dir) if base_dir is not None else None, "check_files": check_files,
               "checks": (*CROSS_CHECKS, *SERVER_CHECKS)}
    try:
        return Scenario.model_validate(data, context=context)
    except ValidationError as exc:
        raise _validation_to_input_error(exc, source, overridden or {}) from None


def load_scenario(path: str | Path, overrides: Sequence[str] = (), *,
                  check_start: Callable[[Scenario], None] | None = None) -> Scenario:  # fmt: skip
    """Read a scenario YAML, apply ``--set`` overrides, validate. Raises InputError.

    ``check_start`` (:func:`sim.app.run.check_startable`) also reads what a run reads when it starts. An error
    that the file alone does not have is blamed on the overrides that cause it (:func:`reblame`).
    """
    path = Path(path)
    data = parse_yaml(read_text(path, "scenario"), str(path))
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise InputError("expected a mapping of scenario sections at the top level", source=str(path))
    overridden = {_parse_override(o)[0]: f"--set {o}" for o in overrides}

    def check(doc: dict, blame: dict[str, str] | None = None) -> Scenario:
        sc = scenario_from_dict(doc, source=str(path), base_dir=path.parent, overridden=blame)
        if check_start is not None:
            try:
                check_start(sc)
            except InputError as exc:
                raise InputError(str(exc), source=str(path)) if not str(exc).startswith(str(path)) else exc from None
        return sc

    try:
        return check(apply_overrides(data, overrides), overridden)
    except InputError as exc:
        if not overrides or not str(exc).startswith(f"{path}: "):
            raise
        try:  # the file alone: if it is valid, the error is the overrides' doing, whatever field it names
            check(data)
        except InputError:
            raise exc from None

        def without(key: str) -> None:
            check(apply_overrides(data, [o for o in overrides if _parse_override(o)[0] != key]))

        raise reblame(exc, str(path), overridden, without) from None


def reblame(exc: InputError, source: str, origins: dict[str, str], check_without: Any) -> InputError:
    """``exc``, an error reported against a valid ``source`` that changes made to it caused (a ``--set`` that
    creates a section missing its required fields, a ``--grid`` value a cross-check refuses), blamed on the
    changes without which the document is valid (all of them, if several are), else those without which the
    error at least changes: ``check_without(key)`` checks the document with every change but that one, raising
    InputError. Failing that, on the change whose dotted key shares the longest prefix with the field the error
    names."""
    rest = str(exc)[len(source) + 2 :]
    field = rest.split(": ", 1)[0].split(".")

    def outcome(key: str) -> str:
        try:
            check_without(key)
        except InputError as other:
            return "same" if str(other) == str(exc) else "other"
        return "valid"

    def shared(key: str) -> int:
        n = 0
        for a, b in zip(key.split("."), field):
            if a != b:
                break
            n += 1
        return n

    if len(origins) > 1:
        seen = {key: outcome(key) for key in origins}
        culprits = [k for k, o in seen.items() if o == "valid"] or [k for k, o in seen.items() if o == "other"]
    else:
        culprits = list(origins)
    blamed = culprits or [max(origins, key=shared)]  # ties: the first given
    return InputError(rest, source=" and ".join(origins[k] for k in blamed))


def dump_resolved(scenario: Scenario) -> str:
    """YAML of the fully resolved scenario (every default filled, paths absolute); loads back equal."""
    return yaml.safe_dump(scenario.model_dump(mode="json"), sort_keys=False, default_flow_style=False)

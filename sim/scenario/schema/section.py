"""What every scenario section shares: the strict base model, the bound every number has, the limits that keep an
accepted scenario within one machine's memory and time, and the field helpers (an error at a dotted path, a file
found beside the scenario)."""

from __future__ import annotations

import functools
import operator
import types
import typing
from pathlib import Path
from typing import Annotated, Any, Union

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, ValidationInfo, model_validator
from pydantic.fields import FieldInfo
from pydantic_core import PydanticCustomError

from sim.base.inputs import MAX_WORKLOAD_PAGES as MAX_WORKLOAD_PAGES
from sim.base.inputs import numbers_problem

# Limits that keep every accepted scenario within memory and time on one machine. Each is well above
# what the shipped scenarios use (largest: 470K workload pages, 220K tokens per request).
# Workloads stream (sim.workload.stream): a request and its page keys are made when it is sent and dropped
# when it finishes, so a run keeps ~70 B of each request it sent (figures drawn up front, latencies for the
# percentiles, a link busy interval) beside a bounded time series: 10M requests, ~0.7 GB. The page-key bound
# is the worst case of what is held at once: the keys (~100 B each) of every request, as an open loop behind
# an overloaded server queues them all (a closed loop holds only its in-flight cap of them): 50M keys, ~5 GB.
# A trace, read as it is replayed, has neither. A lane replay holds its trajectories' keys (~8 B each: ints
# interned per trajectory) for the whole run; they are counted as they are read or generated.
MAX_REQUESTS = 10_000_000  # requests a workload generates
MAX_INSTANCES = 1024
MAX_HISPARSE_IDS = 200_000_000  # top-k ids HiSparse simulates (sample requests x layers x steps x top-k)


class _Section(BaseModel):
    """Base of every schema model: strict types, no unknown keys, immutable once validated, and every number
    within the bounds any input has (:func:`sim.base.inputs.number_problem`), whatever field holds it."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _bounded_numbers(cls, data: Any) -> Any:
        """A rule, not a list: it walks the raw values, so a field added later is covered with no change here.
        Runs before any field's own checks, so a cross-field check never computes with an unbounded number."""
        if not isinstance(data, dict):
            return data
        if (found := _number_problem_in(cls, data)) is not None:
            raise _field_error(*found)
        # -0.0 passes ``ge=0`` but numpy's samplers refuse it as a negative scale: a zero is 0.0
        return {k: 0.0 if type(v) is float and v == 0 else v for k, v in data.items()}


_BOUND_OPS = (("ge", operator.ge), ("gt", operator.gt), ("le", operator.le), ("lt", operator.lt))


def _declared_refuses(info: FieldInfo, value: Any) -> bool:
    """Whether the field's own bounds (``ge``, ``lt``...) refuse ``value``: their message says it better."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    try:
        return any((bound := getattr(m, attr, None)) is not None and not op(value, bound)
                   for m in info.metadata for attr, op in _BOUND_OPS)  # fmt: skip
    except TypeError:
        return False


def _holds_model(annotation: Any) -> bool:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    return any(_holds_model(arg) for arg in typing.get_args(annotation))


def _number_problem_in(cls: type[BaseModel], data: dict) -> tuple[str, str] | None:
    """(field path, problem) of the first number of ``cls``'s own fields in ``data`` that is out of bounds;
    a section below checks its own, an unknown key is refused as such."""
    for key, value in data.items():
        info = cls.model_fields.get(key) if isinstance(key, str) else None
        if info is None or (_holds_model(info.annotation) and isinstance(value, dict | list)):
            continue
        if not _declared_refuses(info, value) and (found := numbers_problem(value, key)) is not None:
            return found
    return None


def _derivable(cls: type[BaseModel], data: Any) -> bool:
    """Whether every one of ``cls``'s own fields in ``data`` has its declared type and numbers within both its
    own and the global bounds: what a derivation may compute from (anything else, the section reports)."""
    if not isinstance(data, dict):
        return True
    own = [(cls.model_fields[k], v) for k, v in data.items() if isinstance(k, str) and k in cls.model_fields]
    return _number_problem_in(cls, data) is None and not any(
        _declared_refuses(info, v) or _type_refuses(info, v) for info, v in own)


def _type_refuses(info: FieldInfo, value: Any) -> bool:
    """Whether ``value`` is not of the field's declared type (a section below checks its own fields)."""
    if _holds_model(info.annotation):
        return False
    try:
        _adapter(info.annotation).validate_python(value)
    except ValidationError:
        return True
    return False


@functools.cache
def _adapter(annotation: Any) -> TypeAdapter:
    return TypeAdapter(annotation)


def _field_error(path: str, message: str) -> PydanticCustomError:
    """A validation error pointing at ``path`` (dotted, relative to the model raising it)."""
    return PydanticCustomError("scenario_field", "{path}: {message}", {"path": path, "message": message})


def _resolve_file(value: str | None, info: ValidationInfo) -> str | None:
    """Find ``value`` beside the scenario file, else under the CWD; return it absolute.

    Raises a validation error when it exists in neither place (unless the context turns checks off).
    """
    if value is None:
        return None
    ctx = info.context or {}
    try:  # a name the system refuses (too long, ~nosuchuser) is the field's error, not the command's
        path = Path(value).expanduser()
        candidates = (
            [path] if path.is_absolute() else [Path(ctx["base_dir"]) / path] if ctx.get("base_dir") else []
        )
        if not path.is_absolute():
            candidates.append(Path.cwd() / path)
        found = next((cand for cand in candidates if cand.exists()), None)
    except (OSError, RuntimeError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        raise PydanticCustomError("file_not_found", "cannot use {value}: {why}",
                                  {"value": value[:80] + ("..." if len(value) > 80 else ""), "why": why}) from None
    if found is not None:
        return str(found.resolve())
    if not ctx.get("check_files", True):
        return value
    where = " or ".join(str(c.parent) for c in candidates)
    raise PydanticCustomError(
        "file_not_found", "file not found: {value} (looked in {where})", {"value": value, "where": where}
    )


@functools.cache
def model_paths(model: type[BaseModel]) -> frozenset[str]:
    """Every valid dotted path in ``model``: sections and leaves, including every workload kind's fields.

    List items are addressed without an index (``model.pools.name``).
    """
    paths: set[str] = set()

    def walk(cls: type[BaseModel], prefix: str) -> None:
        for name, info in cls.model_fields.items():
            path = f"{prefix}{name}"
            paths.add(path)
            for sub in _models_in(info.annotation):
                walk(sub, path + ".")

    walk(model, "")
    return frozenset(paths)


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _models_in(typing.get_args(annotation)[0])
    if origin in (Union, types.UnionType, list, tuple):
        return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]
    return []

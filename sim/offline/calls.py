"""The call formats' shared notation: token ids as ``[first, count]`` runs, expanded and written back, and the
check of a call's fields against its op's declaration (so a bad stream gets one line naming the field)."""

from __future__ import annotations

from collections.abc import Iterable

from sim.base.errors import InputError
from sim.base.inputs import MAX_REQUEST_TOKENS

__all__ = ["MAX_COUNT", "Fields", "check_call", "check_fields", "expand_tokens", "host_runs", "token_runs"]

# A call's fields by op: name -> (kind, least value, required). Kinds: int, int? (null allowed), bool, tokens (ids
# and [first, count] runs), ids (plain ids), rid, num (a finite number from least to MAX_COUNT), object (a JSON
# object, checked by its format), objects (a list of JSON objects, each checked by its format), and a choice of
# names written "a|b|c".
Fields = dict[str, tuple[str, int, bool]]
MAX_ID = 1 << 63
MAX_COUNT = MAX_REQUEST_TOKENS  # tokens one call may name, and decode steps one call may ask for


def expand_tokens(spec: Iterable) -> list[int]:
    """``[[1000, 3], 7]`` -> ``[1000, 1001, 1002, 7]``."""
    out: list[int] = []
    for item in spec:
        if isinstance(item, int):
            out.append(item)
        else:
            first, count = item
            out.extend(range(first, first + count))
    return out


def token_runs(tokens: list[int]) -> list:
    """Consecutive ids as ``[first, count]`` runs (how the recorded answers write them)."""
    out: list = []
    i = 0
    while i < len(tokens):
        j = i
        while j + 1 < len(tokens) and tokens[j + 1] == tokens[j] + 1:
            j += 1
        out.append([tokens[i], j - i + 1])
        i = j + 1
    return out


def host_runs(tokens: list[int]) -> list:
    """Consecutive ids as ``[first, count]`` runs, a lone id as itself (how the host-tier answers write them)."""
    return [first if count == 1 else [first, count] for first, count in token_runs(tokens)]


def check_call(call: dict, fields: dict[str, Fields]) -> None:
    """Raise InputError naming the field of ``call`` that its op's declaration refuses, or one it does not
    declare (a misspelt field would otherwise be dropped unseen; ``id`` names a call in any op)."""
    op = call.get("op")
    if not isinstance(op, str) or op not in fields:
        raise InputError(f"op: unknown op {op!r} (known: {', '.join(fields)})")
    unknown = next((k for k in call if k not in fields[op] and k not in ("op", "id")), None)
    if unknown is not None:
        raise InputError(f"{unknown}: not a field of {op} (its fields: {', '.join(fields[op]) or 'none'})")
    check_fields(call, fields[op])


def check_fields(obj: dict, spec: Fields) -> None:
    for name, (kind, least, required) in spec.items():
        if name not in obj:
            if required:
                raise InputError(f"{name}: required field missing")
            continue
        problem = _problem(obj[name], kind, least)
        if problem:
            raise InputError(f"{name}: {problem}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _problem(value, kind: str, least: int) -> str | None:
    if kind == "bool":
        return None if isinstance(value, bool) else f"expected true or false, got {value!r}"
    if "|" in kind:
        names = kind.split("|")
        return None if isinstance(value, str) and value in names else f"expected one of {', '.join(names)}, got {value!r}"
    if kind == "num":
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and least <= value <= MAX_COUNT
        return None if ok else f"expected a number from {least} to {MAX_COUNT:,}, got {value!r}"
    if kind == "object":
        return None if isinstance(value, dict) else f"expected a JSON object, got {value!r}"[:200]
    if kind == "objects":
        ok = isinstance(value, list) and all(isinstance(x, dict) for x in value)
        return None if ok else f"expected a list of JSON objects, got {value!r}"[:200]
    if kind == "rid":
        return None if isinstance(value, str) or _is_int(value) else f"expected a string or integer, got {value!r}"
    if kind in ("int", "int?"):
        if value is None and kind == "int?":
            return None
        if not _is_int(value) or not least <= value <= MAX_COUNT:
            return f"expected an integer from {least} to {MAX_COUNT:,}, got {value!r}"
        return None
    if not isinstance(value, list):
        return f"expected a list of token ids{' and [first, count] runs' if kind == 'tokens' else ''}"
    total = 0
    for item in value:
        if _is_int(item) and abs(item) < MAX_ID:
            total += 1
        elif (kind == "tokens" and isinstance(item, list) and len(item) == 2 and all(_is_int(x) for x in item)
              and abs(item[0]) < MAX_ID and 0 <= item[1] <= MAX_COUNT):  # fmt: skip
            total += item[1]
        else:
            return f"expected token ids (integers below 2^63){' or [first, count] runs' if kind == 'tokens' else ''}" \
                   f", got {item!r}"[:200]
        if total > MAX_COUNT:
            return f"over {MAX_COUNT:,} tokens in one call"
    return None

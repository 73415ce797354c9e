"""The input-structure rules every reader of a user's file goes through, whatever its format.

One place says what may be read as an input at all (a regular file, or a folder where one is expected: never a
pipe, a device or a socket, which could hang the reader or never end), how big a file may be before it is read,
how long one line of a JSON-lines file may be, how deep a document may nest, how far YAML aliases may expand, and
which numbers any input may hold, a trace's nested ones included. Each rule is checked before the content is used,
and each failure is an :class:`~sim.base.errors.InputError` of one line that names the file (and line) it came
from, so no reader needs its own copy of these checks.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import yaml

from sim.base.errors import InputError, os_error_text

__all__ = [
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_LINE_BYTES",
    "MAX_MAGNITUDE",
    "MAX_SIMULATED_S",
    "MAX_YAML_NODES",
    "MIN_MAGNITUDE",
    "TRACE_ID_FIELDS",
    "check_input",
    "check_trace_record",
    "check_unchanged",
    "dump_yaml",
    "file_stamp",
    "input_problem",
    "iter_lines",
    "json_objects",
    "json_records",
    "number_problem",
    "num_text",
    "numbers_problem",
    "open_input",
    "parse_json",
    "pipe_or_device",
    "parse_yaml",
    "read_number",
    "read_text",
]

MAX_FILE_BYTES = 64 << 20  # a file read whole (scenario, config.json, cost table, bench results, call stream)
MAX_LINE_BYTES = 64 << 20  # one JSON-lines record (a 4M-token token-id record is ~30 MB)
MAX_DEPTH = 64  # nesting of a YAML document (no scenario nests more than 5 deep)
MAX_YAML_NODES = 100_000  # YAML nodes once aliases are expanded (the largest shipped scenario: ~200)
# The numbers any input may hold: finite, at most MAX_MAGNITUDE in size, and 0 or at least MIN_MAGNITUDE.
# Wide enough for every real quantity in its unit here (FLOPs per token of a 5T-parameter model: 1e13; a rate
# of one request per 12 days: 1e-6), narrow enough that products and quotients of a few stay finite.
MAX_MAGNITUDE = 1e15
MIN_MAGNITUDE = 1e-6
MAX_REQUEST_TOKENS = 1 << 22  # input + output of one request (4x DeepSeek V4's 1M context)
MAX_WORKLOAD_PAGES = 50_000_000  # page keys a workload holds at once (the worst case; sim.scenario.schema.section)
MAX_SIMULATED_S = 1e10  # ~300 years: arrival times and the expected length of a run


def num_text(value: int | float) -> str:
    """A number as a message shows it; huge integers by their size (str() refuses over 4,300 digits)."""
    if isinstance(value, int) and abs(value) >= 10**15:
        digits = value.bit_length() * 0.30103
        return f"{'-' if value < 0 else ''}~1e{digits:.0f}"
    return f"{value:g}" if isinstance(value, float) else str(value)


def number_problem(value: Any, *, floor: bool = True) -> str | None:
    """What is wrong with ``value`` as a number of any input (None if nothing, or if it is no number).
    ``floor=False`` lifts the lower bound, for measured times that are rightly below a microsecond."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number, got {value!r}"
    if abs(value) > MAX_MAGNITUDE:
        return f"{num_text(value)} is out of range (any number here is at most {MAX_MAGNITUDE:g} in size)"
    if floor and value and abs(value) < MIN_MAGNITUDE:
        return f"{num_text(value)} is out of range (any non-zero number here is at least {MIN_MAGNITUDE:g} in size)"
    return None


def numbers_problem(value: Any, path: str = "", *, floor: bool = True, skip: frozenset[str] = frozenset(),
                    brackets: bool = False) -> tuple[str, str] | None:  # fmt: skip
    """(dotted path, problem) of the first number in a decoded document that :func:`number_problem` refuses,
    at any depth; ``skip``: keys, at any depth, whose values are not quantities (see ``TRACE_ID_FIELDS``).
    A list item's index is ``.0`` as a ``--set`` key spells it, or with ``brackets`` ``[0]`` as trace and cost
    table messages do (``requests[1].duration_ms``)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if key in skip:
                continue
            found = numbers_problem(item, f"{path}.{key}" if path else str(key), floor=floor, skip=skip,
                                    brackets=brackets)  # fmt: skip
            if found:
                return found
        return None
    if isinstance(value, list | tuple):
        for i, item in enumerate(value):
            at = f"{path}[{i}]" if brackets else f"{path}.{i}" if path else str(i)
            found = numbers_problem(item, at, floor=floor, skip=skip, brackets=brackets)
            if found:
                return found
        return None
    problem = number_problem(value, floor=floor)
    return (path, problem) if problem else None


_GROUPED = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")  # 3,276,800: thousands groups, as a person writes them
_JSON_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?")


def read_number(text: str, *, whole: bool = False) -> int | float:
    """A number a text input (a log line, a header) writes, read by the grammar a trace's JSON numbers are
    (``3.2768e6`` is 3,276,800), thousands groups allowed (``3,276,800``), and held to :func:`number_problem`;
    ``whole``: a count, so ``3276800.5`` is refused rather than truncated. ValueError says what is wrong."""
    plain = text.replace(",", "") if _GROUPED.fullmatch(text) else text
    if not _JSON_NUMBER.fullmatch(plain):
        raise ValueError(f"{text[:40]!r} is not a number")
    if len(plain) > 40:  # a 400-digit count: out of the number rule's range, refused before Python converts it
        raise ValueError(f"{text[:20]}... is out of range (any number here is at most {MAX_MAGNITUDE:g} in size)")
    value: int | float = int(plain) if plain.lstrip("-").isdigit() else float(plain)
    if (problem := number_problem(value)) is not None:
        raise ValueError(f"{text}: {problem}")
    if whole:
        if value != int(value):
            raise ValueError(f"{text} is not a whole number (a count)")
        value = int(value)
    return value


# Trace fields that name things or read a clock, not quantities, so the number rule does not hold them: ids
# (block hashes may be 64-bit; token ids), and arrival_time_ns, an epoch in ns that is bounded in seconds
# once converted. Every other number of a trace record, at any depth, is held to it (no floor: times may be
# below a microsecond).
TRACE_ID_FIELDS = frozenset({"id", "hash_ids", "input_ids", "input_tok_ids", "output_tok_ids", "chat_id",
                             "parent_chat_id", "arrival_time_ns"})  # fmt: skip


def check_trace_record(rec: Any, source: str, line: int | None = None) -> None:
    """The number rule on every number of a trace record, nested ones included (a subagent's calls)."""
    if _flat_and_in_range(rec):
        return
    if (found := numbers_problem(rec, floor=False, skip=TRACE_ID_FIELDS, brackets=True)) is not None:
        raise InputError(f"{found[0]}: {found[1]}", source=source, line=line)


def _flat_and_in_range(rec: Any) -> bool:
    """Whether a record holds no nested value and every number it holds (ids aside) is within the number
    rule's bounds: most trace lines, passed without :func:`numbers_problem`'s walk. A float NaN or infinity
    fails the comparison, so it is left to the walk, which names it."""
    if type(rec) is not dict:
        return False
    for key, value in rec.items():
        kind = type(value)
        if kind is int or kind is float:
            if not -MAX_MAGNITUDE <= value <= MAX_MAGNITUDE and key not in TRACE_ID_FIELDS:
                return False
        elif (kind is list or kind is dict) and key not in TRACE_ID_FIELDS:
            return False
    return True


# ---------------------------------------------------------------------------------------------- reading


_NOT_FILES = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
              (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def input_problem(path: str | Path, *, folder: bool = False) -> str | None:
    """What keeps ``path`` from being read as an input, found without opening it (None if nothing): only a
    regular file is, or a folder where ``folder`` says one is expected. Opening a pipe waits for a writer
    forever, a device never ends (``/dev/zero``), and either gives its bytes once to a reader that reads twice."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return f"a symbolic link to {os.readlink(path)}, which does not exist" if os.path.islink(path) else "no such file"
    except OSError as exc:  # a name too long, a loop of links, a file in the path
        return os_error_text(exc)
    except ValueError:  # a NUL in the name
        return "not a valid file name"
    if stat.S_ISREG(mode) or (folder and stat.S_ISDIR(mode)):
        return None
    if stat.S_ISDIR(mode):
        return "a folder, not a file"
    kind = next((name for test, name in _NOT_FILES if test(mode)), "a special file")
    return f"{kind}, not a regular file"


def check_input(path: str | Path, what: str, *, folder: bool = False, source: str | None = None) -> Path:
    """``path``, if :func:`input_problem` finds nothing; else one line naming it (``what``: the kind of input)."""
    if (problem := input_problem(path, folder=folder)) is not None:
        raise InputError(f"cannot read {what}: {problem}", source=source or str(path))
    return Path(path)


def open_input(path: str | Path, what: str, *, source: str | None = None) -> IO[bytes]:
    """``path`` opened for reading in binary, once :func:`check_input` has found it a regular file."""
    check_input(path, what, source=source)
    try:
        return open(path, "rb")
    except OSError as exc:
        raise InputError(f"cannot read {what}: {os_error_text(exc)}", source=source or str(path)) from None


def read_text(path: str | Path, what: str, *, source: str | None = None, gzipped: bool = False) -> str:
    """The whole of a UTF-8 text file, refused before it is read in full when over ``MAX_FILE_BYTES``
    (a wrong file named by mistake costs one line, not the machine's memory). With ``gzipped``, a file that
    starts as gzip does is read decompressed, under the same bound on what it decompresses to."""
    source = source or str(path)
    with open_input(path, what, source=source) as fh:
        raw = fh.read(MAX_FILE_BYTES + 1)
        if gzipped and raw[:2] == _GZIP_MAGIC:
            raw = _gunzipped(raw, what, source)
    if len(raw) > MAX_FILE_BYTES:
        raise InputError(f"larger than {MAX_FILE_BYTES >> 20} MiB; not a {what}?", source=source)
    return _decoded(raw, what, source)


_GZIP_MAGIC = b"\x1f\x8b"


def _gunzipped(raw: bytes, what: str, source: str) -> bytes:
    """``raw`` decompressed, at most ``MAX_FILE_BYTES + 1`` bytes of it (a larger one is refused by the caller)."""
    import gzip
    import io
    import zlib

    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as fh:
            return fh.read(MAX_FILE_BYTES + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise InputError(f"a damaged gzip file ({exc}), not a {what}", source=source) from None


def _decoded(raw: bytes, what: str, source: str, line: int | None = None) -> str:
    """``raw`` as UTF-8 text; its first fault named: a NUL byte (a binary file) or a byte UTF-8 refuses."""
    nul = raw.find(b"\0")
    try:
        text = raw.decode("utf-8")
        bad = len(raw)
    except UnicodeDecodeError as exc:
        text, bad = "", exc.start
    if 0 <= nul < bad:
        raise InputError(f"a binary file (a NUL byte at {nul}), not a {what}", source=source, line=line)
    if bad < len(raw):
        raise InputError(f"not a UTF-8 text file (byte {bad})", source=source, line=line)
    return text


def iter_lines(path: str | Path, what: str, *, offset: int = 0, lineno: int = 0,
               kind: str = "JSON-lines") -> Iterator[tuple[int, int, str]]:  # fmt: skip
    """(line number, byte offset, text) of each non-blank line, each decoded as UTF-8 and at most
    ``MAX_LINE_BYTES``; from ``offset``, the start of line ``lineno + 1``, so a reader can come back to a line.
    The file is streamed, so its size is not bounded (a long-running server's log); ``kind``: the format the
    messages name."""
    with open_input(path, what) as fh:
        if offset:
            fh.seek(offset)
        while raw := fh.readline(MAX_LINE_BYTES + 1):
            lineno += 1
            if len(raw) > MAX_LINE_BYTES:
                raise InputError(f"line longer than {MAX_LINE_BYTES >> 20} MiB; not a {kind} {what}?", source=str(path),
                                 line=lineno)  # fmt: skip
            line = _decoded(raw, f"{kind} {what}", str(path), lineno)
            if line.strip():
                yield lineno, offset, line
            offset += len(raw)


def count_lines(path: str | Path, what: str) -> int:
    """Lines of a text file (a last one without its newline counted), read in 1 MiB blocks, unparsed:
    a second or so for a gigabyte."""
    lines, last = 0, b"\n"
    with open_input(path, what) as fh:
        while block := fh.read(1 << 20):
            lines += block.count(b"\n")
            last = block[-1:]
    return lines + (last != b"\n")


def file_stamp(path: str | Path) -> tuple | None:
    """What tells a file read again from the one read before (its size and modification time; a folder's, its
    ``.json`` files'); None if it cannot be read."""
    p = Path(path)
    try:
        if p.is_dir():
            return tuple((f.name, file_stamp(f)) for f in sorted(p.iterdir()) if f.suffix == ".json")
        st = p.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def pipe_or_device(path: str | Path) -> bool:
    """Whether ``path`` names something other than a file or a folder (a pipe, a device, a socket), which an
    output renamed into place would replace."""
    p = Path(path)
    return p.exists() and not p.is_file() and not p.is_dir()


def check_unchanged(path: str | Path, stamp: tuple | None, why: str) -> None:
    """Refuse an input read again (``why``) that is not the one read before: a run never mixes two versions."""
    if file_stamp(path) != stamp:
        raise InputError(f"changed during the run ({why})", source=str(path))


# ------------------------------------------------------------------------------------------------ JSON


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows (values must be finite)")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text} is too large for a number (values must be finite)")
    return value


def json_records(path: str | Path, *, offset: int = 0, lineno: int = 0) -> Iterator[tuple[int, int, dict]]:
    """(line number, byte offset, object) of each record of a JSON-lines trace, from ``offset`` (see
    :func:`iter_lines`); a record that is not an object is refused."""
    for n, at, line in iter_lines(path, "trace", offset=offset, lineno=lineno):
        rec = parse_json(line, str(path), line=n)
        if not isinstance(rec, dict):
            raise InputError("expected a JSON object", source=str(path), line=n)
        check_trace_record(rec, str(path), n)
        yield n, at, rec


def json_objects(path: str | Path) -> Iterator[tuple[int, dict]]:
    """(line number, object) of each record of a JSON-lines trace."""
    return ((n, rec) for n, _, rec in json_records(path))


# One decoder for every document: ``json.loads`` with hooks builds a new one per call, a fifth of a trace line's
# parse (the BOM check below is the one thing ``json.loads`` adds to ``decode``).
_DECODER = json.JSONDecoder(parse_constant=_no_constant, parse_float=_finite)


_NOT_FINITE = re.compile(r'(?:"((?:[^"\\]|\\.)*)"\s*:\s*)?(-?Infinity|NaN|-?\d+(?:\.\d+)?[eE][-+]?\d{3,}|-?\d{4300,})')


def _where_not_finite(text: str) -> tuple[str, int | None]:
    """("key: ", line) of the first value strict JSON refuses as a number (NaN, Infinity, 1e999, a 4,300-digit
    integer), so its message names the field; ("", None) where none is found."""
    for m in _NOT_FINITE.finditer(text):
        token = m.group(2)
        if token.lstrip("-").isdigit() or not token[-1].isdigit() or not math.isfinite(float(token)):
            return (f"{m.group(1)}: " if m.group(1) else ""), text.count("\n", 0, m.start(2)) + 1
    return "", None


def parse_json(text: str, source: str, *, line: int | None = None, what: str = "JSON") -> Any:
    """Strict JSON: no NaN or Infinity, no number that overflows a float, bounded nesting."""
    try:
        if text.startswith("\ufeff"):
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        return _DECODER.decode(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed {what}: {exc.msg}", source=source,
                         line=line if line is not None else exc.lineno) from None  # fmt: skip
    except RecursionError:
        raise InputError(f"{what} nested too deeply", source=source, line=line) from None
    except ValueError as exc:  # a constant, an overflowing float, an integer of over 4,300 digits
        problem = str(exc) if "digits" not in str(exc) else "an integer of over 4,300 digits"
        key, at = _where_not_finite(text)
        raise InputError(f"{key}{problem.splitlines()[0]}", source=source,
                         line=line if line is not None else at) from None  # fmt: skip


# ------------------------------------------------------------------------------------------------ YAML


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads ``1e9`` as a float (YAML 1.1 wants ``1.0e+9``) and rejects duplicate keys;
    merge keys (``<<: *base``) are kept, and a key they bring may be overridden."""


_YAML_FLOAT = re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$")
_Loader.add_implicit_resolver("tag:yaml.org,2002:float", _YAML_FLOAT, list("-+0123456789"))
_MERGE_TAG = "tag:yaml.org,2002:merge"


class _Dumper(yaml.SafeDumper):
    """SafeDumper that quotes what :class:`_Loader` would read as another type (the string ``1e9``)."""


_Dumper.add_implicit_resolver("tag:yaml.org,2002:float", _YAML_FLOAT, list("-+0123456789"))


def dump_yaml(doc: Any) -> str:
    """``doc`` as block YAML, in its own order, that :func:`parse_yaml` reads back as ``doc``."""
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, default_flow_style=False)


def _construct_mapping(loader: _Loader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        if key_node.tag == _MERGE_TAG:
            continue
        key = loader.construct_object(key_node, deep=deep)
        try:
            duplicate = key in seen
            seen.add(key)
        except TypeError:
            raise yaml.constructor.ConstructorError(None, None, "a mapping key must be a plain value",
                                                    key_node.start_mark) from None  # fmt: skip
        if duplicate:
            raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _check_shape(root: yaml.Node, source: str) -> None:
    """Refuse a document deeper than ``MAX_DEPTH``, recursive, or over ``MAX_YAML_NODES`` nodes once its
    aliases are expanded (an alias bomb), before anything is built from it. Sizes are memoised per node,
    so the check is linear in the text however far the aliases would expand."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node, depth: int) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if depth > MAX_DEPTH:
            raise InputError(f"malformed YAML: nested deeper than {MAX_DEPTH} levels", source=source,
                             line=node.start_mark.line + 1)  # fmt: skip
        if key in open_nodes:
            raise InputError("malformed YAML: an alias refers to a node that holds it", source=source,
                             line=node.start_mark.line + 1)  # fmt: skip
        total = 1
        if isinstance(node, yaml.MappingNode | yaml.SequenceNode):
            open_nodes.add(key)
            children = [n for pair in node.value for n in pair] if isinstance(node, yaml.MappingNode) else node.value
            for child in children:
                total += size(child, depth + 1)
                if total > MAX_YAML_NODES:
                    raise InputError(f"malformed YAML: over {MAX_YAML_NODES:,} values once its aliases are "
                                     "expanded (an alias bomb?)", source=source)  # fmt: skip
            open_nodes.discard(key)
        sizes[key] = total
        return total

    size(root, 0)


def yaml_problem(exc: yaml.YAMLError) -> tuple[str, int | None]:
    """(one-line description, 1-based line or None) of a YAML error; PyYAML's own text spans lines."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or " ".join(str(exc).split())
    return " ".join(problem.split()), mark.line + 1 if mark else None


def parse_yaml(text: str, source: str) -> Any:
    """A YAML document under the rules above; every failure is one line naming ``source`` (and the line)."""
    loader = None
    try:
        loader = _Loader(text)  # its reader refuses control characters at once
        node = loader.get_single_node()
        if node is None:
            return None
        _check_shape(node, source)
        return loader.construct_document(node)
    except InputError:
        raise
    except yaml.YAMLError as exc:
        problem, line = yaml_problem(exc)
        raise InputError(f"malformed YAML: {problem}", source=source, line=line) from None
    except RecursionError:
        raise InputError(f"malformed YAML: nested deeper than {MAX_DEPTH} levels", source=source) from None
    except ValueError:  # Python refuses to read an integer of over 4,300 digits
        raise InputError("malformed YAML: an integer of over 4,300 digits", source=source) from None
    finally:
        if loader is not None:
            loader.dispose()

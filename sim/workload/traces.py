"""Request traces: Mooncake-format and token-id traces, and the dispatch to the agentic formats.

Traces are read a record at a time (``iter_*``), so a replay holds the requests in flight, not the trace;
``read_*`` gives the list, for the offline tools that walk a trace more than once.

Every request carries its input as *page keys* (see :mod:`sim.cache.radix`), so the tree never hashes token
lists on the hot path.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from pathlib import Path

from sim.base.errors import InputError
from sim.base.inputs import (
    MAX_REQUEST_TOKENS,
    MAX_SIMULATED_S,
    check_input,
    count_lines,
    json_objects,
    num_text,
)
from sim.workload import trajectory
from sim.workload.pagekeys import check_nesting
from sim.workload.request import Request
from sim.workload.stream import TraceRequests

__all__ = ["detect_format", "iter_mooncake", "iter_token_trace", "iter_trace", "read_mooncake", "read_token_trace",
           "read_trace", "token_page_keys", "trace_requests"]

_INT = {int}  # the type of every hash id of a good line (JSON gives int, never a subclass but bool)


def _block_keys(hash_ids: list[int], block: int, page: int, n_tokens: int) -> list:
    """Whole ``page``-token keys covering the first ``n_tokens`` tokens of a block-hashed input (the reader
    checked that the sizes nest: :func:`check_nesting`)."""
    n_pages = n_tokens // page
    if page == block:
        return hash_ids[:n_pages]
    if block % page == 0:
        per = block // page
        return [(hash_ids[i // per], i % per) for i in range(n_pages)]
    per = page // block
    return [tuple(hash_ids[i * per : (i + 1) * per]) for i in range(n_pages)]


def read_mooncake(path: str | Path, **kwargs) -> list[Request]:
    """:func:`iter_mooncake`'s requests, read now."""
    return list(iter_mooncake(path, **kwargs))


def iter_mooncake(path: str | Path, *, block_size: int = 512, page_size: int | None = None,
                  time_scale: float = 1.0, max_requests: int | None = None,
                  whole_blocks: bool = False) -> Iterator[Request]:  # fmt: skip
    """Read a Mooncake FAST'25 trace, a record at a time: one JSON object per line with ``timestamp`` (ms),
    ``input_length``, ``output_length`` and ``hash_ids`` (one id per ``block_size`` tokens).
    ``whole_blocks``: the partial last block counts as a whole one (the prompt is rounded up to blocks), as
    SGLang's policy simulator counts every hash id a page; SGLang's server never caches a partial page."""
    page = page_size or block_size
    if block_size <= 0 or page <= 0:
        raise InputError("block and page sizes must be > 0", source=str(path))
    check_nesting(block_size, page, f"workload.block_size {block_size} and hicache.page_size {page}", str(path))
    count, last = 0, 0.0
    for lineno, rec in json_objects(path):
        if max_requests is not None and count >= max_requests:
            break
        ts = _field(rec, "timestamp", (int, float), path, lineno)
        n_in = _field(rec, "input_length", int, path, lineno)
        n_out = _field(rec, "output_length", int, path, lineno)
        ids = _field(rec, "hash_ids", list, path, lineno)
        if ts < 0 or n_in <= 0 or n_out < 0:
            raise InputError("timestamp and output_length must be >= 0, input_length > 0", source=str(path), line=lineno)
        _check_length(n_in + n_out, path, lineno)
        bad = None if set(map(type, ids)) <= _INT else next(h for h in ids if type(h) is not int)
        if bad is not None:  # ids name blocks (hashes may be 64-bit): integers, not held to a quantity's bounds
            raise InputError(f"hash_ids: every id must be an integer, got {bad!r}", source=str(path), line=lineno)
        if len(ids) < math.ceil(n_in / block_size):
            raise InputError(f"hash_ids: need {math.ceil(n_in / block_size)} ids for {n_in} tokens"
                             f" at block size {block_size}, got {len(ids)}", source=str(path), line=lineno)  # fmt: skip
        arrival = _arrival(ts / 1000.0, time_scale, "timestamp", path, lineno)
        _check_order(count, last, arrival, path, lineno)
        if whole_blocks:
            n_in = math.ceil(n_in / block_size) * block_size
        yield Request(count, arrival, n_in, n_out, _block_keys(ids, block_size, page, n_in))
        count, last = count + 1, arrival
    _check_nonempty(count, path)


def read_token_trace(path: str | Path, **kwargs) -> list[Request]:
    """:func:`iter_token_trace`'s requests, read now."""
    return list(iter_token_trace(path, **kwargs))


def iter_token_trace(path: str | Path, *, page_size: int, time_scale: float = 1.0,
                     max_requests: int | None = None) -> Iterator[Request]:  # fmt: skip
    """Read a token-id trace, a record at a time: JSON lines with ``input_tok_ids`` (or ``input_ids``), ``output_toks`` (or
    ``output_length``), and ``arrival_time_ns`` (or ``timestamp`` in ms). Output token ids
    (``output_tok_ids``), when present, are cached with the input at the end of the request."""
    count, last = 0, 0.0
    for lineno, rec in json_objects(path):
        if max_requests is not None and count >= max_requests:
            break
        ids_field = "input_tok_ids" if "input_tok_ids" in rec else "input_ids"
        ids = _field(rec, ids_field, list, path, lineno)
        if not ids or not all(isinstance(t, int) for t in ids):
            raise InputError(f"{ids_field}: expected a non-empty list of integer token ids", source=str(path), line=lineno)
        time_field = "arrival_time_ns" if "arrival_time_ns" in rec else "timestamp"
        t = _field(rec, time_field, (int, float), path, lineno) / (1e9 if time_field == "arrival_time_ns" else 1e3)
        out_ids = rec.get("output_tok_ids")
        if isinstance(out_ids, list) and not all(isinstance(o, int) for o in out_ids):
            raise InputError("output_tok_ids: expected a list of integer token ids", source=str(path), line=lineno)
        n_out = len(out_ids) if isinstance(out_ids, list) else _field(
            rec, "output_toks" if "output_toks" in rec else "output_length", int, path, lineno)  # fmt: skip
        if t < 0 or n_out < 0:
            raise InputError("arrival time and output length must be >= 0", source=str(path), line=lineno)
        _check_length(len(ids) + n_out, path, lineno)
        keys = token_page_keys(ids, page_size)
        final = token_page_keys(ids + out_ids, page_size) if isinstance(out_ids, list) else None
        arrival = _arrival(t, time_scale, time_field, path, lineno)
        _check_order(count, last, arrival, path, lineno)
        yield Request(count, arrival, len(ids), n_out, keys, final)
        count, last = count + 1, arrival
    _check_nonempty(count, path)


def read_trace(path: str | Path, **kwargs) -> list[Request]:
    """:func:`iter_trace`'s requests, read now."""
    return list(iter_trace(path, **kwargs))


def trace_requests(path: str | Path, **kwargs) -> TraceRequests:
    """A trace as a stream: read again at every pass (:func:`iter_trace`'s arguments)."""
    check_input(path, "trace", folder=True)
    return TraceRequests(lambda: iter_trace(path, **kwargs), path, lambda: _most_records(path, **kwargs))


def _most_records(path: str | Path, *, fmt: str = "auto", max_requests: int | None = None, **_) -> int | None:
    """The requests a JSON-lines trace holds at most (a line each, to ``max_requests``), counted without
    parsing; None for a Weka trace (a trajectory holds many calls)."""
    if (detect_format(path) if fmt == "auto" else fmt) == "weka":
        return None
    lines = count_lines(path, "trace")
    return lines if max_requests is None else min(lines, max_requests)


def iter_trace(path: str | Path, *, fmt: str = "auto", block_size: int | None = None, page_size: int | None = None,
               time_scale: float = 1.0, max_requests: int | None = None,
               whole_blocks: bool = False) -> Iterator[Request]:  # fmt: skip
    """Read a trace of any format; ``auto`` looks at the first record's fields. ``block_size`` None: the
    format's own (Mooncake 512, Bailian 16; Weka files carry theirs); ``whole_blocks``: see
    :func:`iter_mooncake`. A Weka file's trajectories are read whole (their calls replay in time order)."""
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt == "mooncake":
        return iter_mooncake(path, block_size=block_size or 512, page_size=page_size, time_scale=time_scale,
                             max_requests=max_requests, whole_blocks=whole_blocks)  # fmt: skip
    if fmt == "tokens":
        return iter_token_trace(path, page_size=page_size or 1, time_scale=time_scale, max_requests=max_requests)
    if fmt in ("bailian", "weka"):
        page = page_size or block_size or 256
        if fmt == "bailian":
            return trajectory.iter_bailian(path, page_size=page, block_size=block_size or 16, time_scale=time_scale,
                                           max_requests=max_requests)  # fmt: skip
        calls = trajectory.iter_trajectory_requests(trajectory.read_weka(path, page_size=page), time_scale)
        return itertools.islice(calls, max_requests)
    raise InputError(f"unknown trace format {fmt!r} (known: auto, mooncake, tokens, bailian, weka)")


def detect_format(path: str | Path) -> str:
    """``weka`` for a folder or ``.json`` file or a record with ``requests``; ``bailian`` for one with
    ``chat_id``; ``mooncake`` for one with ``hash_ids``; else ``tokens``."""
    check_input(path, "trace", folder=True)
    if Path(path).is_dir() or Path(path).suffix == ".json":
        return "weka"
    first = next(json_objects(path), None)
    if first is None:
        raise InputError("the trace holds no requests", source=str(path))
    rec = first[1]
    return "weka" if "requests" in rec else "bailian" if "chat_id" in rec else "mooncake" if "hash_ids" in rec else "tokens"


def token_page_keys(ids: list[int], page: int) -> list[int]:
    """Chained keys of the whole pages of ``ids``: each names its page and everything before it, as
    SGLang's chained page hashes do, so equal keys mean equal prefixes (what L3 content addressing needs).
    Python hashes tuples of ints the same in every process."""
    keys, prev = [], 0
    for i in range(0, len(ids) // page * page, page):
        prev = hash((prev, tuple(ids[i : i + page])))
        keys.append(prev)
    return keys


def _field(rec: dict, name: str, kind, path, lineno: int):
    """A record's field of type ``kind``; an integer fits 64 bits (times are bounded as arrivals)."""
    if name not in rec:
        raise InputError(f"missing field {name!r}", source=str(path), line=lineno)
    value = rec[name]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise InputError(f"{name}: unexpected value {_short(value)}", source=str(path), line=lineno)
    if isinstance(value, int) and abs(value) >= 1 << 63:
        raise InputError(f"{name}: {num_text(value)} is out of range", source=str(path), line=lineno)
    return value


def _short(value) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _arrival(seconds: float, time_scale: float, name: str, path, lineno: int) -> float:
    """The scaled arrival time, within the longest simulated time a run may span."""
    arrival = seconds * time_scale
    if not arrival <= MAX_SIMULATED_S:
        raise InputError(f"{name}: arrives at {arrival:.3g} s (x time_scale {time_scale:g}), over the limit of "
                         f"{MAX_SIMULATED_S:g} s of simulated time", source=str(path), line=lineno)  # fmt: skip
    return arrival


def _check_length(tokens: int, path, lineno: int) -> None:
    if tokens > MAX_REQUEST_TOKENS:
        raise InputError(f"input + output of {tokens:,} tokens, over the limit of {MAX_REQUEST_TOKENS:,} per request",
                         source=str(path), line=lineno)  # fmt: skip


def _check_order(count: int, last: float, arrival: float, path, lineno: int) -> None:
    if count and arrival < last:
        raise InputError("timestamps go backwards (a trace is in arrival order)", source=str(path), line=lineno)


def _check_nonempty(count: int, path) -> None:
    if not count:
        raise InputError("the trace holds no requests", source=str(path))

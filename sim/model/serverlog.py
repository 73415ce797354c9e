"""What an SGLang 0.5.23 server printed at start: its pools' capacities, read from the log.

The server sizes its pools from the memory it finds after loading the weights; the simulator can only derive
that. Its startup log states the result, and these are the lines read here (``srt/`` paths, each a format string
of SGLang's own):

- the scheduler's summary, ``max_total_num_tokens=..., chunked_prefill_size=..., max_prefill_tokens=...,
  max_running_requests=..., context_len=..., available_gpu_mem=... GB`` (``managers/scheduler.py:1268-1276``);
- DeepSeek V4's pool sizes, ``DSV4 pool sizes: full=..., swa=..., c4=..., c128=..., c4_state=..., c128_state=...``
  (``model_executor/pool_configurator.py:1605-1611``), and its memory line ``DSV4 memory calculation:
  unified=..., unified_fp8=..., ...`` (``pool_configurator.py:1689-1700``), which says whether ROCm's unified
  KV layout is on;
- a hybrid sliding-window model's pools, ``Use sliding window memory pool. full_layer_tokens=...,
  swa_layer_tokens=...`` (``pool_configurator.py:888-891``);
- a device KV pool, ``KV Cache is allocated. dtype: ..., #tokens: ..., KV size: ... GB``
  (``mem_cache/memory_pool.py:2087-2098``);
- each DeepSeek V4 host pool, ``Allocating X GB host memory for V4 paged pool 'NAME' (layers=..., pages=...,
  item_bytes=..., layout=...).`` and the state pools' twin (``mem_cache/memory_pool_host.py:341-350, 864-873``);
- a single host KV pool, ``Allocating LABEL hierarchical KV host pool: N tokens, X GB host memory.``
  (``mem_cache/pool_host/base.py:261-278``; N includes the padding page, ``base.py:226-229``);
- HiCache's auto-sizing, ``HiCache auto-sizing: ratio A -> B; ...`` (``mem_cache/hicache_auto_size.py:114-122``).

- the launch as the server resolved it, ``server_args={...}`` (``entrypoints/engine.py:311, 1185``), and the
  model's class, ``Load weight end. ... type=...`` (``model_executor/model_runner.py:1373``): what the launch it is
  given with must agree with (:func:`sim.interop.fromlog.check_launch`).

Every line carries the logger's prefix (``[DATE TIME DP0 TP0] ``, ``utils/common.py:2630``,
``managers/scheduler.py:6279-6291``), found wherever the line holds it: behind what journald, ``docker logs -t``
or ``kubectl logs --prefix`` put in front, and through ANSI colours. The file is streamed, whatever its size.

The log is checked against itself before anything is taken from it: each rank prints each line once per start,
so a line a rank prints twice is a second startup in one file; ranks of one server size alike, so a value two
ranks print differently is refused; the summary's pool is at most DeepSeek V4's ``full`` (the post-capture resize
only shrinks it, ``kv_pool_runtime.py:58-150``); a host pool's GB is its layers x pages x bytes
(``memory_pool_host.py:289, 814``), and a single host KV pool's against its tokens, by the model's bytes a token
(:func:`sim.interop.fromlog.check_host_kv_bytes`, where the model is known); no pool the server allocates is
empty. Numbers are read by one rule
(:func:`sim.base.inputs.read_number`): a count is whole, and in range.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from sim.base.errors import InputError
from sim.base.inputs import iter_lines, read_number

__all__ = ["HostPoolLine", "ServerLog", "parse_server_log", "read_server_log"]


@dataclass(frozen=True)
class HostPoolLine:
    """One host pool as the server allocated it: pages (tokens for a single KV pool), layers and bytes."""

    name: str
    pages: int
    layers: int
    item_bytes: int  # per layer per page
    gb: float  # as logged (1e9 B)
    state: bool = False  # a V4 state pool (SWA-anchored)
    line: int = 0


@dataclass
class ServerLog:
    """The capacities one log states, each with the line it came from (``lines``), and what it says of the
    launch: the model's class, whether its pools are DeepSeek V4's, the ranks its prefixes show, the launch
    as ``server_args`` resolved it, and the first line that allocates host memory (HiCache on)."""

    source: str
    values: dict[str, float] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    host_pools: dict[str, HostPoolLine] = field(default_factory=dict)
    host_kv_tokens: int | None = None  # a single host KV pool's tokens, padding page included
    unified_kv: bool | None = None  # ROCm's unified KV layout (DSV4 memory calculation)
    unified_kv_fp8: bool | None = None
    architecture: str | None = None  # Load weight end ... type=
    v4_line: int | None = None  # the first DSV4 line: DeepSeek V4's pools
    plain_line: int | None = None  # the first line only a non-V4 server prints (a single KV pool, SWA layers)
    host_line: int | None = None  # the first line allocating host pools: HiCache was on
    ranks: dict[str, tuple[int, int]] = field(default_factory=dict)  # "TP": (highest rank shown, its line)
    prefixed: int | None = None  # the first line carrying the logger's prefix
    server_args: dict[str, str] = field(default_factory=dict)
    _seen: dict[tuple[str, str], int] = field(default_factory=dict, repr=False)  # (what, rank) -> line

    def get(self, key: str) -> int | None:
        value = self.values.get(key)
        return None if value is None else int(value)

    def where(self, key: str) -> str:
        return f"{self.source}:{self.lines[key]}"


_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")
# The logger's "[DATE TIME(.ms) DP0 TP0] " (utils/common.py:2630-2631, scheduler.py:6279-6291), anywhere in a line.
_PREFIX = re.compile(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?((?: [A-Z_]+\d+)*)\] ?")
_NUM = r"([^\s,()]+(?:,\d{3})*)"  # a number as written, thousands groups included: read_number judges it
_PAIRS = re.compile(r"([A-Za-z_][\w+]*)=" + _NUM)
_V4_HOST = re.compile(rf"Allocating {_NUM} GB host memory for V4 (paged|state) pool '([\w.-]+)' \(layers={_NUM}, "
                      rf"pages={_NUM}, (?:item_bytes|state_page_bytes)={_NUM}, layout=\w+\)")  # fmt: skip
_KV_HOST = re.compile(rf"Allocating (.+?) hierarchical KV host pool: {_NUM} tokens, {_NUM} GB host memory"
                      rf"(?:, packed MTP KV layers: target_layers={_NUM}, draft_layers={_NUM}, total_layers="
                      r"([^\s,()]+?)\.?(?:\s|$))?")  # the sentence's full stop is not the number's
_KV_DEVICE = re.compile(rf"KV Cache (?:is allocated|VA upper bound)\. dtype: [\w.]+, #tokens: {_NUM}")
_AUTO = re.compile(rf"HiCache auto-sizing: ratio {_NUM} -> {_NUM};")
_BOOL = re.compile(r"\b(unified|unified_fp8)=(True|False)\b")
_TYPE = re.compile(r"^Load weight end\..*\btype=(\w+)")
_ARGS = re.compile(r"'(tp_size|dp_size|page_size|enable_hierarchical_cache|model_path)': ('[^']*'|[\w.-]+)")

# Scheduler summary keys (managers/scheduler.py:1268-1276), read as logged.
SCHEDULER_KEYS = ("max_total_num_tokens", "chunked_prefill_size", "max_prefill_tokens", "max_running_requests",
                  "context_len")  # fmt: skip
V4_POOLS = ("full", "swa", "c4", "c128", "c4_state", "c128_state")
_MEASURED = ("available_gpu_mem_gb",)  # each rank measures its own: not held to agree
_NONZERO = ("dsv4_full_tokens", "dsv4_swa_tokens", "max_total_num_tokens", "swa_layer_tokens", "full_layer_tokens")


def _number(log: ServerLog, n: int, key: str, text: str, *, whole: bool = True) -> int | float:
    try:
        return read_number(text, whole=whole)
    except ValueError as exc:
        raise InputError(f"{key}: {exc}", source=log.source, line=n) from None


def _once(log: ServerLog, what: str, rank: str, n: int) -> None:
    """A line each rank prints once a start, printed again by the same rank: a second startup in the file."""
    first = log._seen.setdefault((what, rank), n)
    if first != n:
        raise InputError(f"a second startup in one file: {what} again{f' from {rank}' if rank else ''} (first at "
                         f"line {first}); give the log of one start", source=log.source, line=n)  # fmt: skip


def _put(log: ServerLog, key: str, value: float, n: int, rank: str) -> None:
    """The first rank's value; another rank's must be the same (ranks of one server size alike)."""
    if key in _NONZERO and value <= 0:
        raise InputError(f"{key}={value:g}: a pool the server allocates is never empty", source=log.source, line=n)
    if key not in log.values:
        log.values[key], log.lines[key] = value, n
    elif log.values[key] != value and key not in _MEASURED:
        raise InputError(f"{key}={value:g}{f' from {rank}' if rank else ''} disagrees with {log.values[key]:g} at "
                         f"line {log.lines[key]}: the ranks of one server size alike; is this one server's "
                         "log?", source=log.source, line=n)  # fmt: skip


def _summary(log: ServerLog, line: str, n: int, rank: str) -> None:
    _once(log, "the scheduler's summary", rank, n)
    pairs = dict(_PAIRS.findall(line))
    for key in SCHEDULER_KEYS:
        if key in pairs:
            _put(log, key, _number(log, n, key, pairs[key]), n, rank)
    mem = re.search(rf"available_(?:gpu|cpu)_mem={_NUM} GB", line)
    if mem:
        _put(log, "available_gpu_mem_gb", _number(log, n, "available_gpu_mem", mem.group(1), whole=False), n, rank)


def _v4_sizes(log: ServerLog, line: str, n: int, rank: str) -> None:
    _once(log, "DSV4 pool sizes", rank, n)
    log.v4_line = log.v4_line or n
    pairs = dict(_PAIRS.findall(line))
    for key in V4_POOLS:
        if key in pairs:
            _put(log, f"dsv4_{key}_tokens", _number(log, n, key, pairs[key]), n, rank)


def _v4_memory(log: ServerLog, line: str, n: int, rank: str) -> None:
    log.v4_line = log.v4_line or n
    flags = dict(_BOOL.findall(line))
    if log.unified_kv is None and "unified" in flags:
        log.unified_kv = flags["unified"] == "True"
        log.unified_kv_fp8 = flags.get("unified_fp8") == "True"
        log.lines["unified_kv"] = n


def _sliding(log: ServerLog, line: str, n: int, rank: str) -> None:
    log.plain_line = log.plain_line or n
    pairs = dict(_PAIRS.findall(line))
    for key in ("full_layer_tokens", "swa_layer_tokens"):
        if key in pairs:
            _put(log, key, _number(log, n, key, pairs[key]), n, rank)


def _v4_host(log: ServerLog, m: re.Match, n: int, rank: str) -> None:
    gb_text, kind, name, *counts = m.groups()
    _once(log, f"host pool '{name}'", rank, n)
    gb = _number(log, n, f"host pool '{name}' GB", gb_text, whole=False)
    layers, pages, item = (_number(log, n, f"host pool '{name}' {k}", t)
                           for k, t in zip(("layers", "pages", "item_bytes"), counts, strict=True))  # fmt: skip
    if pages <= 0 or layers <= 0 or item <= 0:
        raise InputError(f"host pool '{name}' of {pages} pages: a pool the server allocates is never empty",
                         source=log.source, line=n)  # fmt: skip
    if abs(layers * pages * item / 1e9 - gb) > 0.0051:  # printed %.2f (memory_pool_host.py:342-350)
        raise InputError(f"host pool '{name}': {gb:g} GB logged, but layers x pages x bytes = "
                         f"{layers * pages * item / 1e9:.2f} GB (memory_pool_host.py:289); an edited line?",
                         source=log.source, line=n)  # fmt: skip
    log.host_line = log.host_line or n
    first = log.host_pools.setdefault(name, HostPoolLine(name, pages, layers, item, gb, kind == "state", n))
    if (first.pages, first.layers, first.item_bytes) != (pages, layers, item):
        raise InputError(f"host pool '{name}' of {pages:,} pages{f' from {rank}' if rank else ''} disagrees with "
                         f"line {first.line}: the ranks of one server size alike",
                         source=log.source, line=n)  # fmt: skip


def _kv_host(log: ServerLog, m: re.Match, n: int, rank: str) -> None:
    _once(log, "the host KV pool", rank, n)
    tokens = _number(log, n, "host KV pool tokens", m.group(2))
    gb = _number(log, n, "host KV pool GB", m.group(3), whole=False)
    if m.group(4) is not None:  # packed MTP draft layers, each a target layer's bytes (pool_host/base.py:259-272)
        target, draft, total = (_number(log, n, f"host KV pool {k}", t) for k, t in
                                zip(("target_layers", "draft_layers", "total_layers"), m.groups()[3:], strict=True))
        if target <= 0 or draft <= 0 or target + draft != total:
            raise InputError(f"host KV pool: target_layers={target} + draft_layers={draft} is not total_layers="
                             f"{total}", source=log.source, line=n)  # fmt: skip
        _put(log, "host_kv_layers", total, n, rank)
        _put(log, "host_kv_target_layers", target, n, rank)
    if tokens <= 0:
        raise InputError("a host KV pool of 0 tokens: a pool the server allocates is never empty (it holds at least "
                         "its padding page, pool_host/base.py:226-229)", source=log.source, line=n)  # fmt: skip
    log.plain_line = log.plain_line or n
    log.host_line = log.host_line or n
    _put(log, "host_kv_tokens", tokens, n, rank)
    _put(log, "host_kv_gb", gb, n, rank)
    log.host_kv_tokens = int(log.values["host_kv_tokens"])


def _kv_device(log: ServerLog, m: re.Match, n: int, rank: str) -> None:
    log.plain_line = log.plain_line or n
    _put(log, "kv_cache_tokens", _number(log, n, "#tokens", m.group(1)), n, rank)


def _auto(log: ServerLog, m: re.Match, n: int, rank: str) -> None:
    log.host_line = log.host_line or n
    _put(log, "hicache_auto_ratio", _number(log, n, "HiCache auto-sizing ratio", m.group(2), whole=False), n, rank)


def _weights(log: ServerLog, m: re.Match, n: int, rank: str) -> None:
    if log.architecture is None:
        log.architecture, log.lines["architecture"] = m.group(1), n


def _args(log: ServerLog, line: str, n: int, rank: str) -> None:
    if not log.server_args:
        log.server_args = {k: v.strip("'") for k, v in _ARGS.findall(line)}
        log.lines["server_args"] = n


_STARTS = (("max_total_num_tokens=", _summary), ("DSV4 pool sizes:", _v4_sizes), ("DSV4 memory calculation:", _v4_memory),
           ("Use sliding window memory pool.", _sliding), ("server_args=", _args))  # fmt: skip
_SEARCHES = ((_V4_HOST, _v4_host), (_KV_HOST, _kv_host), (_KV_DEVICE, _kv_device), (_AUTO, _auto),
             (_TYPE, _weights))  # fmt: skip


def _message(log: ServerLog, raw: str, n: int) -> tuple[str, str]:
    """(message, rank) of a raw line: colours dropped, what an operator's tool put in front of the logger's
    prefix dropped with it; the ranks it shows recorded."""
    text = _ANSI.sub("", raw).strip()
    m = _PREFIX.search(text)
    if m is None:
        return text, ""
    log.prefixed = log.prefixed or n
    rank = m.group(1).strip()
    for part in rank.split():
        kind, index = part.rstrip("0123456789"), int(part[len(part.rstrip("0123456789")):])
        if index >= log.ranks.get(kind, (-1, 0))[0] + 1:
            log.ranks[kind] = (index, n)
    return text[m.end():], rank


def _read_line(log: ServerLog, raw: str, n: int) -> None:
    line, rank = _message(log, raw, n)
    for start, handler in _STARTS:
        if line.startswith(start) and (start != "max_total_num_tokens=" or "context_len=" in line):
            handler(log, line, n, rank)
            return
    for pattern, handler in _SEARCHES:
        if (m := pattern.search(line)) is not None:
            handler(log, m, n, rank)
            return


def _finish(log: ServerLog) -> ServerLog:
    if "max_total_num_tokens" not in log.values:
        raise InputError("no SGLang startup summary (a line 'max_total_num_tokens=..., chunked_prefill_size=..., "
                         "context_len=...', managers/scheduler.py:1268-1276): is this the server's log?",
                         source=log.source)  # fmt: skip
    full, total = log.get("dsv4_full_tokens"), log.get("max_total_num_tokens")
    if full is not None and total > full:
        raise InputError(f"max_total_num_tokens={total} is more than DSV4 pool sizes' full={full} (line "
                         f"{log.lines['dsv4_full_tokens']}): the post-capture resize only shrinks the pool "
                         "(kv_pool_runtime.py:58-150)", source=log.source, line=log.lines["max_total_num_tokens"])  # fmt: skip
    return log


def parse_server_log(text: str, source: str = "server log") -> ServerLog:
    """The capacities ``text`` states; a log without the scheduler's summary line is refused (it is the line
    every SGLang server prints once its pools are built)."""
    log = ServerLog(source)
    for n, raw in enumerate(text.splitlines(), 1):
        _read_line(log, raw, n)
    return _finish(log)


def read_server_log(path: str | Path) -> ServerLog:
    """:func:`parse_server_log` of a file, streamed line by line (a long-running server's log may be gigabytes),
    named by its path in any error."""
    log = ServerLog(str(path))
    for n, _, raw in iter_lines(path, "server log", kind="text"):
        _read_line(log, raw, n)
    return _finish(log)

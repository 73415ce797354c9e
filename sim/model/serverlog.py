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

Every line carries the logger's prefix (``[DATE TIME DP0 TP0] ``, ``utils/common.py:2630``,
``managers/scheduler.py:6279-6291``); the first line of each kind is read (rank 0's, which every rank matches).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from sim.base.errors import InputError
from sim.base.inputs import read_text

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
    """The capacities one log states, each with the line it came from (``lines``)."""

    source: str
    values: dict[str, float] = field(default_factory=dict)
    lines: dict[str, int] = field(default_factory=dict)
    host_pools: dict[str, HostPoolLine] = field(default_factory=dict)
    host_kv_tokens: int | None = None  # a single host KV pool's tokens, padding page included
    unified_kv: bool | None = None  # ROCm's unified KV layout (DSV4 memory calculation)
    unified_kv_fp8: bool | None = None

    def get(self, key: str) -> int | None:
        value = self.values.get(key)
        return None if value is None else int(value)

    def where(self, key: str) -> str:
        return f"{self.source}:{self.lines[key]}"


_PREFIX = re.compile(r"^\[[^\]]*\]\s*")  # the logger's "[DATE TIME DP0 TP0] "
_PAIRS = re.compile(r"([A-Za-z_][\w+]*)=(-?\d+(?:\.\d+)?)")
_V4_HOST = re.compile(
    r"Allocating ([\d.]+) GB host memory for V4 (paged|state) pool '([\w.-]+)' \(layers=(\d+), pages=(\d+), "
    r"(?:item_bytes|state_page_bytes)=(\d+), layout=\w+\)"
)
_KV_HOST = re.compile(r"Allocating (.+?) hierarchical KV host pool: (\d+) tokens, ([\d.]+) GB host memory")
_KV_DEVICE = re.compile(r"KV Cache (?:is allocated|VA upper bound)\. dtype: [\w.]+, #tokens: (\d+)")
_AUTO = re.compile(r"HiCache auto-sizing: ratio ([\d.]+) -> ([\d.]+);")
_BOOL = re.compile(r"\b(unified|unified_fp8)=(True|False)\b")

# Scheduler summary keys (managers/scheduler.py:1268-1276), read as logged.
SCHEDULER_KEYS = ("max_total_num_tokens", "chunked_prefill_size", "max_prefill_tokens", "max_running_requests",
                  "context_len")  # fmt: skip


def _first(log: ServerLog, key: str, value: float, line: int) -> None:
    if key not in log.values:
        log.values[key] = value
        log.lines[key] = line


def parse_server_log(text: str, source: str = "server log") -> ServerLog:
    """The capacities ``text`` states; a log without the scheduler's summary line is refused (it is the line
    every SGLang server prints once its pools are built)."""
    log = ServerLog(source)
    for n, raw in enumerate(text.splitlines(), 1):
        line = _PREFIX.sub("", raw.strip())
        if line.startswith("max_total_num_tokens=") and "context_len=" in line:
            pairs = dict(_PAIRS.findall(line))
            for key in SCHEDULER_KEYS:
                if key in pairs:
                    _first(log, key, float(pairs[key]), n)
            mem = re.search(r"available_(?:gpu|cpu)_mem=([\d.]+) GB", line)
            if mem:
                _first(log, "available_gpu_mem_gb", float(mem.group(1)), n)
        elif line.startswith("DSV4 pool sizes:"):
            pairs = dict(_PAIRS.findall(line))
            for key in ("full", "swa", "c4", "c128", "c4_state", "c128_state"):
                if key in pairs:
                    _first(log, f"dsv4_{key}_tokens", float(pairs[key]), n)
        elif line.startswith("DSV4 memory calculation:"):
            flags = dict(_BOOL.findall(line))
            if log.unified_kv is None and "unified" in flags:
                log.unified_kv = flags["unified"] == "True"
                log.unified_kv_fp8 = flags.get("unified_fp8") == "True"
                log.lines["unified_kv"] = n
        elif line.startswith("Use sliding window memory pool."):
            pairs = dict(_PAIRS.findall(line))
            for key in ("full_layer_tokens", "swa_layer_tokens"):
                if key in pairs:
                    _first(log, key, float(pairs[key]), n)
        elif (m := _V4_HOST.search(line)) is not None:
            gb, kind, name, layers, pages, item = m.groups()
            if name not in log.host_pools:
                log.host_pools[name] = HostPoolLine(name, int(pages), int(layers), int(item), float(gb),
                                                    kind == "state", n)  # fmt: skip
        elif (m := _KV_HOST.search(line)) is not None:
            if log.host_kv_tokens is None:
                log.host_kv_tokens = int(m.group(2))
                log.lines["host_kv_tokens"] = n
        elif (m := _KV_DEVICE.search(line)) is not None:
            _first(log, "kv_cache_tokens", float(m.group(1)), n)
        elif (m := _AUTO.search(line)) is not None:
            _first(log, "hicache_auto_ratio", float(m.group(2)), n)
    if "max_total_num_tokens" not in log.values:
        raise InputError("no SGLang startup summary (a line 'max_total_num_tokens=..., chunked_prefill_size=..., "
                         "context_len=...', managers/scheduler.py:1268-1276): is this the server's log?",
                         source=source)  # fmt: skip
    return log


def read_server_log(path: str | Path) -> ServerLog:
    """:func:`parse_server_log` of a file, named by its path in any error."""
    return parse_server_log(read_text(path, "server log"), str(path))

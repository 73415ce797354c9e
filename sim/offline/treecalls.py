"""Drive the V4 prefix cache with a stream of calls in the format of ``shared/vectors/v4`` and answer each
call with the same field names SGLang's recorded answers use, so that a recording from any SGLang version
checks this model in one command (``hicache-sim tree CALLS.jsonl``).

Token fields hold integers and ``[first, count]`` runs. The ops: ``config``, ``request`` (admit to release),
``admit``, ``extend`` (one chunk), ``decode`` (``n`` steps), ``finish``, ``match`` (a bare admission match),
``state`` (the tree's paths). See ``shared/vectors/v4/README.md`` for the full format. Host-tier streams
(``shared/vectors/hicache``: a header naming the ``model``, or a config call with ``hicache_ratio``) go to
:mod:`sim.offline.hostcalls` and :mod:`sim.offline.v4hostcalls`. All drivers share the op table and answer frame of
:mod:`sim.offline.driver`.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from sim.base.errors import InputError
from sim.base.inputs import parse_json, read_text
from sim.cache.radix import RadixTree
from sim.cache.v4.running import Running
from sim.cache.v4.swacache import OutOfMemory, SWACache
from sim.offline.calls import MAX_COUNT, Fields, check_fields, expand_tokens, token_runs
from sim.offline.driver import (
    CallDriver,
    cached_fields,
    handles,
    page_tokens,
    paths_answer,
    progress_fields,
    swa_match_fields,
)
from sim.offline.hostcalls import PlainHostDriver
from sim.offline.hostsched import HOST_CALL_FIELDS, HostScheduler
from sim.offline.v4hostcalls import V4HostDriver

__all__ = ["CALL_FIELDS", "HOST_CALL_FIELDS", "RADIX_CALL_FIELDS", "RadixDriver", "TreeDriver", "compare", "HostDriver",
           "driver_for", "read_calls", "run_calls"]


# What each call may carry, by op (:data:`sim.offline.calls.Fields`). Every call is checked against this before it
# is applied, so a stream gets one line naming the file, line and field for a missing or mistyped one. The host
# tier's calls are declared beside their scheduler (:data:`sim.offline.hostsched.HOST_CALL_FIELDS`).
_TOKENS, _OUTPUT, _RID = ("tokens", 0, True), ("tokens", 0, False), ("rid", 0, True)
CALL_FIELDS: dict[str, Fields] = {
    "config": {"page_size": ("int", 1, False), "window": ("int", 0, False), "full_pages": ("int?", 1, False),
               "swa_pages": ("int?", 1, False), "chunked_prefill_size": ("int", -(1 << 31), False),
               "unbounded": ("bool", 0, False)},
    "request": {"tokens": _TOKENS, "output": _OUTPUT},
    "admit": {"tokens": _TOKENS, "output": _OUTPUT, "rid": _RID},
    "extend": {"rid": _RID},
    "decode": {"rid": _RID, "n": ("int", 0, False)},
    "finish": {"rid": _RID},
    "match": {"tokens": _TOKENS, "admission": ("bool", 0, False)},
    "state": {},
}  # fmt: skip
RADIX_CALL_FIELDS: dict[str, Fields] = {
    "insert": {"tokens": ("ids", 0, True)}, "match": {"tokens": ("ids", 0, True)}, "evict": {"n": ("int", 0, True)},
    "state": {},
}  # fmt: skip
HEADER_FIELDS: Fields = {"page_size": ("int", 1, False), "window": ("int", 0, False)}


@dataclass
class TreeDriver(CallDriver):
    """Applies calls to one :class:`SWACache`, rebuilt by each ``config`` call."""

    call_fields = CALL_FIELDS
    config: dict = field(default_factory=lambda: {"page_size": 256, "window": 128, "full_pages": None,
                                                  "swa_pages": None, "chunked_prefill_size": 8192})  # fmt: skip
    cache: SWACache | None = None
    requests: dict[str, Running] = field(default_factory=dict)

    def _apply(self, handler, call: dict) -> dict:
        if call["op"] != "config" and self.cache is None:
            self._op_config({})
        return handler(call)

    def _state(self) -> dict:
        c = self.cache
        return dict(full_used=c.full_used, swa_used=c.swa_used, full_evictable=c.tree.full_evictable,
                    full_protected=c.tree.full_protected, swa_evictable=c.tree.swa.evictable,
                    swa_protected=c.tree.swa.protected, running=len(c.running))  # fmt: skip

    @handles("config")
    def _op_config(self, call: dict) -> dict:
        for k in ("page_size", "window", "full_pages", "swa_pages", "chunked_prefill_size"):
            if k in call:
                self.config[k] = call[k]
        cfg = self.config
        unbounded = call.get("unbounded", False)
        chunk = cfg["chunked_prefill_size"]
        if chunk <= 0:  # SGLang turns chunking off for a size <= 0 (managers/scheduler.py:1372-1373)
            chunk = MAX_COUNT
        elif chunk < cfg["page_size"]:
            raise InputError(f"chunked_prefill_size: {chunk} is below one page ({cfg['page_size']}): SGLang rounds a "
                             "chunk down to whole pages and admits no prompt longer than it (schedule_policy.py:1664-1672)")
        self.cache = SWACache(page=cfg["page_size"], window=cfg["window"],
                              full_pages=None if unbounded else cfg["full_pages"],
                              swa_pages=None if unbounded else cfg["swa_pages"],
                              chunked_prefill_size=chunk)  # fmt: skip
        self.requests.clear()
        return {"config": {k: cfg[k] for k in ("page_size", "window", "full_pages", "swa_pages",
                                                "chunked_prefill_size")}}  # fmt: skip

    @staticmethod
    def _evictions(r: Running) -> dict:
        return {"evicted_full": r.evicted_full, "evicted_swa": r.evicted_swa}

    @staticmethod
    def _finished(r: Running) -> dict:
        return {**swa_match_fields(r.match), **cached_fields(r, window=True)}

    def _progress(self, r: Running, chunk: tuple | None = None) -> dict:
        out = {**progress_fields(r, chunk), **self._evictions(r)}
        return {**out, **self._finished(r)} if r.finished else out

    def _admit(self, call: dict) -> Running:
        prompt, output = expand_tokens(call["tokens"]), expand_tokens(call.get("output", []))
        return self.cache.admit(self.cache.tree.page_keys(prompt + output), len(prompt), len(output))

    def _running(self, call: dict) -> Running:
        """The call's running request, its eviction counts reset for this call's answer."""
        r = self._request(self.requests, call, "running request")
        r.evicted_full = r.evicted_swa = 0
        return r

    @handles("request")
    def _op_request(self, call: dict) -> dict:
        r = self._admit(call)
        self.cache.finish(r)
        return {**self._finished(r), **self._evictions(r)}

    @handles("admit")
    def _op_admit(self, call: dict) -> dict:
        r = self._admit(call)
        self.requests[call["rid"]] = r
        return {**swa_match_fields(r.match), "evicted_full": 0, "evicted_swa": 0}

    @handles("extend")
    def _op_extend(self, call: dict) -> dict:
        r = self._running(call)
        return self._progress(r, self.cache.extend(r))

    @handles("decode")
    def _op_decode(self, call: dict) -> dict:
        r = self._running(call)
        self.cache.decode_many(r, call.get("n", 1))
        return self._progress(r)

    @handles("finish")
    def _op_finish(self, call: dict) -> dict:
        r = self._running(call)
        self.cache.finish(r)
        del self.requests[call["rid"]]
        return {**self._finished(r), **self._evictions(r)}

    @handles("match")
    def _op_match(self, call: dict) -> dict:
        if call.get("admission") is False:
            raise InputError("admission: this format's match is the admission one (its key limited to the "
                             "prompt less one token, as SGLang's admission matches it)")  # fmt: skip
        tokens = expand_tokens(call["tokens"])
        return swa_match_fields(self.cache.lookup(self.cache.tree.page_keys(tokens), len(tokens)))

    @handles("state")
    def _op_state(self, call: dict) -> dict:
        tree = self.cache.tree
        paths = paths_answer(tree.paths(), page_tokens, lambda node: "S" if node.swa else "T", token_runs, pages=True)
        return {"num_nodes": tree.num_nodes, "paths": paths}


@dataclass
class RadixDriver(CallDriver):
    """Applies SGLang ``RadixCache`` calls (``insert``/``match``/``evict``/``state``) to a device-only
    :class:`~sim.cache.radix.RadixTree` (``shared/vectors/sglang_radix_*.jsonl``)."""

    call_fields = RADIX_CALL_FIELDS
    echo = ("id",)
    page_size: int = 1
    tree: RadixTree = field(init=False)

    def __post_init__(self) -> None:
        self.tree = RadixTree(page_size=self.page_size)

    def _state(self) -> dict:
        tree = self.tree
        return {"evictable": tree.evictable_tokens, "protected": tree.protected_tokens, "total": tree.device_tokens()}

    @handles("insert")
    def _op_insert(self, call: dict) -> dict:
        tree = self.tree
        res = tree.insert(tree.page_keys(call["tokens"]))
        return {"prefix_len": res.prefix_pages * tree.page_size, "inserted": res.inserted_pages * tree.page_size}

    @handles("match")
    def _op_match(self, call: dict) -> dict:
        return {"matched": self.tree.match(self.tree.page_keys(call["tokens"])).device_pages * self.tree.page_size}

    @handles("evict")
    def _op_evict(self, call: dict) -> dict:
        evicted, freed_calls = self.tree.evict(call["n"])
        return {"evicted": evicted, "freed_calls": freed_calls}

    @handles("state")
    def _op_state(self, call: dict) -> dict:
        tree = self.tree
        paths = tree.paths()
        if tree.page_size > 1:
            paths = [[t for page in p for t in page] for p in paths]
        return {"paths": paths, "num_nodes": tree.num_nodes - 1}  # SGLang counts nodes below the root


def driver_for(header: dict | None, first_call: dict | None):
    """The driver a call file needs: V4 (``window`` in its header, or V4 ops) or ``RadixCache``."""
    v4_ops = {"config", "request", "admit", "extend", "decode", "finish"}
    if (header and "model" in header) or (first_call and "hicache_ratio" in first_call):
        return HostDriver()
    if (header and "window" in header) or (first_call and first_call.get("op") in v4_ops):
        return TreeDriver()
    return RadixDriver(page_size=(header or {}).get("page_size", 1))


def run_calls(path: Path) -> Iterator[tuple[int, dict, dict | None]]:
    """Answer every call of ``path``: (line number, answer, expect or None). A bad call, or one SGLang's
    allocator would fail (the pools cannot hold it), stops the stream with its file and line."""
    header = None
    driver = None
    for lineno, call, expect in read_calls(path):
        try:
            if lineno == 0:
                check_fields(call, HEADER_FIELDS)
                if call.get("eviction_policy", "lru") != "lru":  # the recorded trees evict LRU; others would differ
                    raise InputError(f"eviction_policy: the trees answer with SGLang's LRU eviction, got "
                                     f"{call['eviction_policy']!r}")  # fmt: skip
                header = call
                continue
            if driver is None:
                driver = driver_for(header, call)
            answer = driver(call)
        except InputError as exc:
            raise InputError(str(exc), source=str(path), line=lineno or 1) from None
        except OutOfMemory as exc:
            raise InputError(f"the pools cannot hold this call (SGLang's allocator fails here too): {exc}",
                             source=str(path), line=lineno) from None  # fmt: skip
        yield lineno, answer, expect


def read_calls(path: Path) -> Iterator[tuple[int, dict, dict | None]]:
    """(line number, call, expect or None) for each call line; a first line that is no call (a header) comes
    as line 0. Raises InputError naming the file and line."""
    text = read_text(path, "call stream", gzipped=True)
    first = True
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        obj = parse_json(line, str(path), line=lineno)
        if not isinstance(obj, dict):
            raise InputError("a call line must be a JSON object", source=str(path), line=lineno)
        if "call" in obj:
            if not isinstance(obj["call"], dict) or not isinstance(obj.get("expect") or {}, dict):
                raise InputError("call and expect must be JSON objects", source=str(path), line=lineno)
            yield lineno, obj["call"], obj.get("expect")
        elif "op" in obj:
            yield lineno, obj, None
        elif first:
            yield 0, obj, None
        else:
            raise InputError("expected a call: an object with op, or {call, expect}", source=str(path), line=lineno)
        first = False


def compare(answer: dict, expect: dict) -> list[str]:
    """Fields of ``expect`` that ``answer`` gets wrong, as ``field: got X, expected Y``; the events compare
    as the recording names nodes (:func:`_recorder_names`)."""
    out = []
    for key, want in expect.items():
        if key == "config":  # the recording names SGLang's tree backend too; only the pool settings compare
            got = answer.get(key, {})
            want = {k: v for k, v in want.items() if k in got}
        else:
            got = answer.get(key)
        if key == "events" and isinstance(got, list) and isinstance(want, list) and len(got) == len(want):
            got = [_recorder_names(g, w) for g, w in zip(got, want)]
        if got != want:
            out.append(f"{key}: got {got!r}, expected {want!r}")
    return out


def _recorder_names(got: dict, want: dict) -> dict:
    """``got`` as the recorder would have written it. The recorder could not read the last token id of a few
    nodes, all of them made by a split (``[start, end, null]``: such a reference compares by its position
    only), and it leaves such nodes out of a ``host_evict``'s ``nodes`` altogether: its ``got`` then counts
    more tokens than the nodes it names (``v6.34`` frees 256 host tokens naming none; ``v228.68`` 640). So the
    model's nodes missing from a recorded list are not a difference when the recorded nodes are all among
    the model's and the missing ones hold exactly the tokens the recording freed without naming them."""
    if not isinstance(got, dict) or not isinstance(want, dict):
        return got
    out = dict(got)
    for k, w in want.items():
        g = got.get(k)
        if isinstance(w, list) and len(w) == 3 and w[2] is None and isinstance(g, list) and len(g) == 3:
            out[k] = [g[0], g[1], None]
    g, w = got.get("nodes"), want.get("nodes")
    if "host_evict" in want and isinstance(g, list) and isinstance(w, list) and len(g) > len(w):
        named = [n for n in g if n in w]
        unnamed = sum(n[1] - n[0] for n in g if n not in w)
        if len(named) == len(w) and unnamed == want.get("got", 0) - sum(n[1] - n[0] for n in w):
            out["nodes"] = named
    return out


class HostDriver:
    """The host-tier format's driver: each ``config`` call picks the plain model's cache or V4's."""

    def __init__(self) -> None:
        self.driver: HostScheduler | None = None

    def __call__(self, call: dict) -> dict:
        if call.get("op") == "config":
            model = call.get("model", "plain")
            if model == "plain":
                self.driver = PlainHostDriver()
            elif model == "v4":
                self.driver = V4HostDriver()
            else:
                raise InputError(f"model: unknown model {model!r} (known: plain, v4)")
        if self.driver is None:
            raise InputError("op: a host-tier stream starts with a config call")
        return self.driver(call)

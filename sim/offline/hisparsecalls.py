"""Answer a stream of HiSparse decode calls as SGLang 0.5.23 decides them (``hicache-sim hisparse``), one answer
per (step, request, C4 layer) in SGLang's call order (per step, layer by layer, each over the batch), and check
the answers against a recording.

The format is ``shared/vectors/hisparse/README.md``'s: ``config`` (a fresh coordinator), ``arrive`` (a PD decode
request admitted with its prompt on the host), ``step`` (one decode step of the batch: per request its
``seq_len`` and top-k row, or one row per layer) and ``finish``. The model is :class:`HiSparseRequest` over
:class:`~sim.hisparse.hot.LruBuffer`, the same the timed decode engine runs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from sim.base.errors import InputError
from sim.base.inputs import parse_json, read_text
from sim.hisparse.coordinator import HiSparseRequest
from sim.hisparse.hot import LruBuffer
from sim.hisparse.topk import C4_RATIO
from sim.offline.calls import Fields, check_fields
from sim.offline.driver import CallDriver, handles
from sim.offline.treecalls import compare, read_calls

__all__ = ["ANSWER_FIELDS", "CALL_FIELDS", "HiSparseDriver", "agreement", "lru_hash", "read_answers", "run_calls"]

_RID = ("rid", 0, True)
CALL_FIELDS: dict[str, Fields] = {
    "config": {"device_buffer_size": ("int", 1, True), "top_k": ("int", 1, True), "page_size": ("int", 1, False),
               "layers": ("int", 1, False), "block_size": ("int", 1, False), "max_reqs": ("int", 1, False),
               "max_context_len": ("int", 1, False), "seed": ("int", 0, False)},
    "arrive": {"rid": _RID, "prompt_len": ("int", 1, True)},
    "step": {"reqs": ("objects", 0, True)},
    "finish": {"rid": _RID},
}  # fmt: skip
ROW_FIELDS: Fields = {"rid": _RID, "seq_len": ("int", 2, True)}  # and topk: ids, or one list of ids per layer
ANSWER_FIELDS = ("step", "rid", "layer", "seq_len", "c4_len", "fast", "selected", "newest_hit", "hits", "misses",
                 "loads", "evicted", "backup", "resident", "racy", "lru_hash")  # fmt: skip
MAX_SWAP_IN_BLOCK = 1024  # swap_in_block_size's bound (factory.py:92-95)


def lru_hash(order: list[int]) -> str:
    """The recorded answers' digest of an LRU order: sha1 of its ``json.dumps``, 12 hex digits."""
    return hashlib.sha1(json.dumps(order).encode()).hexdigest()[:12]


class _Req:
    """A request the stream admitted: its buffers and the seq_len its next step must have."""

    def __init__(self, state: HiSparseRequest, next_seq_len: int) -> None:
        self.state = state
        self.next_seq_len = next_seq_len


class HiSparseDriver(CallDriver):
    """Applies HiSparse calls to one coordinator (rebuilt by each ``config``); a ``step`` answers a list of
    rows, the other calls none."""

    call_fields = CALL_FIELDS
    kind = "HiSparse"

    def __init__(self) -> None:
        self.config: dict | None = None
        self.reqs: dict = {}
        self.steps = 0

    def __call__(self, call: dict) -> list[dict]:  # type: ignore[override]
        handler = getattr(self, self._handler_name(call))
        if call["op"] != "config" and self.config is None:
            raise InputError("op: a HiSparse stream starts with a config call")
        return handler(call)

    @handles("config")
    def _op_config(self, call: dict) -> list[dict]:
        cfg = {"page_size": 64, "layers": 1, "block_size": 960, "max_reqs": None, "max_context_len": None, **call}
        if cfg["device_buffer_size"] < cfg["top_k"]:  # factory.py:84-87; the kernel's wrapper asserts it too
            raise InputError(f"device_buffer_size: {cfg['device_buffer_size']} is smaller than top_k {cfg['top_k']} "
                             "(SGLang refuses it: srt/mem_cache/sparsity/factory.py:84-87, "
                             "kernels/ops/kvcache/hisparse.py:301-303)")  # fmt: skip
        if cfg["block_size"] > MAX_SWAP_IN_BLOCK:
            raise InputError(f"block_size: {cfg['block_size']} is outside SGLang's [1, {MAX_SWAP_IN_BLOCK}] "
                             "(factory.py:92-95)")  # fmt: skip
        self.config, self.reqs, self.steps = cfg, {}, 0
        return []

    @handles("arrive")
    def _op_arrive(self, call: dict) -> list[dict]:
        cfg, rid = self.config, call["rid"]
        if rid in self.reqs:
            raise InputError(f"rid: request {rid!r} has arrived already")
        if cfg["max_reqs"] is not None and len(self.reqs) >= cfg["max_reqs"]:
            raise InputError(f"rid: max_reqs {cfg['max_reqs']} requests are decoding already")
        self._within_context("prompt_len", call["prompt_len"] + 1)
        buffers = [LruBuffer(cfg["device_buffer_size"], 0) for _ in range(cfg["layers"])]
        self.reqs[rid] = _Req(HiSparseRequest(buffers, call["prompt_len"]), call["prompt_len"] + 1)
        return []

    @handles("finish")
    def _op_finish(self, call: dict) -> list[dict]:
        """``request_finished`` frees the buffers and resets the slots and the order (:1402-1465)."""
        self._request(self.reqs, call, "decoding request")
        del self.reqs[call["rid"]]
        return []

    @handles("step")
    def _op_step(self, call: dict) -> list[dict]:
        """The answers in SGLang's call order: layer by layer, each layer's requests in batch order. The model
        runs its layers in turn over the whole batch (``models/deepseek_v4.py:4063-4219``) and each C4 layer's
        indexer makes one swap-in call for every request of the batch (``layers/attention/dsv4/indexer.py:
        1126-1137``, ``managers/hisparse_coordinator.py:1587-1596,1467-1529``), one kernel block a request;
        the buffers and LRU orders are per layer and request (:1509-1519), so only the order of the answers
        depends on it. The eager backup is per request, of all layers at once, before the forward
        (``schedule_batch.py:3793``, :1100-1111, :1236-1252): each layer's line carries it."""
        batch = [self._checked(i, row, call["reqs"][:i]) for i, row in enumerate(call["reqs"])]  # all, then apply
        per_request = []
        for req, row, rows in batch:
            out: list[dict] = []
            per_request.append(out)
            r = req.state
            backup = r.step(row["seq_len"], rows, 0)
            req.next_seq_len += 1
            c4_len = row["seq_len"] // C4_RATIO
            for layer, (buf, topk) in enumerate(zip(r.buffers, rows)):
                valid = topk[topk >= 0]
                newest_hit = int(bool((valid == r.newest).any()))
                if r.fast:
                    loads, evicted, resident, order = [], [], c4_len - 1, list(range(c4_len - 1))
                else:
                    loads = [[int(t), int(s)] for t, s in zip(buf.loaded, buf.victims)]
                    evicted = [int(t) for t in buf.displaced]
                    resident, order = buf.size - buf.n_empty, buf.lru_order()
                misses = r.misses[layer]
                out.append({"step": self.steps, "rid": row["rid"], "layer": layer, "seq_len": row["seq_len"],
                            "c4_len": c4_len, "fast": r.fast, "selected": int(valid.size), "newest_hit": newest_hit,
                            "hits": int(valid.size) - newest_hit - misses, "misses": misses, "loads": loads,
                            "evicted": evicted, "backup": None if backup < 0 else backup, "resident": resident,
                            "racy": False, "lru_hash": lru_hash(order)})  # fmt: skip
        self.steps += 1
        return [answers[layer] for layer in range(self.config["layers"]) for answers in per_request]

    def _within_context(self, name: str, seq_len: int) -> None:
        limit = self.config["max_context_len"]
        if limit is not None and seq_len > limit:
            raise InputError(f"{name}: a sequence of {seq_len} tokens is beyond max_context_len {limit}")

    def _checked(self, i: int, row: dict, before: list) -> tuple[_Req, dict, list[np.ndarray]]:
        """Row ``i`` of a step, checked: its request, the row, one top-k row per layer as arrays."""
        where = f"reqs[{i}]"
        try:
            for k in row:
                if k not in ROW_FIELDS and k != "topk":
                    raise InputError(f"{k}: not a field of a step's row (its fields: rid, seq_len, topk)")
            check_fields(row, ROW_FIELDS)
            if "topk" not in row:
                raise InputError("topk: required field missing")
        except InputError as exc:
            raise InputError(f"{where}.{str(exc)}") from None
        rid = row["rid"]
        if rid not in self.reqs:
            raise InputError(f"{where}.rid: no request {rid!r} (it never arrived, or has finished)")
        if any(b.get("rid") == rid for b in before):
            raise InputError(f"{where}.rid: request {rid!r} is in this step twice")
        req = self.reqs[rid]
        if row["seq_len"] != req.next_seq_len:
            raise InputError(f"{where}.seq_len: expected {req.next_seq_len} (one more than the request's last, or "
                             f"its prompt + 1), got {row['seq_len']}")  # fmt: skip
        self._within_context(f"{where}.seq_len", row["seq_len"])
        return req, row, self._topk_rows(where, row["topk"], row["seq_len"] // C4_RATIO)

    def _topk_rows(self, where: str, topk, c4_len: int) -> list[np.ndarray]:
        layers, k = self.config["layers"], self.config["top_k"]
        if not isinstance(topk, list):
            raise InputError(f"{where}.topk: expected a list of ids, or one list per layer")
        per_layer = bool(topk) and all(isinstance(x, list) for x in topk)
        if per_layer and len(topk) != layers:
            raise InputError(f"{where}.topk: {len(topk)} rows for {layers} layer(s)")
        rows = []
        for j, ids in enumerate(topk if per_layer else [topk]):
            name = f"{where}.topk[{j}]" if per_layer else f"{where}.topk"
            arr = np.asarray(ids)
            if arr.ndim != 1 or (arr.size and arr.dtype.kind not in "iu"):
                raise InputError(f"{name}: expected compressed-token ids (integers; -1 pads)")
            arr = arr.astype(np.int64)
            if arr.size > k:
                raise InputError(f"{name}: {arr.size} ids, longer than top_k {k}")
            bad = np.flatnonzero((arr < -1) | (arr >= c4_len))
            if bad.size:
                j0 = int(bad[0])
                raise InputError(f"{name}[{j0}]: id {int(arr[j0])} is outside the compressed length {c4_len} "
                                 f"(seq_len // {C4_RATIO}; -1 pads)")  # fmt: skip
            valid = np.sort(arr[arr >= 0])
            dup = valid[1:][valid[1:] == valid[:-1]]
            if dup.size:
                raise InputError(f"{name}: id {int(dup[0])} appears twice (SGLang's indexer never repeats an id; "
                                 "its kernel would race on one: hisparse.cuh:488-497)")  # fmt: skip
            rows.append(arr)
        return rows * layers if not per_layer else rows


def run_calls(path: Path) -> Iterator[tuple[int, list[dict]]]:
    """Answer every call of ``path``: (line number, its answers). A bad call stops the stream with its file, line
    and field."""
    driver = HiSparseDriver()
    for lineno, call, expect in read_calls(path):
        try:
            if lineno == 0:
                raise InputError("expected a call: an object with op")
            if expect is not None:
                raise InputError("expect: a step answers one line per request and layer; give the recorded "
                                 "answers as a file (--expect ANSWERS.jsonl)")  # fmt: skip
            answers = driver(call)
        except InputError as exc:
            raise InputError(str(exc), source=str(path), line=lineno or 1) from None
        yield lineno, answers


def read_answers(path: Path) -> list[dict]:
    """The recorded answers, one JSON object a line; raises InputError naming the file and line."""
    out = []
    for lineno, line in enumerate(read_text(path, "answer file").splitlines(), 1):
        if line.strip():
            obj = parse_json(line, str(path), line=lineno)
            if not isinstance(obj, dict):
                raise InputError("an answer line must be a JSON object", source=str(path), line=lineno)
            out.append(obj)
    return out


def agreement(answers: list[dict], expected: list[dict]) -> tuple[dict[str, list[int]], list[tuple[int, list[str]]]]:
    """Per field, [rows that agree, rows recorded]; and the rows that differ, as (index, ``field: got X,
    expected Y`` items). A row missing on either side differs on every field."""
    per_field: dict[str, list[int]] = {}
    wrong = []
    for i in range(max(len(answers), len(expected))):
        got = answers[i] if i < len(answers) else {}
        want = expected[i] if i < len(expected) else {k: None for k in got}
        diff = compare(got, want)
        bad = {d.split(":", 1)[0] for d in diff}
        for key in want:
            tally = per_field.setdefault(key, [0, 0])
            tally[0] += key not in bad
            tally[1] += 1
        if diff:
            wrong.append((i, diff))
    return per_field, wrong

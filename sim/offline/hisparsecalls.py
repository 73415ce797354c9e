"""Answer a stream of HiSparse decode calls as SGLang 0.5.23 decides them (``hicache-sim hisparse``), one answer
per (step, request, layer) in SGLang's call order (per step, layer by layer, each over the batch), and check
the answers against a recording.

The formats are ``shared/vectors/hisparse/README.md``'s (DeepSeek V4's C4 path) and, with ``"family": "dsa"`` in
the config, ``shared/vectors/hisparse/dsa/README.md``'s (DeepSeek V3.2, GLM-5.x: raw positions, every layer or
IndexShare anchors and skip layers, colocated ``admission: staging``, the device buffer's growth): ``config`` (a
fresh coordinator), ``arrive`` (a request admitted), ``step`` (one decode step of the batch: per request its
``seq_len`` and top-k row, or one row per layer) and ``finish``. The model is :class:`HiSparseRequest` over
:class:`~sim.hisparse.hot.LruBuffer`, the same the timed decode engine runs.

What a stream may declare is bounded by what a real server holds, checked before anything is allocated: a
buffer of at most 32,767 slots (the kernel's LRU order is int16, ``hisparse_coordinator.py:690-697``,
``hisparse.cuh:343-372``), at most :data:`MAX_LAYERS` layers, and device-buffer slots and host positions of the
live requests, over all layers, that one GPU could back with KV (:data:`MAX_LAYER_ITEMS`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from sim.base.errors import InputError
from sim.base.inputs import parse_json, read_text
from sim.hisparse.coordinator import FAMILIES, HiSparseRequest
from sim.hisparse.hot import LruBuffer
from sim.hisparse.indexshare import SwapInPlan
from sim.offline.calls import Fields, check_fields
from sim.offline.driver import CallDriver, handles
from sim.offline.treecalls import compare, read_calls

__all__ = ["ANSWER_FIELDS", "CALL_FIELDS", "HiSparseDriver", "agreement", "lru_hash",
           "read_answers", "run_calls"]

_RID = ("rid", 0, True)
CALL_FIELDS: dict[str, Fields] = {
    "config": {"family": ("v4|dsa", 0, False), "device_buffer_size": ("int", 1, True), "top_k": ("int", 1, True),
               "page_size": ("int", 1, False), "layers": ("int", 1, False), "block_size": ("int", 1, False),
               "max_reqs": ("int", 1, False), "max_context_len": ("int", 1, False), "seed": ("int", 0, False),
               "index_share": ("object", 0, False)},
    "arrive": {"rid": _RID, "prompt_len": ("int", 1, True), "admission": ("direct|staging", 0, False)},
    "step": {"reqs": ("objects", 0, True)},
    "finish": {"rid": _RID},
}  # fmt: skip
ROW_FIELDS: Fields = {"rid": _RID, "seq_len": ("int", 2, True)}  # and topk: ids, or one list of ids per layer
ANSWER_FIELDS = ("step", "rid", "layer", "seq_len", "c4_len", "fast", "selected", "newest_hit", "hits", "misses",
                 "loads", "evicted", "backup", "resident", "racy", "lru_hash")  # fmt: skip
MAX_SWAP_IN_BLOCK = 1024  # swap_in_block_size's bound (factory.py:92-95)
MAX_BUFFER_SIZE = (1 << 15) - 1  # slots an int16 LRU order can name (hisparse_coordinator.py:690-697)
MAX_LAYERS = 1024
"""Layers a config may declare: 13x the most any model SGLang runs HiSparse on has (GLM-5.x: 78
``num_hidden_layers``; DeepSeek V3.2 and V4-Pro: 61)."""
MAX_LAYER_ITEMS = 288_000_000_000 // 584
"""(layer, slot) cells the live requests may hold, device-buffer slots and host positions alike: each is backed
by one KV item on a real server, at least 584 B (V4's C4 row; a DSA fp8 row is 656 B), and one GPU holds at most
288 GB (a B300's HBM). SGLang's own per-slot tables are per layer and request too (``req_device_buffer_tokens``,
``lru_slots``: hisparse_coordinator.py:677-697)."""


def lru_hash(order: list[int]) -> str:
    """The recorded answers' digest of an LRU order: sha1 of its ``json.dumps``, 12 hex digits."""
    return hashlib.sha1(json.dumps(order).encode()).hexdigest()[:12]


class _Req:
    """A request the stream admitted: its buffers (one per kernel layer) and the seq_len its next step must have."""

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
        self.plan = SwapInPlan.every_layer(1)
        self.reqs: dict = {}
        self.steps = 0

    def __call__(self, call: dict) -> list[dict]:  # type: ignore[override]
        handler = getattr(self, self._handler_name(call))
        if call["op"] != "config" and self.config is None:
            raise InputError("op: a HiSparse stream starts with a config call")
        return handler(call)

    @handles("config")
    def _op_config(self, call: dict) -> list[dict]:
        cfg = {"family": "v4", "page_size": 64, "layers": 1, "block_size": 960, "max_reqs": None,
               "max_context_len": None, **call}  # fmt: skip
        h = cfg["device_buffer_size"]
        if h < cfg["top_k"]:  # factory.py:84-87; the kernel's wrapper asserts it too
            raise InputError(f"device_buffer_size: {h} is smaller than top_k {cfg['top_k']} "
                             "(SGLang refuses it: srt/mem_cache/sparsity/factory.py:84-87, "
                             "kernels/ops/kvcache/hisparse.py:301-303)")  # fmt: skip
        if h > MAX_BUFFER_SIZE:
            raise InputError(f"device_buffer_size: {h} is beyond the {MAX_BUFFER_SIZE} slots SGLang's int16 LRU order "
                             "can name (managers/hisparse_coordinator.py:690-697)")  # fmt: skip
        if cfg["block_size"] > MAX_SWAP_IN_BLOCK:
            raise InputError(f"block_size: {cfg['block_size']} is outside SGLang's [1, {MAX_SWAP_IN_BLOCK}] "
                             "(factory.py:92-95)")  # fmt: skip
        if cfg["layers"] > MAX_LAYERS:
            raise InputError(f"layers: {cfg['layers']} is beyond {MAX_LAYERS}, over 13x the layers of any model "
                             "SGLang runs HiSparse on (GLM-5.x: 78)")  # fmt: skip
        per_req = cfg["layers"] * (h + cfg["page_size"])
        if per_req * (cfg["max_reqs"] or 1) > MAX_LAYER_ITEMS:
            name = "max_reqs" if cfg["max_reqs"] and per_req <= MAX_LAYER_ITEMS else "page_size"
            raise InputError(f"{name}: {cfg['max_reqs'] or 1} request(s) x {cfg['layers']} layers x "
                             f"{h + cfg['page_size']} slots is beyond what one GPU holds ({MAX_LAYER_ITEMS:,} KV "
                             "items of 584 B in 288 GB)")  # fmt: skip
        self.plan = self._plan(cfg)
        self.config, self.reqs, self.steps = cfg, {}, 0
        return []

    @staticmethod
    def _plan(cfg: dict) -> SwapInPlan:
        share = cfg.get("index_share")
        if share is None:
            return SwapInPlan.every_layer(cfg["layers"])
        if cfg["family"] != "dsa":
            raise InputError("index_share: IndexShare is a DSA model's (family: dsa); DeepSeek V4 runs the kernel "
                             "on every C4 layer (managers/hisparse_coordinator.py:90-91)")  # fmt: skip
        return SwapInPlan.from_index_share(share, cfg["layers"])

    @handles("arrive")
    def _op_arrive(self, call: dict) -> list[dict]:
        cfg, rid = self.config, call["rid"]
        if rid in self.reqs:
            raise InputError(f"rid: request {rid!r} has arrived already")
        if cfg["max_reqs"] is not None and len(self.reqs) >= cfg["max_reqs"]:
            raise InputError(f"rid: max_reqs {cfg['max_reqs']} requests are decoding already")
        self._within_context("prompt_len", call["prompt_len"] + 1)
        family = FAMILIES[cfg["family"]]
        kernel_layers = len(self.plan.kernel_layers)
        held = sum(r.next_seq_len // family.ratio + r.state.size for r in self.reqs.values())
        if (held + call["prompt_len"] // family.ratio + cfg["device_buffer_size"]) * kernel_layers > MAX_LAYER_ITEMS:
            raise InputError(f"prompt_len: with the {len(self.reqs)} request(s) decoding, their positions and buffer "
                             f"slots over {kernel_layers} layers are beyond what one GPU holds "
                             f"({MAX_LAYER_ITEMS:,} KV items of 584 B in 288 GB)")  # fmt: skip
        buffers = [LruBuffer(cfg["device_buffer_size"], 0) for _ in range(kernel_layers)]
        state = HiSparseRequest(buffers, call["prompt_len"], call.get("admission", "direct"), family, cfg["page_size"])
        self.reqs[rid] = _Req(state, call["prompt_len"] + 1)
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
        runs its layers in turn over the whole batch (``models/deepseek_v4.py:4063-4219``) and each kernel layer
        makes one swap-in call for every request of the batch (``layers/attention/dsv4/indexer.py:1126-1137``,
        ``layers/attention/dsa_backend.py:2623-2629``, ``managers/hisparse_coordinator.py:1587-1637``), one kernel
        block a request; the buffers and LRU orders are per layer and request (:1509-1519), so only the order of
        the answers depends on it. The eager backup is per request, of all layers at once, before the forward
        (``schedule_batch.py:3793``, :1100-1111, :1236-1252): each layer's line carries it."""
        batch = [self._checked(i, row, call["reqs"][:i]) for i, row in enumerate(call["reqs"])]  # all, then apply
        per_request = []
        for req, row, rows in batch:
            r = req.state
            backup = r.step(row["seq_len"], rows, 0)
            req.next_seq_len += 1
            per_request.append(self._kernel_answers(r, row, rows, backup))
        self.steps += 1
        out = []
        for layer, anchor in enumerate(self.plan.anchor_of):
            k = self.plan.kernel_layers.index(anchor)
            for answers in per_request:
                a = {**answers[k], "layer": layer}
                if anchor != layer:  # a skip layer: the anchor's decisions, its plan copied (:1608-1636)
                    a.update(replay_of=anchor, copied=a["misses"])
                out.append(a)
        return out

    def _kernel_answers(self, r: HiSparseRequest, row: dict, rows: list[np.ndarray], backup: int) -> list[dict]:
        """One request's answers at a step, one per kernel layer (the ``layer`` field is set by the caller)."""
        dsa = self.config["family"] == "dsa"
        out = []
        for layer, (buf, topk) in enumerate(zip(r.buffers, rows)):
            valid = topk[topk >= 0]
            newest_hit = int(bool((valid == r.newest).any()))
            if r.fast:
                loads, evicted, resident, order = [], [], r.kernel_len - 1, list(range(r.kernel_len - 1))
            else:
                loads = [[int(t), int(s)] for t, s in zip(buf.loaded, buf.victims)]
                evicted = [int(t) for t in buf.displaced]
                resident, order = buf.size - buf.n_empty, buf.lru_order()
            misses = r.misses[layer]
            a = {"step": self.steps, "rid": row["rid"], "layer": layer, "seq_len": row["seq_len"],
                 ("kernel_len" if dsa else "c4_len"): r.kernel_len, "fast": r.fast, "selected": int(valid.size),
                 "newest_hit": newest_hit, "hits": int(valid.size) - newest_hit - misses, "misses": misses,
                 "loads": loads, "evicted": evicted, "backup": None if backup < 0 else backup, "resident": resident}
            if dsa:
                a["buffer_cap"] = r.buffer_cap
            out.append({**a, "racy": False, "lru_hash": lru_hash(order)})  # fmt: skip
        return out

    def _within_context(self, name: str, seq_len: int) -> None:
        limit = self.config["max_context_len"]
        if limit is not None and seq_len > limit:
            raise InputError(f"{name}: a sequence of {seq_len} tokens is beyond max_context_len {limit}")

    def _checked(self, i: int, row: dict, before: list) -> tuple[_Req, dict, list[np.ndarray]]:
        """Row ``i`` of a step, checked: its request, the row, one top-k row per kernel layer as arrays."""
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
        return req, row, self._topk_rows(where, row["topk"], row["seq_len"] // req.state.family.ratio)

    def _topk_rows(self, where: str, topk, kernel_len: int) -> list[np.ndarray]:
        """One row per kernel layer. ``topk`` is one row of ids for every layer, or a list with a row per layer
        (``null`` on a skip layer, or its anchor's row again)."""
        layers = self.config["layers"]
        if not isinstance(topk, list):
            raise InputError(f"{where}.topk: expected a list of ids, or one list per layer")
        nested = [isinstance(x, list) or x is None for x in topk]
        if any(nested) and not all(nested):
            j = nested.index(not nested[0])
            raise InputError(f"{where}.topk[{j}]: {topk[j]!r} in a row of "
                             f"{'per-layer rows' if nested[0] else 'ids'}: give ids, or one list per layer"[:300])
        per_layer = bool(topk) and nested[0]
        if per_layer and len(topk) != layers:
            raise InputError(f"{where}.topk: {len(topk)} rows for {layers} layer(s)")
        named = list(enumerate(topk)) if per_layer else [(None, topk)] * layers
        rows: dict[int, np.ndarray] = {}
        for layer, anchor in enumerate(self.plan.anchor_of):
            j, ids = named[layer]
            name = f"{where}.topk[{j}]" if per_layer else f"{where}.topk"
            if ids is None and anchor == layer:
                raise InputError(f"{name}: null, but layer {layer} computes its own top-k (only a skip layer's "
                                 "row may be null)")  # fmt: skip
            if anchor != layer:
                if ids is not None and ids != named[anchor][1]:
                    raise InputError(f"{name}: layer {layer} reuses layer {anchor}'s top-k (IndexShare); give null "
                                     "or that row")  # fmt: skip
                continue
            rows[layer] = self._ids(name, ids, kernel_len)
        return [rows[k] for k in self.plan.kernel_layers]

    def _ids(self, name: str, ids: list, kernel_len: int) -> np.ndarray:
        """One row as an array, refused in one line unless it holds distinct kernel-token ids (-1 pads)."""
        k, dsa = self.config["top_k"], self.config["family"] == "dsa"
        if len(ids) > k:
            raise InputError(f"{name}: {len(ids)} ids, longer than top_k {k}")
        for j, x in enumerate(ids):
            if type(x) is not int:
                raise InputError(f"{name}[{j}]: {x!r} is not a token id (an integer; -1 pads)"[:300])
            if not -1 <= x < kernel_len:
                span = f"the sequence length {kernel_len}" if dsa else f"the compressed length {kernel_len} (seq_len // 4)"
                raise InputError(f"{name}[{j}]: id {x} is outside {span}; -1 pads"[:300])
        arr = np.asarray(ids, dtype=np.int64)
        valid = np.sort(arr[arr >= 0])
        dup = valid[1:][valid[1:] == valid[:-1]]
        if dup.size:
            raise InputError(f"{name}: id {int(dup[0])} appears twice (SGLang's indexer never repeats an id; "
                             "its kernel would race on one: hisparse.cuh:488-497)")  # fmt: skip
        return arr.astype(np.int64)


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
    for lineno, line in enumerate(read_text(path, "answer file", gzipped=True).splitlines(), 1):
        if line.strip():
            obj = parse_json(line, str(path), line=lineno)
            if not isinstance(obj, dict):
                raise InputError("an answer line must be a JSON object", source=str(path), line=lineno)
            out.append(obj)
    return out


def agreement(answers: list[dict], expected: list[dict]) -> tuple[dict[str, list[int]], list[tuple[int, list[str]]]]:
    """Per field, [rows that agree, rows compared]; and the rows that differ, as (index, ``field: got X,
    expected Y`` items). Every field either side has is compared, so a row missing on either side, or a field
    missing from one (a recorded ``{}``), differs."""
    per_field: dict[str, list[int]] = {}
    wrong = []
    for i in range(max(len(answers), len(expected))):
        got = answers[i] if i < len(answers) else {}
        recorded = expected[i] if i < len(expected) else {}
        want = {k: recorded.get(k) for k in dict.fromkeys([*got, *recorded])}
        diff = compare(got, want)
        bad = {d.split(":", 1)[0] for d in diff}
        for key in want:
            tally = per_field.setdefault(key, [0, 0])
            tally[0] += key not in bad
            tally[1] += 1
        if diff:
            wrong.append((i, diff))
    return per_field, wrong

"""Top-k access streams for HiSparse: a parametric generator and replay of recorded indexer outputs.

A *stream* is what one (request, C4 layer) sees during decode: per step, the sequence length and the
compressed ids the indexer selected. This module owns the stream representation (:class:`StreamTrace`),
the access models that produce streams, and the on-disk top-k trace format.

Trace file format (``.parquet`` or ``.npz``), one row per (step, request, layer):

=========  ===============  ==============================================================
column     type             meaning
=========  ===============  ==============================================================
step       int              decode step; strictly increasing within one (request, layer)
request    int              request id (any integer label)
layer      int              C4 layer index (any integer label)
seq_len    int              raw sequence length at that step, current token included; the
                            indexer may select compressed ids in ``[0, seq_len // 4)``
ids        list of int      the selected compressed-token ids (at most top-k; may be empty)
=========  ===============  ==============================================================

In ``.npz`` the ``ids`` column is stored flat as ``ids`` plus ``offsets`` (length rows + 1, CSR style):
row ``i`` owns ``ids[offsets[i]:offsets[i + 1]]``. Dump it from SGLang by recording, per decode step,
``seq_lens`` and the indexer's top-k output per C4 layer (drop the ``-1`` padding).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from sim.base.errors import InputError
from sim.base.fileio import atomic_path

C4_RATIO = 4
"""Raw tokens per C4 compressed token."""

TRACE_COLUMNS = ("step", "request", "layer", "seq_len", "ids")


def compressed_len(seq_len: np.ndarray | int) -> np.ndarray | int:
    """Number of complete C4 tokens for a raw sequence length."""
    return seq_len // C4_RATIO


@dataclass(frozen=True)
class StreamTrace:
    """One (request, layer) access stream.

    ``ids`` is ``(n_steps, width)`` int32, padded with -1 on the right; every valid id of row ``s`` is a
    kernel token below ``seq_len[s] // ratio``: a C4 id for V4 (ratio 4), a raw position for DSA (ratio 1).
    Ids may repeat within a row (the hot buffer counts them once).
    """

    seq_len: np.ndarray
    ids: np.ndarray

    @property
    def n_steps(self) -> int:
        return int(self.seq_len.shape[0])

    def window(self, start: int, stop: int) -> StreamTrace:
        return StreamTrace(self.seq_len[start:stop], self.ids[start:stop])


class AccessModel(Protocol):
    """Anything that can produce the access stream of one (request, layer)."""

    def stream(
        self, request: int, layer: int, input_len: int, n_steps: int, top_k: int, rng: np.random.Generator
    ) -> StreamTrace: ...


# --------------------------------------------------------------------------------------------------
# Parametric generator
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParametricAccessParams:
    """Knobs of the synthetic indexer. All defaults are assumptions: no public per-step top-k data exist.

    Each step's top-k is built from four parts, in this order, without repeats:

    - ``sink_tokens`` first compressed ids, always selected. Assumption from the attention-sink effect
      (StreamingLLM); 4 compressed tokens = the first 16 raw tokens.
    - a recency part: the most recent ``recent_fraction * k`` compressed ids. Assumption: sparse indexers
      are known to favour local context; 0.25 of k (128 of 512 = the last 512 raw tokens for Flash) is a
      guess, not a measurement.
    - an overlap part: each id of the previous step's remaining (non-sink, non-recent) selection is kept
      with probability ``overlap``. Consecutive decode queries are similar; 0.8 is a guess.
    - the rest drawn from a Zipf-like popularity ranking over the history (exponent ``zipf_alpha``, a
      random ranking per stream): a few "important" positions are picked again and again. 1.0 is a guess.
    """

    sink_tokens: int = 4
    recent_fraction: float = 0.25
    overlap: float = 0.8
    zipf_alpha: float = 1.0

    def __post_init__(self) -> None:
        if self.sink_tokens < 0:
            raise ValueError(f"sink_tokens must be >= 0, got {self.sink_tokens}")
        for name in ("recent_fraction", "overlap"):
            v = getattr(self, name)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {v}")
        if self.zipf_alpha < 0:
            raise ValueError(f"zipf_alpha must be >= 0, got {self.zipf_alpha}")


@dataclass(frozen=True)
class ParametricAccess:
    """Synthetic indexer: deterministic given the ``numpy.random.Generator`` passed to :meth:`stream`.

    ``ratio``: raw tokens per id it selects: 4 for V4's C4 indexer (compressed ids), 1 for a DSA indexer, which
    selects raw positions (``layers/attention/dsa/dsa_topk_backend.py:272-309``)."""

    params: ParametricAccessParams = field(default_factory=ParametricAccessParams)
    ratio: int = C4_RATIO

    def stream(
        self, request: int, layer: int, input_len: int, n_steps: int, top_k: int, rng: np.random.Generator
    ) -> StreamTrace:
        p = self.params
        seq_len = input_len + 1 + np.arange(n_steps, dtype=np.int64)
        n_max = int(seq_len[-1]) // self.ratio if n_steps else 0
        out = np.full((n_steps, top_k), -1, dtype=np.int32)
        # Popularity: rank r (1-based) of a random permutation has weight r^-alpha.
        rank_of = rng.permutation(max(n_max, 1)).astype(np.int64)
        order = np.argsort(rank_of)  # order[r] = id with rank r
        weights = np.power(np.arange(1, max(n_max, 1) + 1, dtype=np.float64), -p.zipf_alpha)
        cdf = np.cumsum(weights)
        chosen = np.zeros(max(n_max, 1), dtype=bool)
        prev_rest = np.empty(0, dtype=np.int64)
        n_recent = int(round(p.recent_fraction * top_k))
        for s in range(n_steps):
            n = int(seq_len[s]) // self.ratio
            if n <= top_k:
                out[s, :n] = np.arange(n)
                prev_rest = np.empty(0, dtype=np.int64)
                continue
            sink = np.arange(min(p.sink_tokens, n))
            recent = np.arange(max(n - n_recent, sink.size), n)
            base = np.concatenate([sink, recent])
            chosen[base] = True
            keep = prev_rest[(rng.random(prev_rest.size) < p.overlap) & ~chosen[prev_rest]]
            keep = keep[: top_k - base.size]
            chosen[keep] = True
            need = top_k - base.size - keep.size
            fresh = _draw_popular(need, n, order, cdf, chosen, rng)
            chosen[fresh] = True
            rest = np.concatenate([keep, fresh])
            row = np.concatenate([base, rest])
            out[s, : row.size] = row
            chosen[row] = False
            prev_rest = rest
        return StreamTrace(seq_len, out)


def _draw_popular(
    need: int, n: int, order: np.ndarray, cdf: np.ndarray, chosen: np.ndarray, rng: np.random.Generator
) -> np.ndarray:
    """Draw ``need`` distinct unchosen ids < n, by popularity rank restricted to ids that exist yet."""
    picked: list[np.ndarray] = []
    got = 0
    taken = chosen.copy()
    for _ in range(8):
        if got >= need:
            break
        u = rng.random(2 * (need - got) + 16) * cdf[-1]
        ids = order[np.searchsorted(cdf, u, side="right").clip(max=order.size - 1)]
        ids = ids[ids < n]
        ids, first = np.unique(ids, return_index=True)
        ids = ids[np.argsort(first)]
        ids = ids[~taken[ids]][: need - got]
        taken[ids] = True
        picked.append(ids)
        got += ids.size
    if got < need:  # NOTE: rare with small n or steep alpha; fall back to uniform over what is left.
        left = np.flatnonzero(~taken[:n])
        picked.append(rng.choice(left, size=need - got, replace=False))
    return np.concatenate(picked).astype(np.int64) if picked else np.empty(0, dtype=np.int64)


# --------------------------------------------------------------------------------------------------
# Recorded traces
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TopkTrace:
    """A validated top-k trace: row arrays plus ids in CSR form (``ids[offsets[i]:offsets[i+1]]``)."""

    step: np.ndarray
    request: np.ndarray
    layer: np.ndarray
    seq_len: np.ndarray
    ids: np.ndarray
    offsets: np.ndarray

    def row_ids(self, i: int) -> np.ndarray:
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    def keys(self) -> list[tuple[int, int]]:
        """The (request, layer) pairs, in first-appearance order."""
        pairs = np.stack([self.request, self.layer], axis=1)
        _, first = np.unique(pairs, axis=0, return_index=True)
        return [(int(r), int(lay)) for r, lay in pairs[np.sort(first)]]

    def stream(self, request: int, layer: int) -> StreamTrace:
        rows = np.flatnonzero((self.request == request) & (self.layer == layer))
        width = int((self.offsets[rows + 1] - self.offsets[rows]).max(initial=0))
        ids = np.full((rows.size, max(width, 1)), -1, dtype=np.int32)
        for j, i in enumerate(rows):
            r = self.row_ids(int(i))
            ids[j, : r.size] = r
        return StreamTrace(self.seq_len[rows].astype(np.int64), ids)

    @classmethod
    def from_rows(
        cls,
        step: np.ndarray,
        request: np.ndarray,
        layer: np.ndarray,
        seq_len: np.ndarray,
        ids: list[np.ndarray],
        source: str = "<memory>",
    ) -> TopkTrace:
        lengths = np.array([len(x) for x in ids], dtype=np.int64)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        flat = np.concatenate([np.asarray(x) for x in ids]) if ids else np.empty(0, dtype=np.int64)
        return _validated(source, step, request, layer, seq_len, flat, offsets)


def _as_int(source: str, name: str, values: object) -> np.ndarray:
    arr = np.asarray(values)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
            return arr.astype(np.int64)
        raise InputError(f"column {name!r} must hold integers, got dtype {arr.dtype}", source=source)
    return arr.astype(np.int64).reshape(-1)


def _validated(
    source: str,
    step: object,
    request: object,
    layer: object,
    seq_len: object,
    ids: object,
    offsets: object,
) -> TopkTrace:
    """Check a trace and return it, or raise :class:`InputError` naming ``source`` and the problem."""
    cols = {n: _as_int(source, n, v) for n, v in
            (("step", step), ("request", request), ("layer", layer), ("seq_len", seq_len))}
    flat = _as_int(source, "ids", ids)
    off = _as_int(source, "offsets", offsets)
    n = cols["step"].size
    for name, arr in cols.items():
        if arr.size != n:
            raise InputError(f"column {name!r} has {arr.size} rows, 'step' has {n}", source=source)
    if off.size != n + 1 or off[0] != 0 or np.any(np.diff(off) < 0) or off[-1] != flat.size:
        raise InputError("ids offsets are not a valid CSR index over the rows", source=source)
    if n == 0:
        raise InputError("trace has no rows", source=source)
    if np.any(cols["step"] < 0):
        raise InputError(f"negative step at row {int(np.argmax(cols['step'] < 0))}", source=source)
    if np.any(cols["seq_len"] < 1):
        raise InputError(f"seq_len < 1 at row {int(np.argmax(cols['seq_len'] < 1))}", source=source)
    if flat.size and flat.min() < 0:
        row = int(np.searchsorted(off, int(np.argmax(flat < 0)), side="right") - 1)
        raise InputError(f"negative id at row {row} (step {int(cols['step'][row])})", source=source)
    row_of_id = np.repeat(np.arange(n), np.diff(off))
    limit = compressed_len(cols["seq_len"])[row_of_id]
    bad = flat >= limit
    if np.any(bad):
        j = int(np.argmax(bad))
        row = int(row_of_id[j])
        raise InputError(
            f"id {int(flat[j])} at row {row} (step {int(cols['step'][row])}) is beyond the compressed "
            f"length {int(limit[j])} (seq_len {int(cols['seq_len'][row])} // {C4_RATIO})",
            source=source,
        )
    order = np.lexsort((np.arange(n), cols["layer"], cols["request"]))
    same = (np.diff(cols["request"][order]) == 0) & (np.diff(cols["layer"][order]) == 0)
    nonmono = same & (np.diff(cols["step"][order]) <= 0)
    if np.any(nonmono):
        row = int(order[int(np.argmax(nonmono)) + 1])
        raise InputError(
            f"steps not strictly increasing for request {int(cols['request'][row])} layer "
            f"{int(cols['layer'][row])} at row {row} (step {int(cols['step'][row])})",
            source=source,
        )
    return TopkTrace(cols["step"], cols["request"], cols["layer"], cols["seq_len"], flat, off)


def save_topk_trace(path: str | os.PathLike, trace: TopkTrace) -> None:
    """Write ``trace`` atomically; the suffix (``.parquet`` or ``.npz``) picks the format."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".parquet", ".npz"):
        raise InputError("top-k trace must end in .parquet or .npz", source=str(path))
    with atomic_path(path) as tmp:
        if suffix == ".npz":
            with open(tmp, "wb") as fh:
                np.savez_compressed(fh, step=trace.step, request=trace.request, layer=trace.layer,
                                    seq_len=trace.seq_len, ids=trace.ids, offsets=trace.offsets)
        else:
            import pyarrow as pa
            import pyarrow.parquet as pq

            ids = pa.ListArray.from_arrays(pa.array(trace.offsets.astype(np.int32)), pa.array(trace.ids))
            table = pa.table({"step": trace.step, "request": trace.request, "layer": trace.layer,
                              "seq_len": trace.seq_len, "ids": ids})
            pq.write_table(table, tmp)


def load_topk_trace(path: str | os.PathLike) -> TopkTrace:
    """Read and validate a top-k trace; raises :class:`InputError` naming the file and the problem."""
    path = Path(path)
    source = str(path)
    suffix = path.suffix.lower()
    if suffix not in (".parquet", ".npz"):
        raise InputError("top-k trace must end in .parquet or .npz", source=source)
    if not path.exists():
        raise InputError("file not found", source=source)
    try:
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as z:
                data = {k: z[k] for k in z.files}
            missing = [c for c in (*TRACE_COLUMNS, "offsets") if c not in data]
            if missing:
                raise InputError(f"missing column(s) {', '.join(missing)}", source=source)
            return _validated(source, data["step"], data["request"], data["layer"], data["seq_len"],
                              data["ids"], data["offsets"])
        import pyarrow as pa
        import pyarrow.parquet as pq

        table = pq.read_table(path)
    except InputError:
        raise
    except Exception as exc:  # unreadable: corrupt file, wrong format
        raise InputError(f"cannot read top-k trace: {exc}", source=source) from exc
    missing = [c for c in TRACE_COLUMNS if c not in table.column_names]
    if missing:
        raise InputError(f"missing column(s) {', '.join(missing)}", source=source)
    ids_col = table.column("ids").combine_chunks()
    if not (pa.types.is_list(ids_col.type) or pa.types.is_large_list(ids_col.type)):
        raise InputError(f"column 'ids' must be a list of integers, got {ids_col.type}", source=source)
    if ids_col.null_count:
        raise InputError("column 'ids' has null rows (use an empty list)", source=source)
    offsets = np.asarray(ids_col.offsets, dtype=np.int64)
    flat = ids_col.values.to_numpy(zero_copy_only=False)
    offsets = offsets - offsets[0]
    flat = flat[: offsets[-1]] if offsets.size else flat
    cols = {}
    for c in ("step", "request", "layer", "seq_len"):
        col = table.column(c)
        if col.null_count:
            raise InputError(f"column {c!r} has nulls", source=source)
        cols[c] = col.to_numpy()
    return _validated(source, cols["step"], cols["request"], cols["layer"], cols["seq_len"], flat, offsets)


@dataclass(frozen=True)
class TraceAccess:
    """Replay a recorded trace: request i and layer j map onto the trace's streams, cycling.

    The recorded sequence lengths are used as they are (``input_len`` is ignored); ``n_steps`` truncates.
    """

    trace: TopkTrace

    def stream(
        self, request: int, layer: int, input_len: int, n_steps: int, top_k: int, rng: np.random.Generator
    ) -> StreamTrace:
        keys = self.trace.keys()
        requests = list(dict.fromkeys(r for r, _ in keys))
        req = requests[request % len(requests)]
        layers = [lay for r, lay in keys if r == req]
        s = self.trace.stream(req, layers[layer % len(layers)])
        return s.window(0, n_steps)

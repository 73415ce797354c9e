"""Agentic traces: Weka/AgentX trajectories and Qwen-Bailian chat chains, read into page-keyed calls.

**Weka** (the SemiAnalysis ``cc-traces-weka-*`` corpora that InferenceX's AgentX replays with aiperf): one
JSON object per trajectory (a JSON-lines file, a single ``.json`` file, or a folder of them) with ``id``,
``block_size`` (64), ``hash_id_scope`` (``local``: ids are namespaced per trajectory, a trajectory and its
own subagents share them) and ``requests``: calls (``type`` ``n`` or ``s``: ``t`` seconds from the
trajectory start, ``in``, ``out``, ``hash_ids``, ``api_time``, ``think_time``) and subagent groups
(``type: subagent``: ``t`` at the spawn, ``duration_ms``, and inner ``requests``). Field meanings follow
aiperf's ``src/aiperf/dataset/loader/weka_trace_models.py``; an inner ``t`` earlier than its group's spawn
is taken as relative to the spawn, and a group ends at ``t + duration_ms`` or else at its last inner call's
``t + api_time`` (``weka_trace.py``: ``_subagent_request_absolute_t``, ``_sa_end_seconds``).

**Bailian** (Alibaba's ``qwen-bailian-usagetraces-anon``): JSON lines with ``chat_id``, ``parent_chat_id``
(-1 for a root), ``timestamp`` (s), ``input_length``, ``output_length``, ``type``, ``turn`` and ``hash_ids``
of 16-token blocks, in one namespace for the whole file.

Blocks are not pages: SGLang pages the tokens by 256 (V4), so a page is a hit only if every block in it is.
A page's key therefore names its blocks *and* the page before it (interned to an int, so the tree hashes
ints), which makes keys prefix-unique, as L3 content addressing needs. Tokens a request's ``hash_ids`` do
not cover (aiperf fills such a tail with fresh text) get keys of their own that nothing else shares.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from sim.base.errors import InputError
from sim.base.inputs import (
    MAX_REQUEST_TOKENS,
    MAX_SIMULATED_S,
    MAX_WORKLOAD_PAGES,
    check_input,
    check_trace_record,
    check_unchanged,
    file_stamp,
    json_objects,
    json_records,
    num_text,
    parse_json,
    read_text,
)
from sim.workload.pagekeys import PageRuns, check_nesting
from sim.workload.request import Request

__all__ = ["Call", "PageBudget", "PageInterner", "Subagent", "Trajectory", "WekaCorpus", "iter_bailian",
           "iter_trajectory_requests", "read_bailian", "read_weka", "trajectory_requests", "weka_trajectory"]

JOIN_EPS_S = 1e-6  # aiperf's _JOIN_EPSILON_SECONDS


class PageInterner:
    """Page keys as small ints: ``(previous page's id, the page's block ids)`` -> id, so equal ids mean
    equal prefixes. One interner is one hash-id namespace. ``budget``: the page keys still allowed a replay
    that holds its trajectories for the whole run (a lane replay of a corpus and a streamed trace need none)."""

    def __init__(self, budget: PageBudget | None = None) -> None:
        self._ids: dict[tuple, int] = {}
        self._fresh = -(1 << 62)  # uncovered tails: negative ids, never shared, ascending (one run, PageRuns)
        self.budget = budget

    def pages(self, hash_ids: list[int], block: int, page: int, n_tokens: int) -> list[int]:
        """The keys of ``n_tokens``' whole pages (the reader checked that the sizes nest: check_nesting)."""
        n_pages = n_tokens // page
        ids, out, prev = self._ids, [], 0
        if page % block == 0:
            per = page // block
            covered = min(n_pages, len(hash_ids) // per)
            for i in range(covered):
                prev = ids.setdefault((prev, tuple(hash_ids[i * per : (i + 1) * per])), len(ids) + 1)
                out.append(prev)
        else:
            per = block // page
            covered = min(n_pages, len(hash_ids) * per)
            for i in range(covered):
                prev = ids.setdefault((prev, hash_ids[i // per], i % per), len(ids) + 1)
                out.append(prev)
        for _ in range(n_pages - len(out)):
            out.append(self._fresh)
            self._fresh += 1
        return out


@dataclass(slots=True)
class PageBudget:
    """Page keys trajectories may still hold, shared by every trajectory of a replay that holds them all for
    the whole run (an open-loop Weka replay, generated sessions), so a file or a generator that would expand
    past ``limit`` is refused at the call that passes it, not after it has filled the memory."""

    limit: int = MAX_WORKLOAD_PAGES
    used: int = 0

    def take(self, pages: int, page: int, where: _Where, at: str) -> None:
        self.used += pages
        if self.used > self.limit:
            where.fail(at, f"the trajectories so far pass {self.limit:,} page keys of {page} tokens, the most "
                       "this replay holds (fewer or shorter trajectories)")  # fmt: skip


@dataclass(slots=True)
class Call:
    """One recorded request. ``pages``: interned page keys of its input (see :class:`PageInterner`), as runs."""

    t: float
    api_time: float | None
    input_len: int
    output_len: int
    pages: PageRuns
    joins: list[int] = field(default_factory=list)  # subagent groups (step indices) this call waits for


@dataclass(slots=True)
class Subagent:
    """A subagent group: its calls run as a chain of their own from ``t``; it has ended at ``end_t``."""

    t: float
    end_t: float
    calls: list[Call]


@dataclass
class Trajectory:
    """One trajectory (aiperf's session tree): its parent's calls and subagent groups in recorded order."""

    id: str
    steps: list[Call | Subagent]

    @property
    def main(self) -> list[tuple[int, Call]]:
        return [(i, s) for i, s in enumerate(self.steps) if isinstance(s, Call)]

    def calls(self) -> Iterator[Call]:
        for s in self.steps:
            if isinstance(s, Call):
                yield s
            else:
                yield from s.calls


def end_to_start(prev: Call, nxt_t: float) -> float:
    """The idle gap between ``prev`` ending and a request at ``nxt_t`` starting: ``t_k - (t_{k-1} +
    api_{k-1})``, at least 0; a missing ``api_time`` counts as 0 (aiperf ``_end_to_start_delay_ms``)."""
    return max(0.0, nxt_t - prev.t - (prev.api_time or 0.0))


# ----- Weka ---------------------------------------------------------------------------------------------
class WekaCorpus(Sequence):
    """A Weka corpus as a lane replay draws from it: iterating it the first time (the run's survey) reads and
    checks every trajectory and keeps only where each one is; ``corpus[k]`` reads trajectory k again. A lane
    replay so holds the trajectories its lanes are playing, not the corpus, whose page keys can pass what
    memory holds (AgentX's has ~57K parent calls, half of them past 256K tokens). ``budget``: the page keys the
    caller will keep, for one that holds every trajectory (:func:`read_weka`)."""

    def __init__(self, path: str | Path, *, page_size: int, max_trajectories: int | None = None,
                 budget: PageBudget | None = None) -> None:  # fmt: skip
        check_input(path, "corpus", folder=True)
        self.path, self.page, self.most, self.budget = Path(path), page_size, max_trajectories, budget
        self._where: list[tuple[str, int | None, int]] | None = None  # (source, line or None, byte offset)
        self._stamps: dict[str, tuple | None] = {}

    def _read_through(self) -> list[tuple[str, int | None, int]]:
        if self._where is None:
            raise TypeError("a corpus is indexed once it has been read through")
        return self._where

    def __len__(self) -> int:
        return len(self._read_through())

    def __getitem__(self, k: int) -> Trajectory:
        source, line, offset = self._read_through()[k]
        check_unchanged(source, self._stamps[source], "a lane replay reads a trajectory again as a lane draws it")
        rec = _load_json(Path(source)) if line is None else next(json_records(source, offset=offset, lineno=line - 1))[2]
        return weka_trajectory(rec, self.page, source, line, checked=True)  # its ids were checked on the read-through

    def __iter__(self) -> Iterator[Trajectory]:
        return self._scan() if self._where is None else map(self.__getitem__, range(len(self)))

    def _scan(self) -> Iterator[Trajectory]:
        where: list[tuple[str, int | None, int]] = []
        for source, line, offset, rec in _weka_objects(self.path):
            if self.most is not None and len(where) >= self.most:
                break
            self._stamps.setdefault(source, file_stamp(source))
            yield weka_trajectory(rec, self.page, source, line, self.budget)
            where.append((source, line, offset))
        if not where:
            raise InputError("holds no trajectories", source=str(self.path))
        self._where = where


def read_weka(path: str | Path, *, page_size: int, max_trajectories: int | None = None) -> list[Trajectory]:
    """Read Weka trajectories, every one held: JSON lines, one ``.json`` object, or a folder of ``.json`` files."""
    return list(WekaCorpus(path, page_size=page_size, max_trajectories=max_trajectories, budget=PageBudget()))


def _weka_objects(path: Path) -> Iterator[tuple[str, int | None, int, dict]]:
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.suffix == ".json")
        for f in files:
            yield str(f), None, 0, _load_json(f)
        return
    if path.suffix == ".json":
        yield str(path), None, 0, _load_json(path)
        return
    for lineno, offset, rec in json_records(path):
        yield str(path), lineno, offset, rec


def _load_json(path: Path) -> dict:
    rec = parse_json(read_text(path, "trace"), str(path))  # the input rules: size, UTF-8, strict JSON, nesting
    if not isinstance(rec, dict):
        raise InputError("expected a JSON object (one trajectory)", source=str(path))
    check_trace_record(rec, str(path))
    return rec


def weka_trajectory(rec: dict, page: int, source: str, line: int | None, budget: PageBudget | None = None, *,
                    checked: bool = False) -> Trajectory:  # fmt: skip
    """One trajectory's calls and groups. ``checked``: its block ids passed the checks on an earlier read of
    the same (unchanged) file, so they are not walked again. A call may carry its keys as ``pages`` (a
    :class:`PageRuns`, which no JSON makes): generated sessions (:mod:`sim.workload.agentic`) do."""
    where = _Where(source, line, checked)
    tid = str(where.get(rec, "id", (str, int)))
    block = where.get(rec, "block_size", int)
    if block <= 0:
        where.fail("block_size", f"must be > 0, got {block}")
    check_nesting(block, page, f"block_size: {block} and the scenario's page size {page} (hicache.page_size)",
                  source, line)  # fmt: skip
    scope = rec.get("hash_id_scope", "local")
    if scope != "local":
        where.fail("hash_id_scope", f"only 'local' is defined (ids namespaced per trajectory), got {scope!r}")
    reqs = where.get(rec, "requests", list)
    interner = PageInterner(budget)
    steps: list[Call | Subagent] = []
    pending: list[int] = []  # subagent groups not yet joined
    last_t = -math.inf
    for i, r in enumerate(reqs):
        at = f"requests[{i}]"
        if not isinstance(r, dict):
            where.fail(at, "expected a JSON object")
        kind = where.get(r, "type", str, at)
        if kind == "subagent":
            group = _weka_subagent(r, block, page, interner, where, at)
            pending.append(len(steps))
            steps.append(group)
            continue
        if kind not in ("n", "s"):
            where.fail(f"{at}.type", f"expected 'n', 's' or 'subagent', got {kind!r}")
        call = _weka_call(r, block, page, interner, where, at)
        if call.t < last_t - JOIN_EPS_S:
            where.fail(f"{at}.t", f"{call.t:g} s is before the previous call's {last_t:g} s")
        last_t = call.t
        # The parent's next call after a group it waited on starts after the group ended; a group that
        # ends later runs in the background of this call (weka_trace.py's parent.t >= sa_end join scan).
        call.joins = [j for j in pending if call.t + JOIN_EPS_S >= steps[j].end_t]
        pending = [j for j in pending if j not in call.joins]
        steps.append(call)
    if not any(isinstance(s, Call) for s in steps):
        where.fail("requests", "a trajectory needs at least one call of its own")
    return Trajectory(tid, steps)


def _weka_subagent(r: dict, block: int, page: int, interner: PageInterner, where: _Where, at: str) -> Subagent:
    t = where.number(r, "t", at)
    inner = where.get(r, "requests", list, at)
    calls = []
    for k, ir in enumerate(inner):
        sub = f"{at}.requests[{k}]"
        if not isinstance(ir, dict) or ir.get("type") not in ("n", "s"):
            where.fail(f"{sub}.type", "a subagent's requests are calls of type 'n' or 's'")
        c = _weka_call(ir, block, page, interner, where, sub)
        if c.t + JOIN_EPS_S < t:  # recorded relative to the spawn (older captures)
            c.t += t
        if calls and c.t < calls[-1].t - JOIN_EPS_S:
            where.fail(f"{sub}.t", f"{c.t:g} s is before the previous inner call's {calls[-1].t:g} s")
        calls.append(c)
    if not calls:
        where.fail(f"{at}.requests", "a subagent group needs at least one call")
    dur = r.get("duration_ms")
    if dur is not None:
        if isinstance(dur, bool) or not isinstance(dur, (int, float)) or dur < 0:
            where.fail(f"{at}.duration_ms", f"expected milliseconds >= 0 or null, got {dur!r}")
        end = t + dur / 1000.0
        if end > MAX_SIMULATED_S:
            where.fail(f"{at}.duration_ms", f"the group ends at {end:.3g} s, over the limit of {MAX_SIMULATED_S:g} s "
                       "of simulated time")  # fmt: skip
    else:
        end = max(c.t + (c.api_time or 0.0) for c in calls)
    return Subagent(t, end, calls)


def _weka_call(r: dict, block: int, page: int, interner: PageInterner, where: _Where, at: str) -> Call:
    t = where.number(r, "t", at)
    n_in = where.get(r, "in", int, at)
    n_out = where.get(r, "out", int, at)
    ids = where.get(r, "hash_ids", list, at) if "hash_ids" in r else []
    api = r.get("api_time")
    if api is not None and (isinstance(api, bool) or not isinstance(api, (int, float)) or api < 0):
        where.fail(f"{at}.api_time", f"expected seconds >= 0 or null, got {api!r}")
    where.at_least((f"{at}.t", t, 0), (f"{at}.in", n_in, 1), (f"{at}.out", n_out, 0))
    if t + (api or 0.0) > MAX_SIMULATED_S:
        where.fail(f"{at}.api_time" if api else f"{at}.t", f"ends at {t + (api or 0.0):.3g} s, over the limit of "
                   f"{MAX_SIMULATED_S:g} s of simulated time")  # fmt: skip
    if not where.checked:
        _check_ids(ids, n_in, block, where, f"{at}.hash_ids")
    if n_in + n_out > MAX_REQUEST_TOKENS:
        where.fail(at, f"in + out of {n_in + n_out:,} tokens, over the limit of {MAX_REQUEST_TOKENS:,} per request")
    if interner.budget is not None:
        interner.budget.take(n_in // page, page, where, at)
    pages = r.get("pages")
    if not isinstance(pages, PageRuns):
        pages = PageRuns.of(interner.pages(ids, block, page, n_in))
    return Call(float(t), None if api is None else float(api), n_in, n_out, pages)


def _check_ids(ids: list, n_in: int, block: int, where: _Where, at: str) -> None:
    if not all(isinstance(h, int) and not isinstance(h, bool) for h in ids):
        where.fail(at, "expected a list of integer block ids")
    if len(ids) > math.ceil(n_in / block):
        where.fail(at, f"{len(ids)} block ids for {n_in} tokens: at most {math.ceil(n_in / block)} at block size {block}")


@dataclass
class _Where:
    """Names the file, line and field of a bad value in one line."""

    source: str
    line: int | None
    checked: bool = False  # the block ids passed on an earlier read

    def fail(self, fieldname: str, message: str):
        raise InputError(f"{fieldname}: {message}", source=self.source, line=self.line)

    def get(self, rec: dict, name: str, kind, at: str = ""):
        path = f"{at}.{name}" if at else name
        if name not in rec:
            self.fail(path, "missing")
        value = rec[name]
        if isinstance(value, bool) or not isinstance(value, kind):
            self.fail(path, f"unexpected value {repr(value)[:60]}")
        if isinstance(value, int) and abs(value) >= 1 << 63:
            self.fail(path, f"{num_text(value)} is out of range")
        return value

    def at_least(self, *checks: tuple[str, float, float]) -> None:
        for name, value, low in checks:
            if value < low:
                self.fail(name, f"must be >= {low}, got {value}")

    def number(self, rec: dict, name: str, at: str = "") -> float:
        """A time or duration (its bounds were checked with the whole record: sim.base.inputs.check_trace_record)."""
        return float(self.get(rec, name, (int, float), at))


# ----- Bailian ------------------------------------------------------------------------------------------
def read_bailian(path: str | Path, **kwargs) -> list[Request]:
    """:func:`iter_bailian`'s requests, read now."""
    return list(iter_bailian(path, **kwargs))


def iter_bailian(path: str | Path, *, page_size: int, block_size: int = 16, time_scale: float = 1.0,
                 max_requests: int | None = None) -> Iterator[Request]:  # fmt: skip
    """Read a Qwen-Bailian trace in timestamp order, a record at a time (the chat roots and the page
    interner grow with the trace: a chat's parent may be any earlier one); ``session`` is the chain's root ``chat_id``, ``round``
    its ``turn``. A ``parent_chat_id`` must name an earlier request (or be -1)."""
    if block_size <= 0 or page_size <= 0:
        raise InputError("block and page sizes must be > 0", source=str(path))
    check_nesting(block_size, page_size, f"workload.block_size {block_size} and hicache.page_size {page_size}",
                  str(path))  # fmt: skip
    interner, root_of, count, last = PageInterner(), {}, 0, 0.0
    for lineno, rec in json_objects(Path(path)):
        if max_requests is not None and count >= max_requests:
            break
        where = _Where(str(path), lineno)
        chat = where.get(rec, "chat_id", int)
        parent = where.get(rec, "parent_chat_id", int)
        ts = where.number(rec, "timestamp")
        n_in = where.get(rec, "input_length", int)
        n_out = where.get(rec, "output_length", int)
        turn = where.get(rec, "turn", int)
        ids = where.get(rec, "hash_ids", list)
        where.at_least(("timestamp", ts, 0), ("input_length", n_in, 1), ("output_length", n_out, 0), ("turn", turn, 0))
        if parent != -1 and parent not in root_of:
            where.fail("parent_chat_id", f"{parent} names no earlier request")
        if chat in root_of:
            where.fail("chat_id", f"{chat} appears twice")
        _check_ids(ids, n_in, block_size, where, "hash_ids")
        if n_in + n_out > MAX_REQUEST_TOKENS:
            where.fail("input_length", f"input + output of {n_in + n_out:,} tokens, over the limit of "
                       f"{MAX_REQUEST_TOKENS:,} per request")  # fmt: skip
        if ts * time_scale > MAX_SIMULATED_S:
            where.fail("timestamp", f"arrives at {ts * time_scale:.3g} s (x time_scale {time_scale:g}), over the "
                       f"limit of {MAX_SIMULATED_S:g} s of simulated time")  # fmt: skip
        if count and ts * time_scale < last:
            where.fail("timestamp", "goes backwards (a trace is in arrival order)")
        root_of[chat] = root_of[parent] if parent != -1 else chat
        yield Request(count, ts * time_scale, n_in, n_out, interner.pages(ids, block_size, page_size, n_in),
                      session=root_of[chat], round=turn)  # fmt: skip
        count, last = count + 1, ts * time_scale
    if not count:
        raise InputError("the trace holds no requests", source=str(path))


def trajectory_requests(trajs: list[Trajectory]) -> list[Request]:
    """:func:`iter_trajectory_requests`' requests, made now."""
    return list(iter_trajectory_requests(trajs))


def iter_trajectory_requests(trajs: list[Trajectory], time_scale: float = 1.0) -> Iterator[Request]:
    """Every call of every trajectory at its recorded time (x ``time_scale``), all trajectories from time 0:
    the open-loop replay of ``workload.kind: trace``, each request made when reached. Keys are namespaced
    per trajectory (``hash_id_scope: local``)."""
    rows = []
    for n, tr in enumerate(trajs):
        for k, c in enumerate(tr.calls()):
            rows.append((c.t, n, k, c))
    rows.sort(key=lambda r: (r[0], r[1], r[2]))
    for i, (t, n, k, c) in enumerate(rows):
        yield Request(i, t * time_scale, c.input_len, c.output_len, [(n, p) for p in c.pages], session=n, round=k)

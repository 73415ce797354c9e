"""Agentic sessions generated when no trace is at hand, written as Weka/AgentX trajectories.

A trajectory is a coding agent's session: a system + tools prefix, then turns whose input is the whole
history (the previous input, the previous output, and a few thousand new tokens of tool results) with an
idle gap (think / tool time) before each, until the session's turn count is reached or its context would
pass ``max_context``; now and then a turn spawns a group of subagents, each with a fresh context of its
own (sharing only the system prefix with its parent), which run concurrently and which the parent's next
turn waits for. The output is the Weka format :func:`sim.workload.trajectory.read_weka` reads, so a generated
session replays through the same lanes as a recorded one, and ``tools/make_agentic_fixtures.py`` writes
the bundled files from it.

Where the defaults come from (``AgenticWorkload``'s field descriptions say which is which): aiperf's
AgentX FAQ (``docs/benchmark-modes/semianalysis-agentx-faq.md``) for the SemiAnalysis ``062126`` corpus (393
trajectories, ~57K parent calls and ~42K subagent calls in all, half the parent calls past 256K tokens; its
example trajectory's 1,856 tool + 2,304 system tokens and 312-822 output tokens), InferenceX's corpus builder
(a call's input capped near 990K tokens), AgentX's description of its traffic (contexts growing by a few
thousand tokens a turn), and AISimulate's fixture trajectory (129 calls, four subagent groups); how much a call
answers and how long a session idles between calls from the distributions aiperf's agentic session synthesizer
ships for its agentic-coding dataset (``agentic_code_gen/datasets/1k_sessions_200k_ctx/manifest.json``: outputs
lognormal with mean 1,000 and median 800; gaps an agent's, mean 5 s, median 2 s, or with probability 0.3 a
human's, mean 30 s, median 15 s). The session-length and context-growth shapes (geometric, lognormal) are
assumptions, not fitted; docs/notes/agentic.md has the table.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from sim.base.errors import InputError
from sim.workload.pagekeys import PageRuns, check_nesting
from sim.workload.trajectory import Trajectory, weka_trajectory

__all__ = ["MAX_GENERATED_CALLS", "MAX_WRITTEN_BLOCK_IDS", "generate_sessions", "generated_trajectories"]

BLOCK = 64  # the Weka corpora's block size
# Calls generated sessions may hold in all: a replay holds every generated session for the whole run, each call
# as a few ints of page-key runs (sim.workload.pagekeys) whatever its context, ~0.3 KB a call: 2M calls stay
# within ~0.6 GB and a few seconds of making. AgentX's corpus has ~99K calls.
MAX_GENERATED_CALLS = 2_000_000
# Block ids one session written out in the Weka format may hold (tools/make_agentic_fixtures.py): written ids
# grow with the square of a session's turns, so a session whose context barely grows is refused as it passes.
MAX_WRITTEN_BLOCK_IDS = 5_000_000


def _lognormal(rng: np.random.Generator, mean: float, sigma: float) -> float:
    """A lognormal draw with the given mean (not median)."""
    return float(rng.lognormal(math.log(mean) - sigma * sigma / 2, sigma)) if mean > 0 else 0.0


class _Count:
    """Calls made so far, refused past :data:`MAX_GENERATED_CALLS`."""

    def __init__(self) -> None:
        self.calls = 0

    def add(self) -> None:
        self.calls += 1
        if self.calls > MAX_GENERATED_CALLS:
            raise InputError(f"workload.sessions: the generated sessions pass {MAX_GENERATED_CALLS:,} calls (fewer "
                             "sessions or turns_per_session, or fewer subagents)")  # fmt: skip


def _call(rng, w, t: float, prev_in: int, prev_out: int, new_tokens: int, model: str, count: _Count) -> dict | None:
    """The call after one of ``prev_in`` input and ``prev_out`` output tokens (or the system prefix): its input
    repeats them and adds ``new_tokens``; None past ``max_context``. Its keys are given later (``hash_ids``
    by :func:`generate_sessions`, ``pages`` by :func:`generated_trajectories`), in the order calls appear."""
    n_in = prev_in + prev_out + new_tokens
    if n_in > w.max_context:
        return None
    n_out = max(1, int(_lognormal(rng, w.output_tokens, w.output_sigma)))
    count.add()
    return {"t": round(t, 3), "type": "n", "model": model, "in": n_in, "out": n_out, "hash_ids": None,
            "api_time": round(w.api_s_per_output_token * n_out, 3)}  # fmt: skip


def _idle(rng, w) -> float:
    """The idle gap before a parent call: an agent's (tool time) or, with ``human_fraction``, a human's think time,
    the two-component mixture of aiperf's synthesizer (``distributions.py``: ``sample_mixture_delay``). Its
    scaling by the context's share of the synthesizer's 200K prompt cap (``session_synthesizer.py``:
    ``_sample_delay_ms``) is not taken: the corpus's contexts run to 990K."""
    if w.human_fraction and rng.random() < w.human_fraction:
        return _lognormal(rng, w.human_time_s, w.human_sigma)
    return _lognormal(rng, w.think_time_s, w.think_sigma)


def _growth(rng, w) -> int:
    return max(1, int(_lognormal(rng, w.context_growth_tokens, w.growth_sigma)))


def _subagent(rng, w, spawn: float, count: _Count) -> tuple[dict, float]:
    """A subagent group of one chain from ``spawn``, and the time its last call ended."""
    t, prev, calls = spawn, (w.system_tokens, 0), []
    for k in range(max(1, int(rng.geometric(1.0 / w.subagent_turns)))):
        if k:
            t += _lognormal(rng, w.think_time_s, w.think_sigma)
        call = _call(rng, w, t, *prev, w.subagent_first_tokens if k == 0 else _growth(rng, w), "sub", count)
        if call is None:
            break
        calls.append(call)
        t += call["api_time"]
        prev = (call["in"], call["out"])
    end = t
    return {"t": round(spawn, 3), "type": "subagent", "agent_id": "", "subagent_type": "Explore",
            "status": "completed", "duration_ms": int(round((end - spawn) * 1000)), "models": ["sub"],
            "requests": calls}, end  # fmt: skip


def _skeletons(w, rng: np.random.Generator, n: int) -> Iterator[dict]:
    """``n`` trajectories in the Weka format without their keys, made one at a time."""
    count = _Count()
    for s in range(n):
        turns = int(rng.geometric(1.0 / w.turns_per_session))
        t, prev, requests = 0.0, (w.system_tokens, 0), []
        for k in range(turns):
            call = _call(rng, w, t, *prev, w.first_turn_tokens if k == 0 else _growth(rng, w), "main", count)
            if call is None:
                break
            requests.append(call)
            t += call["api_time"]
            prev = (call["in"], call["out"])
            if k + 1 < turns and rng.random() < w.subagent_probability:
                spawn = t + _lognormal(rng, w.spawn_gap_s, w.think_sigma)
                ends = []
                for _ in range(int(rng.integers(1, w.max_fanout + 1))):
                    group, end = _subagent(rng, w, spawn, count)
                    group["agent_id"] = f"agent_{len(requests):03d}"
                    requests.append(group)
                    ends.append(end)
                t = max(ends)
            t += _idle(rng, w)
        yield {"id": f"synthetic-{s:04d}", "models": ["main", "sub"], "block_size": BLOCK,
               "hash_id_scope": "local", "requests": requests}  # fmt: skip


def _chains(requests: list[dict]) -> Iterator[tuple[bool, dict]]:
    """A session's calls in the order they appear, each with whether it starts a chain (a subagent's first
    call, from the system prefix; the parent's chain starts once, at the session's first call)."""
    first_parent = True
    for r in requests:
        if r["type"] == "subagent":
            for k, c in enumerate(r["requests"]):
                yield k == 0, c
        else:
            yield first_parent, r
            first_parent = False


def generate_sessions(w, rng: np.random.Generator, n: int) -> Iterator[dict]:
    """``n`` trajectories in the Weka format (``w``: an AgenticWorkload, or anything with its fields) with
    their ``hash_ids``: each call keeps the whole blocks of its chain's previous input and takes new ids, in
    one namespace a session (``hash_id_scope: local``). What the bundled fixtures are written from."""
    for rec in _skeletons(w, rng, n):
        system = list(range(1, math.ceil(w.system_tokens / BLOCK) + 1))
        next_id, held = len(system) + 1, 0
        parent = (w.system_tokens, system)
        prev: tuple[int, list[int]] = parent
        for starts, call in _chains(rec["requests"]):
            if starts:
                prev = (w.system_tokens, system)
            elif call["model"] == "main":
                prev = parent
            keep = prev[1][: prev[0] // BLOCK]
            fresh = math.ceil(call["in"] / BLOCK) - len(keep)
            call["hash_ids"] = keep + list(range(next_id, next_id + fresh))
            next_id += fresh
            held += len(call["hash_ids"])
            if held > MAX_WRITTEN_BLOCK_IDS:
                raise InputError(f"workload: a generated session's calls pass {MAX_WRITTEN_BLOCK_IDS:,} block ids of "
                                 f"{BLOCK} tokens (fewer turns, faster context growth or a smaller max_context)")  # fmt: skip
            prev = (call["in"], call["hash_ids"])
            if call["model"] == "main":
                parent = prev
        yield rec


def generated_trajectories(w, rng: np.random.Generator, n: int, page: int) -> list[Trajectory]:
    """The sessions :func:`generate_sessions` writes (the same draws), as lane trajectories whose page keys are
    made as runs (:class:`PageRuns`) without block ids: a page is kept while every block in it is (the whole
    blocks of the chain's previous input), every page after it is fresh, one key namespace a session."""
    check_nesting(BLOCK, page, f"hicache.page_size: {page} and the generated sessions' block size {BLOCK}")

    def kept(tokens: int) -> int:
        return tokens // BLOCK * BLOCK // page

    out = []
    for rec in _skeletons(w, rng, n):
        system = PageRuns(((1, kept(w.system_tokens)),) if kept(w.system_tokens) else ())
        next_key = len(system) + 1
        parent = prev = (w.system_tokens, system)
        for starts, call in _chains(rec["requests"]):
            if starts:
                prev = (w.system_tokens, system)
            elif call["model"] == "main":
                prev = parent
            keep = kept(prev[0])
            fresh = call["in"] // page - keep
            call["pages"] = prev[1].prefix(keep).then(next_key, fresh)
            next_key += max(0, fresh)
            del call["hash_ids"]
            prev = (call["in"], call["pages"])
            if call["model"] == "main":
                parent = prev
        out.append(weka_trajectory(rec, page, "workload", None))
    return out

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
example trajectory's 1,856 tool + 2,304 system tokens and 312-822 output tokens), the issue's description
of AgentX traffic (contexts of 100K-200K tokens growing by a few thousand tokens a turn), and AISimulate's
fixture trajectory (129 calls, four subagent groups). The distributions' shapes (lognormal, geometric) are
assumptions, not fitted.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from sim.base.errors import InputError

__all__ = ["MAX_GENERATED_PAGES", "generate_sessions"]

BLOCK = 64  # the Weka corpora's block size
# Page keys generated sessions may hold in all, and block ids one session may: every session is made before
# the run starts (~1 s of CPU a million keys), so a start check stays within seconds. The defaults (64
# sessions) make 1.75M keys at 256-token pages.
MAX_GENERATED_PAGES = 5_000_000


def _lognormal(rng: np.random.Generator, mean: float, sigma: float) -> float:
    """A lognormal draw with the given mean (not median)."""
    return float(rng.lognormal(math.log(mean) - sigma * sigma / 2, sigma)) if mean > 0 else 0.0


class _Ids:
    """Block ids of one trajectory's namespace (``hash_id_scope: local``), and how many its calls hold: a
    session is made whole before it is replayed, so one whose contexts barely grow is refused as it passes
    the bound, not after it has filled the memory."""

    def __init__(self) -> None:
        self.next = 1
        self.held = 0

    def take(self, n: int) -> list[int]:
        out = list(range(self.next, self.next + n))
        self.next += n
        return out

    def hold(self, n: int) -> None:
        self.held += n
        if self.held > MAX_GENERATED_PAGES:
            raise InputError(f"workload: a generated session's calls pass {MAX_GENERATED_PAGES:,} block ids of "
                             f"{BLOCK} tokens (fewer turns, faster context growth or a smaller max_context)")  # fmt: skip


def _call(rng, w, t: float, ids: _Ids, prev: tuple[int, list[int], int], new_tokens: int, model: str) -> dict | None:
    """The call after ``prev`` = (input tokens, block ids, output tokens) of the chain's previous call (or
    the system prefix): its input repeats that input and output and adds ``new_tokens``; the whole blocks
    of the previous input keep their ids, everything after gets new ones. None past ``max_context``."""
    prev_in, prev_ids, prev_out = prev
    n_in = prev_in + prev_out + new_tokens
    if n_in > w.max_context:
        return None
    keep = prev_ids[: prev_in // BLOCK]
    n_out = max(1, int(_lognormal(rng, w.output_tokens, w.output_sigma)))
    hash_ids = keep + ids.take(math.ceil(n_in / BLOCK) - len(keep))
    ids.hold(len(hash_ids))
    return {"t": round(t, 3), "type": "n", "model": model, "in": n_in, "out": n_out, "hash_ids": hash_ids,
            "api_time": round(w.api_s_per_output_token * n_out, 3)}  # fmt: skip


def _growth(rng, w) -> int:
    return max(1, int(_lognormal(rng, w.context_growth_tokens, w.growth_sigma)))


def _subagent(rng, w, spawn: float, ids: _Ids, system: tuple) -> tuple[dict, float]:
    """A subagent group of one chain from ``spawn``, and the time its last call ended."""
    t, prev, calls = spawn, system, []
    for k in range(max(1, int(rng.geometric(1.0 / w.subagent_turns)))):
        if k:
            t += _lognormal(rng, w.think_time_s, w.think_sigma)
        call = _call(rng, w, t, ids, prev, w.subagent_first_tokens if k == 0 else _growth(rng, w), "sub")
        if call is None:
            break
        calls.append(call)
        t += call["api_time"]
        prev = (call["in"], call["hash_ids"], call["out"])
    end = t
    return {"t": round(spawn, 3), "type": "subagent", "agent_id": "", "subagent_type": "Explore",
            "status": "completed", "duration_ms": int(round((end - spawn) * 1000)), "models": ["sub"],
            "requests": calls}, end  # fmt: skip


def generate_sessions(w, rng: np.random.Generator, n: int) -> Iterator[dict]:
    """``n`` trajectories in the Weka format (``w``: an AgenticWorkload, or anything with its fields), made one
    at a time so that a replay converts each before the next is drawn."""
    for s in range(n):
        ids = _Ids()
        system = (w.system_tokens, ids.take(math.ceil(w.system_tokens / BLOCK)), 0)
        turns = int(rng.geometric(1.0 / w.turns_per_session))
        t, prev, requests = 0.0, system, []
        for k in range(turns):
            call = _call(rng, w, t, ids, prev, w.first_turn_tokens if k == 0 else _growth(rng, w), "main")
            if call is None:
                break
            requests.append(call)
            t += call["api_time"]
            prev = (call["in"], call["hash_ids"], call["out"])
            if k + 1 < turns and rng.random() < w.subagent_probability:
                spawn = t + _lognormal(rng, w.spawn_gap_s, w.think_sigma)
                ends = []
                for _ in range(int(rng.integers(1, w.max_fanout + 1))):
                    group, end = _subagent(rng, w, spawn, ids, system)
                    group["agent_id"] = f"agent_{len(requests):03d}"
                    requests.append(group)
                    ends.append(end)
                t = max(ends)
            t += _lognormal(rng, w.think_time_s, w.think_sigma)
        yield {"id": f"synthetic-{s:04d}", "models": ["main", "sub"], "block_size": BLOCK,
               "hash_id_scope": "local", "requests": requests}  # fmt: skip

"""What InferenceX's AgentX ``aiperf profile`` command becomes where one flag is not one field: the corpus it
names (``--public-dataset``) and the warm-up grace period (``--warmup-grace-period``).

A named public corpus needs the network (aiperf downloads it from the Hugging Face Hub), which users behind a
firewall and CI do not have: with ``--input-file`` (its local copy) the lanes replay it; without, they replay
sessions the generator makes with the corpus's published statistics (:mod:`sim.workload.agentic`; the
generator's defaults are the 062126 corpus's: 393 trajectories, ~57K parent and ~42K subagent calls, contexts to
~990K tokens, docs/notes/agentic.md), and the conversion says so in one line.

aiperf 0.13.0's warm-up grace: ``--agentic-warmup-grace-period`` is the agentic warm-up barrier's; without
it, ``--warmup-grace-period`` feeds that barrier only under ``--scenario``
(``config/flags/_converter_profiling.py:78-87``); otherwise it belongs to a ``--warmup-duration`` phase,
which an agentic replay does not have.

aiperf 0.13.0's ``--scenario inferencex-agentx-mvp`` (``common/scenario/inferencex_agentx_mvp.py:7-39``) fills
``--benchmark-duration 1800`` and ``--trajectory-start-{min,max}-ratio`` 0.0 / 1.0 where they are not given, and
keeps each trajectory's own timeline: it rejects ``--trace-idle-gap-cap-seconds`` (``forbid_trace_idle_gap_cap``,
``common/scenario/validator.py:696-719``; ``--unsafe-override`` lets it through) and caps only the time the whole
replay sits idle, at 10 s (``system_idle_gap_cap_seconds``, ``timing/strategies/agentic_replay.py:435-460``), which
no run with a lane in flight reaches and the lanes do not model. Earlier aiperf scenarios locked a 10 s per-trajectory
cap instead (aiperf's AgentX FAQ); InferenceX's AgentX commands passed 300 s.
"""

from __future__ import annotations

from typing import Any

__all__ = ["CORPUS_SESSIONS", "corpus_workload", "scenario_defaults", "warmup_grace"]

# The SemiAnalysis corpora aiperf's AgentX scenario accepts (aiperf common/scenario/inferencex_agentx_mvp.py:14-31)
# whose statistics are published: the 062126 corpus (aiperf's AgentX FAQ). Its ``_256k`` variant drops calls past
# 256K tokens; here its sessions end before 256K (the nearest the generator comes: an approximation).
CORPUS_SESSIONS = {"semianalysis_cc_traces_weka_062126": 393, "semianalysis_cc_traces_weka_062126_256k": 393}
_256K = 256_000


def corpus_workload(name: str, wl: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The workload replaying public corpus ``name`` without a local copy (``wl``: the lane fields the
    command set), and the one line that says what was done."""
    if name not in CORPUS_SESSIONS:
        known = ", ".join(CORPUS_SESSIONS)
        raise ValueError(f"--public-dataset {name}: no local copy (--input-file) and no published statistics to "
                         f"generate its like from (known: {known}); download it and pass --input-file PATH")  # fmt: skip
    entries = wl.get("num_dataset_entries")
    if entries is not None and entries < 1:  # as workload.num_dataset_entries (ge=1) is for a local copy
        raise ValueError(f"--num-dataset-entries {entries}: must be >= 1 (the trajectories to use)")
    out = {k: v for k, v in wl.items() if k not in ("format", "num_dataset_entries", "path")}
    out["kind"] = "agentic"
    out["sessions"] = min(CORPUS_SESSIONS[name], entries or CORPUS_SESSIONS[name])
    if name.endswith("_256k"):
        out["max_context"] = _256K
    line = (f"--public-dataset {name} -> workload.kind: agentic: no --input-file (a local copy), so {out['sessions']} "
            "sessions generated with the corpus's published statistics replace it (docs/notes/agentic.md)")  # fmt: skip
    return out, line


# aiperf 0.13.0's inferencex-agentx-mvp scenario: the fields it fills where the command leaves them unset
_AGENTX_MVP = {"benchmark_duration_s": 1800.0, "trajectory_start_min_ratio": 0.0, "trajectory_start_max_ratio": 1.0,
               "idle_gap_cap_s": None}  # fmt: skip


def scenario_defaults(scenario: str | None, wl: dict[str, Any]) -> str | None:
    """Fill what aiperf's named scenario fills in ``wl`` (the lane fields the command set); the line to say about a
    per-trajectory idle cap the scenario would reject, if one was given."""
    if scenario != "inferencex-agentx-mvp":
        return None
    given = wl.get("idle_gap_cap_s")
    for key, value in _AGENTX_MVP.items():
        wl.setdefault(key, value)
    if given is None:
        return None
    return (f"--trace-idle-gap-cap-seconds {given:g}: aiperf 0.13.0's inferencex-agentx-mvp scenario rejects it (it keeps "
            "each trajectory's timeline) unless --unsafe-override, while InferenceX's own aiperf build takes it as a "
            "cap on a trajectory tree's idle time; replayed with the cap as given, on the trajectory's timeline "
            "(sim.workload.idlegap)")  # fmt: skip


def warmup_grace(agentic: float | None, generic: float | None, scenario: str | None) -> tuple[float | None, str]:
    """The agentic warm-up grace period aiperf uses (None: wait for every warm-up call; ``inf`` means the same),
    and which flag gave it."""
    if agentic is not None:
        value, src = agentic, "--agentic-warmup-grace-period"
    elif generic is not None and scenario is not None:
        value, src = generic, "--warmup-grace-period (under --scenario)"
    else:
        return None, ""
    return (None if value == float("inf") else value), src

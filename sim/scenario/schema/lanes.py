"""The workload kinds aiperf replays in closed-loop lanes: recorded Weka/AgentX trajectories (``lanes``) and
generated agentic sessions (``agentic``), sharing the lane options (:mod:`sim.serve.lanes`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from sim.base.inputs import MAX_REQUEST_TOKENS
from sim.scenario.schema.section import MAX_REQUESTS, _field_error, _resolve_file, _Section


class _LaneReplay(_Section):
    """aiperf's agentic replay options (``aiperf profile`` flags in brackets; see :mod:`sim.serve.lanes`)."""

    lanes: int = Field(8, ge=1, le=100_000, description="Lanes: trajectory trees in flight at once (--concurrency).")
    trajectory_start_min_ratio: float = Field(
        0.25, ge=0, le=1, description="A lane's first trajectory starts at least this far into its span (--trajectory-start-min-ratio)."
    )
    trajectory_start_max_ratio: float = Field(
        0.75, ge=0, le=1, description="... and at most this far (--trajectory-start-max-ratio)."
    )
    warmup_requests_per_lane: int = Field(
        0, ge=0, le=1000, description="Parent calls a lane sends after its primer (the call before its start point), "
        "back to back with one output token each, carrying its trajectory on before the measured phase "
        "(--warmup-requests-per-lane, InferenceX's aiperf; 0: the primer alone, as aiperf 0.13.0 warms up)."
    )
    idle_gap_cap_s: float | None = Field(
        300.0, gt=0, description="Idle cap, s, as aiperf applies it: a gap between a trajectory's request starts longer than "
        "this loses its excess (sim.workload.idlegap); null = none, as under aiperf 0.13.0's inferencex-agentx-mvp "
        "scenario (--trace-idle-gap-cap-seconds; InferenceX's AgentX commands passed 300)."
    )
    benchmark_duration_s: float = Field(
        600.0, gt=0, description="Measured phase, s: no call is sent after it (--benchmark-duration)."
    )
    benchmark_grace_period_s: float | None = Field(
        30.0, ge=0, description="Calls in flight after the measured phase get this long to finish, then the run ends "
        "and the rest are unfinished; null = wait for all (--benchmark-grace-period, aiperf's default 30)."
    )

    warmup_grace_period_s: float | None = Field(
        None, ge=0, description="Warm-up calls still in flight this long after the warm-up started are cancelled and "
        "aiperf aborts the run (TrajectoryWarmupFailedError); null = wait for all, aiperf's default "
        "(--agentic-warmup-grace-period, or --warmup-grace-period under --scenario)."
    )

    @model_validator(mode="after")
    def _ratios(self) -> _LaneReplay:
        if self.trajectory_start_min_ratio > self.trajectory_start_max_ratio:
            raise _field_error("trajectory_start_min_ratio", "must be <= trajectory_start_max_ratio")
        return self


class LanesWorkload(_LaneReplay):
    """Weka/AgentX trajectories replayed in closed-loop lanes, as aiperf plays InferenceX's AgentX."""

    kind: Literal["lanes"] = Field("lanes", description="Workload type.")
    path: str = Field(description="Weka trajectories: JSON lines, a .json file or a folder of them.")
    format: Literal["weka"] = Field("weka", description="Trajectory format.")
    num_dataset_entries: int | None = Field(
        None, ge=1, le=MAX_REQUESTS, description="Use only the first N trajectories (--num-dataset-entries); null = all."
    )

    @field_validator("path")
    @classmethod
    def _resolve(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _resolve_file(value, info)


class AgenticWorkload(_LaneReplay):
    """Generated agentic sessions (:mod:`sim.workload.agentic`) replayed in lanes like a Weka trace. The corpus's
    shape follows the published statistics of the SemiAnalysis AgentX corpus (aiperf's AgentX FAQ); how much a call
    answers and how long a session sits idle between calls follow the distributions aiperf's own agentic session
    synthesizer ships (``aiperf/dataset/agentic_code_gen/datasets/1k_sessions_200k_ctx/manifest.json``, sampled by
    ``session_synthesizer.py`` and ``distributions.py``: "synth" below); what no source gives is marked an
    assumption."""

    kind: Literal["agentic"] = Field("agentic", description="Workload type.")
    synthesizer: Literal["builtin", "aiperf"] = Field(
        "builtin", description="Who makes the sessions: this simulator's generator (the fields below), or aiperf's "
        "agentic session synthesizer (`aiperf synthesize agentic-code`; needs aiperf installed; sessions and "
        "aiperf_config only, no subagents: sim.workload.aiperf_synth)."
    )
    aiperf_config: str = Field(
        "1k_sessions_200k_ctx", description="aiperf's synthesizer config: a bundled config's name (default), a bundled "
        "dataset's (its manifest.json), or a path to a config or manifest JSON."
    )
    sessions: int = Field(64, ge=1, le=100_000, description="Trajectories generated (the dataset lanes draw from, in order).")
    turns_per_session: float = Field(
        145.0, ge=1, description="Mean parent calls per session, geometric (FAQ: ~57K parent calls over 393 trajectories)."
    )
    system_tokens: int = Field(
        4160, ge=0, le=MAX_REQUEST_TOKENS, description="System + tools prefix, shared by a session and its subagents (FAQ example: 1,856 + 2,304)."
    )
    first_turn_tokens: int = Field(4032, ge=1, le=MAX_REQUEST_TOKENS, description="New tokens of the first call (FAQ example: 8,192 in all).")
    context_growth_tokens: float = Field(
        2000.0, gt=0, description="Mean new tokens a later call adds besides the previous output (AgentX: a few thousand a turn)."
    )
    growth_sigma: float = Field(1.0, ge=0, description="Lognormal sigma of the growth (assumption).")
    output_tokens: float = Field(
        1000.0, gt=0, description="Mean output tokens, lognormal (synth: generation_length mean 1,000; the FAQ's example trajectory: 312-822)."
    )
    output_sigma: float = Field(
        0.668, ge=0, description="Lognormal sigma of the output (synth: median 800 for the mean 1,000, sqrt(2 ln 1.25))."
    )
    think_time_s: float = Field(
        5.0, ge=0, description="Mean of an agent's idle gap (tool time) before a call, s, lognormal (synth: agentic_delay mean 5,000 ms)."
    )
    think_sigma: float = Field(
        1.354, ge=0, description="Lognormal sigma of the agent's gap (synth: median 2,000 ms for the mean, sqrt(2 ln 2.5))."
    )
    human_fraction: float = Field(
        0.3, ge=0, le=1, description="Share of a parent's gaps that are a human's think time instead (synth: 1 - agentic_fraction 0.7)."
    )
    human_time_s: float = Field(30.0, ge=0, description="Mean of a human's gap, s, lognormal (synth: human_delay mean 30,000 ms).")
    human_sigma: float = Field(
        1.177, ge=0, description="Lognormal sigma of a human's gap (synth: median 15,000 ms for the mean, sqrt(2 ln 2))."
    )
    api_s_per_output_token: float = Field(
        0.012, ge=0, description="Recorded api_time per output token, s (FAQ example: 312 tokens in 4.1 s); only the recorded timeline uses it."
    )
    subagent_probability: float = Field(
        0.05, ge=0, le=1, description="Chance a parent call spawns a subagent group (with the two below: ~0.75 subagent calls per parent call, as the FAQ's 42K/57K)."
    )
    max_fanout: int = Field(4, ge=1, le=64, description="Subagents a spawn starts, uniform in 1..max_fanout (assumption).")
    subagent_turns: float = Field(6.0, ge=1, description="Mean calls of a subagent, geometric (assumption).")
    subagent_first_tokens: int = Field(8000, ge=1, le=MAX_REQUEST_TOKENS, description="A subagent's first new tokens (assumption).")
    spawn_gap_s: float = Field(1.0, ge=0, description="Mean gap between a parent call's end and its spawn, s (assumption).")
    max_context: int = Field(
        990_000, ge=1, le=MAX_REQUEST_TOKENS, description="A session ends before its input would pass this (InferenceX's "
        "utils/agentic/datasets/build_weka_hf_dataset.py caps a call's input near 990K; with the defaults about half the "
        "parent calls pass 256K, as the FAQ says of the 062126 corpus)."
    )

    @model_validator(mode="after")
    def _fits(self) -> AgenticWorkload:
        for name in ("first_turn_tokens", "subagent_first_tokens"):
            if self.system_tokens + getattr(self, name) > self.max_context:
                raise _field_error(name, f"system_tokens + {name} passes max_context ({self.max_context:,})")
        if self.sessions * self.turns_per_session > MAX_REQUESTS:
            raise _field_error("sessions", f"sessions x turns_per_session over the limit of {MAX_REQUESTS:,} requests")
        return self

"""The ``workload`` section, one model per ``kind``: SGLang's bench_multiturn and bench_serving clients,
synthetic requests, a recorded trace, and the lane replays (:mod:`sim.scenario.schema.lanes`), told apart by ``kind``
(:data:`Workload`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Union

from pydantic import Discriminator, Field, Tag, ValidationInfo, field_validator, model_validator

from sim.base.inputs import MAX_REQUEST_TOKENS
from sim.scenario.schema.lanes import AgenticWorkload, LanesWorkload
from sim.scenario.schema.section import MAX_REQUESTS, _field_error, _resolve_file, _Section


class MultiTurnWorkload(_Section):
    """SGLang's bench_multiturn: clients each send rounds of history + a new question (reference section 8).

    Field names are the client's options (``--num-clients`` is ``num_clients``). The sender follows the
    client's loop (``benchmark/hicache/bench_multiturn.py``): while fewer than ``max_parallel`` are in flight
    it pops a ready request (``ready_queue_policy``) and then sleeps one inter-arrival gap, whether or not one
    was ready; at the limit it polls every 50 ms.
    """

    kind: Literal["multi_turn"] = Field("multi_turn", description="Workload type.")
    num_clients: int = Field(256, ge=1, le=MAX_REQUESTS, description="Conversations.")
    max_parallel: int = Field(128, ge=1, description="Requests in flight at once.")
    request_length: int = Field(512, ge=1, le=MAX_REQUEST_TOKENS, description="New tokens per round (the sub-question).")
    output_length: int = Field(64, ge=1, le=MAX_REQUEST_TOKENS, description="Generated tokens per round.")
    num_rounds: int = Field(5, ge=1, le=MAX_REQUESTS, description="Rounds per client.")
    request_rate: float | None = Field(
        1.0,
        gt=0,
        description="Request arrivals per second (bench default 1.0); null = closed loop, as fast as max_parallel allows.",
    )
    distribution: Literal["poisson", "uniform"] = Field(
        "poisson", description="Inter-arrival distribution (uniform over [0, 2/rate])."
    )
    system_prompt_length: int = Field(
        0, ge=0, le=MAX_REQUEST_TOKENS, description="Tokens of a system prompt shared by all clients."
    )
    ready_queue_policy: Literal["random", "fifo"] = Field(
        "random", description="Which ready client is sent next: a random one (bench default) or the oldest."
    )
    round_barrier: bool = Field(
        False, description="Round r+1 of any client waits until every client has finished round r."
    )
    sub_question_input_length: int = Field(
        0, ge=0, le=MAX_REQUEST_TOKENS, description="Tokens of each later round's new question; 0 = request_length (bench default)."
    )
    disable_random_sample: bool = Field(
        False,
        description="Random token ids instead of ShareGPT text; prompts are distinct either way, so no effect on the cache.",
    )
    round_barrier_pause_s: float = Field(
        0.0,
        ge=0,
        description="With round_barrier, the client's pause before releasing the next round (the upstream client "
        "sends a heartbeat and sleeps 10 s; `scenario from-sglang` sets 10).",
    )
    min_rounds: int = Field(0, ge=0, le=MAX_REQUESTS, description="--min-rounds: 0 = num_rounds (or max_rounds).")
    max_rounds: int = Field(
        0, ge=0, le=MAX_REQUESTS,
        description="--max-rounds: each client runs a uniform number of rounds in [min_rounds, max_rounds]; 0 = num_rounds.",
    )  # fmt: skip
    range_ratio: float = Field(
        1.0,
        ge=0,
        le=1,
        description="--range-ratio: each new question's and answer's length is uniform over [length x ratio, length] "
        "(1: fixed lengths).",
    )

    def round_range(self) -> tuple[int, int]:
        """(min, max) rounds per client, resolved as the client resolves them."""
        lo, hi = self.min_rounds, self.max_rounds
        if not lo and not hi:
            return self.num_rounds, self.num_rounds
        return lo or hi, hi or lo

    def client_rounds(self, rng) -> list[int]:
        """Each client's number of rounds, drawn from ``rng`` only when they differ (``random.randint``)."""
        lo, hi = self.round_range()
        if lo == hi:
            return [lo] * self.num_clients
        return [int(x) for x in rng.integers(lo, hi + 1, self.num_clients)]

    @model_validator(mode="after")
    def _bounded(self) -> MultiTurnWorkload:
        lo, hi = self.round_range()
        if lo > hi:
            raise _field_error("min_rounds", f"min_rounds ({lo}) must be <= max_rounds ({hi})")
        question = max(self.request_length, self.sub_question_input_length)
        last = self.system_prompt_length + hi * (question + self.output_length)
        if last > MAX_REQUEST_TOKENS:
            raise _field_error("num_rounds", f"the last round reaches {last:,} tokens, over the limit of "
                               f"{MAX_REQUEST_TOKENS:,} per request")  # fmt: skip
        if self.num_clients * hi > MAX_REQUESTS:
            rounds = "num_rounds" if (self.min_rounds, self.max_rounds) == (0, 0) else "max_rounds"
            raise _field_error("num_clients", f"num_clients x {rounds} = {self.num_clients * hi:,} "
                               f"requests, over the limit of {MAX_REQUESTS:,}")  # fmt: skip
        return self

    def pages(self, page_size: int) -> int:
        """Page keys the workload holds (at most): each round's input and final keys."""
        question = max(self.request_length, self.sub_question_input_length)
        step, rounds = question + self.output_length, self.round_range()[1]
        tokens = rounds * (2 * self.system_prompt_length + question) + step * rounds * rounds
        return self.num_clients * tokens // page_size


class ServingStep(_Section):
    """One ``bench_serving`` invocation: ``--num-prompts`` random-ids prompts sent under a concurrency limit."""

    num_prompts: int = Field(1000, ge=1, le=MAX_REQUESTS, description="--num-prompts.")
    random_input_len: int = Field(1024, ge=1, le=MAX_REQUEST_TOKENS, description="--random-input-len (tokens).")
    random_output_len: int = Field(1024, ge=1, le=MAX_REQUEST_TOKENS, description="--random-output-len (tokens).")
    random_range_ratio: float = Field(
        0.0, ge=0, le=1, description="--random-range-ratio: lengths uniform in [len x ratio, len]; 1 = exact."
    )
    max_concurrency: int | None = Field(None, ge=1, description="--max-concurrency; null = unlimited.")
    request_rate: float | None = Field(
        None, gt=0, description="--request-rate, req/s (Poisson); null = inf, every prompt at once."
    )
    flush_cache: bool = Field(False, description="POST /flush_cache before the step (L1 and L2 emptied, L3 kept).")
    seed: int = Field(42, ge=0, description="--seed (default 42): steps with equal seed and lengths send the same prompts.")
    wait_backups: bool = Field(
        False, description="Start only after every queued L2/L3 backup has landed (a pause between runs)."
    )
    label: str = Field("", description="Name of the step in reports.")


class BenchServingWorkload(_Section):
    """SGLang's ``bench_serving --dataset-name random-ids``: one or more steps run back to back."""

    kind: Literal["bench_serving"] = Field("bench_serving", description="Workload type.")
    dataset_name: Literal["random-ids", "random"] = Field(
        "random-ids", description="--dataset-name; both give distinct prompts (no shared prefixes)."
    )
    steps: list[ServingStep] = Field(min_length=1, description="The bench_serving runs, in order.")

    @model_validator(mode="after")
    def _bounded(self) -> BenchServingWorkload:
        prompts = sum(st.num_prompts for st in self.steps)
        if prompts > MAX_REQUESTS:
            raise _field_error("steps", f"{prompts:,} prompts in all, over the limit of {MAX_REQUESTS:,}")
        return self

    def pages(self, page_size: int) -> int:
        """Page keys the workload holds (at most: lengths are drawn up to random_input_len)."""
        return sum(st.num_prompts * (st.random_input_len // page_size) for st in self.steps)


class SyntheticWorkload(_Section):
    """Independent requests with optional shared prefixes, for controlled experiments."""

    kind: Literal["synthetic"] = Field("synthetic", description="Workload type.")
    arrival: Literal["poisson", "gamma"] = Field("poisson", description="Inter-arrival process.")
    rate: float = Field(1.0, gt=0, description="Mean arrivals per second.")
    cv: float = Field(
        1.0, gt=0, description="Coefficient of variation of gamma inter-arrivals (1 = Poisson)."
    )
    num_requests: int = Field(1000, ge=1, le=MAX_REQUESTS, description="Requests to generate.")
    input_length: int = Field(1024, ge=1, le=MAX_REQUEST_TOKENS, description="Prompt tokens per request.")
    output_length: int = Field(128, ge=1, le=MAX_REQUEST_TOKENS, description="Generated tokens per request.")
    shared_prefix_length: int = Field(
        0, ge=0, description="Leading prompt tokens shared within a prefix group."
    )
    num_prefix_groups: int = Field(
        1, ge=1, description="Distinct shared prefixes; requests pick one uniformly."
    )

    @model_validator(mode="after")
    def _prefix_fits(self) -> SyntheticWorkload:
        if self.shared_prefix_length > self.input_length:
            raise _field_error("shared_prefix_length", f"longer than input_length ({self.input_length})")
        if self.input_length + self.output_length > MAX_REQUEST_TOKENS:
            raise _field_error("output_length", f"input_length + output_length over the limit of "
                               f"{MAX_REQUEST_TOKENS:,} tokens per request")  # fmt: skip
        return self

    def pages(self, page_size: int) -> int:
        """Page keys the workload holds."""
        return self.num_requests * (self.input_length // page_size)


class TraceWorkload(_Section):
    """Replay of a recorded trace in time, open loop: Mooncake or Qwen-Bailian JSONL (hash_ids per block),
    Weka/AgentX trajectories (every call at its recorded ``t``, all trajectories from time 0; ``kind: lanes``
    plays them as aiperf does), or real token ids."""

    kind: Literal["trace"] = Field("trace", description="Workload type.")
    path: str = Field(description="Trace file, relative to the scenario file (or the current directory).")
    format: Literal["mooncake", "tokens", "bailian", "weka"] = Field(
        "mooncake",
        description="mooncake: timestamp ms, input_length, output_length, hash_ids; tokens: token-id records; "
        "bailian: Qwen-Bailian chat_id/parent_chat_id records; weka: AgentX trajectories (sim.workload.trajectory).",
    )
    block_size: int | None = Field(
        None, ge=1, description="Tokens per hash_id block; null = the format's (Mooncake 512, Bailian 16; Weka files say)."
    )
    time_scale: float = Field(1.0, gt=0, description="Multiplies inter-arrival times; > 1 slows arrivals.")
    max_requests: int | None = Field(
        None, ge=1, le=MAX_REQUESTS, description="Replay only the first N requests; null = all."
    )

    @field_validator("path")
    @classmethod
    def _resolve(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _resolve_file(value, info)

    @model_validator(mode="after")
    def _weka_block(self) -> TraceWorkload:
        if self.format == "weka" and self.block_size is not None:
            raise _field_error("block_size", "a Weka trace states its own block size in each trajectory (block_size), which its hash_ids follow; leave this unset")
        return self


def _workload_tag(value: Any) -> str | None:
    """The workload kind; a mapping without one is multi_turn, the default workload."""
    return value.get("kind", "multi_turn") if isinstance(value, dict) else getattr(value, "kind", None)


Workload = Annotated[
    Union[  # noqa: UP007 - Annotated tags need the explicit Union form
        Annotated[MultiTurnWorkload, Tag("multi_turn")],
        Annotated[SyntheticWorkload, Tag("synthetic")],
        Annotated[TraceWorkload, Tag("trace")],
        Annotated[BenchServingWorkload, Tag("bench_serving")],
        Annotated[LanesWorkload, Tag("lanes")],
        Annotated[AgenticWorkload, Tag("agentic")],
    ],
    Discriminator(_workload_tag),
]
_WORKLOAD_CLASSES = (MultiTurnWorkload, SyntheticWorkload, TraceWorkload, BenchServingWorkload, LanesWorkload,
                     AgenticWorkload)
_WORKLOAD_KINDS = ("multi_turn", "synthetic", "trace", "bench_serving", "lanes", "agentic")

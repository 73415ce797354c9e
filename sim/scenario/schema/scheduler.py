"""The ``scheduler`` section: SGLang's batch formation and schedule policy knobs (:mod:`sim.serve.engine`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sim.scenario.schema.section import _Section


class SchedulerConfig(_Section):
    """Batch formation per scheduler step."""

    max_running_requests: int = Field(256, ge=1, description="Requests decoding at once.")
    chunked_prefill_size: int = Field(
        8192, ge=1, description="Prefill tokens per step; longer prompts are chunked."
    )
    max_prefill_tokens: int = Field(
        16384, ge=1, description="Prefill token budget for admitting new requests in one step."
    )
    schedule_policy: Literal["fcfs", "lpm"] = Field(
        "fcfs", description="Waiting-queue order: arrival, or longest prefix match."
    )
    enable_mixed_chunk: bool = Field(
        False,
        description="SGLang's --enable-mixed-chunk: running requests decode inside each prefill pass. Off (SGLang's "
        "default): a pass is a prefill batch whenever one forms, else a decode batch.",
    )
    load_balance_method: Literal["auto", "round_robin", "total_requests", "total_tokens", "follow_bootstrap_room"] = Field(
        "auto",
        description="SGLang --load-balance-method: how the DP controller places a request on an attention-DP rank "
        "(managers/data_parallel_controller.py:105-145, 880-925); auto (SGLang's default) is round_robin outside PD "
        "prefill (serving_hook.py:217-236). follow_bootstrap_room: bootstrap room modulo ranks (PD prefill).",
    )
    enable_prefill_delayer: bool = Field(
        False,
        description="SGLang's --enable-prefill-delayer: before each pass the ranks of a server agree whether to admit "
        "new requests, holding a rank's prefill until every rank can prefill (DP attention) or until the running batch "
        "has room for a recent prefill batch (managers/prefill_delayer.py:166-352). Off by default; on in AgentX.",
    )
    prefill_delayer_max_delay_passes: int = Field(
        30, ge=1, description="--prefill-delayer-max-delay-passes: a delay ends after this many passes less one."
    )
    prefill_delayer_token_usage_low_watermark: float | None = Field(
        None,
        ge=0,
        le=1,
        description="--prefill-delayer-token-usage-low-watermark: no delay while a prefillable rank's KV usage (used, "
        "not evictable, over the pool) is below this; null (SGLang's default): no such release.",
    )
    overlap_schedule: bool = Field(
        True,
        description="SGLang's overlap scheduler (on by default; --disable-overlap-schedule turns it off): a pass's "
        "results are processed once the next pass is launched. With HiCache on, the first tokens of a prefill pass "
        "then reach the client when the next prefill pass ends.",
    )
    disable_consecutive_prefill_overlap: bool = Field(
        False,
        description="SGLANG_DISABLE_CONSECUTIVE_PREFILL_OVERLAP=1: no overlap between two prefill passes, so a prefill "
        "pass's first tokens stream at its own end even with HiCache on (managers/scheduler.py:2136-2156).",
    )
    prefill_decode_interval: int = Field(
        0,
        ge=0,
        description="SGLang's --prefill-decode-interval: decode passes run after a prefill pass before the next prefill "
        "(0: off, SGLang's default outside profiled Qwen3-VL setups).",
    )
    prefill_decode_interval_min_bs: int = Field(
        0, ge=0, description="--prefill-decode-interval-min-bs: the interval applies only from this many running requests."
    )
    enable_two_batch_overlap: bool = Field(
        False,
        description="SGLang's --enable-two-batch-overlap: a prefill pass runs as two micro-batches, one's DP "
        "gather/combine hidden behind the other's compute (sim.model.tbo; DeepSeek-V4 with DP attention, prefill "
        "passes only, models/deepseek_v4.py:4262-4294). Priced by aiconfigurator-core's per-op times; the roofline "
        "has no communication term, so with it the pass time is unchanged.",
    )
    tbo_token_distribution_threshold: float = Field(
        0.48,
        ge=0,
        le=0.5,
        description="--tbo-token-distribution-threshold: a split at a sequence boundary leaving either micro-batch "
        "under this share of the tokens cuts a sequence at half the tokens instead (two_batch_overlap.py:102-132); "
        "0: never.",
    )
    tokenizer_tokens_per_s: float | None = Field(
        None,
        gt=0,
        description="Tokens per second SGLang's tokenizer manager encodes a text prompt at, one request after another "
        "before the scheduler sees it (tokenizer_manager.py:1058-1066); null: prompts arrive as token ids (nothing "
        "charged). `scenario from-sglang` sets it when the client sends text (bench/tokenizer.py measures it).",
    )
    tokenizer_workers: int = Field(
        1,
        ge=1,
        description="SGLang's --tokenizer-worker-num: tokenizer processes encoding prompts in parallel, per instance "
        "(a prompt goes to the first free one: optimistic next to the OS spreading connections over them).",
    )

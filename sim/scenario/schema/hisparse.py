"""The ``hisparse`` section: the decode-side hot buffer of C4 KV and the top-k access model that drives it
(:mod:`sim.hisparse`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from sim.scenario.schema.section import _field_error, _resolve_file, _Section


class HiSparseAccessConfig(_Section):
    """Which compressed tokens the indexer's top-k picks each step: a parametric model or a recorded trace."""

    kind: Literal["parametric", "trace"] = Field("parametric", description="Access model.")
    trace_path: str | None = Field(
        None, description="Recorded top-k trace (kind trace), relative to the scenario file."
    )
    sink_tokens: int = Field(4, ge=0, description="First compressed ids always selected (attention sinks; assumption).")
    recent_fraction: float = Field(
        0.25, ge=0, le=1, description="Share of top-k taken by the most recent compressed ids (assumption)."
    )
    overlap: float = Field(
        0.8, ge=0, le=1, description="Probability an older pick of the previous step is picked again (assumption)."
    )
    zipf_alpha: float = Field(1.0, ge=0, description="Zipf exponent of popularity over older tokens (assumption).")
    layers_simulated: int = Field(
        2, ge=1, description="C4 layers simulated (LRU state is per layer); results scale to all."
    )

    @field_validator("trace_path")
    @classmethod
    def _resolve(cls, value: str | None, info: ValidationInfo) -> str | None:
        return _resolve_file(value, info)

    @model_validator(mode="after")
    def _trace_needs_path(self) -> HiSparseAccessConfig:
        if self.kind == "trace" and self.trace_path is None:
            raise _field_error("trace_path", "required when kind is trace")
        return self


class HiSparseConfig(_Section):
    """HiSparse decode offload of C4 KV (DESIGN.md 1.6); defaults from mem_cache/sparsity/factory.py:79-82."""

    enabled: bool = Field(False, description="HiSparse on (needs cluster.role: decode).")
    device_buffer_size: int = Field(
        4096, ge=1, description="GPU hot-buffer C4 slots per request (plus one 64-slot page for the newest)."
    )
    host_to_device_ratio: int = Field(
        2,
        ge=1,
        description="The device C4 pool is full tokens / (4 x this); SGLang's default 2 (the docs suggest 5-10).",
    )
    initial_fill: Literal["direct", "staging"] = Field(
        "direct",
        description="Hot buffer at decode start: direct (PD direct-to-host: empty unless the prompt fits) or "
        "staging (prefill staged on this GPU: the oldest tokens).",
    )
    top_k: int | None = Field(
        None,
        ge=1,
        description="Compressed tokens picked per step; null = the model's index_topk (512 Flash, 1024 Pro).",
    )
    policy: Literal["lru", "clock", "belady"] = Field(
        "lru", description="Hot-buffer replacement (SGLang: lru; belady is the offline bound)."
    )
    access: HiSparseAccessConfig = Field(
        default_factory=HiSparseAccessConfig, description="Top-k access model."
    )
    step_windows: int | None = Field(
        4, ge=1, description="Decode windows whose misses are simulated (spread over the output); null = all steps."
    )
    window_steps: int = Field(256, ge=1, description="Steps per simulated window.")
    sample_requests: int = Field(2, ge=1, description="Requests whose access streams are simulated.")

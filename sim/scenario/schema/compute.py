"""The ``compute`` and ``speculative`` sections: what one pass costs on the GPU (:mod:`sim.model.compute`) and how
speculative decoding turns a pass into several tokens (:mod:`sim.model.speculative`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from sim.scenario.schema.section import _field_error, _Section


class ComputeConfig(_Section):
    """GPU step time: aiconfigurator-core's measured SGLang kernels (:mod:`sim.model.aic`) where they cover the GPU
    and model, carried over by the datasheets to a GPU they lack (:mod:`sim.model.transfer`), or a simple roofline
    (defaults are V4-Flash estimates, not measurements). ``backend: auto`` picks (:mod:`sim.model.pricing`).

    prefill time = tokens x (flops_per_token + attn x context) / (peak x mfu); decode time = (weights + KV read)
    / (HBM x mbu); plus ``step_overhead_ms`` per step. The efficiencies left null come from the cost table's
    ``compute`` section (``hicache-sim calibrate compute``), else from spec-derived estimates.
    """

    backend: Literal["auto", "aiconfigurator", "roofline"] = Field(
        "auto",
        description="What prices each pass. aiconfigurator: aiconfigurator-core's measured SGLang kernels for "
        "hardware.gpu (H100, H200, B200, B300, GB200, GB300, RTX PRO 6000), the model, hardware.tp_size and "
        "model.expert_dtype; another catalog GPU on the nearest measured one's kernels scaled by the datasheets "
        "(labelled); what no measured GPU's tables hold is refused. roofline: the fields below. auto: "
        "aiconfigurator where it prices the scenario (and no measured fit of a GPU without kernel data is in the "
        "cost table), else the roofline, saying why.",
    )
    prefill_flops_per_token: float = Field(
        2.6e10,
        gt=0,
        description="Linear FLOPs per token: 2 x active params (V4-Flash ~13B active; estimate).",
    )
    attn_flops_per_token_per_ctx: float = Field(
        1.4e6,
        ge=0,
        description="Attention FLOPs per token per context token (estimate: 4 x 64 heads x 512 dim x 43 layers / 4 for C4 compression).",
    )
    decode_bytes_per_step: float = Field(
        1.3e10, gt=0, description="Weight bytes read per decode step: active params x 1 B (fp8)."
    )
    kv_bytes_per_token_read: float = Field(
        3900.0,
        ge=0,
        description="KV bytes read per context token per decode step (V4-Flash FULL-anchored ~3,899 B; estimate).",
    )
    kv_bytes_per_request: float = Field(
        0.0, ge=0, description="KV bytes read per request per decode step whatever its length (V4: SWA window, top-k rows)."
    )
    expert_bytes: float = Field(0.0, ge=0, description="MoE: bytes of one routed expert over all layers, per rank.")
    n_experts: int = Field(0, ge=0, description="MoE: routed experts per layer (0: dense model).")
    experts_per_token: int = Field(0, ge=0, description="MoE: routed experts each token picks.")
    mfu: float | None = Field(
        None, ge=0.01, le=1,
        description="Achieved fraction of peak FLOPs in prefill; null = the cost table's fitted value, else 0.4 (estimate).",
    )
    mbu: float | None = Field(
        None, ge=0.01, le=1,
        description="Achieved fraction of HBM bandwidth in decode; null = fitted, else 0.7 (estimate).",
    )
    step_overhead_ms: float | None = Field(
        None, ge=0, description="Scheduler and launch overhead per step, ms; null = fitted, else 2.0 (estimate); "
        "on measured kernels null = 0 (its kernel sums, the overlap scheduler hiding the CPU).",
    )
    attn_flops_scale: float | None = Field(
        None, gt=0, description="Multiplier on attention FLOPs per context token; null = fitted, else 1."
    )


class SpeculativeConfig(_Section):
    """Speculative decoding (SGLang's --speculative-* flags): each decode pass drafts, verifies the draft tokens in
    one target forward and emits the accepted ones (:mod:`sim.model.speculative`).

    SGLang picks (num_steps, eagle_topk, num_draft_tokens) = (3, 1, 4) for DeepSeek models when none is given
    (``arg_groups/speculative_hook.py:1160-1175, 1430-1461``); NEXTN is an alias of EAGLE
    (``speculative/spec_registry.py:183``), and MTP here names the same path (the model's own NEXTN head).
    """

    algorithm: Literal["EAGLE", "EAGLE3", "NEXTN", "MTP"] | None = Field(
        None, description="--speculative-algorithm; null = no speculative decoding."
    )
    num_steps: int = Field(3, ge=1, le=32, description="--speculative-num-steps: draft forwards per pass.")
    eagle_topk: int = Field(1, ge=1, le=32, description="--speculative-eagle-topk: draft branches per step.")
    num_draft_tokens: int | None = Field(
        None, ge=1, le=256,
        description="--speculative-num-draft-tokens: tokens the target verifies per request per pass; null = "
        "num_steps + 1 (required with eagle_topk 1, base_spec_worker.py:117-127).",
    )
    accept_length: float | None = Field(
        None, ge=1,
        description="Mean tokens a request emits per verify pass (accepted drafts + the bonus token), as the "
        "server reports it (avg spec accept length); required with an algorithm. Published V4 runs: ~2.4-3.5.",
    )
    draft_layers: int = Field(
        1, ge=1, le=8,
        description="Layers of the draft model (DeepSeek's NEXTN/MTP head: 1); its KV and forwards cost this share "
        "of the target's layers.",
    )

    @property
    def enabled(self) -> bool:
        return self.algorithm is not None

    @property
    def draft_tokens(self) -> int:
        """Tokens verified per request per pass."""
        return self.num_draft_tokens if self.num_draft_tokens is not None else self.num_steps + 1

    @model_validator(mode="after")
    def _consistent(self) -> SpeculativeConfig:
        if self.algorithm is None:
            return self
        if self.accept_length is None:
            raise _field_error("accept_length", "required with an algorithm: the mean tokens emitted per verify "
                               "pass (SGLang logs it as accept len)")  # fmt: skip
        if self.eagle_topk == 1 and self.draft_tokens != self.num_steps + 1:
            raise _field_error("num_draft_tokens", f"with eagle_topk 1 it must be num_steps + 1 = {self.num_steps + 1} "
                               "(SGLang asserts it, speculative/base_spec_worker.py:125)")  # fmt: skip
        if self.accept_length > self.num_steps + 1:
            raise _field_error("accept_length", f"{self.accept_length:g} exceeds num_steps + 1 = {self.num_steps + 1}, "
                               "the most one verify pass can emit")  # fmt: skip
        return self

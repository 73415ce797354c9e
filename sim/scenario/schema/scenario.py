"""The whole scenario: its top-level fields, the sections, what a GPU and a model config derive before they
validate (:mod:`sim.scenario.schema.derive`), and the rules across sections after (:mod:`sim.scenario.schema.checks`)."""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    Field,
    PrivateAttr,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from sim.scenario.schema.compute import ComputeConfig, SpeculativeConfig
from sim.scenario.schema.derive import derive
from sim.scenario.schema.hardware import HIP_GPUS, ClusterConfig, HardwareConfig
from sim.scenario.schema.hicache import HiCacheConfig, L3Config
from sim.scenario.schema.hisparse import HiSparseConfig
from sim.scenario.schema.model import ModelConfig
from sim.scenario.schema.scheduler import SchedulerConfig
from sim.scenario.schema.section import _field_error, _Section, model_paths
from sim.scenario.schema.workload import MultiTurnWorkload, Workload

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$"


class OutputConfig(_Section):
    """What a run records."""

    timeseries_interval_s: float = Field(
        1.0, gt=0, description="Sampling interval of the metrics time series, simulated s."
    )
    record_requests: bool = Field(True, description="Keep one record per request.")


class Scenario(_Section):
    """A complete, validated simulation input. Build it with :func:`load_scenario` or :func:`scenario_from_dict`."""

    name: str = Field(
        pattern=NAME_PATTERN,
        description="Scenario name, used in output paths (runs/NAME/) and reports: letters, digits, '.', '_', '-'.",
    )
    description: str = Field("", description="Free text.")
    seed: int = Field(0, ge=0, description="Seed of the one numpy Generator a run uses.")
    duration_s: float | None = Field(
        None, gt=0, description="Simulated-time cap, s; null = until the workload is exhausted."
    )
    model: ModelConfig = Field(
        default_factory=lambda: ModelConfig(name="deepseek-v4-flash"),
        description="Catalog name or inline pool list.",
    )
    hardware: HardwareConfig = Field(default_factory=HardwareConfig, description="GPU and host.")
    hicache: HiCacheConfig = Field(default_factory=HiCacheConfig, description="L2 host cache.")
    l3: L3Config = Field(default_factory=L3Config, description="L3 storage.")
    scheduler: SchedulerConfig = Field(default_factory=SchedulerConfig, description="Batching.")
    compute: ComputeConfig = Field(default_factory=ComputeConfig, description="GPU step-time roofline.")
    workload: Workload = Field(
        default_factory=MultiTurnWorkload, description="Request source, chosen by kind."
    )
    cluster: ClusterConfig = Field(default_factory=ClusterConfig, description="Instances and routing.")
    hisparse: HiSparseConfig = Field(
        default_factory=HiSparseConfig, description="Decode-side sparse offload."
    )
    speculative: SpeculativeConfig = Field(
        default_factory=SpeculativeConfig, description="Speculative decoding (EAGLE / NEXTN / MTP)."
    )
    output: OutputConfig = Field(default_factory=OutputConfig, description="Recording.")
    origins: dict[str, str] = Field(
        default_factory=dict,
        description="Where fields' values came from, as `scenario from-sglang` records them: field path (dotted) -> "
        "the launch flag, server-log line or recipe default that set it. The resolved server's sources name them "
        "(validate, the run summary); nothing else reads them.",
    )
    _derived: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="before")
    @classmethod
    def _derive(cls, data: Any, info: ValidationInfo) -> Any:
        """Fill what a catalog GPU and a model config.json determine, where the scenario leaves it unset.

        The filled paths are remembered (:attr:`derived`) and left out of dumps, so that a dump with another
        GPU, TP size or memory fraction set on it (``--set``, a sweep grid) derives them afresh.
        """
        return derive(data, info)

    @model_serializer(mode="wrap")
    def _leave_out_derived(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        out = handler(self)
        for path in self._derived:
            section, key = path.split(".")
            if isinstance(out.get(section), dict):
                out[section].pop(key, None)
        if not out.get("origins", True):
            out.pop("origins")  # a scenario without them dumps as before
        return out

    @field_validator("origins")
    @classmethod
    def _origin_paths(cls, value: dict[str, str]) -> dict[str, str]:
        """Each key a field path of the schema at every segment (list items by index, as ``--set`` writes them)."""
        known = model_paths(cls)
        for key in value:
            parts = key.split(".")
            named = ".".join(p for p in parts if not p.isdigit())
            if parts[0] == "origins" or named not in known or not all(p.isidentifier() or p.isdigit() for p in parts):
                raise _field_error(key, "not a scenario field path (origins maps field paths to where they came from)")
        return value

    def _check_origins_set(self) -> None:
        """An origin names where a value came from: a field left at its default, or derived, came from none."""
        for key in self.origins:
            node: Any = self
            for part in key.split("."):
                if isinstance(node, BaseModel):
                    if part not in node.model_fields_set or key in self._derived:
                        raise _field_error(f"origins.{key}", f"{key} is not set in this scenario (it holds its "
                                           "default or a derived value), so nothing set it")  # fmt: skip
                    node = getattr(node, part)
                elif isinstance(node, list | tuple) and part.isdigit() and int(part) < len(node):
                    node = node[int(part)]
                elif isinstance(node, dict) and part in node:
                    node = node[part]
                else:
                    raise _field_error(f"origins.{key}", f"{key} is not set in this scenario")

    @property
    def derived(self) -> tuple[str, ...]:
        """Fields filled from the GPU catalog and the model config (left out of dumps, derived on load)."""
        return self._derived

    @model_validator(mode="after")
    def _cross_check(self, info: ValidationInfo) -> Scenario:
        context = info.context if isinstance(info.context, dict) else {}
        self._derived = tuple(context.get("derived", ()))
        self._check_origins_set()
        for check in context.get("checks", ()):  # the rules across sections, handed down by the loader
            check(self)
        return self

    @property
    def fp4_indexer_sized(self) -> bool:
        """Whether the pools are sized at the fp4 indexer's bytes: SGLang does so on ROCm only; on NVIDIA the FP4
        path keeps the FP8 estimate for sizing (``model_executor/pool_configurator.py:1109-1114``), so the same
        token count fits and the indexer buffer is smaller than budgeted."""
        return self.model.fp4_indexer and (self.hardware.gpu or "").upper() in HIP_GPUS

    @property
    def hisparse_top_k(self) -> int | None:
        """HiSparse top-k in effect: the explicit value, else the model's index_topk."""
        return self.hisparse.top_k or self.model.spec(self.hicache.page_size, self.hardware.tp_size, self.hardware.attn_dp_size).index_topk or None

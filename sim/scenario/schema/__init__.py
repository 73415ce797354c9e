"""The scenario schema: pydantic models of every section, their defaults and cross-field checks, one module per
section (:mod:`.model`, :mod:`.hardware` with the cluster, :mod:`.hicache` with L3, :mod:`.scheduler`,
:mod:`.compute` with speculative decoding, :mod:`.workload` with :mod:`.lanes`, :mod:`.hisparse`), the base they
share (:mod:`.section`), and the whole :mod:`.scenario` with what it derives (:mod:`.derive`) and checks across
sections (:mod:`.checks`).

Pydantic lives only here and in :mod:`sim.scenario.load`, at the YAML edge. Every model forbids unknown keys and
is frozen, so a typo fails loudly and the engine cannot mutate its config. Defaults are SGLang 0.5.23's (see
``shared/reference/sglang_hicache.md``); estimates say so in their help text. Relative paths
(``hardware.cost_table``, ``workload.path``, ``hisparse.access.trace_path``) are resolved against the
scenario file's directory, then the current directory, and stored absolute, so a resolved dump loads back
anywhere.
"""

from __future__ import annotations

# ``X as X``: names outside __all__ that stay importable from here, as from the module this package replaced.
from sim.scenario.schema.compute import ComputeConfig, SpeculativeConfig
from sim.scenario.schema.hardware import FP4_INDEXER_GPUS as FP4_INDEXER_GPUS
from sim.scenario.schema.hardware import HIP_GPUS as HIP_GPUS
from sim.scenario.schema.hardware import ClusterConfig, HardwareConfig
from sim.scenario.schema.hicache import HiCacheConfig, L3Config
from sim.scenario.schema.hisparse import HiSparseAccessConfig, HiSparseConfig
from sim.scenario.schema.lanes import AgenticWorkload, LanesWorkload
from sim.scenario.schema.model import CATALOG_MODELS, ModelConfig, PoolConfig
from sim.scenario.schema.modelspec import build_model_spec
from sim.scenario.schema.scenario import NAME_PATTERN as NAME_PATTERN
from sim.scenario.schema.scenario import OutputConfig, Scenario
from sim.scenario.schema.scheduler import SchedulerConfig
from sim.scenario.schema.section import MAX_HISPARSE_IDS as MAX_HISPARSE_IDS
from sim.scenario.schema.section import MAX_INSTANCES as MAX_INSTANCES
from sim.scenario.schema.section import MAX_REQUESTS as MAX_REQUESTS
from sim.scenario.schema.section import MAX_WORKLOAD_PAGES as MAX_WORKLOAD_PAGES
from sim.scenario.schema.section import _Section as _Section
from sim.scenario.schema.workload import (
    BenchServingWorkload,
    MultiTurnWorkload,
    ServingStep,
    SyntheticWorkload,
    TraceWorkload,
)
from sim.scenario.schema.workload import Workload as Workload

__all__ = [
    "CATALOG_MODELS",
    "AgenticWorkload",
    "BenchServingWorkload",
    "ClusterConfig",
    "ComputeConfig",
    "HardwareConfig",
    "HiCacheConfig",
    "HiSparseAccessConfig",
    "HiSparseConfig",
    "LanesWorkload",
    "L3Config",
    "ModelConfig",
    "MultiTurnWorkload",
    "OutputConfig",
    "PoolConfig",
    "Scenario",
    "SchedulerConfig",
    "ServingStep",
    "SpeculativeConfig",
    "SyntheticWorkload",
    "TraceWorkload",
    "build_model_spec",
]

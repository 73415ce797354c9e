"""The pool specification a whole scenario's model gives: :meth:`ModelConfig.spec
<sim.scenario.schema.model.ModelConfig.spec>` at the scenario's page size and parallelism. Above the scenario's
type, so the schema's modules read one way."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sim.scenario.schema.scenario import Scenario


def build_model_spec(scenario: Scenario) -> Any:
    """The ``sim.model.pools.ModelSpec`` for the scenario's model."""
    hw = scenario.hardware
    return scenario.model.spec(scenario.hicache.page_size, hw.tp_size, hw.attn_dp_size)

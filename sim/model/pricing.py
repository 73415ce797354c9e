"""Which step-time backend prices a scenario's passes (``compute.backend``), and why.

``auto`` (the default) takes aiconfigurator-core's measured SGLang kernels wherever they can price the scenario's
GPU and model: the GPU's own tables (:data:`sim.model.transfer.MEASURED`), else the nearest measured GPU's carried over
by the datasheets (:mod:`sim.model.transfer`), unless the cost table holds a measured fit of this GPU
(``hicache-sim calibrate compute``), which a transfer does not beat. It falls back to the roofline
(:class:`sim.model.compute.Roofline`), saying why, where there is no kernel path: no ``hardware.gpu`` (the scenario
gives its own GPU figures), aiconfigurator-core not installed (its wheel is for Python 3.11-3.13), a model it
ships no config for, or a quantization no measured GPU's tables hold. ``aiconfigurator`` and ``roofline`` name
one backend; the first refuses what it cannot price.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sim.base.errors import InputError
from sim.model import aic
from sim.model.compute import Roofline
from sim.model.transfer import MEASURED

__all__ = ["Choice", "choose", "step_model"]


@dataclass(frozen=True)
class Choice:
    backend: str  # "aiconfigurator" or "roofline"
    why: str  # what decided it: the field the scenario set, or auto's reason


def choose(sc, fitted: bool = False) -> Choice:
    """The backend ``sc`` asks for, without compiling anything; ``fitted``: the cost table holds a compute fit."""
    backend = sc.compute.backend
    if backend != "auto":
        return Choice(backend, "compute.backend")
    hw = sc.hardware
    if hw.gpu is None:
        return Choice("roofline", "auto: no hardware.gpu, so the scenario's own GPU figures")
    if not aic.installed():
        return Choice("roofline", "auto: aiconfigurator-core is not installed (its wheel is for Python 3.11-3.13)")
    if aic.aic_model_id(sc.model) is None:
        return Choice("roofline", f"auto: aiconfigurator-core ships no config for {sc.model.name!r}")
    if fitted and aic.catalog_gpu(sc) not in MEASURED:
        return Choice("roofline", f"auto: the cost table's measured fit of {hw.gpu} (hardware.cost_table)")
    if (err := aic.coverage_error(sc)) is not None:
        return Choice("roofline", f"auto: {err[1]}")
    return Choice("aiconfigurator", "auto: aiconfigurator-core's tables hold hardware.gpu and the model")


def step_model(sc, fitted: Mapping[str, float] | None = None, expert_dtype: str | None = None):
    """The scenario's step-time backend; both answer ``step_seconds`` and ``decode_seconds``. ``fitted``: a cost
    table's ``compute`` section; ``expert_dtype``: the routed experts' dtype as the server resolved it
    (``sim.scenario.resolve``), which the kernels are priced at, as memory is sized at it. Under ``auto`` an
    estimator's refusal falls back to the roofline with the refusal as its reason."""
    choice = choose(sc, bool(fitted))
    if choice.backend == "aiconfigurator":
        try:
            steps = aic.AicSteps.from_scenario(sc, expert_dtype)
        except InputError as exc:
            if sc.compute.backend != "auto":
                raise
            choice = Choice("roofline", f"auto: {exc}")
        else:
            steps.why = choice.why if steps.transfer is None or sc.compute.backend != "auto" else (
                f"auto: no {steps.gpu} tables in aiconfigurator-core for this setup; the nearest measured GPU's")
            return steps
    return Roofline.from_scenario(sc, fitted, why=choice.why)

"""``hicache-sim calibrate check``: a new table against a baseline, entry by entry (see ``sim.model.costs.compare_tables``)."""

from __future__ import annotations

from sim.base.errors import InputError
from sim.model.costs import compare_tables, load_cost_table

__all__ = ["parse_tolerance", "run_check"]


def parse_tolerance(text: str) -> float:
    """``10%`` or ``0.1`` -> 0.1; raises InputError otherwise."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise InputError(
            f"--tolerance: expected a percentage like 10% or a fraction like 0.1, got {text!r}"
        ) from None
    if not 0 <= value < 10:
        raise InputError(f"--tolerance: must be between 0% and 1000%, got {text!r}")
    return value


def run_check(new_path: str, baseline_path: str, tolerance: str, allow_device_change: bool) -> int:
    """Print the comparison; 1 on a regression beyond the tolerance, 0 otherwise (InputError -> exit 2)."""
    tol = parse_tolerance(tolerance)
    new, base = load_cost_table(new_path), load_cost_table(baseline_path)
    report = compare_tables(new, base, tol, allow_device_change)
    print(f"new:      {new.describe()}")
    print(f"baseline: {base.describe()}")
    print(report.format())
    return report.exit_code

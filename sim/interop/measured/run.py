"""What one measured run says, whatever tool wrote it: figures under one set of names, and what to check it against.

Figure names are the simulator's own (``sim.app.sweep.flat_metrics``: seconds, tokens per second, hit rates as
fractions of the prompt tokens), so a measured figure and a simulated one meet under the same key. A figure
of one part of a run carries the part in front: ``step2.ttft_mean_s`` (the third bench_serving run of a file,
one a line), ``round3.hit_total`` (bench_multiturn's fourth round, counted from 0 as it counts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sim.base.errors import InputError

__all__ = ["Measured", "MeasuredRequest", "Where", "field_number", "part_of"]


@dataclass(frozen=True)
class Where:
    """Where in a file a value was read: the file, its line (JSON lines) and the field, for one-line errors."""

    source: str
    field: str
    line: int | None = None

    def error(self, message: str) -> InputError:
        """One line, whatever the field's name holds (a key typed into the file may hold a newline)."""
        name = self.field if self.field.isprintable() else self.field.encode("unicode_escape").decode()
        return InputError(f"{name}: {message}", source=self.source, line=self.line)


@dataclass(frozen=True)
class MeasuredRequest:
    """One request of a per-request export: when it was sent (seconds from the first), its sizes, and the
    conversation it belongs to (aiperf's ``conversation_id`` / ``turn_index``) where the tool records them."""

    start_s: float
    input_tokens: int
    output_tokens: int
    ttft_s: float | None = None
    conversation: str | None = None
    turn: int | None = None


@dataclass
class Measured:
    """One measured run: ``figures`` by name (see the module's docstring), the model and concurrency the run
    states (each with where it was read), and its requests where the export holds them."""

    source: str
    tool: str
    figures: dict[str, float] = field(default_factory=dict)
    model: tuple[str, Where] | None = None
    concurrency: dict[str, tuple[int, Where]] = field(default_factory=dict)  # part ("" = whole run) -> value
    requests: list[MeasuredRequest] = field(default_factory=list)

    def put(self, name: str, value: float | None) -> None:
        """Keep a figure the tool reported (None and NaN: not reported, left out)."""
        if value is not None and not (isinstance(value, float) and math.isnan(value)):
            self.figures[name] = float(value)


def part_of(name: str) -> str:
    """``step2.ttft_mean_s`` -> ``step2``; a whole-run figure's part is ``""``."""
    return name.split(".", 1)[0] if "." in name else ""


def field_number(doc: dict, key: str, where: Where, *, required: bool = False) -> float | None:
    """``doc[key]`` as a finite non-negative number (None when absent and not required)."""
    value = doc.get(key)
    if value is None:
        if required:
            raise Where(where.source, key if not where.field else f"{where.field}.{key}", where.line).error(
                "missing (the export is cut short, or written by another tool)")
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        name = key if not where.field else f"{where.field}.{key}"
        raise Where(where.source, name, where.line).error(f"expected a non-negative number, got {value!r}")
    return float(value)

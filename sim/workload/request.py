"""The request: what every workload yields and every layer above consumes.

Every request carries its input as *page keys* (see :mod:`sim.cache.radix`), so the tree never hashes token
lists on the hot path.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Request"]


@dataclass(slots=True, init=False)  # its own __init__, compiled: see :mod:`sim.base.compiled`
class Request:
    """One request. ``keys``: whole pages of the input; ``final_keys``: of input + output, if known."""

    rid: int
    arrival_s: float
    input_len: int
    output_len: int
    keys: list
    final_keys: list | None
    session: int
    round: int

    def __init__(self, rid: int, arrival_s: float, input_len: int, output_len: int, keys: list,
                 final_keys: list | None = None, session: int = -1, round: int = 0) -> None:  # fmt: skip
        self.rid, self.arrival_s, self.input_len, self.output_len = rid, arrival_s, input_len, output_len
        self.keys, self.final_keys, self.session, self.round = keys, final_keys, session, round

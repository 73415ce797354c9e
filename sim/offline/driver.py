"""What every driver of ``hicache-sim tree`` shares: the op table and the frame of an answer (the call's op and
names echoed, the handler's fields, then what every answer of the format reports), and the answer fields more
than one format writes: a request's progress and what the tree kept of it, and the tree's paths."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import ClassVar

from sim.base.errors import InputError
from sim.offline.calls import Fields, check_call

__all__ = ["CallDriver", "cached_fields", "handles", "page_tokens", "paths_answer", "progress_fields", "swa_match_fields"]


def handles(op: str):
    """Mark a driver method as the handler of calls whose ``op`` is ``op``."""

    def mark(method):
        method.handles = op
        return method

    return mark


class CallDriver:
    """Answers one call stream: each call goes to the method marked ``@handles`` for its op (a subclass may
    override that method by name), after its fields are checked against ``call_fields`` where the format
    declares them."""

    ops: ClassVar[dict[str, str]] = {}  # op -> the name of the method that handles it
    call_fields: ClassVar[dict[str, Fields] | None] = None
    echo: ClassVar[tuple[str, ...]] = ("id", "rid")  # call fields every answer repeats after its op
    kind: ClassVar[str] = ""  # the format, as an unknown op's error names it

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        marked = {getattr(m, "handles", None): name for name, m in vars(cls).items()}
        cls.ops = {**cls.ops, **{op: name for op, name in marked.items() if isinstance(op, str)}}

    def __call__(self, call: dict) -> dict:
        handler = getattr(self, self._handler_name(call))
        out = {"op": call["op"], **{k: call[k] for k in self.echo if k in call}}
        out.update(self._apply(handler, call))
        out.update(self._state())
        return out

    def _handler_name(self, call: dict) -> str:
        if self.call_fields is not None:
            check_call(call, self.call_fields)
        op = call.get("op")
        name = self.ops.get(op) if isinstance(op, str) else None
        if name is None:
            raise InputError(f"op: unknown {self.kind} op {op!r}")
        return name

    def _apply(self, handler: Callable[[dict], dict], call: dict) -> dict:
        """The handler's fields; a format that does work around every call does it here."""
        return handler(call)

    def _state(self) -> dict:
        """The fields every answer ends with (pool usage and the like)."""
        return {}

    @staticmethod
    def _request(requests: dict, call: dict, what: str = "request"):
        try:
            return requests[call["rid"]]
        except KeyError:
            raise InputError(f"rid: no {what} {call.get('rid')!r}") from None


def progress_fields(r, chunk: tuple | list | None = None) -> dict:
    """An ``extend`` answer (with ``chunk``) or a ``decode`` answer: how far request ``r`` is."""
    if chunk is not None:
        return {"chunk": list(chunk), "prefilled": r.prefilled >= r.prompt_len, "finished": r.finished}
    return {"steps": r.decode_steps, "finished": r.finished}


def swa_match_fields(m) -> dict:
    """What a FULL + SWA tree's admission match found: the SWA-valid device prefix, the Full hit, the branch."""
    return {"matched": m.device, "full_hit": m.full_hit, "swa_branching": m.branching}


def cached_fields(r, *, window: bool) -> dict:
    """What a finished request ran and what the tree kept of it; with ``window``, where its SWA was freed to."""
    out = {"chunks": [list(c) for c in r.chunks], "cached_len": r.protected}
    if window:
        out["swa_evicted_at_finish"] = r.evicted
    return out


def page_tokens(node) -> list[int]:
    """The token ids of a node whose keys are pages of ids."""
    return [t for key in node.key for t in key]


def paths_answer(paths: Iterable[list], tokens_of: Callable, flag: Callable, runs: Callable, *,
                 pages: bool = False) -> list[dict]:  # fmt: skip
    """A ``state`` answer's paths: each root-to-leaf path of nodes as its length, its tokens (written by
    ``runs``), optionally one flag letter per page, and ``[start, end, flag]`` per node; sorted by tokens."""
    out = []
    for path in paths:
        tokens, nodes, letters, pos = [], [], [], 0
        for node in path:
            t = tokens_of(node)
            f = flag(node)
            tokens += t
            nodes.append([pos, pos + len(t), f])
            letters.append(f * len(node.key))
            pos += len(t)
        entry = {"len": pos, "tokens": runs(tokens)}
        if pages:
            entry["pages"] = "".join(letters)
        entry["nodes"] = nodes
        out.append((tokens, entry))
    out.sort(key=lambda x: x[0])
    return [entry for _, entry in out]

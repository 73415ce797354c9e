"""What a conversion builds: the scenario as a YAML-ready dict, and the account of every flag that went into it.

Its own module so that each reader of a command or a log (:mod:`sim.interop.fromsglang`, ``fromlog``,
``fromrouter``) takes it from below instead of from the module that calls them."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import Any

from sim.base.errors import InputError


@dataclass
class Conversion:
    """The scenario (a YAML-ready dict) and the account of every flag: mapped or ignored (with why)."""

    scenario: dict[str, Any]
    mapped: list[str] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    token_ids: bool = False  # the server takes token ids only (--skip-tokenizer-init)
    prompt_text: str | None = None  # the kind of text the client sends (TOKENIZER_TOKENS_PER_S); None: token ids
    origins: dict[str, str] = field(default_factory=dict)  # field path -> the flag that set it, as written
    checks: list[str] = field(default_factory=list)  # the server's log against the derivation (sim.interop.fromlog)
    notes: list[str] = field(default_factory=list)  # what the user must know of the conversion, one line each
    router: str | None = None  # the sglang_router command, once one is read (a second is refused)
    forced_accept: tuple[float, str] | None = None  # SGLANG_SIMULATE_ACC_LEN: (its value, as written)

    def put(self, path: str, value: Any, origin: str | None = None) -> None:
        """Set the scenario field at dotted ``path``; ``origin``: what set it, for errors that blame it."""
        set_path(self.scenario, path, value)
        if origin is not None:
            self.origins[path] = origin

    def check(self, scenario: dict[str, Any] | None = None) -> Any:
        """The scenario (or ``scenario``, a variant of it) validated; an error in a field a flag set names that
        flag, and one across fields (a page size the model's compression does not divide) the flags without
        which it goes away (:func:`sim.scenario.load.reblame`, as for ``--set``)."""
        from sim.scenario.load import reblame, scenario_from_dict

        doc = self.scenario if scenario is None else scenario
        try:
            return scenario_from_dict(doc, source="from-sglang", overridden=self.origins)
        except InputError as exc:
            if not self.origins or not str(exc).startswith("from-sglang: "):
                raise

            def without(key: str) -> None:  # the field and its origin gone: its default then applies
                rest = _without(doc, key)
                if isinstance(rest.get("origins"), dict):
                    rest = {**rest, "origins": {k: v for k, v in rest["origins"].items() if k != key}}
                scenario_from_dict(rest, source="from-sglang")

            raise reblame(exc, "from-sglang", self.origins, without) from None


def _without(d: dict, path: str) -> dict:
    """A copy of ``d`` without the field at dotted ``path`` (its default then applies)."""
    head, _, rest = path.partition(".")
    if head not in d:
        return d
    if not rest:
        return {k: v for k, v in d.items() if k != head}
    return {**d, head: _without(d[head], rest)} if isinstance(d[head], dict) else d


def set_path(d: dict, path: str, value: Any) -> None:
    """Set the field at dotted ``path`` of the nested dict ``d``, making the parents it lacks."""
    *parents, last = path.split(".")
    for p in parents:
        d = d.setdefault(p, {})
    d[last] = value


def joined(command: str) -> str:
    """``command`` with its line continuations (a backslash ending a line) removed, as a POSIX shell removes them
    outside single quotes: a command pasted over several lines is the one command it was typed as."""
    out, quote, i = [], "", 0
    while i < len(command):
        c = command[i]
        if c == "\\" and quote != "'":
            rest = command[i + 1:i + 3]
            if rest[:1] == "\n" or rest == "\r\n":
                i += 1 + (2 if rest == "\r\n" else 1)
                continue
            out.append(command[i:i + 2])
            i += 2
            continue
        if c in "'\"" and quote in ("", c):
            quote = "" if quote else c
        out.append(c)
        i += 1
    return "".join(out)


def shell_words(command: str) -> list[str]:
    """The words a shell makes of ``command`` (``shlex``, POSIX rules): continuations joined, other newlines
    between words taken as spaces; an unclosed quote is one line naming the command."""
    try:
        return shlex.split(joined(command))
    except ValueError as e:
        raise InputError(f"cannot split the command {command[:40]!r}...: {e}") from None

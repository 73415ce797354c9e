"""What both twin tests (a timed run against a ``hicache-sim tree`` stream of its own calls) need: a request's page
keys as the call format's token runs, and the engine's acknowledged backups as the driver's copies."""

from __future__ import annotations

DECISIONS = ("backup", "demote", "delete", "drop", "host_evict", "load")


def token_runs(keys, input_len: int, output_len: int, page: int, tokens_of: dict, unique: int) -> tuple[list, list]:
    """The prompt's and the output's token runs: one run of ``page`` tokens per page key (``tokens_of`` keeps each
    key's tokens the same across requests), a partial last page of tokens no other request has (from
    ``unique``), cut where the prompt ends (a page may hold both)."""
    n = input_len + output_len
    out = [[tokens_of.setdefault(k, len(tokens_of) * page + 10_000), page] for k in keys[: n // page]]
    if n % page:
        out.append([unique, n % page])
    prompt, output, seen = [], [], 0
    for start, count in out:
        cut = min(count, max(0, input_len - seen))
        if cut:
            prompt.append([start, cut])
        if count > cut:
            output.append([start + cut, count - cut])
        seen += count
    return prompt, output


def ack_logger(calls: list[dict], ack):
    """``ack`` wrapped to log each acknowledged backup as "the first K backups acknowledged" (an ``ack`` call with
    ``backups``: K), which :func:`acked_copies` turns into the driver's copies when the calls are streamed."""
    acked = [0]

    def logged(op) -> None:
        acked[0] += 1
        if calls and calls[-1]["op"] == "ack":
            calls[-1]["backups"] = acked[0]
        else:
            calls.append({"op": "ack", "backups": acked[0]})
        ack(op)

    return logged


def acked_copies(driver, backups: int, acked: int) -> tuple[int, int]:
    """(copies, backups they hold): the driver's copies in flight that the engine's first ``backups``
    acknowledged backups cover, ``acked`` of which the stream has acknowledged already."""
    n = 0
    for copy in (x for x in driver.copies.ack_write_queue if not x.done):
        if acked + len(copy.items) > backups:
            break
        acked, n = acked + len(copy.items), n + 1
    return n, acked


def decisions(events: list[dict]) -> list[tuple]:
    """The host-tier decisions of an event log, each as its kind and the token span it names."""
    return [(k, e[k][:2] if isinstance(e[k], list) else e[k]) for e in events for k in DECISIONS if k in e]

"""Seeded synthetic workloads: arrival processes, multi-turn conversations, shared prefixes, bench_serving's random ids.

Each draws its random figures when built and makes a request only when asked for it
(:class:`sim.workload.stream.IndexedRequests`), so a run holds the requests in flight, not the workload.

Synthetic content is append-only per conversation, so a page is identified by ``(conversation, page index)``:
the same history gives the same keys, a new conversation new ones. All randomness comes from the
``numpy.random.Generator`` passed in.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sim.base.errors import InputError
from sim.workload.request import Request
from sim.workload.stream import IndexedRequests

__all__ = ["MultiTurnRequests", "RandomIdsRequests", "SharedPrefixRequests", "arrival_times", "multi_turn_requests",
           "multi_turn_sessions", "random_ids_requests", "shared_prefix"]


def arrival_times(n: int, rate: float, rng: np.random.Generator, *, process: str = "poisson",
                  cv: float = 1.0) -> np.ndarray:  # fmt: skip
    """``n`` arrival instants at ``rate`` per second: Poisson, gamma (burstiness ``cv``) or uniform."""
    if rate <= 0:
        raise InputError(f"rate: must be > 0, got {rate}")
    if process == "poisson":
        gaps = rng.exponential(1.0 / rate, n)
    elif process == "gamma":
        shape = 1.0 / (cv * cv)
        gaps = rng.gamma(shape, 1.0 / (rate * shape), n)
    elif process == "uniform":
        gaps = rng.uniform(0.0, 2.0 / rate, n)
    else:
        raise InputError(f"unknown arrival process {process!r} (known: poisson, gamma, uniform)")
    return np.cumsum(gaps)


def multi_turn_sessions(num_clients: int, num_rounds: int, request_length: int, output_length: int,
                        page_size: int, **kwargs) -> list[list[Request]]:  # fmt: skip
    """Each client's rounds of :func:`multi_turn_requests`, made now (a list of lists)."""
    convos = multi_turn_requests(num_clients, num_rounds, request_length, output_length, page_size, **kwargs)
    return [[convos.request(c, r) for r in range(n)] for c, n in enumerate(convos.rounds)]


def multi_turn_requests(num_clients: int, num_rounds: int, request_length: int, output_length: int,
                        page_size: int, *, system_prompt_length: int = 0, sub_question_length: int = 0,
                        rounds: list[int] | None = None, range_ratio: float = 1.0,
                        rng: np.random.Generator | None = None) -> MultiTurnRequests:  # fmt: skip
    """SGLang ``bench_multiturn``'s conversations: round 0 sends a ``request_length``-token prompt, round r
    the history, the previous answer and a new question of ``sub_question_length`` tokens (0: request_length).
    ``rounds``: each client's number of rounds (``--min-rounds``/``--max-rounds``; default ``num_rounds``).
    ``range_ratio`` < 1 draws every new question's and answer's length uniform over [len x ratio, len] from
    ``rng``, as the client's ``--range-ratio`` does through ``compute_random_lens``
    (``benchmark/datasets/common.py:56-64``): all of them now, so the draws come before the run's. The
    requests are made when sent (arrival times are set by the caller: a round can only start once the
    previous one has finished)."""
    if min(num_clients, num_rounds, request_length) <= 0 or output_length < 0 or sub_question_length < 0:
        raise InputError("multi-turn sizes must be > 0")
    rounds = rounds or [num_rounds] * num_clients
    question = sub_question_length or request_length

    def lens(full: int, n: int) -> np.ndarray:
        if range_ratio >= 1 or full <= 0:
            return np.full(n, full, dtype=np.int64)
        return rng.integers(max(int(full * range_ratio), 1), full + 1, n)

    n_sub = sum(r - 1 for r in rounds)
    first_in, first_out = lens(request_length, num_clients), lens(output_length, num_clients)
    sub_in, sub_out = lens(question, n_sub), lens(output_length, n_sub)
    return MultiTurnRequests(rounds, (first_in, first_out), (sub_in, sub_out), page_size, system_prompt_length)


class MultiTurnRequests(IndexedRequests):
    """Multi-turn conversations by request id (clients in order, each client's rounds in order); a
    round's input is the system prompt, every earlier round's question and answer, and its own question."""

    def __init__(self, rounds: list[int], first: tuple[np.ndarray, np.ndarray], sub: tuple[np.ndarray, np.ndarray],
                 page_size: int, system_prompt_length: int) -> None:  # fmt: skip
        self.rounds, self.page, self.sys_pages = rounds, page_size, system_prompt_length // page_size
        self.starts = np.concatenate(([0], np.cumsum(rounds[:-1], dtype=np.int64))).astype(np.int64)
        n = sum(rounds)
        new, self.n_out = np.empty(n, np.int64), np.empty(n, np.int64)
        opens = np.zeros(n, bool)
        opens[self.starts] = True
        new[opens], self.n_out[opens] = first
        new[~opens], self.n_out[~opens] = sub  # round r >= 1 of client c: in client order, as drawn
        spent = np.cumsum(new + self.n_out)  # tokens up to and including each round, over all clients
        before = spent - (new + self.n_out)
        self.n_in = system_prompt_length + before - np.repeat(before[self.starts], rounds) + new

    def __len__(self) -> int:
        return len(self.n_in)

    def request(self, client: int, rnd: int) -> Request:
        rid = int(self.starts[client]) + rnd
        n_in, out = int(self.n_in[rid]), int(self.n_out[rid])
        keys = _conversation_keys(client, n_in, self.page, self.sys_pages)
        final = _conversation_keys(client, n_in + out, self.page, self.sys_pages)
        return Request(rid, 0.0, n_in, out, keys, final, session=client, round=rnd)

    def make(self, i: int) -> Request:
        client = int(np.searchsorted(self.starts, i, side="right")) - 1
        return self.request(client, i - int(self.starts[client]))

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        return self.n_in, self.n_out


def _conversation_keys(client: int, n_tokens: int, page: int, sys_pages: int) -> list:
    n = n_tokens // page
    return [("sys", i) if i < sys_pages else (client, i) for i in range(n)]


def shared_prefix(num_requests: int, num_groups: int, prefix_length: int, input_length: int,
                  output_length: int, page_size: int, arrivals: np.ndarray,
                  rng: np.random.Generator) -> SharedPrefixRequests:  # fmt: skip
    """Requests that share one of ``num_groups`` prefixes of ``prefix_length`` tokens, then diverge (each
    request's group drawn now, its keys made when it is sent)."""
    if prefix_length > input_length:
        raise InputError("shared_prefix_length: must be <= input_length")
    groups = rng.integers(0, max(1, num_groups), num_requests)
    return SharedPrefixRequests(arrivals, groups, input_length, output_length, prefix_length // page_size,
                                input_length // page_size)  # fmt: skip


@dataclass(eq=False)
class SharedPrefixRequests(IndexedRequests):
    """:func:`shared_prefix`'s requests, by index."""

    arrivals: np.ndarray
    groups: np.ndarray
    input_length: int
    output_length: int
    prefix_pages: int
    pages: int

    def __len__(self) -> int:
        return len(self.groups)

    def make(self, i: int) -> Request:
        g, p_pages = int(self.groups[i]), self.prefix_pages
        keys = [("g", g, j) if j < p_pages else ("r", i, j) for j in range(self.pages)]
        return Request(i, float(self.arrivals[i]), self.input_length, self.output_length, keys, session=g)

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        n = len(self)
        return np.full(n, self.input_length, np.int64), np.full(n, self.output_length, np.int64)


def random_ids_requests(num_prompts: int, input_len: int, output_len: int, range_ratio: float, seed: int,
                        page_size: int, *, step: int = 0, first_rid: int = 0) -> RandomIdsRequests:  # fmt: skip
    """``bench_serving --dataset-name random-ids`` prompts: lengths uniform over [len x ratio, len] (at least 1),
    as ``compute_random_lens`` draws them (SGLang ``benchmark/datasets/common.py:56-64``), and random token
    ids, so prompts share no prefix. The prompt set is a function of (seed, sizes): a step repeating them
    sends the same prompts again (what an L3 hit run relies on). ``step`` goes in ``Request.round``."""
    if min(num_prompts, input_len, output_len) <= 0 or not 0 <= range_ratio <= 1:
        raise InputError("bench_serving sizes must be > 0 and the range ratio in [0, 1]")
    rng = np.random.default_rng(seed)
    ins = rng.integers(max(int(input_len * range_ratio), 1), input_len + 1, num_prompts)
    outs = rng.integers(max(int(output_len * range_ratio), 1), output_len + 1, num_prompts)
    tag = ("ids", seed, num_prompts, input_len, output_len, range_ratio)
    return RandomIdsRequests(ins, outs, tag, page_size, step, first_rid)


@dataclass(eq=False)
class RandomIdsRequests(IndexedRequests):
    """:func:`random_ids_requests`' prompts, by index."""

    ins: np.ndarray
    outs: np.ndarray
    tag: tuple
    page: int
    step: int
    first_rid: int

    def __len__(self) -> int:
        return len(self.ins)

    def make(self, i: int) -> Request:
        n, m, tag = int(self.ins[i]), int(self.outs[i]), self.tag
        return Request(self.first_rid + i, 0.0, n, m, [(tag, i, j) for j in range(n // self.page)],
                       [(tag, i, j) for j in range((n + m) // self.page)], session=i, round=self.step)  # fmt: skip

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        return self.ins, self.outs

"""Seeded synthetic workloads: arrival processes, multi-turn conversations, shared prefixes, bench_serving's random ids.

Synthetic content is append-only per conversation, so a page is identified by ``(conversation, page index)``:
the same history gives the same keys, a new conversation new ones. All randomness comes from the
``numpy.random.Generator`` passed in.
"""

from __future__ import annotations

import numpy as np

from sim.base.errors import InputError
from sim.workload.request import Request

__all__ = ["arrival_times", "multi_turn_sessions", "random_ids_requests", "shared_prefix"]


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
                        page_size: int, *, system_prompt_length: int = 0, sub_question_length: int = 0,
                        rounds: list[int] | None = None, range_ratio: float = 1.0,
                        rng: np.random.Generator | None = None) -> list[list[Request]]:  # fmt: skip
    """SGLang ``bench_multiturn``'s conversations: round 0 sends a ``request_length``-token prompt, round r
    the history, the previous answer and a new question of ``sub_question_length`` tokens (0: request_length).
    ``rounds``: each client's number of rounds (``--min-rounds``/``--max-rounds``; default ``num_rounds``).
    ``range_ratio`` < 1 draws every new question's and answer's length uniform over [len x ratio, len] from
    ``rng``, as the client's ``--range-ratio`` does through ``compute_random_lens``
    (``benchmark/datasets/common.py:56-64``). Returns each client's rounds (arrival times are set by the
    caller: a round can only start once the previous one has finished)."""
    if min(num_clients, num_rounds, request_length) <= 0 or output_length < 0 or sub_question_length < 0:
        raise InputError("multi-turn sizes must be > 0")
    rounds = rounds or [num_rounds] * num_clients
    question = sub_question_length or request_length

    def lens(full: int, n: int) -> list[int]:
        if range_ratio >= 1 or full <= 0:
            return [full] * n
        return [int(x) for x in rng.integers(max(int(full * range_ratio), 1), full + 1, n)]

    n_sub = sum(r - 1 for r in rounds)
    first_in, first_out = lens(request_length, num_clients), lens(output_length, num_clients)
    sub_in, sub_out = lens(question, n_sub), lens(output_length, n_sub)
    sys_pages = system_prompt_length // page_size
    sessions, rid, k = [], 0, 0
    for c in range(num_clients):
        convo, history = [], system_prompt_length
        for r in range(rounds[c]):
            if r:
                new, out, k = sub_in[k], sub_out[k], k + 1
            else:
                new, out = first_in[c], first_out[c]
            n_in = history + new
            keys = _conversation_keys(c, n_in, page_size, sys_pages)
            final = _conversation_keys(c, n_in + out, page_size, sys_pages)
            convo.append(Request(rid, 0.0, n_in, out, keys, final, session=c, round=r))
            rid += 1
            history = n_in + out
        sessions.append(convo)
    return sessions


def _conversation_keys(client: int, n_tokens: int, page: int, sys_pages: int) -> list:
    n = n_tokens // page
    return [("sys", i) if i < sys_pages else (client, i) for i in range(n)]


def shared_prefix(num_requests: int, num_groups: int, prefix_length: int, input_length: int,
                  output_length: int, page_size: int, arrivals: np.ndarray,
                  rng: np.random.Generator) -> list[Request]:  # fmt: skip
    """Requests that share one of ``num_groups`` prefixes of ``prefix_length`` tokens, then diverge."""
    if prefix_length > input_length:
        raise InputError("shared_prefix_length: must be <= input_length")
    groups = rng.integers(0, max(1, num_groups), num_requests)
    p_pages, n_pages = prefix_length // page_size, input_length // page_size
    out = []
    for i in range(num_requests):
        g = int(groups[i])
        keys = [("g", g, j) if j < p_pages else ("r", i, j) for j in range(n_pages)]
        out.append(Request(i, float(arrivals[i]), input_length, output_length, keys, session=g))
    return out


def random_ids_requests(num_prompts: int, input_len: int, output_len: int, range_ratio: float, seed: int,
                        page_size: int, *, step: int = 0, first_rid: int = 0) -> list[Request]:  # fmt: skip
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
    return [Request(first_rid + i, 0.0, int(n), int(m), [(tag, i, j) for j in range(int(n) // page_size)],
                    [(tag, i, j) for j in range(int(n + m) // page_size)], session=i, round=step)
            for i, (n, m) in enumerate(zip(ins, outs))]  # fmt: skip

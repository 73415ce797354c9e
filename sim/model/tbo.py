"""Two-batch overlap (SGLang's ``--enable-two-batch-overlap``): what it changes in a prefill pass's time.

SGLang splits a pass's batch into two micro-batches and runs them as one op list with a yield at each
communication op, so one micro-batch's collective runs while the other computes
(``batch_overlap/two_batch_overlap.py:950-1010``, ``execute_overlapped_operations``). For DeepSeek-V4, the only
model the simulator prices it for, it runs on prefill (EXTEND) passes only (``models/deepseek_v4.py:4262-4294``;
decode raises, ``batch_overlap/operations_strategy.py:172-183``), never on the draft model
(``two_batch_overlap.py:509-510``), and without an EP all-to-all backend its collectives are the DP gather of
the attention output and the reduce-scatter back (``op_gather_a/b``, ``op_combine_a/b``,
``operations_strategy.py:189-203``). Per layer the compute stream then runs four stages, each hiding the other
micro-batch's collective just launched:

    max(attn_A, combine_B) + max(attn_B, gather_A) + max(moe_A, gather_B) + max(moe_B, combine_A)

summed over layers as whole-pass totals (the layers are alike). Each micro-batch is priced at its own shape,
so a split that runs smaller GEMMs less efficiently costs what the backend says it does. A backend that
prices the collectives as ops of their own (aiconfigurator-core, :meth:`sim.model.aic.AicSteps.tbo_parts`)
prices it so; the roofline has no communication term, so with it the pass time is unchanged (spec-derived:
nothing to hide, and its compute is linear in tokens, so the split costs nothing).

The split follows ``compute_split_seq_index`` / ``compute_split_token_index``
(``two_batch_overlap.py:83-173, 291-310``): at a sequence boundary balancing the tokens, unless that leaves
one side with less than ``threshold`` of them, when the pass is cut at half its tokens inside a sequence
("two-chunk"). The engine knows a pass as ``n`` chunks carrying its tokens and attention pairs, which it
splits as ``n`` equal chunks behind equal prefixes (as :func:`sim.model.aic.prefill_shape` prices them).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["DEFAULT_THRESHOLD", "halves", "split_seq_index", "split_token_index", "stage_seconds", "tbo_saving"]

DEFAULT_THRESHOLD = 0.48  # --tbo-token-distribution-threshold's default (arg_groups/fields/exec_.py:1054-1057)

Part = tuple[int, float, int]  # (tokens, attention pairs, chunks) of one micro-batch


def _cum_less_than_half(lens: Sequence[int]) -> int:
    """The sequence holding the middle token (``_split_array_by_cum_less_than_half``, :142-154)."""
    half, left = sum(lens) // 2, 0
    for i, n in enumerate(lens):
        left += n
        if left > half:
            return i
    return 0


def _balanced_sum(lens: Sequence[int]) -> int:
    """The first sequence boundary past which the two sides' tokens stop getting closer
    (``_split_array_by_balanced_sum``, :157-173)."""
    total, left, best, best_diff = sum(lens), 0, 0, float("inf")
    for i in range(1, len(lens)):
        left += lens[i - 1]
        diff = abs(2 * left - total)
        if diff > best_diff:
            break
        best, best_diff = i, diff
    return best


def two_chunk(lens: Sequence[int], threshold: float) -> bool:
    """Whether the split cuts a sequence at half the tokens (``_is_two_chunk_split_enabled``, :102-132): the
    balanced boundary leaves one side under ``threshold`` of the tokens, and the first micro-batch keeps at
    least one token per sequence."""
    total = sum(lens)
    left = sum(lens[: _balanced_sum(lens)])
    if threshold * total <= left <= (1 - threshold) * total:
        return False
    return _cum_less_than_half(lens) + 1 <= total // 2


def split_seq_index(lens: Sequence[int], threshold: float = DEFAULT_THRESHOLD) -> int:
    """The sequence an extend batch of ``lens`` tokens per sequence splits at (``_split_extend_seqs``, :135-139)."""
    return _cum_less_than_half(lens) if two_chunk(lens, threshold) else _balanced_sum(lens)


def split_token_index(lens: Sequence[int], threshold: float = DEFAULT_THRESHOLD) -> int:
    """The tokens of the first micro-batch (``compute_split_token_index``'s extend branch, :298-302)."""
    if two_chunk(lens, threshold):
        return sum(lens) // 2
    return sum(lens[: split_seq_index(lens, threshold)])


def halves(tokens: int, pairs: float, n: int, threshold: float = DEFAULT_THRESHOLD) -> tuple[Part, Part]:
    """The two micro-batches of a prefill pass of ``n`` equal chunks carrying ``tokens`` tokens and ``pairs``
    attention pairs: the chunks split as SGLang splits them, each chunk's pairs shared by its tokens as a
    causal chunk behind its prefix shares them."""
    n = max(1, min(n, tokens))
    lens = [tokens // n + (i < tokens % n) for i in range(n)]
    per = pairs / n
    seq, cut = split_seq_index(lens, threshold), split_token_index(lens, threshold)
    done = sum(lens[:seq])
    if cut == done:  # at a sequence boundary
        a = (cut, per * seq, seq)
        return a, (tokens - cut, pairs - a[1], n - seq)
    m, length = cut - done, lens[seq]  # the first m tokens of sequence `seq` go first
    prefix = max(0.0, (per - length * (length + 1) / 2) / length)
    a = (cut, per * seq + m * prefix + m * (m + 1) / 2, seq + 1)
    return a, (tokens - cut, pairs - a[1], n - seq)


def stage_seconds(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> float:
    """Both micro-batches' layers, each given as (attention-side compute, gather, MoE-side compute, combine)
    seconds over all layers: four stages per layer, each the longer of one's compute and the other's
    collective in flight."""
    return max(a[0], b[3]) + max(b[0], a[1]) + max(a[2], b[1]) + max(b[2], a[3])


def tbo_saving(backend, tokens: int, pairs: float, n: int, threshold: float) -> float:
    """Seconds two-batch overlap takes off a prefill pass's forward (negative where the split costs more than
    it hides); 0 with a backend that prices no collectives (the roofline)."""
    parts = getattr(backend, "tbo_parts", None)
    if parts is None or tokens < 2:
        return 0.0
    a, b = halves(tokens, pairs, n, threshold)
    if not a[0] or not b[0]:
        return 0.0
    whole = parts(tokens, pairs, n)
    return sum(whole) - stage_seconds(parts(*a), parts(*b))

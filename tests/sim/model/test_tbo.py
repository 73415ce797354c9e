"""Two-batch overlap: SGLang's split of an extend batch, and what the overlap takes off a prefill pass."""

from __future__ import annotations

import pytest

from sim.model.compute import attention_pairs
from sim.model.tbo import halves, split_seq_index, split_token_index, stage_seconds, tbo_saving, two_chunk


class TestSplit:
    """``compute_split_seq_index`` / ``compute_split_token_index`` on extend batches
    (``batch_overlap/two_batch_overlap.py:83-173, 291-310``), worked by hand through SGLang's code (the functions
    also agreed with SGLang's own, run on 80,000 random batches at four thresholds, when written)."""

    @pytest.mark.parametrize(("lens", "threshold", "seq", "token", "chunked"), [
        ([4, 4], 0.48, 1, 4, False),  # the balanced boundary splits 50/50
        ([10, 2, 2], 0.48, 0, 7, True),  # the best boundary leaves 10 of 14 first: cut sequence 0 at 7 tokens
        ([10, 2, 2], 0.0, 1, 10, False),  # threshold 0: never cut a sequence
        ([3, 3, 3], 0.48, 1, 4, True),  # ties go to the later boundary (6 of 9), then the middle token's sequence
        ([100], 0.48, 0, 50, True),  # one prompt: halved
        ([1], 0.48, 0, 0, False),  # a one-token prompt cannot be cut: the first micro-batch would have none
        ([5, 5, 5, 5, 6], 0.48, 2, 13, True),  # best boundary 15 of 26 (over 0.52): cut sequence 2 at 13 tokens
    ])  # fmt: skip
    def test_split_points(self, lens, threshold, seq, token, chunked):
        assert (split_seq_index(lens, threshold), split_token_index(lens, threshold)) == (seq, token)
        assert two_chunk(lens, threshold) is chunked


class TestHalves:
    def test_equal_chunks_split_at_a_boundary_keep_their_pairs(self):
        pairs = 4 * attention_pairs(512, 1000)
        a, b = halves(2048, pairs, 4)
        assert a == (1024, pairs / 2, 2) and b == (1024, pairs / 2, 2)

    def test_one_prompt_is_cut_in_the_middle_with_the_pairs_each_half_attends(self):
        a, b = halves(2048, attention_pairs(2048, 300), 1)
        assert a == (1024, attention_pairs(1024, 300), 1)
        assert b == (1024, pytest.approx(attention_pairs(1024, 300 + 1024)), 1)


class _Linear:
    """A backend whose pass ops scale with the tokens: (attention side, gather, MoE side, combine) per token."""

    def __init__(self, per_token):
        self.per_token = per_token

    def tbo_parts(self, tokens, pairs, n_prefill=1):
        return tuple(x * tokens for x in self.per_token)


class TestSaving:
    def test_the_stages_hide_each_collective_behind_the_other_micro_batchs_compute(self):
        assert stage_seconds((3, 1, 2, 1), (3, 1, 2, 1)) == 10  # every collective hidden: the compute alone
        assert stage_seconds((1, 3, 1, 3), (1, 3, 1, 3)) == 12  # communication-bound: the collectives alone
        assert stage_seconds((3, 0, 2, 0), (3, 0, 2, 0)) == 10  # nothing to hide: compute in turn

    def test_collectives_shorter_than_the_compute_are_hidden_whole(self):
        backend = _Linear((3e-6, 1e-6, 2e-6, 1e-6))
        assert tbo_saving(backend, 8192, attention_pairs(8192, 0), 1, 0.48) == pytest.approx(2e-6 * 8192)

    def test_without_communication_a_split_that_costs_nothing_saves_nothing(self):
        backend = _Linear((3e-6, 0.0, 2e-6, 0.0))
        assert tbo_saving(backend, 8192, attention_pairs(8192, 0), 1, 0.48) == pytest.approx(0.0, abs=1e-15)

    def test_the_roofline_prices_no_collectives_so_its_pass_is_unchanged(self):
        from sim.model.pricing import step_model
        from sim.scenario.load import load_scenario

        sc = load_scenario("scenarios/dsv4_flash_dp_mtp.yaml", ["compute.backend=roofline"])  # auto: the kernels
        assert tbo_saving(step_model(sc), 8192, attention_pairs(8192, 0), 1, 0.48) == 0.0

    def test_an_unsplittable_pass_saves_nothing(self):
        assert tbo_saving(_Linear((1.0, 1.0, 1.0, 1.0)), 1, 1.0, 1, 0.48) == 0.0
        assert tbo_saving(_Linear((1.0, 1.0, 1.0, 1.0)), 100, 5050.0, 1, 0.0) == 0.0  # threshold 0, one prompt

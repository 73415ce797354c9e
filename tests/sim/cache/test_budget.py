"""SGLang's one-pool prefill budget arithmetic, shared by the engine and the host-tier drivers."""

from types import SimpleNamespace

from sim.cache.budget import (
    CLIP_MAX_NEW_TOKENS,
    admission_demand,
    chunk_end,
    chunk_reservation,
    clip_output,
    output_left,
)

PAGE = 64


def test_outputs_count_in_full_up_to_the_clip():
    assert clip_output(100) == 100
    assert clip_output(CLIP_MAX_NEW_TOKENS + 1) == CLIP_MAX_NEW_TOKENS
    assert output_left(SimpleNamespace(output_len=10_000, emitted=9_000)) == 1_000
    assert output_left(SimpleNamespace(output_len=10_000, emitted=10)) == CLIP_MAX_NEW_TOKENS


def test_a_candidate_needs_its_extend_past_the_device_prefix_its_output_and_a_page():
    assert admission_demand(1_000, 256, 50, PAGE) == 1_000 - 256 + 50 + PAGE
    assert admission_demand(1_000, 0, 100_000, PAGE) == 1_000 + CLIP_MAX_NEW_TOKENS + PAGE


def test_a_chunk_reserves_whole_pages_and_a_page_and_the_output_only_when_it_ends_the_prompt():
    assert chunk_reservation(65, False, 500, PAGE) == 2 * PAGE + PAGE
    assert chunk_reservation(65, True, 500, PAGE) == 2 * PAGE + PAGE + 500
    assert chunk_reservation(0, True, 7, PAGE) == PAGE + 7


def test_a_first_chunk_takes_the_prompt_if_its_paged_extend_fits_else_ends_on_a_page():
    assert chunk_end(1_000, 0, 1_024, PAGE) == 1_000  # 1,000 tokens are 16 pages: 1,024 fit
    assert chunk_end(1_000, 0, 1_000, PAGE) == 960  # 1,024 do not fit 1,000: cut at the last whole page
    assert chunk_end(1_000, 100, 300, PAGE) == 320  # from an unaligned prefix: at most the limit, on a page
    assert chunk_end(1_000, 128, 0, PAGE) == 128  # no room: an empty chunk

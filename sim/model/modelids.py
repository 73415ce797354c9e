"""A Hugging Face id as users type it, to the architecture config aiconfigurator-core ships for it.

Published checkpoints carry release and tuning suffixes (``Qwen/Qwen3-235B-A22B-Instruct-2507``,
``...-Thinking-2507``, ``deepseek-ai/DeepSeek-R1-0528``) on the architecture of a shipped id
(``Qwen/Qwen3-235B-A22B``): the fields the derivation reads (layers, heads, head and expert sizes, vocabulary,
:data:`sim.model.modelcfg.CONFIG_INTS`) are the base model's. Such suffixes are stripped, one at a time from the
end, until a shipped id is named. Suffixes that change the weights or the layout (``-FP8``, ``-AWQ``,
``-NVFP4``, a size) are kept: those need their own config (``--model-config``).
"""

from __future__ import annotations

import re

__all__ = ["NEUTRAL_SUFFIX", "shipped_id"]

NEUTRAL_SUFFIX = re.compile(r"-(instruct|thinking|chat|base|preview|it|\d{4})$", re.IGNORECASE)


def shipped_id(name: str) -> str | None:
    """The shipped Hugging Face id ``name`` names (case-insensitive), directly or less release/tuning suffixes;
    None when there is none."""
    from sim.model.aic import shipped_models

    ids = {k.lower(): k for k in shipped_models()}
    ref = name.strip().rstrip("/")
    while True:
        if ref.lower() in ids:
            return ids[ref.lower()]
        m = NEUTRAL_SUFFIX.search(ref)
        if m is None or "/" not in ref[: m.start()]:
            return None
        ref = ref[: m.start()]

"""Tokenizer throughput: what SGLang's tokenizer manager spends on one prompt before the scheduler sees it.

    pip install tokenizers && python bench/tokenizer.py [--corpus DIR] [--vocab 128000]

SGLang 0.5.23 tokenizes a text prompt on the tokenizer manager's event loop, one request after another
(``managers/tokenizer_manager.py:1058-1066``: ``self.tokenizer([text])``, a batch of one, so one thread;
``--tokenizer-worker-num`` adds processes). No model tokenizer ships with this project, so this trains a stand-in
byte-level BPE (the family of DeepSeek's and Qwen's tokenizers) on local text (by default SGLang's own source)
and times single-thread encodes of two kinds of prompt: bench_serving's ``random-ids`` text (consecutive vocab
ids from a random offset, decoded, as ``benchmark/datasets/random.py:141-155`` builds it) and prose (SGLang's
Markdown files). It prints tokens per second per prompt length; ``scheduler.tokenizer_tokens_per_s`` takes
the figure (``sim.interop.fromsglang.TOKENIZER_TOKENS_PER_S``). A real tokenizer on a server CPU may be faster or slower:
measure yours with ``--corpus`` or time ``tokenizer.encode`` on your prompts.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # one request's encode is one thread in SGLang
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

SGLANG = Path("/work/sglang/sglang-0.5.23/sglang")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--corpus", type=Path, default=SGLANG, help="folder of .py/.md text to train the stand-in on")
    ap.add_argument("--vocab", type=int, default=128000, help="target vocabulary size")
    args = ap.parse_args()
    from tokenizers import ByteLevelBPETokenizer, Tokenizer

    files = sorted(str(p) for p in args.corpus.rglob("*") if p.suffix in (".py", ".md"))
    trainer = ByteLevelBPETokenizer()
    trainer.train(files, vocab_size=args.vocab, min_frequency=2, show_progress=False)
    with tempfile.TemporaryDirectory() as tmp:
        trainer.save(f"{tmp}/tok.json")
        tok = Tokenizer.from_file(f"{tmp}/tok.json")
    vocab = tok.get_vocab_size()
    prose = "".join(Path(f).read_text() for f in files if f.endswith(".md"))
    prose_ids = tok.encode(prose).ids
    rng = np.random.default_rng(0)
    print(f"stand-in byte-level BPE: {vocab:,} tokens, trained on {len(files):,} files; one thread")
    print(f"{'prompt':<11}{'ids':>8}{'tokens':>9}{'bytes':>11}{'CPU ms':>9}{'M tok/s':>9}")
    for n in (1000, 3500, 16000, 128000):
        offset = int(rng.integers(0, vocab))
        texts = {"random-ids": tok.decode([(offset + j) % vocab for j in range(n)]),
                 "prose": tok.decode(prose_ids[:n])}  # fmt: skip
        for kind, text in texts.items():
            reps = max(3, 200_000 // n)
            tok.encode_batch([text])
            start = time.process_time()  # CPU time: a shared machine's wall clock is not the work
            for _ in range(reps):
                out = tok.encode_batch([text])
            seconds = (time.process_time() - start) / reps
            tokens = len(out[0].ids)
            print(f"{kind:<11}{n:>8,}{tokens:>9,}{len(text.encode()):>11,}{seconds * 1e3:>9.2f}{tokens / seconds / 1e6:>9.2f}")


if __name__ == "__main__":
    main()

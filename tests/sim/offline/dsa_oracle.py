"""A DSA HiSparse call stream of our own, and its answers from a second, naive statement of SGLang 0.5.23's
coordinator and swap-in kernel: plain lists, one slot at a time, written from the source
(``srt/managers/hisparse_coordinator.py``, ``kernels/jit/csrc/kvcacheio/hisparse.cuh``), sharing no code with
``sim``. It makes ``tests/data/hisparse_dsa`` (``python tests/sim/offline/dsa_oracle.py``), so the DSA path is
checked on a clean clone without ``../shared``; the test regenerates it to keep the two in step.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import random
import sys
from pathlib import Path

DATA = Path(__file__).parents[2] / "data" / "hisparse_dsa"
NAME = "stream_gen_dsa_H48_K16_L5"
H, K, PAGE, LAYERS = 48, 16, 16, 5
SHARE = {"index_topk_freq": 2, "index_skip_topk_offset": 2}  # anchors 0, 1, 3; layer 2 reuses 1, layer 4 reuses 3


def skip_pattern() -> list[bool]:
    """``dsa_layer_skips_topk`` with a frequency and an offset (configs/model_config.py:511-520)."""
    return [max(i - SHARE["index_skip_topk_offset"] + 1, 0) % SHARE["index_topk_freq"] != 0 for i in range(LAYERS)]


def anchors() -> list[int]:
    out, anchor = [], 0
    for i, skip in enumerate(skip_pattern()):
        anchor = anchor if skip else i
        out.append(anchor)
    return out


def cap_for(length: int) -> int:
    """``alloc_device_buffer`` / ``_grow_device_buffers``: pages up to H, then H plus one page."""
    cap = min((length + PAGE - 1) // PAGE * PAGE, H)
    return H + PAGE if cap == H else cap


class Req:
    def __init__(self, prompt: int, staging: bool) -> None:
        self.seq = prompt
        keep = staging or prompt <= H  # staging keeps arange(H); PD direct keeps it only when the prompt fits
        self.tokens = {a: [t if keep else -1 for t in range(H)] for a in set(anchors())}
        self.lru = {a: list(range(H)) for a in set(anchors())}
        self.cap = cap_for(prompt)
        self.skip_backup = True
        self.hot = random.Random(prompt).sample(range(prompt), min(prompt, 6))


def kernel(r: Req, layer: int, seq_len: int, row: list[int]) -> dict:
    """One request's block of ``load_cache_to_device_buffer_kernel`` (hisparse.cuh:343-722) for one layer."""
    valid = [t for t in row if t >= 0]
    newest = seq_len - 1
    newest_hit = int(newest in valid)
    if seq_len <= H:  # fast path: nothing looked up, nothing moved
        order = list(range(seq_len - 1))
        return {"hits": len(valid) - newest_hit, "misses": 0, "loads": [], "evicted": [], "resident": seq_len - 1,
                "order": order}
    wanted = [t for t in valid if t != newest]
    tokens, lru = r.tokens[layer], r.lru[layer]
    hit_slots, evictable = [], []
    for slot in lru:  # the LRU walk: a slot whose token is selected is a hit; any other (empty too) evictable
        (hit_slots if tokens[slot] in wanted else evictable).append(slot)
    resident = {tokens[s] for s in hit_slots}
    misses = [t for t in wanted if t not in resident]
    loads, evicted = [], []
    for i, t in enumerate(misses):  # the i-th miss takes the i-th evictable from the LRU end
        slot = evictable[i]
        loads.append([t, slot])
        evicted.append(tokens[slot])
        tokens[slot] = t
    r.lru[layer] = evictable[len(misses):] + evictable[: len(misses)] + hit_slots
    order = [tokens[s] for s in r.lru[layer] if tokens[s] >= 0]
    return {"hits": len(wanted) - len(misses), "misses": len(misses), "loads": loads, "evicted": evicted,
            "resident": sum(t >= 0 for t in tokens), "order": order}


def answers(calls: list[dict]) -> list[dict]:
    reqs: dict[str, Req] = {}
    out, step = [], 0
    for call in calls:
        if call["op"] == "arrive":
            reqs[call["rid"]] = Req(call["prompt_len"], call.get("admission") == "staging")
        elif call["op"] == "finish":
            del reqs[call["rid"]]
        elif call["op"] == "step":
            per_req = []
            for row in call["reqs"]:
                r, n = reqs[row["rid"]], row["seq_len"]
                backup = None if r.skip_backup else n - 2  # every step, the previous newest; not the first
                r.skip_backup = False
                if r.cap < n <= H:
                    r.cap = cap_for(n)
                per_req.append((row, r, backup, {a: kernel(r, a, n, row["topk"][a]) for a in set(anchors())}))
            for layer, anchor in enumerate(anchors()):
                for row, r, backup, done in per_req:
                    d = done[anchor]
                    valid = [t for t in row["topk"][anchor] if t >= 0]
                    a = {"step": step, "rid": row["rid"], "layer": layer, "seq_len": row["seq_len"],
                         "kernel_len": row["seq_len"], "fast": row["seq_len"] <= H, "selected": len(valid),
                         "newest_hit": int(row["seq_len"] - 1 in valid), "hits": d["hits"], "misses": d["misses"],
                         "loads": d["loads"], "evicted": d["evicted"], "backup": backup, "resident": d["resident"],
                         "buffer_cap": r.cap, "racy": False,
                         "lru_hash": hashlib.sha1(json.dumps(d["order"]).encode()).hexdigest()[:12]}
                    if anchor != layer:
                        a.update(replay_of=anchor, copied=d["misses"])
                    out.append(a)
            step += 1
    return out


def topk_row(r: Req, seq_len: int, rng: random.Random) -> list[int]:
    """An indexer's row: every position while seq_len <= K (dsa_topk_backend.py:272-309), else sinks, the newest
    few, a per-request hot set and the rest drawn at random, shuffled and padded."""
    if seq_len <= K:
        row = list(range(seq_len))
    else:
        picks = [0, 1, seq_len - 1, seq_len - 2, seq_len - 3] + [t for t in r.hot if t < seq_len]
        while len(set(picks)) < K - rng.randint(0, 2):
            picks.append(rng.randrange(seq_len))
        row = list(dict.fromkeys(picks))[:K]
    rng.shuffle(row)
    return row + [-1] * (K - len(row))


def calls(seed: int = 7) -> list[dict]:
    """Five requests through two decode slots: above H and below it, PD direct and colocated staging, a finish and a
    re-admission, buffers that grow page by page and cross H."""
    rng = random.Random(seed)
    out = [{"op": "config", "family": "dsa", "device_buffer_size": H, "top_k": K, "page_size": PAGE,
            "layers": LAYERS, "block_size": 960, "max_reqs": 2, "max_context_len": 400, "index_share": SHARE}]
    plan = [("r0", 120, "direct"), ("r1", 30, "staging"), ("r2", 12, "direct"), ("r3", 90, "staging"),
            ("r4", 40, "direct")]
    live: dict[str, tuple[Req, int]] = {}
    for rid, prompt, admission in plan:
        if len(live) == 2:
            gone = min(live)
            del live[gone]
            out.append({"op": "finish", "rid": gone})
        out.append({"op": "arrive", "rid": rid, "prompt_len": prompt,
                    **({"admission": "staging"} if admission == "staging" else {})})
        live[rid] = (Req(prompt, admission == "staging"), 22)
        for _ in range(live[rid][1]):
            rows = []
            for r_id, (r, _) in live.items():
                r.seq += 1
                own = {a: topk_row(r, r.seq, rng) for a in set(anchors())}
                rows.append({"rid": r_id, "seq_len": r.seq,
                             "topk": [own[i] if a == i else None for i, a in enumerate(anchors())]})
            out.append({"op": "step", "reqs": rows})
    return out


def write() -> None:
    stream = calls()
    DATA.mkdir(parents=True, exist_ok=True)
    for suffix, rows in ((".jsonl.gz", stream), (".answer.jsonl.gz", answers(stream))):
        text = "".join(json.dumps(x, separators=(",", ":")) + "\n" for x in rows)
        (DATA / f"{NAME}{suffix}").write_bytes(gzip.compress(text.encode(), mtime=0))


if __name__ == "__main__":
    write()
    print(f"wrote {DATA}/{NAME}.jsonl.gz and .answer.jsonl.gz", file=sys.stderr)

"""Write the bundled synthetic agentic traces: one Weka/AgentX file and the same calls as Qwen-Bailian records.

    python tools/make_agentic_fixtures.py            # writes data/agentic/weka_synthetic.jsonl, bailian_synthetic.jsonl

The sessions come from the project's own generator (:mod:`sim.workload.agentic`, seed 7), sized so a lane replay of
them runs in seconds; nothing here is taken from a real corpus. The real corpora are public: SemiAnalysis's
``semianalysisai/cc-traces-weka-*`` on Hugging Face (Apache-2.0; aiperf's ``--public-dataset
semianalysis_cc_traces_weka_062126``) and Alibaba's ``qwen-bailian-usagetraces-anon`` on GitHub (Apache-2.0).

The Bailian file holds the first sessions' calls: one chat chain per parent and per subagent (a subagent's first call's
``parent_chat_id`` is the parent call it was spawned after), session k starting ``STAGGER_S`` x k seconds in,
and each 64-token block split into four 16-token blocks numbered in one namespace for the file (a trailing
partial block into as many as its tokens need).
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sim.scenario.schema import AgenticWorkload  # noqa: E402
from sim.workload.agentic import BLOCK, generate_sessions  # noqa: E402

SEED = 7
SESSIONS = 24
STAGGER_S = 20.0
BAILIAN_SESSIONS = 6  # the Bailian file repeats the first sessions only (16-token blocks make it 4x larger)
PARAMS = dict(sessions=SESSIONS, turns_per_session=10, system_tokens=2048, first_turn_tokens=2048,
              context_growth_tokens=1500, output_tokens=300, output_sigma=0.8, think_time_s=4.0, think_sigma=1.5,
              human_fraction=0.0, subagent_probability=0.3,
              max_fanout=3, subagent_turns=3, subagent_first_tokens=3000, max_context=64_000)  # fmt: skip


def bailian_records(sessions: list[dict], small: int = 16) -> list[dict]:
    per = BLOCK // small
    ids: dict[tuple, int] = {}
    rows: list[dict] = []

    def blocks(s: int, call: dict) -> list[int]:
        out, n_blocks = [], math.ceil(call["in"] / small)
        for b in call["hash_ids"]:
            for j in range(per):
                if len(out) < n_blocks:
                    out.append(ids.setdefault((s, b, j), len(ids)))
        return out

    def add(s: int, call: dict, parent: int, turn: int) -> int:
        rows.append({"chat_id": len(rows), "parent_chat_id": parent, "timestamp": round(s * STAGGER_S + call["t"], 3),
                     "input_length": call["in"], "output_length": call["out"], "type": "text", "turn": turn,
                     "hash_ids": blocks(s, call)})  # fmt: skip
        return len(rows) - 1

    for s, sess in enumerate(sessions):
        last, turn = -1, 0
        for step in sess["requests"]:
            if step["type"] == "subagent":
                parent = last
                for k, call in enumerate(step["requests"]):
                    parent = add(s, call, parent, k + 1)
                continue
            turn += 1
            last = add(s, step, last, turn)
    rows.sort(key=lambda r: (r["timestamp"], r["chat_id"]))
    renumber = {r["chat_id"]: i for i, r in enumerate(rows)}  # Bailian files are in arrival order
    for r in rows:
        r["chat_id"], r["parent_chat_id"] = renumber[r["chat_id"]], renumber.get(r["parent_chat_id"], -1)
    return rows


def main() -> None:
    sessions = list(generate_sessions(AgenticWorkload(**PARAMS), np.random.default_rng(SEED), SESSIONS))
    out = ROOT / "data" / "agentic"
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "weka_synthetic.jsonl", "w") as fh:
        for sess in sessions:
            fh.write(json.dumps(sess, separators=(",", ":")) + "\n")
    with open(out / "bailian_synthetic.jsonl", "w") as fh:
        for rec in bailian_records(sessions[:BAILIAN_SESSIONS]):
            fh.write(json.dumps(rec, separators=(",", ":")) + "\n")
    calls = sum(len(r.get("requests", [r])) for s in sessions for r in s["requests"])
    print(f"wrote {len(sessions)} sessions, {calls} calls to {out}")


if __name__ == "__main__":
    main()

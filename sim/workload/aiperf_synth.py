"""Sessions made by aiperf's own agentic session synthesizer (``aiperf synthesize agentic-code``), replayed in lanes
(``workload.kind: agentic, synthesizer: aiperf``), where aiperf is installed: it is imported here only.

aiperf 0.13.0's ``dataset/agentic_code_gen`` draws each session as a state machine (``session_synthesizer.py``):
a first call of a shared prefix (``cache.layer1_tokens``, a group's ``layer1_5_tokens``) and a lognormal
session-specific context; each later call's input is the previous input and output plus lognormal new tokens,
after a mixture delay (agent or human, ``distributions.py``); a session ends when its input would reach
``max_prompt_tokens`` or at a probabilistic reset that grows with the context. ``timestamp_ms`` accumulates the
delays only, so the delay is the idle gap after the previous call ended (the lanes' end-to-start gap with no
``api_time``). Its ``hash_ids`` are blocks of ``block_size`` tokens in one namespace for the whole set; the lanes
still give every replayed session keys of its own (AgentX's ``--cache-bust``), so the shared prefix blocks hit
within a session only.

``aiperf_config``: a config aiperf bundles by name (``default``), a bundled dataset's name (its
``datasets/<name>/manifest.json``, e.g. ``1k_sessions_200k_ctx``), or a path to a config or manifest JSON.
"""

from __future__ import annotations

from pathlib import Path

from sim.base.errors import InputError
from sim.workload.pagekeys import PageRuns, check_nesting
from sim.workload.trajectory import Call, PageInterner, Trajectory

__all__ = ["aiperf_trajectories"]

_WHERE = "workload.aiperf_config"


def _config(name: str):
    """aiperf's SessionDistributionConfig for ``name`` (see the module's docstring)."""
    try:
        from aiperf.dataset.agentic_code_gen import config as aic_config
    except ImportError:
        raise InputError("workload.synthesizer: aiperf is not installed (pip install aiperf): its agentic session "
                         "synthesizer makes these sessions") from None  # fmt: skip
    manifest = Path(aic_config.__file__).parent / "datasets" / name / "manifest.json"
    try:
        return aic_config.load_config(str(manifest) if manifest.is_file() else name)
    except (FileNotFoundError, ValueError) as exc:
        raise InputError(f"{_WHERE}: {name}: {str(exc).splitlines()[0]}") from None


def aiperf_trajectories(config: str, n: int, seed: int, page: int) -> list[Trajectory]:
    """``n`` sessions from aiperf's synthesizer with ``config`` and ``seed``, as lane trajectories."""
    cfg = _config(config)
    from aiperf.dataset.agentic_code_gen.session_synthesizer import SessionSynthesizer

    check_nesting(cfg.block_size, page, f"{_WHERE}: {config}: block size {cfg.block_size} and hicache.page_size {page}")
    interner = PageInterner()
    out = []
    for s in SessionSynthesizer(cfg, seed=seed).synthesize_sessions(n):
        calls = [
            Call(t.timestamp_ms / 1000.0, None, t.input_length, t.output_length,
                 PageRuns.of(interner.pages(t.hash_ids, cfg.block_size, page, t.input_length)))
            for t in s.turns
        ]  # fmt: skip
        out.append(Trajectory(s.session_id, calls))
    return out

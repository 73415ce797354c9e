"""GPU step time from NVIDIA aiconfigurator-core's measured SGLang kernels (``compute.backend: auto`` or ``aiconfigurator``).

aiconfigurator-core (a dependency of hicache-sim on Python 3.11-3.13, the wheel's range) ships per-GPU tables of
SGLang kernels timed on silicon (GEMM, attention, MLA, MoE, all-reduce, DeepSeek-V4's attention modules) and
a compiled estimator that sums them over a model's op list for one forward pass at a given parallelism and
quantization. :class:`AicSteps` answers the calls :class:`sim.model.compute.Roofline` answers, so the engine does
not care which one priced a pass:

- a prefill batch of ``n`` chunks is asked as ``n`` equal chunks that carry the batch's tokens and its
  attention pairs (the GEMMs see the tokens, attention the pairs; for one chunk it is exactly that chunk and
  its cached prefix): ``predict_prefill_latency(n, chunk + prefix, prefix)``;
- a decode batch at its mean context ``s``: ``decode_step_latency(n, s - 1, 0)`` (the estimator steps at
  ``isl + osl // 2 + 1``);
- a mixed-chunk pass as the estimator composes one: the non-attention ops once over all its tokens, plus
  the prefill chunks' attention and the decode rows' attention.

Shapes are memoised on a grid (mixed-chunk passes, off by default in SGLang, on their exact shape): a prefill
chunk snaps to 4 points per octave, its cached prefix to 2, a decode context to 16 (every integer below 64), and a shape between grid points is interpolated linearly
between them (bilinearly for a chunk and its prefix), so a long run asks the estimator once per grid point
it reaches (a V4 prefill query behind a long prefix costs the estimator ~1 ms); a shape on the grid is the
estimator's own answer. Off it the interpolation is within 3.2% of the estimator, 0.2% on average
(V4-Flash, H200: 40 random batches of 1-4 chunks up to 8K behind prefixes up to 60K; the prefix grid moves
neither figure, the estimator being near-linear in the prefix; a test checks the bound). The estimator's times
are kernel sums: the scheduler's own time is not in them (SGLang's overlap scheduler hides most of it), so
``compute.step_overhead_ms`` adds a per-pass overhead only when the scenario sets it. A GPU, model or
quantization the database lacks is refused (an :class:`InputError` naming the field); ``compute.backend: auto``
then falls back to the roofline and says why (:mod:`sim.model.pricing`). A GPU the tables lack is priced on the
nearest measured GPU's kernels with every op scaled by the two datasheets (:mod:`sim.model.transfer`), labelled
as such. Nothing here imports aiconfigurator-core until a scenario asks for it.
"""

from __future__ import annotations

import importlib.util
import logging
import re
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from sim.base.errors import InputError
from sim.model.hardware import gpu_names
from sim.model.transfer import COMM_OP, MEASURED, Transfer, references

__all__ = ["SGLANG_VERSION", "AicSteps", "aic_model_id", "catalog_gpu", "coverage_error", "installed",
           "model_config_path", "shipped_id", "shipped_models"]  # fmt: skip

# The catalog GPUs aiconfigurator-core 0.12.0 has SGLang tables for, and their system names; every other catalog
# GPU is priced on one of them through :class:`sim.model.transfer.Transfer` (H800: H100's, collectives rescaled).
# The estimator prices communication as ops of its own (all-reduce, MoE dispatch), which the transfer scales by
# the link bandwidth ratio: a bandwidth-bound bound, which overstates the smallest, latency-bound ones.
# aiconfigurator-core 0.12.0's "current" SGLang collection (systems/query_versions.yaml): every kernel family
# collected at this version; the newer 0.5.16 slot is partial and back-filled from it.
SGLANG_VERSION = "0.5.14"
# Catalog and bundled-config names of this project that name a model aiconfigurator-core ships.
_ALIASES = {"deepseek-v4-flash": "deepseek-ai/DeepSeek-V4-Flash", "deepseek-v4-pro": "deepseek-ai/DeepSeek-V4-Pro",
            "deepseek-v3": "deepseek-ai/DeepSeek-V3", "llama-3.1-8b": "meta-llama/Meta-Llama-3.1-8B"}  # fmt: skip
# model.expert_dtype -> aiconfigurator's MoE quantization; fp4 is MXFP4 (the schema's definition), whose
# SGLang kernels the tables file per architecture (below); model.kv_dtype -> its KV-cache quantization.
_EXPERT_QUANT = {"auto": None, "bf16": "bfloat16", "fp8": "fp8_block"}
_MXFP4 = {"b": "w4a8_mxfp4_mxfp8_trtllm", "h": "w4a16_mxfp4_cutlass"}  # Blackwell / Hopper system names
_KV_QUANT = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "bfloat16", "float16": "bfloat16",
             "fp8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}  # fmt: skip
_INSTALL = "its wheel is built for Python 3.11-3.13 (cp311-abi3); run on one of those"


def installed() -> bool:
    """Whether aiconfigurator-core can be imported (a base dependency on Python 3.11-3.13, absent elsewhere)."""
    return _package_dir() is not None


def _package_dir() -> Path | None:
    spec = importlib.util.find_spec("aiconfigurator_core")
    return Path(next(iter(spec.submodule_search_locations))) if spec and spec.submodule_search_locations else None


@cache
def shipped_models() -> dict[str, Path]:
    """Hugging Face ids aiconfigurator-core ships a config.json for (none where it is not installed), found on disk
    without loading the extension."""
    root = _package_dir()
    if root is None:
        return {}
    out = {}
    for path in sorted((root / "model_configs").glob("*--*_config.json")):
        org, name = path.name[: -len("_config.json")].split("--", 1)
        out[f"{org}/{name}"] = path
    return out


def model_config_path(name: str) -> Path | None:
    """The shipped config.json of a Hugging Face id (case-insensitive; release and tuning suffixes dropped,
    :func:`shipped_id`), or None."""
    key = shipped_id(name)
    return None if key is None else shipped_models()[key]


# Release and tuning suffixes, which leave the architecture as it is.
NEUTRAL_SUFFIX = re.compile(r"-(instruct|thinking|chat|base|preview|it|\d{4})$", re.IGNORECASE)


def shipped_id(name: str) -> str | None:
    """The shipped Hugging Face id ``name`` names (case-insensitive), directly or less release and tuning
    suffixes; None when there is none.

    Published checkpoints carry such suffixes (``Qwen/Qwen3-235B-A22B-Instruct-2507``, ``...-Thinking-2507``)
    on the architecture of a shipped id (``Qwen/Qwen3-235B-A22B``): the fields the derivation reads (layers,
    heads, head and expert sizes, vocabulary; :data:`sim.model.modelcfg.CONFIG_INTS`) are the base model's.
    They are stripped one at a time from the end until a shipped id is named. Suffixes that change the weights
    or the layout (``-FP8``, ``-AWQ``, ``-NVFP4``, a size) are kept: those need their own config."""
    ids = {k.lower(): k for k in shipped_models()}
    ref = name.strip().rstrip("/")
    while True:
        if ref.lower() in ids:
            return ids[ref.lower()]
        m = NEUTRAL_SUFFIX.search(ref)
        if m is None or "/" not in ref[: m.start()]:
            return None
        ref = ref[: m.start()]


def aic_model_id(model) -> str | None:
    """The aiconfigurator-core model a scenario's ``model`` section names, or None."""
    for ref in (model.name, model.config):
        if ref is None:
            continue
        ref = _ALIASES.get(ref.lower(), ref)
        if (key := shipped_id(ref)) is not None:
            return key
    return None


def catalog_gpu(sc) -> str:
    """The catalog name of the scenario's GPU (``hardware.gpu``, else the ``gpu_name`` label), as spelled there."""
    name = sc.hardware.gpu or sc.hardware.gpu_name
    return next((g for g in gpu_names() if g.lower() == name.lower()), name)


def coverage_error(sc) -> tuple[str, str] | None:
    """(field, message) when the scenario asks for something aiconfigurator-core cannot price; cheap (reads
    no tables), so scenario validation calls it. Missing kernel data for the exact shape is found when the
    backend is built (:meth:`AicSteps.from_scenario`)."""
    if _package_dir() is None:
        return "compute.backend", f"aiconfigurator-core is not installed ({_INSTALL})"
    if catalog_gpu(sc) not in gpu_names():
        return "hardware.gpu", (f"{catalog_gpu(sc)} is not a catalog GPU, whose datasheet a transfer of measured "
                                f"kernels scales by ({', '.join(gpu_names())}); use compute.backend: roofline for it")  # fmt: skip
    if not references(catalog_gpu(sc)):
        return "hardware.gpu", (f"no GPU in aiconfigurator-core's SGLang database ({', '.join(MEASURED)}) has "
                                f"{catalog_gpu(sc)}'s FP4 support and node form to carry kernels from")  # fmt: skip
    if aic_model_id(sc.model) is None:
        return "model.name", (f"aiconfigurator-core ships no config for {sc.model.name!r}; name one it ships "
                              "(e.g. Qwen/Qwen3-235B-A22B, deepseek-ai/DeepSeek-V4-Flash) or use "
                              "compute.backend: roofline")  # fmt: skip
    return None


@dataclass(frozen=True)
class _Setup:
    """What one compiled estimator is for."""

    model: str
    system: str
    tp: int  # attention tensor parallelism per DP rank
    attention_dp: int
    moe_tp: int
    moe_ep: int
    moe_quant: str | None
    kv_quant: str | None
    nextn: int  # speculative draft tokens verified per decode pass, beyond the one every pass emits


def _setup(sc, system: str, expert_dtype: str | None = None) -> _Setup:
    """The estimator for ``sc`` on aiconfigurator-core's ``system``. ``expert_dtype``: the experts' resolved dtype
    (:meth:`AicSteps.from_scenario`), else ``model.expert_dtype``."""
    hw, m = sc.hardware, sc.model
    dp = getattr(hw, "dp_size", 1) if getattr(hw, "enable_dp_attention", False) else 1
    ep = getattr(hw, "ep_size", 1)
    for name, value in (("hardware.dp_size", dp), ("hardware.ep_size", ep)):
        if hw.tp_size % value:
            raise InputError(f"{name}: {value} does not divide hardware.tp_size {hw.tp_size}")
    spec = getattr(sc, "speculative", None)
    nextn = int(getattr(spec, "num_steps", 0) or 0) if getattr(spec, "algorithm", None) else 0
    model = aic_model_id(m)
    return _Setup(model, system, hw.tp_size // dp, dp, hw.tp_size // ep, ep,
                  _moe_quant(expert_dtype or getattr(m, "expert_dtype", "auto"), model, system),
                  _KV_QUANT.get(m.kv_dtype), nextn)  # fmt: skip


def _moe_quant(expert_dtype: str, model: str, system: str) -> str | None:
    """The estimator's MoE mode. MXFP4 experts run on per-architecture SGLang kernels whose rows the tables
    file under their own modes; for DeepSeek V4's FP4-expert checkpoints the estimator's own rule picks them
    (``models/helpers.py: resolve_dsv4_moe_arch_mode``), which ``compile_engine`` does not apply by itself."""
    if expert_dtype == "fp4":
        return _MXFP4["h" if system.startswith("h") else "b"]
    if expert_dtype == "auto":
        from aiconfigurator_core.sdk.models.helpers import resolve_dsv4_moe_arch_mode

        mode = resolve_dsv4_moe_arch_mode(model, system, "sglang")
        return mode.name if mode is not None else None
    return _EXPERT_QUANT[expert_dtype]


@contextmanager
def _quiet():
    """aiconfigurator-core logs its table loads to stderr; the run's output keeps to the simulator's lines
    (what the tables hold is reported per op instead, :func:`_compiled`; a refusal carries its reason)."""
    log = logging.getLogger("aiconfigurator_core")
    level, propagate = log.level, log.propagate
    log.setLevel(logging.CRITICAL + 1)
    log.propagate = False
    try:
        yield
    finally:
        log.setLevel(level)
        log.propagate = propagate


@cache
def _compiled(setup: _Setup):
    """(engine handle, op sources) for a setup, compiled once per process (sweeps reuse it). The sources
    count the ops of a 1-request, 1,024-token prefill and decode by where the estimator took each one from
    (``silicon``: a measured table row; others are its own derived estimates)."""
    from aiconfigurator_core.sdk.engine import EngineHandle

    with _quiet():
        handle = EngineHandle.compile(
            setup.model, setup.system, "sglang", backend_version=SGLANG_VERSION, tp_size=setup.tp,
            attention_dp_size=setup.attention_dp, moe_tp_size=setup.moe_tp, moe_ep_size=setup.moe_ep,
            moe_quant_mode=setup.moe_quant, kvcache_quant_mode=setup.kv_quant, nextn=setup.nextn,
        )  # fmt: skip
        handle.predict_prefill_latency(1, 1024, 0)  # loads every table a prefill or decode pass reads
        handle.decode_step_latency(1, 1023, 0)
        ctx, gen = handle.run_static_per_op(batch_size=1, isl=1024, osl=2, prefix=0)
    return handle, tuple(sorted(Counter(op[3] for op in (*ctx, *gen)).items()))


@cache
def _try_compile(setup: _Setup):
    """:func:`_compiled`'s answer, or the estimator's refusal (kept too: a refused setup is asked once)."""
    try:
        return _compiled(setup)
    except Exception as exc:  # the estimator's own refusal: no kernel data for this model/GPU/quantization
        return exc


def _gemm_dtype(sc) -> str | None:
    """The dense weights' dtype (the non-expert GEMMs'), where the model's config says it."""
    shape = sc.model.shape(sc.hardware.tp_size, sc.hardware.attn_dp_size)
    return getattr(shape, "compute_dtype", None)


def _refused(sc, setup: _Setup, exc: Exception) -> InputError:
    what = "model.expert_dtype" if getattr(sc.model, "expert_dtype", "auto") != "auto" else "model.name"
    fp8 = shipped_id(f"sgl-project/{setup.model.split('/')[-1]}-FP8") or "sgl-project/DeepSeek-V4-Flash-FP8"
    return InputError(f"{what}: aiconfigurator-core {_version()} cannot price {setup.model} on "
                      f"{setup.system} (SGLang {SGLANG_VERSION}, tp {setup.tp}, moe quant "
                      f"{setup.moe_quant or 'as the checkpoint'}): {_first_line(exc)}"
                      + ("; its tables price MXFP4 experts on Blackwell only (B200, B300): on Hopper price "
                         f"the FP8 checkpoint (model: {fp8}, or model.expert_dtype: fp8 "
                         "with a model.config)" if "fp4" in str(exc) and setup.system.startswith("h")
                         else ""))  # fmt: skip


def _attention_ops(handle) -> tuple[list[int], list[int]]:
    """Positions of the attention ops in the compiled context and generation op lists."""
    ctx, gen = handle.run_static_per_op(batch_size=1, isl=2, osl=2, prefix=0)
    return ([i for i, op in enumerate(ctx) if op[0] == "context_attention"],
            [i for i, op in enumerate(gen) if op[0] == "generation_attention"])  # fmt: skip


@dataclass
class AicSteps:
    """Step times from a compiled aiconfigurator-core estimator, memoised per shape (seconds).

    With attention DP (``hardware.enable_dp_attention``, ``hardware.dp_size``) a pass's batch is one DP
    rank's, as the estimator takes it (its global batch is ``bs x attention_dp_size``); with speculative
    decoding (``speculative.algorithm``, ``speculative.num_steps``) a decode pass verifies ``num_steps + 1``
    tokens per request and includes the draft (MTP) layers' cost, which the estimator's ``nextn`` prices.
    """

    handle: object
    setup: _Setup
    overhead_s: float = 0.0
    op_sources: tuple[tuple[str, int], ...] = ()
    name: str = "aiconfigurator"
    transfer: Transfer | None = None  # another GPU's kernels carried to this one; None on a GPU the tables measured
    gpu: str = ""
    why: str = ""  # what chose this backend (sim.model.pricing)
    _prefill: dict = field(default_factory=dict, repr=False)
    _decode: dict = field(default_factory=dict, repr=False)
    _mixed: dict = field(default_factory=dict, repr=False)
    _attn: tuple | None = field(default=None, repr=False)
    _ratios: tuple | None = field(default=None, repr=False)
    _tbo: dict = field(default_factory=dict, repr=False)

    @classmethod
    def from_scenario(cls, sc, expert_dtype: str | None = None) -> AicSteps:
        """The scenario's estimator; refuses (InputError naming the field) what the database cannot price.
        ``expert_dtype``: the routed experts' dtype the server resolved from the checkpoint (``auto``'s answer,
        the one memory is sized at); without it, ``model.expert_dtype`` (``auto``: the estimator's own rule)."""
        err = coverage_error(sc)
        if err is not None:
            raise InputError(f"{err[0]}: {err[1]}")
        gpu, refusal = catalog_gpu(sc), None
        overhead = (sc.compute.step_overhead_ms or 0.0) / 1e3
        for ref in references(gpu):  # its own tables, else the nearest measured GPU's that price the setup
            setup = _setup(sc, MEASURED[ref], expert_dtype)
            built = _try_compile(setup)
            if isinstance(built, Exception):
                refusal = refusal or _refused(sc, setup, built)
                continue
            transfer = None if ref == gpu else Transfer.between(gpu, ref, _gemm_dtype(sc),
                                                                setup.moe_quant or expert_dtype)  # fmt: skip
            return cls(built[0], setup, overhead, built[1], transfer=transfer, gpu=gpu)
        raise refusal

    # ----- the Roofline interface
    def prefill_seconds(self, tokens: int, pairs: float, n_prefill: int = 1) -> float:
        n, chunk, prefix = prefill_shape(tokens, pairs, n_prefill)
        (c0, c1, wc), (p0, p1, wp) = grid(chunk, 4), grid(prefix, 2)
        ms = ((1 - wc) * ((1 - wp) * self._prefill_ms(n, c0, p0) + wp * self._prefill_ms(n, c0, p1))
              + wc * ((1 - wp) * self._prefill_ms(n, c1, p0) + wp * self._prefill_ms(n, c1, p1)))  # fmt: skip
        return ms / 1e3

    def decode_seconds(self, n_requests: int, context_tokens: float) -> float:
        if not n_requests:
            return 0.0
        s0, s1, w = grid(max(1, round(context_tokens / n_requests)), 16)
        return ((1 - w) * self._decode_ms(n_requests, s0) + w * self._decode_ms(n_requests, s1)) / 1e3

    def _prefill_ms(self, n: int, chunk: int, prefix: int) -> float:
        key = (n, chunk, prefix)
        ms = self._prefill.get(key)
        if ms is None:
            ms = self.handle.predict_prefill_latency(n, chunk + prefix, prefix)
            ms = self._prefill[key] = self._on_target(ms, n, chunk, prefix, 0, 0)
        return ms

    def _on_target(self, ms: float, n: int, chunk: int, prefix: int, n_decode: int, context: int) -> float:
        """A pass's measured time carried to the target GPU (:class:`sim.model.transfer.Transfer`): times its ops'
        ratios averaged over their measured times (the draft layers, which the estimator adds beyond its op list,
        at the same mix)."""
        if self.transfer is None:
            return ms
        ctx_r, gen_r = self._op_ratios()
        ops = []
        if n:
            ops += zip(ctx_r, self.handle.evaluate_context_ops(list(range(len(ctx_r))), batch_size=n, s=chunk,
                                                               prefix=prefix))  # fmt: skip
        if n_decode:
            ops += zip(gen_r, self.handle.evaluate_generation_ops(list(range(len(gen_r))), batch_size=n_decode,
                                                                  s=context))  # fmt: skip
        total = sum(op[1] for _, op in ops)
        return ms * sum(r * op[1] for r, op in ops) / total if total > 0 else ms

    def _op_ratios(self) -> tuple[list[float], list[float]]:
        """Each context and generation op's multiplier, in the compiled op lists' order (1 without a transfer)."""
        if self._ratios is None:
            ctx, gen = self.handle.run_static_per_op(batch_size=1, isl=2, osl=2, prefix=0)
            ratio = self.transfer.ratio if self.transfer is not None else (lambda _: 1.0)
            self._ratios = ([ratio(op[0]) for op in ctx], [ratio(op[0]) for op in gen])
        return self._ratios

    def _decode_ms(self, n: int, context: int) -> float:
        key = (n, context)
        ms = self._decode.get(key)
        if ms is None:
            ms = self._decode[key] = self._on_target(self.handle.decode_step_latency(n, context - 1, 0), 0, 0, 0,
                                                     n, context)  # fmt: skip
        return ms

    def step_seconds(self, prefill_tokens: int, pairs: float, n_decode: int, decode_context: float,
                     n_prefill: int = 1) -> float:  # fmt: skip
        """One forward pass: prefill, decode, or both in one mixed-chunk batch."""
        if not prefill_tokens:
            return self.overhead_s + self.decode_seconds(n_decode, decode_context)
        if not n_decode:
            return self.overhead_s + self.prefill_seconds(prefill_tokens, pairs, n_prefill)
        return self.overhead_s + self.mixed_seconds(prefill_tokens, pairs, n_prefill, n_decode, decode_context)

    def mixed_seconds(self, tokens: int, pairs: float, n_prefill: int, n_decode: int, context: float) -> float:
        """A mixed-chunk pass: the estimator's non-attention ops once over the chunk tokens and the decode
        rows, plus the chunks' attention and the rows' attention (its own mixed-step composition)."""
        shape = prefill_shape(tokens, pairs, n_prefill)
        s = max(1, round(context / n_decode))
        key = (*shape, n_decode, s)
        ms = self._mixed.get(key)
        if ms is None:
            if self._attn is None:
                self._attn = _attention_ops(self.handle)
            ctx_idx, gen_idx = self._attn
            n, chunk, prefix = shape
            h = self.handle
            shared = h.mixed_step_breakdown(n * chunk, n_decode, n * chunk, 0, 0)[1]
            ctx = sum(op[1] for op in h.evaluate_context_ops(ctx_idx, batch_size=n, s=chunk, prefix=prefix))
            gen = sum(op[1] for op in h.evaluate_generation_ops(gen_idx, batch_size=n_decode, s=s))
            ms = self._mixed[key] = self._on_target(shared + ctx + gen, n, chunk, prefix, n_decode, s)
        return ms / 1e3

    def tbo_parts(self, tokens: int, pairs: float, n_prefill: int = 1) -> tuple[float, float, float, float]:
        """A prefill pass's ops in seconds as two-batch overlap interleaves them (:mod:`sim.model.tbo`): the
        compute before the routed experts, the collectives before them (the DP gather or EP dispatch), the
        experts and the compute after them, and the collectives after them (the combine), at the pass's exact
        shape; together they are the estimator's prefill latency."""
        shape = prefill_shape(tokens, pairs, n_prefill)
        parts = self._tbo.get(shape)
        if parts is None:
            n, chunk, prefix = shape
            ratios = self._op_ratios()[0]
            ops = self.handle.evaluate_context_ops(list(range(len(ratios))), batch_size=n, s=chunk,
                                                   prefix=prefix)  # fmt: skip
            names = [op[0] for op in ops]
            moe = names.index("context_moe") if "context_moe" in names else len(names)
            sums = [0.0, 0.0, 0.0, 0.0]
            for i, op in enumerate(ops):
                comm = COMM_OP.search(op[0]) is not None
                sums[(2 if i >= moe else 0) + comm] += op[1] * ratios[i]
            parts = self._tbo[shape] = (sums[0] / 1e3, sums[1] / 1e3, sums[2] / 1e3, sums[3] / 1e3)
        return parts

    def describe(self) -> dict:
        """What priced the passes, for the run summary."""
        s = self.setup
        return {"backend": self.name, "aiconfigurator_core": _version(), "system": s.system,
                "sglang_version": SGLANG_VERSION, "model": s.model, "tp_size": s.tp, "attention_dp_size": s.attention_dp,
                "moe_tp_size": s.moe_tp, "moe_ep_size": s.moe_ep, "moe_quant": s.moe_quant or "checkpoint",
                "kv_quant": s.kv_quant or "checkpoint", "nextn": s.nextn, "step_overhead_ms": self.overhead_s * 1e3,
                "op_sources": dict(self.op_sources),
                "gpu": self.gpu, "chosen": self.why, **({"priced_as": self.transfer.label()} if self.transfer is not None else {}),
                "shapes_priced": len(self._prefill) + len(self._decode) + len(self._mixed)}  # fmt: skip


def grid(x: int, per_octave: int) -> tuple[int, int, float]:
    """(grid point at or below ``x``, the next one, weight of the upper): every integer below 64, then
    ``per_octave`` (a power of two up to 32) evenly spaced points in each octave."""
    if x < 64:
        return x, x, 0.0
    step = 1 << (x.bit_length() - per_octave.bit_length())
    lo = x // step * step
    return (lo, lo, 0.0) if lo == x else (lo, lo + step, (x - lo) / step)


def prefill_shape(tokens: int, pairs: float, n: int) -> tuple[int, int, int]:
    """(chunks, tokens per chunk, cached prefix per chunk) of ``n`` equal chunks with ``tokens`` tokens and
    ``pairs`` attention pairs in all (:func:`sim.model.compute.attention_pairs`)."""
    n = max(1, n)
    chunk = max(1, round(tokens / n))
    prefix = max(0, round((pairs / n - chunk * (chunk + 1) / 2) / chunk))
    return n, chunk, prefix


def _first_line(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__).split(" at /")[0][:300]


@cache
def _version() -> str:
    from importlib.metadata import version

    return version("aiconfigurator-core")

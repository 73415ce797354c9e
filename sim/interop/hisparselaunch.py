"""What SGLang 0.5.23 decides about a launch with ``--enable-hisparse``, and about a DSA model's KV dtype and
backends: the flag combinations it refuses (one line naming the flag), and the KV dtype it resolves, which sizes
a DSA model's rows. Paths are SGLang 0.5.23, relative to ``sglang/srt/``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.base.errors import InputError

if TYPE_CHECKING:
    from sim.interop.conversion import Conversion

__all__ = ["NSA_SPELLINGS", "dsa_launch", "hisparse_launch"]

# The DSA backend flags' spelling before DSA was renamed from NSA; 0.5.23 spells them --dsa-*.
NSA_SPELLINGS = {"--nsa-decode-backend": "--dsa-decode-backend", "--nsa-prefill-backend": "--dsa-prefill-backend"}
# HiSparse's DSA backends on CUDA by KV dtype (arg_groups/hisparse_hook.py:18-21).
HISPARSE_BACKENDS = {"bfloat16": ("flashmla_sparse",), "fp8_e4m3": ("flashmla_kv", "flashinfer_sparse_mla")}
SM100_GPUS = ("B200", "B300")  # SM100 and later: DSA's KV defaults to fp8 there (arg_groups/overrides.py:532-535)
_KV_SPELLING = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp8_e4m3": "fp8_e4m3"}


def hisparse_launch(conv: Conversion, flags: list[tuple[str, str | None, str]]) -> None:
    """Refuse what ``validate_hisparse`` refuses (arg_groups/hisparse_hook.py:92-127): the radix cache on, a mixed
    chunk, speculation that is not linear or is adaptive. With HiSparse, ``--disable-radix-cache`` is what it
    requires, not a prefix reuse the simulator would miss (the HiSparse instance matches no prefix)."""
    seen = {f: (v, t) for f, v, t in flags}
    if "--enable-hisparse" not in seen:
        return
    if "--disable-radix-cache" not in seen:
        raise InputError("--enable-hisparse: SGLang requires --disable-radix-cache with it "
                         "(arg_groups/hisparse_hook.py:107-109)")  # fmt: skip
    if "--enable-mixed-chunk" in seen:
        raise InputError(f"{seen['--enable-mixed-chunk'][1]}: SGLang refuses it with --enable-hisparse "
                         "(arg_groups/hisparse_hook.py:83-88)")  # fmt: skip
    spec = seen.get("--speculative-algorithm", (None, ""))[0]
    if spec is not None and spec.upper() != "NONE":
        topk, text = seen.get("--speculative-eagle-topk", ("1", ""))
        if topk not in (None, "1"):
            raise InputError(f"{text}: HiSparse takes linear speculation only, --speculative-eagle-topk 1 "
                             "(arg_groups/hisparse_hook.py:115-120)")  # fmt: skip
        if "--speculative-adaptive" in seen:
            raise InputError(f"{seen['--speculative-adaptive'][1]}: HiSparse sizes its swap state statically and "
                             "refuses it (arg_groups/hisparse_hook.py:121-125)")  # fmt: skip
    text = seen["--disable-radix-cache"][1]
    conv.ignored = [i for i in conv.ignored if not i.startswith(f"{text}:")]
    conv.mapped.append(f"{text}: HiSparse's requirement (hisparse_hook.py:107-109); its instance reuses no prefix, "
                       "as modelled")  # fmt: skip


def dsa_launch(conv: Conversion, flags: list[tuple[str, str | None, str]], gpu: str, dsa: bool) -> None:
    """A DSA model's KV dtype as SGLang resolves it (``auto``: bf16 before SM100, fp8 from it, overrides.py:
    532-544), written to ``model.kv_dtype``; with HiSparse, a ``--dsa-*-backend`` outside the ones it takes at that
    dtype is refused as ``validate_hisparse_dsa_backend`` refuses it (hisparse_hook.py:44-63)."""
    if not dsa:
        return
    seen = {f: (v, t) for f, v, t in flags}
    value, text = seen.get("--kv-cache-dtype", ("auto", ""))
    if value not in ("auto", *_KV_SPELLING):
        raise InputError(f"{text}: DSA models store bf16 or fp8_e4m3 KV (arg_groups/overrides.py:539-544)")
    dtype = _KV_SPELLING.get(value) or ("fp8_e4m3" if gpu.upper() in SM100_GPUS else "bfloat16")
    if value == "auto":
        conv.put("model.kv_dtype", dtype)
        conv.mapped.append(f"DSA model on {gpu}, no --kv-cache-dtype -> model.kv_dtype: {dtype} "
                           "(arg_groups/overrides.py:532-535)")  # fmt: skip
    if dtype == "fp8_e4m3" and (raw := _raw_fp8_backend(seen, conv.scenario.get("cluster", {}).get("role"))):
        conv.notes.append(f"{raw}: stores fp8 KV in the raw layout, 576 B a row (mem_cache/kv_cache_configurator.py:"
                          "3425-3456), which the simulator does not model: sized as the scaled layout's 656 B")  # fmt: skip
    if "--enable-hisparse" not in seen:
        return
    top_k = conv.scenario.get("hisparse", {}).get("top_k")
    if top_k is not None:
        conv.notes.append(f"--hisparse-config top_k {top_k}: a DSA model swaps in its config's index_topk instead "
                          "(model_executor/model_runner.py:1038-1041); top_k only sets the default "
                          "device_buffer_size")  # fmt: skip
    allowed = HISPARSE_BACKENDS[dtype]
    for flag in ("--dsa-decode-backend", "--dsa-prefill-backend"):
        if flag in seen and seen[flag][0] not in allowed:
            raise InputError(f"{seen[flag][1]}: HiSparse runs DSA with {' or '.join(allowed)} at --kv-cache-dtype "
                             f"{dtype} (arg_groups/hisparse_hook.py:18-21, 44-63)")  # fmt: skip


def _raw_fp8_backend(seen: dict, role: str | None) -> str | None:
    """The flag that puts fp8 KV in the raw layout (kv_cache_configurator.py:3425-3456): trtllm on the role's
    backend (either, colocated), TileLang on both; None for the scaled layout."""
    decode, prefill = (seen.get(f, (None, ""))[0] for f in ("--dsa-decode-backend", "--dsa-prefill-backend"))
    if "trtllm" in ((decode,) if role == "decode" else (decode, prefill)):
        return seen["--dsa-decode-backend" if decode == "trtllm" else "--dsa-prefill-backend"][1]
    if decode == prefill == "tilelang":
        return seen["--dsa-decode-backend"][1]
    return None

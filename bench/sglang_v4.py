"""SGLang's own DeepSeek-V4 prefix cache, driven over a trace the way ``sim.offline.replay.replay_v4`` drives ours.

Used by ``bench/replay.py`` for its "SGLang UnifiedRadixCache FULL+SWA" rows. SGLang is imported from the
directory the user passes (``--sglang-path``), never copied here. Real SGLang 0.5.23 code answers every call
(paths relative to ``sglang/srt/``): ``UnifiedRadixCache`` with FULL + SWA components on the tree core
selected by ``CacheInitParams.tree_core_backend`` ("rust": ``mem_cache/rust_tree_core``, the default;
"python": ``mem_cache/unified_cache/unified_tree_core.py``), ``SWATokenToKVPoolAllocator`` over a paged
``SWAKVPool`` (one Full and one SWA layer of one 1-wide head: only indices and sizes matter), ``Req``, and the
calls a running request makes:

- admission: ``Req.init_next_round_input`` (match with the key capped at ``len - 1``), then
  ``tree_cache.lock(req.last_node)`` (``managers/schedule_policy.py:1690``);
- each prefill chunk (the first ends on a page, ``managers/schedule_policy.py:1665``; later ones take up to
  ``chunked_prefill_size``): ``alloc_paged_token_slots_extend`` (evicts for the chunk plus a page), the
  slots written to the request's row; ``checkpoint_kv_cache`` after a chunk that does not end the prompt and
  after a prefill that does not finish the request;
- decode: ``alloc_paged_token_slots_decode`` at each step that starts a page (the rows of a page are that
  page's consecutive slots), ``evict_from_tree_cache`` at a step that finds less than a page free, and
  ``evict_sliding_windows`` (the out-of-window SWA free, ``managers/schedule_batch.py:4047-4095``) at the
  steps where it can move the request's SWA boundary; the other decode steps touch neither the tree nor a
  pool's free lists in SGLang beyond taking the next slot of the page, and are not replayed (our
  ``SWACache.decode_many`` skips the same steps);
- ``release_kv_cache(req, tree_cache, checkpoint=True)`` when the request finishes (prompt + output minus
  its last token stay in the tree).

On CPU the allocator's work is SGLang's torch fallback (``allocator/paged.py:41``, ``alloc_extend_naive``;
a Triton kernel on a GPU), run on one intra-op thread (more only contend on a chunk's few thousand slots); the
seconds spent inside the allocation helpers are reported beside the total. The frees of a checkpoint or a
release are torch calls too and stay in the total.

Token ids: a whole prompt page keyed ``(block, half)`` by ``sim.workload.traces.read_mooncake`` is
``block * 512 + offset within the block``, so equal keys are equal tokens; every other token (the prompt's
last partial page, the output) is unique to its request, as ``sim.cache.v4.hicache.request_keys`` keys them.

Install (outside any project environment; SGLang's full dependency set needs CUDA wheels, this is the subset
its cache modules import):

    pip download --no-deps sglang==0.5.23 -d /tmp/sg && unzip -q /tmp/sg/sglang-0.5.23-*.whl -d SGDIR
    pip install --target SGDEPS --no-deps psutil pybase64 starlette anyio msgspec aiohttp multidict yarl \
        propcache aiohappyeyeballs aiosignal frozenlist apache-tvm-ffi==0.1.11 transformers==5.19.0 \
        huggingface_hub httpx2 httpcore2 truststore h11 safetensors tokenizers==0.23.2 dill sentencepiece \
        compressed-tensors==0.18.0 loguru gguf openai==2.8.0 partial_json_parser httpx distro
    PYTHONPATH=SGDEPS python bench/replay.py --sglang-path SGDIR

(torch 2.11-2.14, CPU build, is already installed with hicache-sim's own dependencies.)
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import time
import types
from array import array
from dataclasses import dataclass

from sim.cache.v4.swa import SWA_EVICTION_INTERVAL

PAGE = 256
WINDOW = 128
BLOCK = 512
UNIQUE = 1 << 40  # token ids at or above this are unique to one request
ROW_STRIDE = 1 << 18  # > the longest prompt + output of the trace


class _AnyAttr(type):
    """A class whose every attribute is another such class: enough for ``import x; x.A.B`` at import time."""

    def __getattr__(cls, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _AnyAttr(name, (), {})


class _TorchvisionStub(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Import-only stand-in for ``torchvision``.

    SGLang's config package imports torchvision at module level for its vision models
    (``multimodal/internvl_utils.py:5``, ``configs/deepseek_ocr.py:7``); nothing on the cache path calls it.
    The PyPI torchvision wheel links against CUDA torch (``libc10_cuda.so``) and fails to import next to a
    CPU torch, so where no working torchvision is installed this stub lets the import succeed. Any real use
    of it would fail loudly (its attributes are empty classes).
    """

    def find_spec(self, name, path=None, target=None):
        if name == "torchvision" or name.startswith("torchvision."):
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)

        def attr(name):
            if name.startswith("__"):
                raise AttributeError(name)
            return _AnyAttr(name, (), {})

        module.__getattr__ = attr
        return module

    def exec_module(self, module):
        module.__path__ = []
        module.__version__ = "0.0.0+stub"


def _torchvision_usable() -> bool:
    try:
        import torchvision  # noqa: F401
    except Exception:
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]
        return False
    return True


_API = {  # what the driver calls, by module of sglang.srt
    "managers.schedule_batch": "FINISH_LENGTH Req",
    "mem_cache.allocation": "alloc_paged_token_slots_decode alloc_paged_token_slots_extend",
    "mem_cache.allocator.swa": "SWATokenToKVPoolAllocator",
    "mem_cache.cache_init_params": "CacheInitParams",
    "mem_cache.common": "checkpoint_kv_cache evict_from_tree_cache release_kv_cache",
    "mem_cache.memory_pool": "ReqToTokenPool",
    "mem_cache.swa_memory_pool": "SWAKVPool",
    "mem_cache.unified_cache.component_type": "ComponentType",
    "mem_cache.unified_radix_cache": "UnifiedRadixCache",
    "sampling.sampling_params": "SamplingParams",
    "server_args": "ServerArgs set_global_server_args_for_scheduler",
}


def prepare(path: str | None) -> None:
    """Put ``path`` (a directory holding ``sglang/``) first on ``sys.path``; stub torchvision if it is unusable."""
    if path and path not in sys.path:
        sys.path.insert(0, path)
    if importlib.util.find_spec("sglang") is None:
        return
    if not any(isinstance(f, _TorchvisionStub) for f in sys.meta_path) and not _torchvision_usable():
        sys.meta_path.insert(0, _TorchvisionStub())


def load(path: str | None):
    """SGLang's V4 cache API as a namespace, or the reason it cannot be imported."""
    try:
        prepare(path)
        names = {}
        for module, attrs in _API.items():
            mod = importlib.import_module(f"sglang.srt.{module}")
            names.update((a, getattr(mod, a)) for a in attrs.split())
    except Exception as exc:  # any import failure means: not usable here
        return None, f"{type(exc).__name__}: {exc}"
    return types.SimpleNamespace(**names), ""


@dataclass
class SGRequest:
    """One trace request as SGLang sees it: prompt token ids and its output length (>= 1)."""

    ids: array
    output_len: int


def to_sglang(requests) -> list[SGRequest]:
    """Token ids for ``read_mooncake(..., page_size=256)`` requests (see the module docstring)."""
    out = []
    for r in requests:
        whole = len(r.keys) * PAGE
        ids = array("q")
        for block, half in r.keys:
            base = block * BLOCK + half * PAGE
            ids.extend(range(base, base + PAGE))
        tail = UNIQUE + r.rid * ROW_STRIDE
        ids.extend(range(tail + whole, tail + r.input_len))
        out.append(SGRequest(ids, max(1, r.output_len)))
    return out


class SGLangV4:
    """SGLang's FULL + SWA cache over ``full_tokens`` / ``swa_tokens`` slots on the ``backend`` tree core."""

    def __init__(self, api, *, backend: str, full_tokens: int, swa_tokens: int, max_context: int,
                 chunked_prefill_size: int = 8192) -> None:  # fmt: skip
        import torch

        self.api, self.torch = api, torch
        torch.set_num_threads(1)  # one request at a time: tensors of a chunk; intra-op threads only contend
        api.set_global_server_args_for_scheduler(api.ServerArgs(model_path="dummy", page_size=PAGE, device="cpu"))
        self.req_pool = api.ReqToTokenPool(size=2, max_context_len=max_context, device="cpu",
                                           enable_memory_saver=False)  # fmt: skip
        kv = api.SWAKVPool(size=full_tokens, size_swa=swa_tokens, page_size=PAGE, dtype=torch.float16, head_num=1,
                           head_dim=1, swa_attention_layer_ids=[1], full_attention_layer_ids=[0], device="cpu")  # fmt: skip
        self.allocator = api.SWATokenToKVPoolAllocator(size=full_tokens, size_swa=swa_tokens, page_size=PAGE,
                                                       dtype=torch.float16, device="cpu", kvcache=kv,
                                                       need_sort=False)  # fmt: skip
        params = api.CacheInitParams(
            req_to_token_pool=self.req_pool, token_to_kv_pool_allocator=self.allocator, page_size=PAGE,
            disable=False, sliding_window_size=WINDOW, tree_components=(api.ComponentType.FULL, api.ComponentType.SWA),
            eviction_policy="lru", tree_core_backend=backend,
        )  # fmt: skip
        self.cache = api.UnifiedRadixCache(params)
        self.backend = self.cache._tree_core_backend  # what SGLang resolved, after its fallbacks
        self.chunk = chunked_prefill_size
        self.matched = 0  # device prefix tokens over all admissions
        self.input_tokens = 0
        self.alloc_s = 0.0  # seconds inside the allocation helpers (their evictions from the tree included)

    def _free(self) -> int:
        a = self.allocator
        return min(a.full_available_size(), a.swa_available_size())

    def serve(self, rid: int, sr: SGRequest) -> None:
        api, torch, cache, pool = self.api, self.torch, self.cache, self.req_pool
        n, out_len = len(sr.ids), sr.output_len
        req = api.Req(rid=str(rid), origin_input_text="", origin_input_ids=sr.ids,
                      sampling_params=api.SamplingParams(max_new_tokens=out_len))  # fmt: skip
        req.init_next_round_input(cache)
        req.lock = cache.lock(req.last_node)
        prefix = req.prefix_len
        self.matched += prefix
        self.input_tokens += n
        prefix_slots = cache.prefix_device_indices(req) if prefix else None
        pool.alloc([req])
        row = pool.req_to_token[req.kv.req_pool_idx]
        if prefix:
            row[:prefix] = prefix_slots.to(row.dtype)

        # prefill, chunk by chunk
        start, first = prefix, True
        while start < n:
            if first and n - start > self.chunk:
                end = (start + self.chunk // PAGE * PAGE) // PAGE * PAGE
            else:
                end = start + min(n - start, self.chunk)
            first = False
            req.extend_end = end
            last = torch.tensor([int(row[start - 1]) if start else -1], dtype=torch.int64)
            lo, hi = torch.tensor([start]), torch.tensor([end])
            t = time.perf_counter()
            loc = api.alloc_paged_token_slots_extend(cache, lo, lo, hi, hi, last, end - start)
            self.alloc_s += time.perf_counter() - t
            row[start:end] = loc.to(row.dtype)
            req.kv.kv_allocated_len = req.kv.kv_committed_len = end
            if end < n:
                api.checkpoint_kv_cache(req, cache)
            start = end
        req.output_ids.append(UNIQUE + rid * ROW_STRIDE + n)
        if out_len <= 1:
            return self._release(req, n, out_len)
        api.checkpoint_kv_cache(req, cache)

        # decode steps k = 1 .. out_len - 1: seqlen n + k before step k, which writes row n + k - 1
        if n % PAGE:  # the rest of the prompt's last page: its next slots
            top = -(-n // PAGE) * PAGE
            row[n:top] = torch.arange(int(row[n - 1]) + 1, int(row[n - 1]) + 1 + top - n, dtype=row.dtype)
        swa = api.ComponentType.SWA
        keep = -(-max(WINDOW, PAGE) // PAGE) * PAGE
        evicted = req.kv.get_evicted_seqlen(swa)
        k = 1
        while k < out_len:
            seqlen = n + k
            if k >= 2 and seqlen - 1 - WINDOW >= evicted + SWA_EVICTION_INTERVAL:
                cache.evict_sliding_windows(req, seqlen - 1, eviction_interval=1)
                evicted = req.kv.get_evicted_seqlen(swa)
            pos = seqlen - 1
            short = False
            if pos % PAGE == 0:
                s = torch.tensor([seqlen])
                t = time.perf_counter()
                base = int(api.alloc_paged_token_slots_decode(cache, s, s, row[pos - 1 : pos].to(torch.int64))[0])
                self.alloc_s += time.perf_counter() - t
                row[pos : pos + PAGE] = torch.arange(base, base + PAGE, dtype=row.dtype)
                short = self._free() < PAGE
            elif self._free() < PAGE:
                api.evict_from_tree_cache(cache, PAGE)
            if short:  # the next step evicts
                k += 1
                continue
            # the next step that can do anything: one that starts a page or can move the SWA boundary
            page_step = -(-seqlen // PAGE) * PAGE - n + 1
            trigger = evicted + SWA_EVICTION_INTERVAL + WINDOW + 1 - n
            if evicted >= req.kv.swa_dead_lo(PAGE):  # a free below the next page boundary frees nothing
                trigger = max(trigger, evicted + PAGE + keep + 1 - n)
            k = max(k + 1, min(page_step, max(2, trigger)))
        req.output_ids.extend(range(UNIQUE + rid * ROW_STRIDE + n + 1, UNIQUE + rid * ROW_STRIDE + n + out_len))
        req.kv.kv_allocated_len = req.kv.kv_committed_len = n + out_len - 1
        self._release(req, n, out_len)

    def _release(self, req, n: int, out_len: int) -> None:
        req.finished_reason = self.api.FINISH_LENGTH(length=out_len)
        self.api.release_kv_cache(req, self.cache, checkpoint=True)


def replay(api, sg_requests: list[SGRequest], *, backend: str, full_tokens: int, swa_tokens: int,
           chunked_prefill_size: int = 8192) -> tuple[float, SGLangV4]:  # fmt: skip
    """Seconds to serve every request in order (the pools and the empty tree are built before the clock)."""
    max_context = max(len(r.ids) + r.output_len for r in sg_requests) + 2 * PAGE
    v4 = SGLangV4(api, backend=backend, full_tokens=full_tokens, swa_tokens=swa_tokens, max_context=max_context,
                  chunked_prefill_size=chunked_prefill_size)  # fmt: skip
    start = time.perf_counter()
    for i, r in enumerate(sg_requests):
        v4.serve(i, r)
    return time.perf_counter() - start, v4

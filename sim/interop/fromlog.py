"""``scenario from-sglang --server-log FILE``: the capacities the server logged at start, into the scenario.

What the log states replaces what the scenario would derive (:mod:`sim.model.serverlog` lists the lines read):
the Full and SWA device pools (``hardware.max_total_num_tokens``, ``hardware.swa_max_total_num_tokens``), the
host pools (``hicache.host_pages``, ``hicache.host_swa_pages``), ``scheduler.chunked_prefill_size``,
``max_prefill_tokens`` and ``max_running_requests``. Each is listed as mapped from its log line; a host pool whose
logged bytes differ from the model's, and a derived pool more than a page away from the logged one, are listed
as checks, since either says the catalog or the memory rule does not describe that server.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from sim.base.errors import InputError
from sim.model.serverlog import ServerLog, read_server_log

if TYPE_CHECKING:
    from sim.interop.conversion import Conversion
    from sim.model.dsa import DsaLayout
    from sim.model.pools import ModelSpec

__all__ = ["apply_server_log", "check_capacities", "check_host_kv_bytes", "check_launch", "host_pool_checks",
           "kv_layout_env"]

# Scheduler summary key -> scenario field (managers/scheduler.py:1268-1276).
_SCHEDULER_FIELDS = {
    "max_total_num_tokens": "hardware.max_total_num_tokens",
    "chunked_prefill_size": "scheduler.chunked_prefill_size",
    "max_prefill_tokens": "scheduler.max_prefill_tokens",
    "max_running_requests": "scheduler.max_running_requests",
}
# Logged per attention-DP worker (with DP attention), as SGLang divides them.
_PER_WORKER = {"max_running_requests": "kv_cache_configurator.py:3126-3129",
               "chunked_prefill_size": "arg_groups/parallel_hook.py:327-331"}
_LABELS = {"dsv4_swa_tokens": "DSV4 pool sizes: swa", "swa_layer_tokens": "swa_layer_tokens"}
# V4 host pools whose indices are the SWA anchor's (hybrid_pool_assembler.py:1029-1045, 1114-1146); the rest
# are KV-derived and share the Full host page count (:1061-1112, 1152-1170).
_SWA_ANCHORED = ("swa", "c4_state", "c4_indexer_state")


def _short(name: str) -> str:
    return name.removeprefix("deepseek_v4_")


def apply_server_log(conv: Conversion, path: str) -> ServerLog:
    """Put what the log at ``path`` states into ``conv``'s scenario, each field's origin its log line."""
    log = read_server_log(path)
    check_launch(conv, log)
    sc = conv.scenario
    hw = sc.get("hardware", {})
    dp = int(hw.get("dp_size", 1)) if hw.get("enable_dp_attention") else 1
    for key, field in _SCHEDULER_FIELDS.items():
        value = log.get(key)
        if value is None or (key == "chunked_prefill_size" and value <= 0):  # -1: chunking off
            continue
        if dp > 1 and key in _PER_WORKER:  # logged per attention-DP worker; the scenario's are the instance's
            _set(conv, log, key, field, value * dp, f" x {dp} attention-DP ranks ({_PER_WORKER[key]})")
        else:
            _set(conv, log, key, field, value)
    swa_key = "dsv4_swa_tokens" if "dsv4_swa_tokens" in log.values else "swa_layer_tokens"
    if log.get(swa_key) and not log.unified_kv:  # the unified layout's paged SWA pool is vestigial (a ring)
        _set(conv, log, swa_key, "hardware.swa_max_total_num_tokens", log.get(swa_key))
    if (ctx := log.get("context_len")) is not None:
        conv.ignored.append(f"{log.where('context_len')}: context_len={ctx}: a length limit, not modelled")
    hc = sc.get("hicache", {})
    if hc.get("enabled"):
        _host_pages(conv, log, int(hc.get("page_size", 1)))
    if log.unified_kv is not None:
        layout = ("unified_fp8" if log.unified_kv_fp8 else "unified") if log.unified_kv else "paged"
        where = f"{log.source}:{log.lines['unified_kv']}"
        conv.put("model.kv_layout", layout, f"--server-log {where}")
        conv.mapped.append(f"{where}: unified={log.unified_kv}, unified_fp8={log.unified_kv_fp8} -> "
                           f"model.kv_layout: {layout}")  # fmt: skip
    return log


def _launch_facts(conv: Conversion) -> dict[str, tuple[object, str]]:
    """What the launch says of the server a log must be from: name -> (value, the flag that says it)."""
    from sim.model.modelcfg import load_config

    sc = conv.scenario
    hw, hc = sc.get("hardware", {}), sc.get("hicache", {})
    config = load_config(sc["model"]["config"])[0]
    return {
        "architecture": ((config.get("architectures") or [None])[0], "--model-path"),
        "v4": ("compress_ratios" in config, "--model-path"),
        "tp_size": (int(hw.get("tp_size", 1)), "--tp-size"),
        "dp_size": (int(hw.get("dp_size", 1)), "--dp-size"),
        "page_size": (int(hc.get("page_size", 1)), "--page-size"),
        "hicache": (bool(hc.get("enabled")), "--enable-hierarchical-cache"),
    }


def _launch_problems(log: ServerLog, facts: dict[str, tuple[object, str]]) -> Iterator[tuple[int, str, str]]:
    """(log line, what the log says, the flag's value it contradicts) for each disagreement."""
    arch, v4, tp, dp = (facts[k][0] for k in ("architecture", "v4", "tp_size", "dp_size"))
    page, hicache = facts["page_size"][0], facts["hicache"][0]
    if log.architecture and arch and log.architecture != arch:
        yield log.lines["architecture"], f"the model is {log.architecture}", f"--model-path is a {arch}"
    if log.v4_line and not v4:
        yield log.v4_line, "DeepSeek V4's pools (a DSV4 line)", f"--model-path is a {arch or 'model'} (not V4)"
    if log.plain_line and v4:
        yield log.plain_line, "a single-pool (not DeepSeek V4) server", "--model-path is a DeepSeek V4 model"
    args = log.server_args
    for key, flag, value in (("tp_size", "--tp-size", tp), ("dp_size", "--dp-size", dp), ("page_size", "--page-size", page)):
        if args.get(key, str(value)) != str(value):
            yield log.lines["server_args"], f"server_args {key}={args[key]}", f"{flag} {value}"
    if args.get("enable_hierarchical_cache", str(hicache)) != str(hicache):
        yield log.lines["server_args"], f"server_args enable_hierarchical_cache={args['enable_hierarchical_cache']}", \
            "HiCache " + ("on" if hicache else "off") + " (--enable-hierarchical-cache)"
    for kind, flag, size in (("TP", "--tp-size", tp), ("DP", "--dp-size", dp)):
        shown, line = log.ranks.get(kind, (None, 0))
        if shown is not None and shown >= size:
            yield line, f"rank {kind}{shown}", f"{flag} {size}"
    if log.prefixed and tp > 1 and "TP" not in log.ranks:
        yield log.prefixed, "no TP rank in its prefixes (shown when tp_size > 1, scheduler.py:6289-6290)", f"--tp-size {tp}"
    if log.host_line and not hicache:
        yield log.host_line, "host pools allocated (HiCache on)", "no --enable-hierarchical-cache"
    tokens = log.host_kv_tokens
    if tokens is not None and tokens % page:
        yield log.lines["host_kv_tokens"], f"a host pool of {tokens:,} tokens (not whole pages)", f"--page-size {page}"


def check_launch(conv: Conversion, log: ServerLog) -> None:
    """Refuse a log from another server than the launch's: the model's class and kind, TP and DP sizes, the page
    size and whether HiCache is on must agree, or one line names the log line and the flag."""
    if (found := next(_launch_problems(log, _launch_facts(conv)), None)) is not None:
        line, logged, launched = found
        raise InputError(f"the log says {logged}, but {launched}: is this log from this launch's server?",
                         source=log.source, line=line)  # fmt: skip


def kv_layout_env(conv: Conversion, name: str, value: str, truthy: bool) -> None:
    """ROCm's unified KV layout from the launch's environment: ``SGLANG_HACK_FLASHMLA_BACKEND=unified_kv_triton``
    turns it on (``unified_kv_gate.py:12-15``), ``SGLANG_DSV4_UNIFIED_KV_FP8=1`` makes its rows fp8 (:19-38)."""
    text = f"{name}={value}"
    model = conv.scenario.setdefault("model", {})
    if name == "SGLANG_DSV4_UNIFIED_KV_FP8":
        conv.origins["env.unified_fp8"] = text if truthy else ""
        if model.get("kv_layout") == "unified" and truthy:
            model["kv_layout"] = "unified_fp8"
            conv.origins["model.kv_layout"] = text
            conv.mapped.append(f"{text} -> model.kv_layout: unified_fp8 (fp8 nope rows, bf16 rope pools)")
        elif not model.get("kv_layout"):
            conv.ignored.append(f"{text}: fp8 rows of the unified KV layout, which this launch does not turn on"
                                if truthy else f"{text}: off (bf16 rows)")  # fmt: skip
        return
    if value != "unified_kv_triton":
        conv.ignored.append(f"{text}: an attention backend choice; the KV layout stays paged")
        return
    layout = "unified_fp8" if conv.origins.pop("env.unified_fp8", "") else "unified"
    model["kv_layout"] = layout
    conv.origins["model.kv_layout"] = text
    conv.mapped.append(f"{text} -> model.kv_layout: {layout} (ROCm's unified KV layout)")


def _set(conv: Conversion, log: ServerLog, key: str, field: str, value: int, how: str = "") -> None:
    where = log.where(key)
    before = conv.origins.get(field)
    conv.put(field, value, f"--server-log {where}")
    note = f" (the server's value in place of {before})" if before else ""
    conv.mapped.append(f"{where}: {_LABELS.get(key, key)}={log.get(key)}{how} -> {field}: {value}{note}")


def _host_pages(conv: Conversion, log: ServerLog, page: int) -> None:
    """Host pool pages: V4's per pool (Full-anchored and SWA-anchored counts), a single pool's tokens less SGLang's
    padding page (``pool_host/base.py:226-229``; the simulator adds it back when it counts bytes)."""
    if log.host_pools:
        full = {n: p for n, p in log.host_pools.items() if _short(n) not in _SWA_ANCHORED}
        swa = {n: p for n, p in log.host_pools.items() if _short(n) in _SWA_ANCHORED}
        for group, field in ((full, "hicache.host_pages"), (swa, "hicache.host_swa_pages")):
            if not group:
                continue
            first = next(iter(group.values()))
            odd = [f"{_short(n)} {p.pages:,}" for n, p in group.items() if p.pages != first.pages]
            conv.put(field, first.pages, f"--server-log {log.source}:{first.line}")
            conv.mapped.append(f"{log.source}:{first.line}: host pool '{first.name}' pages={first.pages} -> {field}: "
                               f"{first.pages}" + (f" (others differ: {', '.join(odd)})" if odd else ""))  # fmt: skip
    elif log.host_kv_tokens is not None:
        pages = max(1, log.host_kv_tokens // page - 1)
        conv.put("hicache.host_pages", pages, f"--server-log {log.where('host_kv_tokens')}")
        conv.mapped.append(f"{log.where('host_kv_tokens')}: host KV pool {log.host_kv_tokens} tokens -> "
                           f"hicache.host_pages: {pages} (less SGLang's padding page)")  # fmt: skip
    elif log.get("hicache_auto_ratio") is not None:
        ratio = log.values["hicache_auto_ratio"]
        conv.put("hicache.hicache_ratio", ratio)
        conv.mapped.append(f"{log.where('hicache_auto_ratio')}: auto-sized ratio {ratio:g} -> hicache.hicache_ratio")


def host_pool_checks(log: ServerLog, model: ModelSpec, page_tokens: int) -> list[str]:
    """Host pools whose logged bytes a page are not the model's: another layout (ROCm's unified KV), another
    indexer dtype, or pools the model does not have."""
    out = []
    scale = page_tokens / model.page_size
    pools = {p.name: p for p in model.pools}
    for name, line in log.host_pools.items():
        logged = line.layers * line.item_bytes
        pool = pools.get(_short(name))
        if pool is None:
            out.append(f"host pool {_short(name)} ({logged:,} B a page, {log.source}:{line.line}) is not one of "
                       f"{model.name}'s pools")  # fmt: skip
        elif abs(pool.bytes_per_page * scale - logged) >= 1:
            out.append(f"host pool {_short(name)}: {logged:,} B a page logged ({log.source}:{line.line}), "
                       f"{pool.bytes_per_page * scale:,.0f} in {model.name}'s pools")  # fmt: skip
    return out


def check_host_kv_bytes(log: ServerLog, model: ModelSpec, dsa: DsaLayout | None = None) -> None:
    """Refuse a single host KV pool whose logged GB is not its tokens x the model's bytes a token, as SGLang
    allocates it (``pool_host/base.py:249, 273-278``, printed %.2f): an MHA/GQA rank's (K + V widths) x its heads x
    layers x dtype (``pool_host/mha.py:290-296``), an MLA row x layers (``pool_host/mla.py:195-197``; a DSA model's
    latent alone, ``dsa``: its indexer has a host pool of its own, ``pool_host/dsa.py:203``), packed MTP draft
    layers each a target layer's (``pool_host/base.py:259-271``). A log of another model or KV dtype, or an edited
    line, disagrees."""
    gb, tokens = log.values.get("host_kv_gb"), log.host_kv_tokens
    if gb is None or tokens is None or len(model.pools) != 1:
        return
    if dsa is not None and log.server_args.get("hicache_mem_layout") == "page_first_kv_split":
        return  # the index keys join the latent's rows there (pool_host/mla.py:198-205): not modelled
    per_token = dsa.layers * dsa.kv_row_bytes if dsa is not None else model.pools[0].bytes_per_page / model.page_size
    total, target = log.get("host_kv_layers"), log.get("host_kv_target_layers")
    if total and target:
        per_token = per_token * total / target
    want = tokens * per_token / 1e9
    if abs(want - gb) > 0.0051:
        raise InputError(f"host KV pool: {gb:g} GB logged for {tokens:,} tokens, but {model.name} at this launch's "
                         f"TP size and KV dtype takes {per_token:,.0f} B a token (pool_host/base.py:249), {want:.2f} GB: "
                         "a log of another model or KV dtype, or an edited line?",
                         source=log.source, line=log.lines["host_kv_gb"])  # fmt: skip


def check_capacities(conv: Conversion, log: ServerLog) -> list[str]:
    """The conversion's logged pools against what the scenario would derive without them; a single host KV
    pool's GB against the model's bytes (:func:`check_host_kv_bytes`) is refused, not listed."""
    from sim.hisparse.dsadecode import dsa_layout_of
    from sim.scenario.capacity import logged_mismatches
    from sim.scenario.load import build_model_spec
    from sim.scenario.resolve import derived_device_pools

    try:
        sc = conv.check()
    except InputError:
        return []  # the caller's own check reports it
    model = build_model_spec(sc)
    check_host_kv_bytes(log, model, dsa_layout_of(sc))
    out = logged_mismatches(sc, *derived_device_pools(sc, model))
    return out + host_pool_checks(log, model, sc.hicache.page_size)

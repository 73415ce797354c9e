"""hicache-sim: a discrete-event model of SGLang's hierarchical KV cache for multi-pool models.

Layers, each importing only those below it (each package's docstring says which; ``tests/test_layers.py``
holds the code to them): ``base`` < ``model`` < ``workload`` < ``cache`` < ``serve`` < ``hisparse`` <
``offline`` < ``app``. Nothing under ``sim`` imports torch or triton.
"""

from __future__ import annotations

import sys
from importlib.abc import MetaPathFinder

__version__ = "0.1.0"

# Where each module of the flat layout (0.1.0 before the regroup) went: an old import says its new name.
MOVED = {
    "agentic": "workload.agentic", "aic": "model.aic", "boundary": "cache.boundary",
    "clairvoyant": "cache.clairvoyant", "cli": "app.cli", "clients": "serve.clients",
    "compare": "offline.compare", "compute": "model.compute", "costs": "model.costs",
    "decode": "hisparse.decode", "engine": "serve.engine", "errors": "base.errors",
    "eviction": "cache.eviction", "fileio": "base.fileio", "fromsglang": "app.fromsglang",
    "hardware": "model.hardware", "hicache": "cache.hicache", "hisparse": "hisparse.buffer",
    "hostcalls": "offline.hostcalls", "hostmem": "model.hostmem", "inputs": "base.inputs",
    "lanes": "serve.lanes", "metrics": "serve.metrics", "modelcfg": "model.modelcfg", "mrc": "cache.mrc",
    "parallel": "app.parallel", "plan": "app.plan", "plot": "app.plot", "pools": "model.pools",
    "progress": "base.progress", "radix": "cache.radix", "replay": "offline.replay", "run": "app.run",
    "scenario": "app.scenario", "schema": "app.schema", "seeds": "app.seeds",
    "speculative": "model.speculative", "storage": "serve.storage", "swa": "cache.v4.swa",
    "swacache": "cache.v4.swacache", "sweep": "app.sweep", "text": "base.text", "topk": "hisparse.topk",
    "tosglang": "app.tosglang", "trajectory": "workload.trajectory", "treecalls": "offline.treecalls",
    "unified": "cache.v4.unified", "v4hicache": "cache.v4.hicache", "v4hostcalls": "offline.v4hostcalls",
}


class _MovedModules(MetaPathFinder):
    """Last on the path: an import that found nothing and names an old module is told the new name."""

    def find_spec(self, fullname: str, path, target=None):
        old = fullname.removeprefix("sim.")
        if fullname.startswith("sim.") and old in MOVED:
            raise ModuleNotFoundError(f"{fullname} is now sim.{MOVED[old]}", name=fullname)
        return None


sys.meta_path.append(_MovedModules())

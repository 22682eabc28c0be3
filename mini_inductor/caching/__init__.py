"""Every cache of mini_inductor, in memory and on disk (the folders: files.py).

Storage, which the runtime may use (each imports only files.py and torch; Triton inside the
functions that need it):
    files.py          the one atomic writer and hash-checked reader; the directory layout; the versions
                      every key includes
    memory.py         PROCESS: what this process keeps between compiles (compiled graphs, loaded modules,
                      layout timings)
    modules.py        generated modules, content-addressed, loaded once per process
    kernel_store.py   compiled Triton kernels' records, so that a later process reloads a kernel without
                      Triton's compile path (written and read by runtime/launch/precompile.py)
    autotune.py       autotuning winners: the config mode="max-autotune" picked per kernel specialization
                      (the tuning itself: runtime/launch/autotune.py); and the layout timings by which
                      conv_layout decides fp32 graphs (the timing itself: lowering/layout_timing.py)
Compiled graphs, above the runtime and the compiler:
    graph_cache.py    keyed on the ATen graph: a new process skips lowering, scheduling and codegen
    front_cache.py    keyed on Dynamo's graph: a hit skips AOT autograd as well (inference graphs, and
                      training graphs through front_autograd.py)
    dynamo_cache.py   torch's Dynamo cache (opt-in): a hit skips Dynamo's tracing as well
    lookup.py         memory, then disk: `from_memory`, `rebuild` (the one way from an entry back to a
                      CompiledGraph), `keep`

    from mini_inductor.caching import PROCESS
    print(PROCESS)                 # compiled graphs and modules held, how each compile was served
    print(describe(cache_dir))     # what the cache dir holds, folder by folder

This file imports only the storage half: the runtime imports caching.files, kernel_store and
autotune, and the compiled-graph modules import the runtime.
"""
from __future__ import annotations

import os

from .files import LAYOUT
from .memory import PROCESS, ProcessCache

__all__ = ["PROCESS", "ProcessCache", "describe"]


def describe(cache_dir: str | None = None, process: bool = True) -> str:
    """What `cache_dir` (default: the configured one) holds, a line per kind of entry, and (with
    `process`) this process's in-memory caches."""
    if cache_dir is None:
        from ..config import current
        cache_dir = current().cache_dir
    counts = {folder: [0, 0] for folder in LAYOUT}
    for folder, _, names in os.walk(cache_dir):
        for name in names:
            kind = _kind(os.path.relpath(os.path.join(folder, name), cache_dir))
            if kind is not None:
                counts[kind][0] += 1
                counts[kind][1] += os.path.getsize(os.path.join(folder, name))
    lines = [f"mini_inductor cache {cache_dir}"]
    lines += [f"  {n:6d} files {size / 1e6:9.2f} MB  {LAYOUT[kind]}" for kind, (n, size) in counts.items()]
    if process:
        lines.append(f"  in this process: {PROCESS!r}")
    return "\n".join(lines)


def _kind(relpath: str) -> str | None:
    top = relpath.split(os.sep, 1)[0]
    if top in LAYOUT:
        return top
    if os.path.basename(relpath).startswith("mi_"):
        return "modules"
    return None

"""A compiled graph served from the caches instead of compiled: this process's memory, then the disk.

    key = memory_key(disk_key, gm, cfg)               # the disk key plus options and constants' identity
    compiled = from_memory(key, name, record, graph_args)      # shares the module of an earlier compile
    compiled = rebuild(disk_key, name, record, graph_args)     # from its graph cache entry (graph_cache.py)
    keep(key, compiled, entry, trace, cfg)            # after a compile: memory, and disk when it is on

`rebuild` is the one way back from a cache entry to a CompiledGraph: the pipeline's disk hit, the
front cache (front_cache.py) and Dynamo's cache (dynamo_cache.py) all go through it. None of these
lower, schedule or generate anything; the fusion log still shows the original compile's decisions.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from typing import Any, NamedTuple

from ..config import Config
from ..debug import structured as debug_structured
from ..metrics import GraphRecord
from ..runtime import CompiledGraph
from ..runtime.launch.launcher import prepare_kernels
from . import graph_cache, shape_guards
from .memory import PROCESS
from .modules import load_module

log = logging.getLogger("mini_inductor")
fusion_log = logging.getLogger("mini_inductor.fusion")
schedule_log = logging.getLogger("mini_inductor.schedule")


class Kept(NamedTuple):
    """What PROCESS.graphs holds per key."""

    compiled: CompiledGraph
    entry: graph_cache.CacheEntry
    trace: Any                   # debug.trace.GraphTrace; None for a graph first served from disk


def memory_key(disk_key: str, gm, cfg: Config) -> str:
    """The disk key plus every option (a compile with a debug dir must dump) and the identity of the
    graph's constants: a memory hit reuses the CompiledGraph that holds them, so it must be the
    same tensors, not only the same metadata."""
    parts = [disk_key, repr(sorted(vars(cfg).items()))]
    parts += [f"{name}:{id(buf)}" for name, buf in gm.named_buffers()]
    parts += [f"{n.target}:{id(getattr(gm, n.target))}" for n in gm.graph.nodes if n.op == "get_attr"]
    return "|".join(parts)


def from_memory(key: str, name: str, record: GraphRecord, graph_args: dict, *, needs_ir: bool,
                shape_env=None) -> CompiledGraph | None:
    """A new CompiledGraph on the module compiled earlier in this process under `key`, or None. With
    `needs_ir` (explain, debug folders) only a graph this process compiled for real counts: one
    served from disk has no IR to show. The hit's `trace` is the original compile's. `shape_env`: a
    dynamic graph's, to which a hit adds the guards its compile added (`guards_hold`)."""
    kept = PROCESS.graphs.get(key)
    if kept is None or (needs_ir and kept.trace is None) or not guards_hold(kept.entry, shape_env, name):
        return None
    graph_cache.restore_record(record, kept.entry)
    record.source_path = kept.compiled.source_path
    record.cache_hit, record.cache = True, "memory"
    PROCESS.hits["memory"] += 1
    log.info("%s: served from the in-process cache (%s)", name, kept.entry.graph)
    schedule_log.info("%s: in-process cache hit (compiled as %s)", name, kept.entry.graph)
    log_cached_decisions(name, kept.entry.graph, kept.entry.decisions)
    debug_structured.output_code(name, kept.entry.source, kept.compiled.source_path, kept.entry.graph)
    hit = kept.compiled
    compiled = CompiledGraph(name, hit.module, hit.source_path, hit.constants, **graph_args)
    compiled.trace = hit.trace
    record.graphed_workspace_bytes = compiled.graphed_workspace_bytes
    return compiled


def rebuild(key: str, name: str, record: GraphRecord, graph_args: dict,
            constants: dict | None = None, label: str = "disk", shape_env=None,
            check_guards: bool = True) -> CompiledGraph | None:
    """The compiled graph of graph cache entry `key`, rebuilt without lowering, scheduling or codegen,
    or None when there is no usable entry (a miss, a damaged entry, other constants: logged).

    `graph_args`: CompiledGraph's keyword arguments (kind, static_input_idxs, cfg, sizes_key,
    generator_idxs); `constants`: the graph's get_attr tensors by node name (graph_cache.graph_constants;
    none for graphs rebuilt without their ATen graph, whose entries never have any); `label`: the
    record's `cache` (which level served it); `shape_env` as for from_memory; `check_guards` False
    for the front cache, whose entry holds every guard added after its own key, these too."""
    constants = constants or {}
    cfg = graph_args["cfg"]
    began = time.perf_counter()
    entry = graph_cache.load(cfg.cache_dir, key)
    if entry is not None and sorted(entry.constants) != sorted(constants):
        log.warning("mini_inductor: compiled-graph cache entry for %s expects constants %s, the graph has %s; "
                    "compiling again", name, entry.constants, sorted(constants))
        entry = None
    if entry is None:
        schedule_log.info("%s: compiled-graph cache miss (key %s…), compiling", name, key[:12])
        return None
    if check_guards and not guards_hold(entry, shape_env, name):
        return None
    try:
        module, path = load_module(entry.source, cfg.cache_dir)
    except Exception as e:  # noqa: BLE001  (a broken entry is a miss, not a failed compile)
        log.warning("mini_inductor: cannot load the module of cached graph %s from %s (%s: %s); compiling again",
                    name, graph_cache.entry_path(cfg.cache_dir, key), type(e).__name__, e)
        return None
    loaded = time.perf_counter()
    graph_cache.restore_record(record, entry)
    record.source_path = path
    record.cache_hit, record.cache = True, label
    debug_structured.output_code(name, entry.source, path, entry.graph)
    record.stage_seconds = {"cache lookup": loaded - began}
    schedule_log.info("%s: compiled-graph cache hit (key %s…, compiled earlier as %s): "
                      "no lowering, scheduling or codegen; module %s", name, key[:12], entry.graph, path)
    log_cached_decisions(name, entry.graph, entry.decisions)
    prepare_kernels(module, name, cfg, record)
    compiled = CompiledGraph(name, module, path, constants, **graph_args)
    compiled.trace = None
    compiled.graph_key = key
    compiled.cache_entry = entry
    # cudagraphs is not in the cache key: whether the graph is graphed is decided again here
    record.graphed_workspace_bytes = compiled.graphed_workspace_bytes
    PROCESS.hits[label] += 1
    return compiled


def guards_hold(entry: graph_cache.CacheEntry, shape_env, name: str) -> bool:
    """Whether the guards `entry`'s compile added to its ShapeEnv hold at this graph's sizes; if so they
    are added to `shape_env` (as that compile added them, for Dynamo to check), else it is a miss."""
    exprs, why = shape_guards.check(shape_env, entry.guards)
    if why is not None:
        schedule_log.info("%s: compiled-graph cache entry %s not used (%s), compiling", name, entry.graph, why)
        return False
    shape_guards.install(shape_env, exprs)
    return True


def keep(key: str, compiled: CompiledGraph, record: GraphRecord, trace, cfg: Config, guards=()) -> None:
    """Remember a freshly compiled graph in this process, and on disk when the graph cache is on.
    `guards`: those the compile added to a dynamic graph's ShapeEnv (shape_guards.pack)."""
    entry = graph_cache.make_entry(record, trace.generated.source, trace.lowered.constants, trace.schedule.decisions,
                                   guards)
    if cfg.graph_cache:
        path = graph_cache.store(cfg.cache_dir, compiled.graph_key, entry)
        if path:
            schedule_log.info("%s: compiled graph cached at %s", compiled.name, path)
    PROCESS.graphs[key] = Kept(compiled, entry, trace)
    PROCESS.hits["miss" if cfg.graph_cache else "off"] += 1


def keep_rebuilt(key: str, compiled: CompiledGraph) -> None:
    """Remember a graph `rebuild` served, so that the next compile of it in this process is a memory hit."""
    PROCESS.graphs[key] = Kept(compiled, compiled.cache_entry, None)


def log_cached_decisions(name: str, original: str, decisions) -> None:
    """A cache hit still reports the fusion decisions (Inductor's fusion log goes silent on hits)."""
    if not fusion_log.isEnabledFor(logging.INFO):
        return
    fused = sum(1 for d in decisions if d.fused)
    fusion_log.info("%s: cache hit (compiled as %s); its fusion decisions: %d fused, %d refused",
                    name, original, fused, len(decisions) - fused)
    for d in decisions:
        if d.fused:
            fusion_log.info("  fused %s with %s", d.node1, d.node2)
        else:
            fusion_log.info("  cannot fuse %s with %s: %s", d.node1, d.node2, d.reason)


def with_name(trace, name: str, record: GraphRecord):
    """The original compile's trace, shown again under the name and record of a memory hit."""
    return dataclasses.replace(trace, name=name, record=record)

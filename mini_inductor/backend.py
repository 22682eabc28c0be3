"""The torch.compile entry: modes, options, aot_autograd wiring (decompositions: lowering/decompositions.py), partitioner.

    torch.compile(m, backend="mini_inductor", mode=..., options={...})
      → AOT autograd (decompositions, min-cut partitioner): _through_aot_autograd
      → compile_graph(ATen graph) for the inference, forward and backward graphs
      → lower → schedule → generate → load → CompiledGraph
"""
from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import os
import time
from typing import Any, NamedTuple

import torch
from torch._dynamo import disable
from torch._dynamo.utils import counters, flatten_graph_inputs
from torch._functorch.aot_autograd import aot_module_simplified
from torch._functorch.partitioners import min_cut_rematerialization_partition

from . import config as config_module
from . import dynamo_cache, front_cache, graph_cache, metrics
from .codegen import generate
from .codegen.cache import clear as clear_module_cache
from .codegen.cache import load_module
from .config import Config
from .debug import debug_root, dump_graph, wants_debug_files
from .debug import structured as debug_structured
from .debug.logs import follow_torch_logs
from .debug import trace as debug_trace
from .errors import CodegenError, MiniInductorError, SchedulingError
from .lowering import lower_graph
from .lowering.decompositions import decomposition_table
from .lowering.layout_opt import SUMMARY as LAYOUT_SUMMARY, channels_last_convolutions
from .lowering.graph import unsupported_graph_reason
from .runtime import CompiledGraph, EagerGraph, log_eager_graph_skip
from .runtime.capture_sizes import SizeSpecializedGraph
from .runtime.cudagraph_trees import reset as reset_cudagraph_trees
from .runtime.autotune import Autotuner
from .runtime.launcher import accelerate
from .runtime.precompile import precompile
from .runtime.interpreter import install as install_interpreter_shims
from .config import interpreting
from .scheduler import schedule

log = logging.getLogger("mini_inductor")
perf_log = logging.getLogger("mini_inductor.perf_hints")
fusion_log = logging.getLogger("mini_inductor.fusion")
schedule_log = logging.getLogger("mini_inductor.schedule")

aten = torch.ops.aten
DYNAMIC_SHAPES = "dynamic shapes are not supported yet"
MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")

_graph_counter = itertools.count()
_compiled: dict[str, Any] = {}           # in-process cache: graph key → _InProcessEntry


def mini_inductor(gm: torch.fx.GraphModule, example_inputs, mode: str | None = None, options: dict | None = None):
    """The backend: `torch.compile(model, backend="mini_inductor", mode=None, options=None)`."""
    cfg = config_for(mode, options)
    _reset_by_dynamo()
    follow_torch_logs()
    front = front_cache.Front(gm, example_inputs, cfg)   # the level before AOT autograd (inference graphs)
    hit = front.load(functools.partial(_rebuild_inference_graph, cfg=cfg))
    if hit is not None:
        return dynamo_cache.keep(gm, hit, cfg, front.key, mode, options)
    compilers = {kind: front.watch(kind, functools.partial(compile_graph, kind=kind, cfg=cfg))
                 for kind in ("forward", "backward", "inference")}
    began, first = time.perf_counter(), len(metrics.compiled_graphs)
    compiled = _through_aot_autograd(gm, example_inputs, compilers)
    _note_aot_seconds(time.perf_counter() - began, metrics.compiled_graphs[first:])
    stored = front.store()
    return dynamo_cache.keep(gm, compiled, cfg, front.key if stored else None, mode, options)


def config_for(mode: str | None, options: dict | None) -> Config:
    """The options of one torch.compile: the global config, then what `mode` implies, then `options`."""
    if mode not in MODES:
        raise ValueError(f"mini_inductor: unknown mode {mode!r}; valid modes: {[m for m in MODES if m]}")
    changes = {"max_autotune": True} if mode in ("max-autotune", "max-autotune-no-cudagraphs") else {}
    changes.update(options or {})
    cfg = config_module.current().replace(**changes)
    if mode == "max-autotune-no-cudagraphs":
        cfg = cfg.replace(cudagraphs=False)
    return cfg


def _note_aot_seconds(total: float, records: list) -> None:
    """AOT autograd's own share of a compile (its tracing, functionalization, partitioning: the time
    not spent in our compilers) as the first stage of the first graph it produced."""
    if records:
        ours = sum(r.compile_seconds for r in records)
        records[0].stage_seconds = {"AOT autograd": max(0.0, total - ours), **records[0].stage_seconds}


def _through_aot_autograd(gm, example_inputs, compilers: dict):
    """AOT autograd (functionalization, decompositions, the min-cut partitioner) with our compilers.

    This is what torch's `torch._dynamo.backends.common.aot_autograd` helper does, less its
    debug-logging context: that context's module imports most of Inductor, which cost 0.5-0.8 s of
    every first call on the H100 machine (cold or warm) for a backend that uses none of it. (A
    training graph still pays it: the min-cut partitioner's CSE pass imports Inductor's pattern matcher.)
    """
    if any(isinstance(x, (list, tuple, dict)) for x in example_inputs):
        return flatten_graph_inputs(gm, example_inputs,
                                    functools.partial(_through_aot_autograd, compilers=compilers))
    counters["aot_autograd"]["total"] += 1
    backward = compilers["backward"]

    def backward_compiler(*args, **kwargs):
        # Dynamo must neither trace the backward compile nor the backward it returns (both run inside
        # autograd's backward, where Dynamo's frame hook is still installed)
        compiled = disable(backward, reason="mini_inductor compiles the backward graph")(*args, **kwargs)
        return disable(compiled, reason="mini_inductor's generated backward")

    try:
        compiled = aot_module_simplified(
            gm, example_inputs,
            fw_compiler=compilers["forward"],
            bw_compiler=backward_compiler,
            inference_compiler=compilers["inference"],
            decompositions=decomposition_table(),
            partition_fn=min_cut_rematerialization_partition,
        )
    except Exception:
        counters["aot_autograd"]["not_ok"] += 1
        raise
    counters["aot_autograd"]["ok"] += 1
    return disable(compiled, reason="mini_inductor's generated graph")


def reset() -> None:
    """Forget compiled graphs and tear down the CUDA-graph trees (torch._dynamo.reset() calls this
    through the backend's `reset`)."""
    _compiled.clear()
    clear_module_cache()
    reset_cudagraph_trees()


mini_inductor.reset = reset  # type: ignore[attr-defined]


def _reset_by_dynamo() -> None:
    """torch._dynamo.reset() resets the backends it holds in `cached_backends`, a table filled when
    torch.compile wraps a function and emptied by every reset: a function compiled before a reset
    and run after it would leave our caches and trees alone at the next one. Each compile puts the
    backend back in the table."""
    table = getattr(torch._dynamo.eval_frame, "cached_backends", None)
    if isinstance(table, dict):
        table.setdefault(id(mini_inductor), mini_inductor)


def compile_graph(gm: torch.fx.GraphModule, example_inputs, *, kind: str, cfg: Config,
                  static_input_idxs: tuple[int, ...] | None = None, sizes_key=None):
    """One ATen graph → a callable. `static_input_idxs` defaults to what aot_autograd knows;
    `sizes_key` is set for a static specialization of a graph with dynamic dims (capture sizes)."""
    name = f"{kind}_{next(_graph_counter)}"
    start = time.perf_counter()
    record = metrics.GraphRecord(name, num_fx_nodes=sum(1 for n in gm.graph.nodes if n.op == "call_function"))
    metrics.compiled_graphs.append(record)
    static = tuple(static_input_idxs) if static_input_idxs is not None else _static_input_idxs(gm, kind)
    graph_args = dict(kind=kind, static_input_idxs=static, cfg=cfg, sizes_key=sizes_key,
                      generator_idxs=_generator_idxs(gm))
    reason = _why_eager(gm, example_inputs)
    if reason == DYNAMIC_SHAPES and cfg.cudagraphs and cfg.cudagraph_capture_sizes is not None:
        log.info("%s: dynamic dims; compiled per size in cudagraph_capture_sizes %s", name,
                 list(cfg.cudagraph_capture_sizes))
        specialize = functools.partial(_compile_specialization, kind=kind, cfg=cfg, static=static)
        return SizeSpecializedGraph(name, gm, kind, cfg.cudagraph_capture_sizes, cfg, specialize)
    if reason:
        debug_trace.ran_eagerly(name, reason, gm, warn_key=reason)   # noted for explain; warned once per reason
        record.ran_eagerly = reason
        log_eager_graph_skip(gm, name, reason, reason == DYNAMIC_SHAPES, cfg)
        return EagerGraph(name, gm, reason)
    install_interpreter_shims()
    if kind == "inference":
        gm = channels_last_convolutions(gm, cfg.conv_layout, name)
        record.layout = gm.meta.get(LAYOUT_SUMMARY, "")
    disk_key = graph_cache.graph_key(gm, example_inputs, cfg)
    key = _in_process_key(disk_key, gm, cfg)
    cached = _compiled.get(key)
    # explain and debug folders need the IR of every graph: one first served from disk is compiled for real
    needs_ir = debug_trace.capturing() or wants_debug_files(cfg)
    if cached is not None and not (needs_ir and cached.trace is None):
        graph_cache.restore_record(record, cached.entry)
        record.source_path = cached.compiled.source_path
        record.cache_hit, record.cache = True, "memory"
        log.info("%s: served from the in-process cache (%s)", name, cached.entry.graph)
        schedule_log.info("%s: in-process cache hit (compiled as %s)", name, cached.entry.graph)
        _log_cached_decisions(name, cached.entry.graph, cached.entry.decisions)
        if needs_ir:
            _keep_trace(dataclasses.replace(cached.trace, name=name, record=record), cfg)
        debug_structured.output_code(name, cached.entry.source, cached.compiled.source_path, cached.entry.graph)
        hit = cached.compiled
        compiled = CompiledGraph(name, hit.module, hit.source_path, hit.constants, **graph_args)
        compiled.trace = hit.trace
        compiled.graph_key = disk_key
        record.graphed_workspace_bytes = compiled.graphed_workspace_bytes
        return compiled
    # debug folders and explain want the IR and the schedule, which the disk cache does not keep
    use_disk = cfg.graph_cache and not needs_ir
    if use_disk:
        compiled = _load_from_disk(graph_cache.graph_constants(gm), disk_key, name, record, graph_args)
        if compiled is not None:
            compiled.graph_key = disk_key
            record.compile_seconds = time.perf_counter() - start
            _compiled[key] = _InProcessEntry(compiled, compiled.cache_entry, None)
            log.info("%s", record.summary())
            return compiled
    record.cache = "miss" if cfg.graph_cache else "off"
    try:
        compiled = _compile(gm, example_inputs, name, record, graph_args)
    except MiniInductorError as e:
        if not cfg.fallback_on_error:
            raise
        debug_trace.warn_at_user_code(f"mini_inductor: {e}\nGraph {name} runs eagerly (fallback_on_error=True).",
                                      debug_trace.ran_eagerly(name, str(e), gm).source)
        record.ran_eagerly = str(e)
        return EagerGraph(name, gm, str(e))
    record.compile_seconds = time.perf_counter() - start
    compiled.graph_key = disk_key
    trace = compiled.trace
    entry = graph_cache.make_entry(record, trace.generated.source, trace.lowered.constants, trace.schedule.decisions)
    if cfg.graph_cache:
        path = graph_cache.store(cfg.cache_dir, disk_key, entry)
        if path:
            schedule_log.info("%s: compiled graph cached at %s", name, path)
    _compiled[key] = _InProcessEntry(compiled, entry, trace)
    log.info("%s", record.summary())
    return compiled


class _InProcessEntry(NamedTuple):
    compiled: CompiledGraph
    entry: graph_cache.CacheEntry
    trace: Any                   # debug_trace.GraphTrace; None for a graph first served from disk


def _rebuild_inference_graph(key: str, *, num_fx_nodes: int, static_input_idxs: tuple[int, ...], began: float,
                             cfg: Config, label: str = front_cache.LABEL) -> CompiledGraph | None:
    """A front cache hit (front_cache.py; dynamo_cache.py's rebuilds too, recorded under `label`): the
    inference graph of ATen-graph entry `key`, rebuilt as a disk hit is, without the ATen graph (such
    entries have no constants); None when it cannot be loaded."""
    name = f"inference_{next(_graph_counter)}"
    record = metrics.GraphRecord(name, num_fx_nodes=num_fx_nodes)
    install_interpreter_shims()
    graph_args = dict(kind="inference", static_input_idxs=tuple(static_input_idxs), cfg=cfg, sizes_key=None,
                      generator_idxs=())
    compiled = _load_from_disk({}, key, name, record, graph_args)
    if compiled is None:
        return None
    record.cache = label
    record.compile_seconds = time.perf_counter() - began
    metrics.compiled_graphs.append(record)
    log.info("%s", record.summary())
    return compiled


def _load_from_disk(constants: dict, key: str, name: str, record: metrics.GraphRecord,
                    graph_args: dict) -> CompiledGraph | None:
    """The compiled graph rebuilt from its cache entry (no lowering, scheduling or codegen), or None on a
    miss. `constants`: the graph's get_attr tensors by node name (graph_cache.graph_constants)."""
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
    try:
        module, path = load_module(entry.source, cfg.cache_dir)
    except Exception as e:  # noqa: BLE001  (a broken entry is a miss, not a failed compile)
        log.warning("mini_inductor: cannot load the module of cached graph %s from %s (%s: %s); compiling again",
                    name, graph_cache.entry_path(cfg.cache_dir, key), type(e).__name__, e)
        return None
    loaded = time.perf_counter()
    graph_cache.restore_record(record, entry)
    record.source_path = path
    record.cache_hit, record.cache = True, "disk"
    debug_structured.output_code(name, entry.source, path, entry.graph)
    record.stage_seconds = {"cache lookup": loaded - began}
    schedule_log.info("%s: compiled-graph cache hit (key %s…, compiled earlier as %s): "
                      "no lowering, scheduling or codegen; module %s", name, key[:12], entry.graph, path)
    _log_cached_decisions(name, entry.graph, entry.decisions)
    _prepare_kernels(module, name, cfg, record)
    compiled = CompiledGraph(name, module, path, constants, **graph_args)
    compiled.trace = None
    compiled.cache_entry = entry
    # cudagraphs is not in the cache key: whether the graph is graphed is decided again here
    record.graphed_workspace_bytes = compiled.graphed_workspace_bytes
    return compiled


def _prepare_kernels(module, name: str, cfg: Config, record: metrics.GraphRecord) -> None:
    """GPU only: compile every kernel now, concurrently; under max-autotune, tune each at its first launch."""
    if interpreting():
        return
    began = time.perf_counter()
    reloaded, compiled = precompile(module, cfg.compile_threads, os.path.join(cfg.cache_dir, "kernels"),
                                    static=cfg.static_launch)
    took = time.perf_counter() - began
    if compiled:
        record.stage_seconds["kernel compile"] = took
        schedule_log.info("%s: %d Triton kernels compiled on %d threads in %.2f s%s", name, compiled,
                          cfg.compile_threads, took, f" ({reloaded} more reloaded)" if reloaded else "")
    elif reloaded:
        record.stage_seconds["kernel load"] = took
        schedule_log.info("%s: %d compiled Triton kernels reloaded from the cache in %.2f s", name, reloaded, took)
    if cfg.max_autotune:
        accelerate(module, tuner=Autotuner(cfg.cache_dir, cfg.compile_threads), static=cfg.static_launch)


def _compile(gm, example_inputs, name: str, record: metrics.GraphRecord, graph_args: dict) -> CompiledGraph:
    cfg = graph_args["cfg"]
    stage = _StageClock(name, record)
    stage.start("lowering", f"{record.num_fx_nodes} ATen nodes")
    lowered = lower_graph(gm, example_inputs, name, cfg)
    stage.start("scheduling", f"{len(lowered.buffers)} IR buffers")
    try:
        sched = schedule(lowered, cfg)
    except MiniInductorError:
        raise
    except Exception as e:
        raise SchedulingError(f"{type(e).__name__}: {e}", graph=name) from e
    stage.start("codegen", f"{len(sched.nodes)} groups")
    try:
        gen = generate(sched, cfg)
        stage.start("loading", f"{len(gen.kernel_names)} Triton kernels")
        module, path = load_module(gen.source, cfg.cache_dir)
    except MiniInductorError:
        raise
    except Exception as e:
        raise CodegenError(f"{type(e).__name__}: {e}", graph=name) from e
    stage.stop()
    _prepare_kernels(module, name, cfg, record)
    record.nodes_before_fusion = sched.nodes_before_fusion
    record.nodes_after_fusion = len(sched.nodes)
    record.planned_peak_bytes = gen.planned_peak_bytes
    record.estimated_bytes_moved = gen.estimated_bytes_moved
    record.kernel_names = list(gen.kernel_names)
    record.extern_calls = list(gen.extern_calls)
    record.fallback_ops = lowered.fallback_ops.copy()
    record.source_path = path
    if lowered.fallback_ops:
        perf_log.info("%s: ops run as ATen fallbacks: %s", name, dict(lowered.fallback_ops))
    trace = debug_trace.GraphTrace(name, gm, lowered, sched, gen, record)
    debug_structured.graph_artifacts(trace)
    debug_structured.output_code(name, gen.source, path)
    _keep_trace(trace, cfg)
    compiled = CompiledGraph(name, module, path, lowered.constants, **graph_args)
    compiled.trace = trace  # what the fusion log and `explain` show again on a cache hit
    record.graphed_workspace_bytes = compiled.graphed_workspace_bytes
    return compiled


def _keep_trace(trace: debug_trace.GraphTrace, cfg: Config) -> None:
    """A compiled graph's trace to whoever wants it: explain's capture, the debug folder."""
    if debug_trace.capturing():
        debug_trace.record(trace)
    root = debug_root(cfg)
    if root is not None:
        dump_graph(root, trace)


def _log_cached_decisions(name: str, original: str, decisions) -> None:
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


class _StageClock:
    """Per-stage seconds into the record; progress lines on the `schedule` log (MINI_INDUCTOR_LOGS=schedule)."""

    def __init__(self, name: str, record: metrics.GraphRecord):
        self.name, self.record = name, record
        self.current: str | None = None
        self.began = 0.0

    def start(self, stage: str, what: str) -> None:
        self.stop()
        self.current, self.began = stage, time.perf_counter()
        schedule_log.info("%s: %s (%s)…", self.name, stage, what)

    def stop(self) -> None:
        if self.current is not None:
            took = time.perf_counter() - self.began
            self.record.stage_seconds[self.current] = took
            schedule_log.info("%s: %s done in %.2f s", self.name, self.current, took)
            self.current = None


def _why_eager(gm, example_inputs) -> str | None:
    """Why this graph cannot get generated code here, or None."""
    tensors = [x for x in example_inputs if isinstance(x, torch.Tensor)]
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            val = node.meta.get("val")
            if isinstance(val, torch.SymInt) or (isinstance(val, torch.Tensor) and
                                                  any(not isinstance(s, int) for s in val.shape)):
                return DYNAMIC_SHAPES
    reason = unsupported_graph_reason(gm)
    if reason:
        return reason
    devices = {t.device.type for t in tensors}
    for node in gm.graph.nodes:   # a graph without tensor inputs (torch.rand(n, device="cuda")) still runs on its ops' device
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            devices.add(val.device.type)
    if "cuda" not in devices and not interpreting():
        return ("mini_inductor generates code for CUDA; on the CPU set TRITON_INTERPRET=1 to run the "
                "generated Triton kernels in Triton's interpreter")
    return None


def _compile_specialization(gm, example_inputs, sizes_key, *, kind: str, cfg: Config, static: tuple[int, ...]):
    """A graph with dynamic dims retraced for one listed capture size (SizeSpecializedGraph)."""
    compiled = compile_graph(gm, example_inputs, kind=kind, cfg=cfg, static_input_idxs=static, sizes_key=sizes_key)
    if isinstance(compiled, EagerGraph):
        log.warning("mini_inductor: the specialization of a %s graph for sizes %s runs eagerly: %s",
                    kind, sizes_key, compiled.reason)
    return compiled


def _static_input_idxs(gm, kind: str) -> tuple[int, ...]:
    """Inputs at fixed addresses (parameters, buffers): CUDA graphs read them in place.

    aot_autograd knows them for the forward/inference graph; in the backward they are the saved
    `primals_k` whose forward input k-1 was static (saved activations are found in the pool by address).
    """
    ctx = torch._guards.TracingContext.try_get()
    fw = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    static = list(getattr(fw, "static_input_indices", None) or [])
    if kind != "backward":
        return tuple(static)
    wanted = {f"primals_{i + 1}" for i in static}
    placeholders = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    return tuple(i for i, n in enumerate(placeholders) if n in wanted)


def _generator_idxs(gm) -> tuple[int, ...]:
    """Positions of the generator arguments (one per checkpointed random op, see random_lowerings.py)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return tuple(i for i, n in enumerate(placeholders) if isinstance(n.meta.get("val"), torch.Generator))


def _in_process_key(disk_key: str, gm, cfg: Config) -> str:
    """The disk key plus every option (a compile with a debug dir must dump) and the identity of the
    graph's constants: an in-process hit reuses the CompiledGraph that holds them, so it must be the
    same tensors, not only the same metadata."""
    parts = [disk_key, repr(sorted(vars(cfg).items()))]
    parts += [f"{name}:{id(buf)}" for name, buf in gm.named_buffers()]
    parts += [f"{n.target}:{id(getattr(gm, n.target))}" for n in gm.graph.nodes if n.op == "get_attr"]
    return "|".join(parts)

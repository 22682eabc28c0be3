"""One ATen graph → a callable: the compile pipeline, in the order it runs.

    compile_graph(gm, example_inputs, kind="forward", cfg=cfg)
      runs eagerly?  a graph we cannot compile here becomes a runtime.EagerGraph (why_eager)
      cached?        this process's memory, then the graph cache on disk (caching/lookup.py)
      lower          ATen FX graph → IR buffers                     lowering.lower_graph
      schedule       IR → fused groups, memory plan, partitions     scheduler.schedule
      generate       groups → Triton kernels + the wrapper source   codegen.generate
      load           source → module, kernels compiled             caching.modules, runtime.launch.launcher
      → runtime.CompiledGraph, kept in the caches (caching/lookup.py keep)

Each stage is a timing span: its seconds go to the graph's metrics.GraphRecord (`stage_seconds`,
what `explain` shows) and a start and an end line to the `schedule` log (MINI_INDUCTOR_LOGS=schedule).
backend.py calls compile_graph once per graph that AOT autograd produces.
"""
from __future__ import annotations

import contextlib
import functools
import logging
import time

import torch

from . import metrics
from .caching import graph_cache, lookup, shape_guards
from .caching.modules import load_module
from .codegen import generate
from .config import Config, interpreting
from .debug import debug_root, dump_graph, wants_debug_files
from .debug import structured as debug_structured
from .debug import trace as debug_trace
from .errors import CodegenError, MiniInductorError, SchedulingError
from .lowering import eager_strides, lower_graph, symbolic
from .lowering.graph import DATA_DEPENDENT_OUTPUTS, FIRST_SAVED, INPUT_ALIASES, unsupported_graph_reason
from .lowering.layout_opt import SUMMARY as LAYOUT_SUMMARY, channels_last_convolutions
from .runtime import CompiledGraph, EagerGraph, log_eager_graph_skip
from .runtime.cudagraphs.capture_sizes import SizeSpecializedGraph
from .runtime.interpreter import install as install_interpreter_shims
from .runtime.launch.launcher import prepare_kernels
from .runtime.rng import seed_state_inputs
from .scheduler import schedule

log = logging.getLogger("mini_inductor")
perf_log = logging.getLogger("mini_inductor.perf_hints")
schedule_log = logging.getLogger("mini_inductor.schedule")

DYNAMIC_SHAPES = "dynamic shapes run eagerly under dynamic_shapes='eager'"
DATA_DEPENDENT_INPUTS = "data-dependent input sizes"


def compile_graph(gm: torch.fx.GraphModule, example_inputs, *, kind: str, cfg: Config,
                  static_input_idxs: tuple[int, ...] | None = None, sizes_key=None,
                  param_grad_idxs: tuple[int, ...] | None = None):
    """One ATen graph → a callable. `static_input_idxs` and `param_grad_idxs` default to what
    aot_autograd knows; `sizes_key` is set for a static specialization of a graph with dynamic dims
    (capture sizes)."""
    if kind == "forward":
        _copy_saved_mutated_inputs(gm)
        gm.meta.setdefault(FIRST_SAVED, eager_strides.first_saved_output())   # (a specialization's is carried)
    name = metrics.graph_name(kind)
    start = time.perf_counter()
    record = metrics.GraphRecord(name, num_fx_nodes=sum(1 for n in gm.graph.nodes if n.op == "call_function"))
    metrics.compiled_graphs.append(record)
    static = tuple(static_input_idxs) if static_input_idxs is not None else _static_input_idxs(gm, kind)
    grads = tuple(param_grad_idxs) if param_grad_idxs is not None else _param_grad_idxs(gm, kind)
    graph_args = dict(kind=kind, static_input_idxs=static, cfg=cfg, sizes_key=sizes_key,
                      generator_idxs=_generator_idxs(gm), param_grad_idxs=grads,
                      seed_state_idxs=seed_state_inputs(gm))

    reason = why_eager(gm, example_inputs)
    if reason == DYNAMIC_SHAPES:
        gm.meta[INPUT_ALIASES] = _input_aliases(kind)
    if reason == DYNAMIC_SHAPES and cfg.cudagraph_capture_sizes is None and cfg.dynamic_shapes != "eager":
        record.dynamic_symbols = _symbol_names(gm, unbacked=False)
        if cfg.dynamic_shapes == "symbolic":
            return compile_dynamic(gm, example_inputs, name, record, graph_args, start)
        record.dynamic_fallback = "dynamic_shapes='per_size'"
        return _per_size(gm, name, graph_args)
    if reason and reason.startswith((DATA_DEPENDENT_OUTPUTS, DATA_DEPENDENT_INPUTS)) and cfg.dynamic_shapes != "eager":
        # sizes read from data (.item(), nonzero): the symbolic compile reads them at run time
        record.dynamic_symbols = _symbol_names(gm, unbacked=True)
        return compile_dynamic(gm, example_inputs, name, record, graph_args, start, per_size=False,
                               sizes_from=DATA_DEPENDENT_INPUTS if reason.startswith(DATA_DEPENDENT_INPUTS)
                               else DATA_DEPENDENT_OUTPUTS)
    if reason == DYNAMIC_SHAPES and cfg.cudagraphs and cfg.cudagraph_capture_sizes is not None:
        log.info("%s: dynamic dims; compiled per size in cudagraph_capture_sizes %s", name,
                 list(cfg.cudagraph_capture_sizes))
        specialize = functools.partial(_compile_specialization, kind=kind, cfg=cfg, static=static, grads=grads)
        return SizeSpecializedGraph(name, gm, kind, cfg.cudagraph_capture_sizes, cfg, specialize)
    if reason:
        debug_trace.ran_eagerly(name, reason, gm, warn_key=reason)   # noted for explain; warned once per reason
        record.ran_eagerly = reason
        symbolic_inputs = reason == DYNAMIC_SHAPES or reason.startswith(DATA_DEPENDENT_INPUTS)
        log_eager_graph_skip(gm, name, reason, symbolic_inputs, cfg)
        return EagerGraph(name, gm, reason)
    return _compile(gm, example_inputs, name, record, graph_args, start)


def _symbol_names(gm, unbacked: bool) -> list[str]:
    """The graph's size symbols (and its unbacked ones), for its record; none where the graph cannot be
    compiled with symbols (compile_dynamic then meets the same reason and says it)."""
    try:
        shapes = symbolic.graph_symbols(gm)
    except symbolic.SymbolicUnsupported:
        return []
    return [str(s) for s in (*shapes.sources, *(shapes.unbacked if unbacked else ()))]


def _compile(gm, example_inputs, name: str, record: metrics.GraphRecord, graph_args: dict, start: float):
    """The caches (this process's memory, then the disk), else the stages; kept in the caches after."""
    cfg, kind = graph_args["cfg"], graph_args["kind"]
    install_interpreter_shims()
    if kind == "inference":
        gm = channels_last_convolutions(gm, cfg.conv_layout, name, cache_dir=cfg.cache_dir)
        record.layout = gm.meta.get(LAYOUT_SUMMARY, "")

    disk_key = graph_cache.graph_key(gm, example_inputs, cfg)
    memory_key = lookup.memory_key(disk_key, gm, cfg)
    # explain and debug folders need the IR of every graph: one first served from disk is compiled for real
    needs_ir = debug_trace.capturing() or wants_debug_files(cfg)
    shape_env = symbolic.current().shape_env
    compiled = lookup.from_memory(memory_key, name, record, graph_args, needs_ir=needs_ir, shape_env=shape_env)
    if compiled is not None:
        if needs_ir:
            _keep_trace(lookup.with_name(compiled.trace, name, record), cfg)
        compiled.graph_key = disk_key
        return compiled
    if cfg.graph_cache and not needs_ir:   # the disk cache keeps no IR and no schedule
        compiled = lookup.rebuild(disk_key, name, record, graph_args, graph_cache.graph_constants(gm),
                                  shape_env=shape_env)
        if compiled is not None:
            record.compile_seconds = time.perf_counter() - start
            lookup.keep_rebuilt(memory_key, compiled)
            log.info("%s", record.summary())
            return compiled
    record.cache = "miss" if cfg.graph_cache else "off"

    guards = symbolic.guard_count()
    try:
        compiled = run_stages(gm, example_inputs, name, record, graph_args)
    except MiniInductorError as e:
        if not cfg.fallback_on_error:
            raise
        # (its text without the advice to set fallback_on_error, which is set)
        debug_trace.warn_at_user_code(f"mini_inductor: {e.where}\nGraph {name} runs eagerly (fallback_on_error=True).",
                                      debug_trace.ran_eagerly(name, e.where, gm).source)
        record.ran_eagerly = e.where
        return EagerGraph(name, gm, e.where)
    record.compile_seconds = time.perf_counter() - start
    compiled.graph_key = disk_key
    # guards the compile added past the keys' facts are kept with the entry, and a hit adds them again
    # for Dynamo to check (shape_guards.py); one that cannot be kept keeps the graph out of the caches
    trees, why = shape_guards.pack(shape_env, guards)
    if why is not None:
        log.info("%s: %s; not cached", name, why)
        record.cache = "not kept (the compile added guards)"
    else:
        lookup.keep(memory_key, compiled, record, compiled.trace, cfg, trees)
    log.info("%s", record.summary())
    return compiled


def compile_dynamic(gm, example_inputs, name: str, record: metrics.GraphRecord, graph_args: dict, start: float,
                    *, per_size: bool = True, sizes_from: str = DATA_DEPENDENT_OUTPUTS):
    """A graph with symbolic sizes: one compile for every size the ShapeEnv's guards admit. If that
    fails, the graph is compiled per size, or (`per_size` False: sizes read from data, which no
    static compile can fix; `sizes_from` says where: its outputs, or its inputs, a backward's saved
    for it) runs eagerly; either way with a warning that says why."""
    cfg, key, why = graph_args["cfg"], None, None
    try:   # the caches key a dynamic graph on its symbolic form: any size it serves is correct
        with symbolic.graph_shapes(gm):   # (which raises where the graph cannot have symbols at all)
            if per_size and cfg.graph_cache:   # failed before, in this process or another: per size at once
                key = graph_cache.graph_key(gm, example_inputs, cfg)
                why = graph_cache.load_per_size(cfg.cache_dir, key, name)
            if why is None:
                compiled = _compile(gm, example_inputs, name, record, graph_args, start)
        if why is not None:
            record.cache = "disk (per size)"
            log.info("%s: the symbolic compile failed before (cache entry %s…); compiled per size", name, key[:12])
        elif not isinstance(compiled, EagerGraph):   # (fallback_on_error's answer to a failed compile)
            return compiled
        else:
            raise MiniInductorError(compiled.reason)
    except Exception as e:  # noqa: BLE001  (every failure of the symbolic compile has the same remedy)
        record.ran_eagerly = None
        # (a MiniInductorError's own text without its fallback_on_error advice: the graph falls back anyway)
        why = (e.where if isinstance(e, MiniInductorError) else f"{type(e).__name__}: {e}").split("\n")[0]
        log.debug("%s: the symbolic compile failed", name, exc_info=True)
        if key is not None and not isinstance(e, (MemoryError, OSError, torch.OutOfMemoryError)):
            graph_cache.store_per_size(cfg.cache_dir, key, why, name)   # the compiler's answer to this key
    if not per_size:
        reason = f"{sizes_from}: the symbolic compile failed ({why})"
        debug_trace.ran_eagerly(name, reason, gm, warn_key=reason)
        record.ran_eagerly = reason
        return EagerGraph(name, gm, reason)
    record.dynamic_fallback = why
    debug_trace.compiled_per_size(name, why, gm)   # warned, and listed by explain
    log.info("%s: symbolic compile failed (%s); compiled per size", name, why)
    return _per_size(gm, name, graph_args)


def _per_size(gm, name: str, graph_args: dict) -> SizeSpecializedGraph:
    """A graph with symbolic sizes compiled statically for each size it is called with."""
    cfg = graph_args["cfg"]
    specialize = functools.partial(_compile_specialization, kind=graph_args["kind"], cfg=cfg,
                                   static=graph_args["static_input_idxs"], grads=graph_args["param_grad_idxs"])
    return SizeSpecializedGraph(name, gm, graph_args["kind"], None, cfg, specialize)


def run_stages(gm: torch.fx.GraphModule, example_inputs, name: str, record: metrics.GraphRecord,
               graph_args: dict) -> CompiledGraph:
    """lower → schedule → generate → load: the compile itself, with no cache in front of it."""
    cfg = graph_args["cfg"]
    with stage(name, record, "lowering", f"{record.num_fx_nodes} ATen nodes"):
        lowered = lower_graph(gm, example_inputs, name, cfg)
    with stage(name, record, "scheduling", f"{len(lowered.buffers)} IR buffers", SchedulingError):
        sched = schedule(lowered, cfg)
    with stage(name, record, "codegen", f"{len(sched.nodes)} groups", CodegenError):
        gen = generate(sched, cfg)
    with stage(name, record, "loading", f"{len(gen.kernel_names)} Triton kernels", CodegenError):
        module, path = load_module(gen.source, cfg.cache_dir)
    prepare_kernels(module, name, cfg, record)   # GPU: every kernel compiled now, concurrently

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
    trace = debug_trace.GraphTrace(name, gm, lowered, sched, gen, record,
                                   symbolic.current() if symbolic.current().dynamic else None)
    debug_structured.graph_artifacts(trace)
    debug_structured.output_code(name, gen.source, path)
    _keep_trace(trace, cfg)
    compiled = CompiledGraph(name, module, path, lowered.constants, **graph_args)
    compiled.trace = trace  # what the fusion log and `explain` show again on a cache hit
    record.graphed_workspace_bytes = compiled.graphed_workspace_bytes
    return compiled


@contextlib.contextmanager
def stage(name: str, record: metrics.GraphRecord, what: str, detail: str, error: type | None = None):
    """A timing span: its seconds into `record.stage_seconds[what]` when it succeeds, progress lines on
    the `schedule` log. An exception that is not a MiniInductorError becomes `error` (naming the graph)."""
    schedule_log.info("%s: %s (%s)…", name, what, detail)
    began = time.perf_counter()
    try:
        yield
    except MiniInductorError:
        raise
    except Exception as e:
        if error is None:
            raise
        raise error(f"{type(e).__name__}: {e}", graph=name) from e
    took = time.perf_counter() - began
    record.stage_seconds[what] = took
    schedule_log.info("%s: %s done in %.2f s", name, what, took)


def _keep_trace(trace: debug_trace.GraphTrace, cfg: Config) -> None:
    """A compiled graph's trace to whoever wants it: explain's capture, the debug folder."""
    if debug_trace.capturing():
        debug_trace.record(trace)
    root = debug_root(cfg)
    if root is not None:
        dump_graph(root, trace)


def why_eager(gm, example_inputs) -> str | None:
    """Why this graph cannot get generated code here, or None."""
    from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
    tensors = [x for x in example_inputs if isinstance(x, torch.Tensor)]
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            val = node.meta.get("val")
            if free_unbacked_symbols(val):   # a size read from data (nonzero, .item()): new at every call
                return f"{DATA_DEPENDENT_INPUTS} (input %{node.name})"
            if isinstance(val, torch.SymInt) or (isinstance(val, torch.Tensor) and
                                                  any(not isinstance(s, int) for s in val.shape)):
                return DYNAMIC_SHAPES
            if isinstance(val, (torch.SymBool, torch.SymFloat)) and val.node.expr.free_symbols:
                return DYNAMIC_SHAPES   # a backward's saved k > 6 alone: known only at run time
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


def _compile_specialization(gm, example_inputs, sizes_key, *, kind: str, cfg: Config, static: tuple[int, ...],
                            grads: tuple[int, ...]):
    """A graph with dynamic dims retraced for one listed capture size (SizeSpecializedGraph)."""
    compiled = compile_graph(gm, example_inputs, kind=kind, cfg=cfg, static_input_idxs=static, sizes_key=sizes_key,
                             param_grad_idxs=grads)
    if isinstance(compiled, EagerGraph):
        log.warning("mini_inductor: the specialization of a %s graph for sizes %s runs eagerly: %s",
                    kind, sizes_key, compiled.reason)
    return compiled


def _copy_saved_mutated_inputs(gm) -> None:
    """A forward graph that saves for the backward an input whose data it mutates saves a copy instead.

    AOT autograd copies a mutated input's new value into it after the forward, which bumps the input's
    version; the min-cut partitioner may still save the input itself (to recompute, say, a zeros_like
    of it in the backward), and the backward then failed its version check (fuzz seed 107: x.zero_()
    then x.mul_(w)). The copy has the input's strides, which the backward reads it with: a clone of a
    dense input, else (gaps between its elements, fuzz seed 252: x[::2].fill_(0.5).mul_(w)) a copy
    into an empty tensor of those strides (a dynamic graph's read from the input).
    """
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    ctx = torch._guards.TracingContext.try_get()
    fw = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if fw is None or getattr(fw, "tokens", None) or len(placeholders) != len(fw.input_info):
        return   # inputs that are not the user's one to one (tokens, synthetic bases): left alone
    mutated = {p for p, info in zip(placeholders, fw.input_info) if info.mutates_data}
    output = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    outs, copies = list(output.args[0]), {}
    first = next(n for n in gm.graph.nodes if n.op != "placeholder")   # new nodes go before it, in order
    for j in range(fw.num_forward_returns, len(outs)):
        p = outs[j]
        val = p.meta.get("val") if p in mutated else None
        if p not in copies and isinstance(val, torch.Tensor):
            copied = torch.ops.aten.clone.default(val)
            with gm.graph.inserting_before(first):
                if all(statically_known_true(a == b) for a, b in zip(copied.stride(), val.stride())):
                    copies[p] = gm.graph.call_function(torch.ops.aten.clone.default, (p,))
                else:   # a strided input (gaps between its elements): a copy with its very strides
                    copied = val.new_empty_strided(val.size(), val.stride())
                    # a dynamic graph's sizes and strides read from the input (fuzz seed 263 prog 266)
                    sizes = [_input_dim(gm, p, torch.ops.aten.sym_size.int, d, n) for d, n in enumerate(val.size())]
                    strides = [_input_dim(gm, p, torch.ops.aten.sym_stride.int, d, st)
                               for d, st in enumerate(val.stride())]
                    fresh = gm.graph.call_function(torch.ops.aten.empty_strided.default, (
                        sizes, strides), {"dtype": val.dtype, "device": val.device})
                    fresh.meta["val"] = copied
                    copies[p] = gm.graph.call_function(torch.ops.aten.copy.default, (fresh, p))
            copies[p].meta["val"] = copied
        if p in copies:
            outs[j] = copies[p]
    if copies:
        output.update_arg(0, type(output.args[0])(outs))
        gm.recompile()


def _input_dim(gm, p, op, d: int, value):
    """`value` (size or stride `d` of input `p`) as an int, or as an FX node that reads it from `p`."""
    if not isinstance(value, torch.SymInt):
        return value
    node = gm.graph.call_function(op, (p, d))
    node.meta["val"] = value
    return node


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


def _param_grad_idxs(gm, kind: str) -> tuple[int, ...]:
    """The backward's outputs that are gradients of parameters (of the forward's static inputs): AOT
    autograd's backward returns one gradient (or None) per forward input, in order. Empty for other
    graphs, and where the counts disagree."""
    if kind != "backward":
        return ()
    ctx = torch._guards.TracingContext.try_get()
    fw = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    output = next((n for n in gm.graph.nodes if n.op == "output"), None)
    if fw is None or output is None or len(output.args[0]) != len(fw.input_info):
        return ()
    return tuple(sorted(getattr(fw, "static_input_indices", None) or ()))


def _input_aliases(kind: str) -> dict[int, int]:
    """Output position → input index, for the outputs of a forward or inference graph that AOT autograd
    regenerates as views of an input (lowering/graph.py `_input_alias`)."""
    ctx = torch._guards.TracingContext.try_get()
    fw = getattr(ctx, "fw_metadata", None) if ctx is not None and kind != "backward" else None
    if fw is None:
        return {}
    first = fw.num_mutated_inp_runtime_indices   # the new values of mutated inputs come first
    return {first + j: info.base_idx for j, info in enumerate(fw.output_info)
            if info.output_type.name == "alias_of_input" and isinstance(info.base_idx, int)}


def _generator_idxs(gm) -> tuple[int, ...]:
    """Positions of the generator arguments (one per checkpointed random op, see random_lowerings.py)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return tuple(i for i, n in enumerate(placeholders) if isinstance(n.meta.get("val"), torch.Generator))

"""The torch.compile entry: modes, options, AOT autograd wiring, reset.

    torch.compile(m, backend="mini_inductor", mode=..., options={...})
      → the front cache (caching/front_cache.py): a graph compiled before, without AOT autograd
      → AOT autograd (decompositions: lowering/decompositions.py; the min-cut partitioner)
      → pipeline.compile_graph for each inference, forward and backward graph it produces
"""
from __future__ import annotations

import contextlib
import functools
import time

import torch
from torch._dynamo import disable
from torch._dynamo.utils import counters, flatten_graph_inputs
from torch._functorch.aot_autograd import aot_module_simplified

from . import metrics
from .caching import PROCESS, dynamo_cache, front_cache
from .config import for_compile, interpreting
from .debug import trace as debug_trace
from .debug.logs import follow_torch_logs
from .lowering.decompositions import decomposition_table, undo_split_fma
from .lowering.early_decompositions import early_decompositions_checked
from .partition import min_cut_partition
from .pipeline import compile_graph
from .runtime.cudagraphs.trees import reset as reset_cudagraph_trees
from .runtime.forward_ad import ForwardADAware
from .runtime.launch import compile_pool


def mini_inductor(gm: torch.fx.GraphModule, example_inputs, mode: str | None = None, options: dict | None = None):
    """The backend: `torch.compile(model, backend="mini_inductor", mode=None, options=None)`."""
    cfg = for_compile(mode, options)
    _reset_by_dynamo()
    follow_torch_logs()
    before = None
    if isinstance(gm, torch.fx.GraphModule):
        undo_split_fma(gm)   # AdamW's addcmul_ rounded as eager rounds it
    traced = _AsTraced(gm)   # Dynamo's graph as traced, for what must run it eagerly (ForwardADAware)
    if cfg.attention_fusion != "off":    # before the front cache: its key is the rewritten graph's
        before = _fuse_attention(gm, example_inputs, traced, cfg.attention_data_masks)
    first = len(metrics.compiled_graphs)
    front = front_cache.Front(gm, example_inputs, cfg)   # the level before AOT autograd
    hit = front.load()
    if hit is not None:
        return ForwardADAware(_guarded(gm, dynamo_cache.keep(gm, hit, cfg, front.static_inference_key(), mode, options,
                                                             traced), before, first),
                               traced, metrics.compiled_graphs[first:])
    _start_compile_workers(example_inputs, cfg)
    compilers = {kind: front.watch(kind, functools.partial(compile_graph, kind=kind, cfg=cfg))
                 for kind in ("forward", "backward", "inference")}
    began, first = time.perf_counter(), len(metrics.compiled_graphs)
    compiled = _through_aot_autograd(gm, example_inputs, compilers)
    _note_aot_seconds(time.perf_counter() - began, metrics.compiled_graphs[first:])
    stored = front.store()
    return ForwardADAware(_guarded(gm, dynamo_cache.keep(gm, compiled, cfg, front.static_inference_key() if stored
                                                          else None, mode, options, traced), before, first),
                           traced, metrics.compiled_graphs[first:])


def _start_compile_workers(example_inputs, cfg) -> None:
    """Start the Triton compile workers (runtime/launch/compile_pool.py) at a graph's first compile on
    a CUDA device, so that they are ready when its kernels are (AOT autograd and lowering come first)."""
    if not cfg.compile_workers or cfg.compile_threads <= 0 or interpreting():
        return
    if any(isinstance(t, torch.Tensor) and t.is_cuda for t in example_inputs):
        compile_pool.warm(min(cfg.compile_threads, compile_pool.MAX_WORKERS))


class _AsTraced:
    """Dynamo's graph as it was traced, before any rewrite of ours (the rejoined addcmul_ computes as
    eager does): `gm` itself, unless `snapshot()` copied its nodes before attention fusion rewrote it in
    place (a copy costs about 7 µs a node, so only graphs with a matmul take one); a module is made of
    the copy only when something runs it."""

    def __init__(self, gm):
        self.root, self.graph, self.module = gm, None, gm

    def snapshot(self) -> torch.fx.Graph:
        if self.graph is None:
            self.graph = torch.fx.Graph()
            self.graph.output(self.graph.graph_copy(self.root.graph, {}))
            self.module = None
        return self.graph

    def as_module(self) -> torch.fx.GraphModule:
        if self.module is None:
            self.module = torch.fx.GraphModule(self.root, self.graph)
        return self.module

    def __call__(self, *args):
        return self.as_module()(*args)


def _fuse_attention(gm, example_inputs, traced: _AsTraced, data_masks: bool = True):
    """Attention written out in Dynamo's graph (attention/match.py) and flex attention's calls
    (attention/flex.py) → one call each; what was found goes to metrics.attention and to explain's
    traces. Where an input's data was read as a causal mask, Dynamo's graph as it was before (for
    `_guarded`), else None."""
    if not isinstance(gm, torch.fx.GraphModule):
        return None
    from .attention.flex import fuse_flex_attention, has_flex_attention
    from .attention.match import ANCHOR_OPS, DATA_GUARDS, fuse_attention, tril_inputs
    from .attention.modification import op_of

    before = None
    flex = has_flex_attention(gm)
    if flex or any(op_of(node) in ANCHOR_OPS for node in gm.graph.nodes):   # where attention may be rewritten
        traced.snapshot()
    tril = tril_inputs(gm, example_inputs) if data_masks else {}
    if tril:
        traced.snapshot()
        before = traced.as_module()   # (one module of the copy: the data guard and forward AD share it)
    name = metrics.dynamo_graph_name()
    found = (fuse_flex_attention(gm, name) if flex else []) + fuse_attention(gm, example_inputs, name, tril)
    metrics.attention.extend(found)
    debug_trace.attention_found(found)
    if before is not None and gm.meta.get(DATA_GUARDS):
        before.meta["mini_inductor_graph"] = name
        return before
    return None


def _guarded(gm, compiled, before, first: int):
    """`compiled` behind attention's data guard where the rewrite read an input's data (match.DataGuard)."""
    from .attention.match import DATA_GUARDS, DataGuard

    guards = gm.meta.pop(DATA_GUARDS, None)
    if not guards or before is None:
        return compiled
    return DataGuard(compiled, guards, disable(before), before.meta["mini_inductor_graph"],
                     metrics.compiled_graphs[first:])


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
    every first call on the H100 machine (cold or warm) for a backend that uses none of it. The
    partitioner's own CSE would import Inductor's pattern matcher too: partition.py does that CSE.
    """
    if any(isinstance(x, (list, tuple, dict)) for x in example_inputs):
        return flatten_graph_inputs(gm, example_inputs,
                                    functools.partial(_through_aot_autograd, compilers=compilers))
    counters["aot_autograd"]["total"] += 1
    forward, backward = compilers["forward"], compilers["backward"]

    def forward_compiler(*args, **kwargs):
        _no_donated_buffers()
        return forward(*args, **kwargs)

    def backward_compiler(*args, **kwargs):
        # Dynamo must neither trace the backward compile nor the backward it returns (both run inside
        # autograd's backward, where Dynamo's frame hook is still installed)
        compiled = disable(backward, reason="mini_inductor compiles the backward graph")(*args, **kwargs)
        return disable(compiled, reason="mini_inductor's generated backward")

    try:
        with early_decompositions_checked(), _rng_saved_in_the_graph():   # refused dtypes reach the table whole
            compiled = aot_module_simplified(
                gm, example_inputs,
                fw_compiler=forward_compiler,
                bw_compiler=backward_compiler,
                inference_compiler=compilers["inference"],
                decompositions=decomposition_table(),
                partition_fn=min_cut_partition,
            )
    except Exception:
        counters["aot_autograd"]["not_ok"] += 1
        raise
    counters["aot_autograd"]["ok"] += 1
    return disable(compiled, reason="mini_inductor's generated graph")


def _no_donated_buffers() -> None:
    """AOT autograd lists the saved tensors a backward may write into (donated buffers: Inductor reuses
    their memory) and then refuses `backward(retain_graph=True)` on any later step. mini_inductor's
    backward never writes into its inputs (codegen/wrapper.py reuses only buffers it allocated), so the
    list is emptied, in place: the forward's context and AOT autograd's outer metadata share it."""
    ctx = torch._guards.TracingContext.try_get()
    donated = getattr(getattr(ctx, "fw_metadata", None), "bw_donated_idxs", None)
    if donated:
        donated.clear()


def _rng_saved_in_the_graph():
    """Checkpointed random ops on CUDA as on the CPU: the forward saves its device generator's state
    for the backward's recompute (run_and_save_rng_state), rather than aot_autograd's generators per
    graph, which are seeded once and then ignore `torch.manual_seed` (aot_eager's behaviour; eager and
    Inductor repeat a region's numbers after it: H200, session 40). See lowering/random_lowerings.py."""
    if hasattr(torch._functorch.config, "graphsafe_rng_functionalization"):
        return torch._functorch.config.patch(graphsafe_rng_functionalization=False)
    return contextlib.nullcontext()


def reset() -> None:
    """Forget compiled graphs and tear down the CUDA-graph trees (torch._dynamo.reset() calls this
    through the backend's `reset`)."""
    PROCESS.clear()
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

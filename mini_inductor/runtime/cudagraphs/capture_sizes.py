"""A graph with symbolic sizes compiled statically per size: option `dynamic_shapes='per_size'` (every
size; also where the symbolic compile failed), and `cudagraph_capture_sizes` (CUDA graphs only for the listed sizes of a graph's dynamic dims).

A graph that Dynamo traced with symbolic sizes (`mark_dynamic`, `dynamic=True`, or the recompile after
a shape change) is specialized at run time, one static compile per size, each running inside the
CUDA-graph tree like any other compiled graph. With `cudagraph_capture_sizes` set, only listed sizes are:

    call with dynamic sizes k ──► k listed?  yes: static compile for k (kept), graphed
                                             no:  the ATen graph runs eagerly; "skipping
                                                  cudagraphs due to ..." logged and counted once per k

The sizes key of a call is the values of the graph's dynamic dims in the order the graph takes
them: an int for one dynamic dim, a tuple for several (as Inductor's `triton.cudagraph_capture_sizes`
compares the graph's int inputs). A graph with no dynamic dims has no key and, as in Inductor, is
not captured while the option is set (see CompiledGraph).
"""
from __future__ import annotations

import logging
from typing import Any, Callable

import torch
import torch.fx.traceback as fx_traceback
from torch.fx.experimental.proxy_tensor import make_fx

from .utils import log_skip

log = logging.getLogger("mini_inductor.cudagraphs")
perf_log = logging.getLogger("mini_inductor.perf_hints")


def dynamic_dims(gm: torch.fx.GraphModule) -> list[tuple[int, int | None]]:
    """Where each distinct size symbol of the graph's inputs is read at run time, in input order:
    (input index, None) for an int input, (input index, dim) for a tensor dim."""
    seen: set = set()
    where: list[tuple[int, int | None]] = []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, node in enumerate(placeholders):
        val = node.meta.get("val")
        sizes = [(None, val)] if isinstance(val, torch.SymInt) else \
            list(enumerate(val.shape)) if isinstance(val, torch.Tensor) else []
        for dim, s in sizes:
            if not isinstance(s, torch.SymInt):
                continue
            expr = s.node.expr
            if getattr(expr, "is_Symbol", False) and expr not in seen:
                seen.add(expr)
                where.append((i, dim))
    return where


def _describe_dim(gm: torch.fx.GraphModule, args: list, index: int, dim: int | None) -> str:
    """'dim 0 of a 4x3 input': where a size symbol is, with this call's tensor; for an int input (Dynamo
    passes a tensor's symbolic size as one too), the first tensor dim of that size."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if dim is None:
        symbol = placeholders[index].meta.get("val")
        found = [(i, d) for i, node in enumerate(placeholders)
                 for d, size in enumerate(getattr(node.meta.get("val"), "shape", ()))
                 if isinstance(size, torch.SymInt) and isinstance(symbol, torch.SymInt)
                 and size.node.expr == symbol.node.expr]
        if not found:
            return f"an int input ({args[index]})"
        index, dim = found[0]
    return f"dim {dim} of a {'x'.join(map(str, args[index].shape))} input"


def sizes_key(where: list[tuple[int, int | None]], args: list) -> int | tuple[int, ...] | None:
    values = tuple(int(args[i]) if dim is None else int(args[i].shape[dim]) for i, dim in where)
    if not values:
        return None
    return values[0] if len(values) == 1 else values


# gm.meta entries the compile of a specialization reads too (lowering/graph.py INPUT_ALIASES)
CARRIED_META = ("mini_inductor_input_aliases", "mini_inductor_first_saved_output")


def specialize(gm: torch.fx.GraphModule, args: list) -> tuple[torch.fx.GraphModule, list]:
    """The graph retraced for the concrete sizes of `args` (fake tensors: nothing runs), and its
    example inputs. Source lines of the original nodes are kept."""
    with fx_traceback.preserve_node_meta():
        static = make_fx(torch.fx.Interpreter(gm).run, tracing_mode="fake", _allow_non_fake_inputs=True)(*args)
    static.meta.update({k: gm.meta[k] for k in CARRIED_META if k in gm.meta})
    placeholders = [n for n in static.graph.nodes if n.op == "placeholder"]
    examples = [n.meta.get("val") if isinstance(a, torch.Tensor) else a for n, a in zip(placeholders, args)]
    return static, examples


class SizeSpecializedGraph:
    """A graph with dynamic dims under `cudagraph_capture_sizes`: listed sizes run a static compile
    (graphed), others the ATen graph eagerly.

    Key attributes: `name`, `kind`, `capture_sizes`, `specialized` (sizes key → compiled graph, or
    None where the static compile failed), `skipped_sizes` (unlisted keys seen).
    """

    _boxed_call = True

    def __init__(self, name: str, gm: torch.fx.GraphModule, kind: str, capture_sizes: tuple | None, cfg,
                 compile_static: Callable[[torch.fx.GraphModule, list, Any], Any]):
        self.name, self.gm, self.kind, self.cfg = name, gm, kind, cfg
        self._boxed_call = True   # also on the instance: aot_autograd's functools.wraps copies only __dict__
        self.capture_sizes = capture_sizes
        self.where = dynamic_dims(gm)
        self.compile_static = compile_static
        self.specialized: dict[Any, Any] = {}
        self.skipped_sizes: set = set()

    def __call__(self, *args):
        args = args[0] if len(args) == 1 and isinstance(args[0], list) else list(args)
        key = sizes_key(self.where, args)
        if self.capture_sizes is None or key in self.capture_sizes:
            if key not in self.specialized:
                self.specialized[key] = self._compile(key, args)
                self._warn_if_many()
            graph = self.specialized[key]
            if graph is not None:
                return graph(args)
        elif key not in self.skipped_sizes:
            self.skipped_sizes.add(key)
            log_skip(f"dynamic sizes {key} not in cudagraph_capture_sizes {list(self.capture_sizes)} "
                     f"(the graph runs eagerly at these sizes){self._shape_hint(key, args)}",
                     f"graph {self.name} ({self.kind})", self.cfg)
        out = self.gm(*args)
        args.clear()
        return out

    def _shape_hint(self, key, args: list) -> str:
        """Where no listed size has the key's shape (ints for a graph of several dynamic dims, as
        `dynamic=True` makes every dim dynamic): what a listed size of this graph looks like."""
        arity = len(key) if isinstance(key, tuple) else 1
        if any((len(c) if isinstance(c, tuple) else 1) == arity for c in self.capture_sizes):
            return ""
        dims = ", ".join(_describe_dim(self.gm, args, i, dim) for i, dim in self.where)
        return (f"; this graph has {arity} dynamic {'dim' if arity == 1 else 'dims'} ({dims}), so each listed "
                f"size must be {'an int' if arity == 1 else f'a tuple of {arity}'}")

    def _warn_if_many(self) -> None:
        """Once, when sizes past `cudagraph_dynamic_shape_warn_limit` have each been compiled
        (dynamic_shapes='per_size'): every new size costs a compile and a recording."""
        limit = self.cfg.cudagraph_dynamic_shape_warn_limit
        if self.capture_sizes is None and limit and len(self.specialized) == limit + 1:
            perf_log.warning(
                "mini_inductor: graph %s (%s) has been compiled for %d sizes of its dynamic dims "
                "(dynamic_shapes='per_size' compiles each new size, and records its CUDA graphs). "
                "options={'dynamic_shapes': 'symbolic'} compiles it once for every size; "
                "options={'cudagraph_capture_sizes': [...]} compiles only the listed sizes. Set "
                "options={'cudagraph_dynamic_shape_warn_limit': 0} to silence this warning.",
                self.name, self.kind, len(self.specialized))

    def _compile(self, key, args: list):
        """The static compile for `key`, or None (the graph then runs eagerly at this size) when
        retracing or compiling fails: a logged and counted skip, not an error in the user's step."""
        log.info("%s: compiling a static specialization for dynamic sizes %s (%s)", self.name, key,
                 "cudagraph_capture_sizes" if self.capture_sizes is not None else "dynamic_shapes='per_size'")
        try:
            static, examples = specialize(self.gm, args)
            return self.compile_static(static, examples, key)
        except Exception as e:  # noqa: BLE001
            log.warning("%s: the static specialization for sizes %s failed", self.name, key, exc_info=True)
            log_skip(f"a failed static compile for dynamic sizes {key} ({type(e).__name__}: {e}); the graph "
                     "runs eagerly at these sizes", f"graph {self.name} ({self.kind})", self.cfg)
            return None

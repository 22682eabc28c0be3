"""Symbolic sizes: the sizes of a dynamic graph as sympy expressions of its ShapeEnv's symbols.

Dynamo traces a graph with symbolic sizes once a dimension is marked dynamic (`mark_dynamic`,
`dynamic=True`, or the recompile after a second size). Its FakeTensors carry SymInts whose
expressions are over symbols such as s0, s1 of one ShapeEnv; the graph's placeholders say where
each symbol is read at run time (a dim of an input tensor, or an int input).

    with graph_shapes(gm):               set while one graph is lowered, scheduled and generated
        to_expr(sym_int)                 torch's sympy → ours (FloorDiv, ModularIndexing, Mod, Min/Max)
        size_value(expr)                 an int for a static size, else the expression
        hint(expr)                       its value at the traced sizes: for heuristics only, whose
                                         result is correct at any size

Nothing here adds a guard: every decision the compiler makes from a symbolic size is one that is
right at any size (looped reductions, 64-bit indices), so the graph's guards are Dynamo's own.
A static graph has no ShapeEnv here: every size is an Integer and `hint` is `int`.
"""
from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field
from typing import Any, Iterator

import sympy
import torch
import torch.utils._sympy.functions as torch_fns

from .sizevars import Expr, FloorDiv, ModularIndexing


class SymbolicUnsupported(NotImplementedError):
    """A step of the compiler that needs a concrete size met a symbolic one: `what` and the size `expr`."""

    def __init__(self, what: str, expr: Any):
        self.what, self.expr = what, expr
        super().__init__(f"{what}: symbolic size {expr}")


@dataclass
class GraphShapes:
    """The ShapeEnv of the graph being compiled and where its symbols come from.

    `sources`: symbol → (placeholder index, kind, dim) of the first place it can be read at run time,
    kind one of "size", "stride" (of dim), "offset" (storage offset), "int" (an int input); in the
    order the graph takes them. `shape_env` is None for a static graph."""
    shape_env: Any = None
    sources: dict[sympy.Symbol, tuple[int, str, int | None]] = field(default_factory=dict)
    hints: dict[sympy.Symbol, sympy.Integer] = field(default_factory=dict)   # symbol → its traced value

    @property
    def dynamic(self) -> bool:
        return bool(self.sources)


_current: contextvars.ContextVar[GraphShapes] = contextvars.ContextVar("mini_inductor_graph_shapes",
                                                                       default=GraphShapes())


def current() -> GraphShapes:
    return _current.get()


def graph_symbols(gm: torch.fx.GraphModule) -> GraphShapes:
    """The symbols of `gm`'s inputs (sizes, strides, offsets and int inputs), each with the first place
    it is read from, and the ShapeEnv they belong to."""
    shapes = GraphShapes()
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, node in enumerate(placeholders):
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt):
            _note(shapes, val, (i, "int", None))
        elif isinstance(val, torch.Tensor):
            for dim, s in enumerate(val.shape):
                _note(shapes, s, (i, "size", dim))
    for i, node in enumerate(placeholders):   # symbols that only strides or offsets hold, after every size
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            for dim, s in enumerate(val.stride()):
                _note(shapes, s, (i, "stride", dim))
            _note(shapes, val.storage_offset(), (i, "offset", None))
    if shapes.shape_env is not None:
        env = shapes.shape_env
        values = getattr(env, "backed_var_to_val", None) or env.var_to_val   # torch 2.13 renamed it
        shapes.hints = {symbol(s.name): sympy.Integer(int(v)) for s, v in values.items()
                        if getattr(v, "is_Integer", True)}
    return shapes


def _note(shapes: GraphShapes, value, where: tuple[int, str, int | None]) -> None:
    if not isinstance(value, torch.SymInt):
        return
    node = value.node
    shapes.shape_env = node.shape_env
    if isinstance(node.expr, sympy.Symbol):
        shapes.sources.setdefault(to_expr(node.expr), where)


@contextlib.contextmanager
def graph_shapes(gm: torch.fx.GraphModule) -> Iterator[GraphShapes]:
    shapes = graph_symbols(gm)
    token = _current.set(shapes)
    try:
        yield shapes
    finally:
        _current.reset(token)


def symbol(name: str) -> sympy.Symbol:
    """Our symbol for a ShapeEnv symbol: sizes are positive integers."""
    return sympy.Symbol(name, integer=True, positive=True)


def to_expr(x) -> Expr:
    """An int, a SymInt or a sympy expression of torch's → a sympy expression of ours."""
    if isinstance(x, bool):
        return sympy.Integer(int(x))
    if isinstance(x, int):
        return sympy.Integer(x)
    if isinstance(x, (torch.SymInt, torch.SymFloat)):
        x = x.node.expr
    if not isinstance(x, sympy.Basic):
        return sympy.sympify(x)
    return _convert(x)


def _convert(e: sympy.Basic) -> Expr:
    if e.is_Integer:
        return e
    if isinstance(e, sympy.Symbol):
        return symbol(e.name)
    args = [_convert(a) for a in e.args]
    if isinstance(e, (FloorDiv, ModularIndexing)):   # ours already
        return e.func(*args)
    if isinstance(e, torch_fns.FloorDiv):
        return FloorDiv(*args)
    if isinstance(e, torch_fns.ModularIndexing):
        return ModularIndexing(*args)
    if isinstance(e, (torch_fns.Mod, torch_fns.PythonMod)) or isinstance(e, sympy.Mod):
        return ModularIndexing(args[0], sympy.Integer(1), args[1])
    if isinstance(e, (torch_fns.IntTrueDiv, torch_fns.FloatTrueDiv)):   # a float made of sizes
        return args[0] / args[1]
    if isinstance(e, torch_fns.ToFloat):
        return args[0]
    if e.is_Float:
        return e
    if isinstance(e, torch_fns.CeilDiv):
        return FloorDiv(args[0] + args[1] - 1, args[1])
    if isinstance(e, (sympy.Add, sympy.Mul, torch_fns.Max, torch_fns.Min, sympy.Max, sympy.Min)):
        kind = {torch_fns.Max: sympy.Max, torch_fns.Min: sympy.Min}.get(type(e), e.func)
        return kind(*args)
    if isinstance(e, (sympy.Pow, torch_fns.PowByNatural)) and args[1].is_Integer and int(args[1]) >= 0:
        return sympy.Pow(args[0], args[1])
    raise SymbolicUnsupported(f"a size expression with {type(e).__name__}", e)


def size_value(expr):
    """An int for a static size, the sympy expression for a symbolic one (what kernels are grouped by)."""
    expr = sympy.sympify(expr)
    return int(expr) if not expr.free_symbols else expr


def hint(expr) -> int:
    """The value of a size at the traced sizes (exact for a static size)."""
    if isinstance(expr, int):
        return expr
    expr = sympy.sympify(expr)
    if not expr.free_symbols:
        return int(expr)
    value = expr.xreplace(current().hints)   # FloorDiv and ModularIndexing evaluate themselves on integers
    if value.free_symbols:
        raise SymbolicUnsupported("no hint for a size", expr)
    return int(value)

"""Symbolic sizes: the sizes of a dynamic graph as sympy expressions of its ShapeEnv's symbols.

Dynamo traces a graph with symbolic sizes once a dimension is marked dynamic (`mark_dynamic`,
`dynamic=True`, or the recompile after a second size). Its FakeTensors carry SymInts whose
expressions are over symbols such as s0, s1 of one ShapeEnv; the graph's placeholders say where
each symbol is read at run time (a dim of an input tensor, or an int input).

    with graph_shapes(gm):               set while one graph is lowered, scheduled and generated
        to_expr(sym_int)                 torch's sympy → ours (FloorDiv, ModularIndexing, their signed
                                         forms SignedFloorDiv and SignedMod, Min/Max; Abs as Max, floor,
                                         ceil, trunc and round of exact quotients as floor divisions)
        size_value(expr)                 an int for a static size, else the expression
        hint(expr)                       its value at the traced sizes: for heuristics only, whose
                                         result is correct at any size

        decide(relation)                 True/False where provable at every size the graph serves (the
                                         symbols' assumptions, the ShapeEnv's ranges and Dynamo's
                                         guards), else None

Nothing here adds a guard: every decision the compiler makes from a symbolic size is one that is
right at any size (looped reductions, 64-bit indices, a slice bound clamped only where `decide`
proves it), so the graph's guards are Dynamo's own.
Unbacked symbols (u0: `.item()`, nonzero's row count) are in `unbacked`, with the node whose result
holds each; their hints are guesses (UNBACKED_HINT), for heuristics only.
A static graph has no ShapeEnv here: every size is an Integer and `hint` is `int`.
"""
from __future__ import annotations

import contextlib
import contextvars
import operator
from dataclasses import dataclass, field
import weakref
from typing import Any, Iterator

import sympy
import torch
import torch.utils._sympy.functions as torch_fns
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols, resolve_unbacked_bindings
from torch.utils._pytree import keystr

from .sizevars import Expr, FloorDiv, ModularIndexing, SignedFloorDiv, SignedMod, index_range, never_negative_sum


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
    # unbacked symbols (a value read from data: .item(), nonzero's length): symbol → (the FX node that
    # defines it, the path from that node's value to the symbol's, as `keystr` prints it: "" or ".size()[0]")
    unbacked: dict[sympy.Symbol, tuple[str, str]] = field(default_factory=dict)
    # symbol → its greatest value, where the ShapeEnv bounds it (mark_dynamic(max=...), torch._check)
    # and it is never negative: what lets a kernel of a dynamic graph index in 32 bits
    bounds: dict[sympy.Symbol, int] = field(default_factory=dict)
    # symbol name → sympy assumptions, from the ShapeEnv's ranges (`symbol`)
    signs: dict[str, dict[str, bool]] = field(default_factory=dict)
    # placeholder index → the size expression of an int input (a symbol, or s0 // 2 that a backward takes):
    # a generated module's example inputs give it its traced value
    int_inputs: dict[int, Expr] = field(default_factory=dict)
    # placeholder index → the symbol (b3: 0 or 1) standing for a bool input of relations of symbols this
    # graph cannot read (a backward's `k < 3` of the forward's int input k)
    bool_inputs: dict[int, sympy.Symbol] = field(default_factory=dict)
    # torch's expressions of the float quotients autograd's formulas compute (`autograd_quotients`): each
    # divides as IEEE doubles do, inf or NaN where its divisor is 0
    ieee_quotients: frozenset = frozenset()

    @property
    def dynamic(self) -> bool:
        return bool(self.sources or self.unbacked)

    def known(self) -> set[sympy.Symbol]:
        """Every symbol the generated code can read: from the inputs, or bound once its node has run."""
        return set(self.sources) | set(self.unbacked)


_current: contextvars.ContextVar[GraphShapes] = contextvars.ContextVar("mini_inductor_graph_shapes",
                                                                       default=GraphShapes())


def current() -> GraphShapes:
    return _current.get()


def graph_symbols(gm: torch.fx.GraphModule) -> GraphShapes:
    """The symbols of `gm`'s inputs (sizes, strides, offsets and int inputs), each with the first place
    it is read from, and the ShapeEnv they belong to."""
    shapes = GraphShapes(signs=_signs(_graph_shape_env(gm)))
    token = _current.set(shapes)   # `symbol` reads the signs
    try:
        return _graph_symbols(gm, shapes)
    finally:
        _current.reset(token)


def _graph_shape_env(gm: torch.fx.GraphModule):
    for node in gm.graph.nodes:
        env = _shape_env_of(node.meta.get("val"))
        if env is not None:
            return env
    return None


def _signs(env) -> dict[str, dict[str, bool]]:
    """Each backed symbol's sign as its ShapeEnv range gives it. An input's size is at least 2
    (Dynamo specializes 0 and 1), but an int input is a symbol too, of any sign, and a slice by it
    has a guard on its sign: `x[:, k:]` at k = -3, then -2 has k in [-6, -1]. Declared positive, k
    made `k < 0` false to sympy, and the slice took 8 elements from before x's start (review,
    session 33)."""
    signs = {}
    for sym, r in (env.var_to_range.items() if env is not None else ()):
        low, high = r.lower, r.upper
        if sym.name.startswith("u"):   # unbacked: graph_symbols refuses one that may be negative
            continue
        if isinstance(low, sympy.Integer) and low >= 1:
            continue                    # the default: positive
        if isinstance(low, sympy.Integer) and low >= 0:
            signs[sym.name] = {"nonnegative": True}
        elif isinstance(high, sympy.Integer) and high <= -1:
            signs[sym.name] = {"negative": True}
        elif isinstance(high, sympy.Integer) and high <= 0:
            signs[sym.name] = {"nonpositive": True}
        else:
            signs[sym.name] = {}
    return signs


def _graph_symbols(gm: torch.fx.GraphModule, shapes: GraphShapes) -> GraphShapes:
    shapes.ieee_quotients = autograd_quotients(gm)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, node in enumerate(placeholders):
        val = node.meta.get("val")
        if isinstance(val, torch.SymInt):
            _note(shapes, val, (i, "int", None))
            shapes.int_inputs[i] = to_expr(val)
        elif isinstance(val, torch.SymFloat) and val.node.expr.free_symbols:
            # (a backward's input: the forward's float `.item()`, zuf0)
            raise SymbolicUnsupported(f"input %{node.name} is a float known only at run time, and generated "
                                      "code has integer symbols only", val.node.expr)
        elif isinstance(val, torch.SymBool) and val.node.expr.free_symbols:
            # a backward's input: the forward's `k > 6` of an int input k, which the backward cannot read.
            # Its own symbol, 0 or 1, read from the input (`int(arg)`): a kernel took its traced value as a
            # constant and added the guard, past the cache key's facts, and a later compile at k = 7 got
            # the kernel of k = 5 (review, session 34); then it was compiled per size
            sym = sympy.Symbol(f"b{i}", integer=True, nonnegative=True)
            shapes.sources[sym] = (i, "bool", None)
            shapes.bool_inputs[i] = shapes.int_inputs[i] = sym
            shapes.shape_env = shapes.shape_env or val.node.shape_env
        elif isinstance(val, torch.Tensor):
            for dim, s in enumerate(val.shape):
                _note(shapes, s, (i, "size", dim))
    for i, node in enumerate(placeholders):   # symbols that only strides or offsets hold, after every size
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            for dim, s in enumerate(val.stride()):
                _note(shapes, s, (i, "stride", dim))
            _note(shapes, val.storage_offset(), (i, "offset", None))
    for node in gm.graph.nodes:   # symbols that data defines, where the graph reads them
        bindings = node.meta.get("unbacked_bindings") if node.op == "call_function" else None
        val = node.meta.get("val")
        if bindings:
            shapes.shape_env = shapes.shape_env or _shape_env_of(val)
            if shapes.shape_env is None:
                raise SymbolicUnsupported(f"no ShapeEnv for the unbacked sizes of node %{node.name}", bindings)
            for sym, path in resolve_unbacked_bindings(shapes.shape_env, bindings).items():
                if to_expr(sym) not in shapes.sources:   # (a backward recomputing the op that sized an input)
                    shapes.unbacked.setdefault(to_expr(sym), (node.name, keystr(path)))
        elif (node.op == "call_function" and node.target is torch.ops.aten._local_scalar_dense.default
              and isinstance(val, torch.SymInt) and isinstance(val.node.expr, sympy.Symbol)
              and free_unbacked_symbols(val) and to_expr(val) not in shapes.sources):
            # an `.item()` AOT autograd traced again keeps its value but not its binding (torch.tensor_split
            # by a tensor of indices: NameError 'u14' in the wrapper, OpInfo sweep, session 30)
            shapes.shape_env = shapes.shape_env or val.node.shape_env
            shapes.unbacked.setdefault(to_expr(val), (node.name, ""))
    if shapes.shape_env is not None:
        env = shapes.shape_env
        values = env.backed_var_to_val if hasattr(env, "backed_var_to_val") else env.var_to_val   # 2.13 renamed it
        shapes.hints = {symbol(s.name): sympy.Integer(int(v)) for s, v in values.items()
                        if getattr(v, "is_Integer", True)}
        for i, sym in shapes.bool_inputs.items():   # its traced value
            traced = placeholders[i].meta["val"].node.expr.xreplace(
                {s: sympy.Integer(int(v)) for s, v in values.items() if getattr(v, "is_Integer", True)})
            if traced not in (sympy.true, sympy.false):
                raise SymbolicUnsupported(f"input %{placeholders[i].name} is a bool with no traced value", traced)
            shapes.hints[sym] = sympy.Integer(int(bool(traced)))
            shapes.bounds[sym] = 1
        for sym in (*shapes.unbacked, *shapes.sources):   # (a backward's inputs may be sized by data: u0)
            if sym not in shapes.hints:
                shapes.hints[sym] = _unbacked_hint(env, sym)
        ranges = {s.name: r for s, r in env.var_to_range.items()}
        returned = _only_returned(gm)
        for sym in shapes.unbacked:
            # every size symbol is declared nonnegative (`symbol`), and the code generated for %, // and
            # max relies on it: an `.item()` that may be negative would give wrong values (-3 % 4 as -3;
            # review, session 30). Such a graph is not compiled with symbols, unless the value is only
            # returned (`loss.item()` at the end of a step: the graph ran eagerly; review, session 33)
            if shapes.unbacked[sym][0] in returned:
                continue
            low = ranges[sym.name].lower if sym.name in ranges else None
            if sym.name.startswith("zuf"):   # the ShapeEnv's name for an unbacked float
                raise SymbolicUnsupported(f"the data-dependent value of %{shapes.unbacked[sym][0]} is a float "
                                          "(`.item()` of a floating tensor), and generated code has integer "
                                          "symbols only", sym)
            if not (isinstance(low, sympy.Integer) and low >= 0):
                raise SymbolicUnsupported(f"the data-dependent value of %{shapes.unbacked[sym][0]} may be negative, "
                                          "and generated code takes every size symbol as nonnegative", sym)
        for sym in (*shapes.sources, *shapes.unbacked):
            r = ranges.get(sym.name)
            # (torch's int_oo is no Integer.) Only a symbol that is never negative: the index-width
            # and row-length decisions take a bounded symbol to walk 0 … its bound (an int input in
            # [-2**40, 5] would pass for one below 6)
            if r is not None and isinstance(r.upper, sympy.Integer) and isinstance(r.lower, sympy.Integer) \
                    and r.lower >= 0:
                shapes.bounds[sym] = int(r.upper)
        _rederive_stale(gm, {s.name for s in shapes.known()})
    return shapes


def autograd_quotients(gm: torch.fx.GraphModule) -> frozenset:
    """The float quotients of sizes that a backward's formulas compute (var's 2 / (n - correction)): the
    `operator.truediv` nodes AOT autograd traced while running autograd's backward. Eager computes them
    in C++ doubles, inf or NaN where the divisor is 0 (var with correction 2 over 2 elements), where
    Python's own float division, in a user's code, raises. Refused, such a backward was compiled per
    size, and its static compile at n == correction, then its ATen graph, raised ZeroDivisionError
    (issue 23)."""
    return frozenset(n.meta["val"].node.expr for n in gm.graph.nodes
                     if n.op == "call_function" and n.target is operator.truediv
                     and isinstance(n.meta.get("val"), torch.SymFloat)
                     and (n.meta.get("autograd_backward") or n.meta.get("partitioner_tag") == "is_backward"))


def _only_returned(gm: torch.fx.GraphModule) -> set[str]:
    """The nodes whose only use is to be returned, as they are or as a tensor (`scalar_tensor`, which
    AOT autograd wraps a returned float in; ATen makes it: lowerings.full): a value read from data
    there reaches no size, index or kernel, only the wrapper's return."""
    def returned(n) -> bool:
        return bool(n.users) and all(u.op == "output" or ((u.target is torch.ops.aten.scalar_tensor.default
                                                          or _python_arithmetic(u)) and returned(u))
                                     for u in n.users)
    return {n.name for n in gm.graph.nodes if n.op == "call_function" and returned(n)}


def _python_arithmetic(n: torch.fx.Node) -> bool:
    """A node of Python integer arithmetic (`count.item() - 100`, `n // 2 > 3`): the wrapper computes it
    in Python from the values read, which need no symbol of generated code. Integers only: the wrapper
    prints the sympy expression, exact for integers, where a float's would be rounded (`loss.item() / 3`
    gave 0.7499999999999992; review, session 34)."""
    def integer(a) -> bool:
        return isinstance(a, int) or (isinstance(a, torch.fx.Node) and isinstance(a.meta.get("val"), (int, torch.SymInt)))
    return n.op == "call_function" and getattr(n.target, "__module__", None) in ("_operator", "math") \
        and isinstance(n.meta.get("val"), (torch.SymInt, torch.SymBool)) and all(integer(a) for a in n.args) \
        and not n.kwargs


def _rederive_stale(gm: torch.fx.GraphModule, known: set[str]) -> None:
    """FakeTensors that name a data-dependent symbol no input or node of this graph gives, computed
    again from their inputs'. Common-subexpression elimination merges the second of two equal
    data-dependent ops (`x[x > 0]` twice: u0, u1) into the first, and the backward's nodes keep u1 in
    their FakeTensors while their arguments give u0 (`expand(s, [sym_size_int])` is "f32[u1]" with
    sym_size_int = u0): the backward ran eagerly ("no hint for a size: u1"; review, session 31); the
    forward's size check `sym_size_int == sym_size_int` said Eq(u0, u1), and the wrapper read u1
    (NameError, review, session 30); from its arguments it is true."""
    from .eager_strides import rerun
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        if node.op != "call_function" or val is None:
            continue
        stale = {s.name for s in free_unbacked_symbols(val)} - known
        if not stale:
            continue
        new = rerun(node)
        if new is not None and not ({s.name for s in free_unbacked_symbols(new)} - known):
            node.meta["val"] = new


# what heuristics take an unbacked size to be (within its range): Inductor's default guess too
UNBACKED_HINT = 8192


def _unbacked_hint(env, sym: sympy.Symbol) -> sympy.Integer:
    value = UNBACKED_HINT
    bounds = {s.name: r for s, r in env.var_to_range.items()}.get(sym.name)
    if bounds is not None:   # (torch's int_oo is no sympy Integer, and on torch 2.13 it says is_finite)
        if isinstance(bounds.upper, sympy.Integer):
            value = min(value, int(bounds.upper))
        if isinstance(bounds.lower, sympy.Integer):
            value = max(value, int(bounds.lower))
    return sympy.Integer(value)


def _shape_env_of(val):
    for x in (val if isinstance(val, (list, tuple)) else [val]):
        if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return x.node.shape_env
        if isinstance(x, torch.Tensor):
            for s in (*x.shape, *x.stride()):
                if isinstance(s, torch.SymInt):
                    return s.node.shape_env
    return None


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


@contextlib.contextmanager
def using(shapes: GraphShapes | None) -> Iterator[None]:
    """`shapes` current again (a report of a dynamic graph made after its compile: sizes at its
    hints); nothing for None."""
    if shapes is None:
        yield
        return
    token = _current.set(shapes)
    try:
        yield
    finally:
        _current.reset(token)


def symbol(name: str) -> sympy.Symbol:
    """Our symbol for a ShapeEnv symbol: an input's sizes are positive integers (Dynamo specializes 0
    and 1); a value read from data (unbacked, u0) may be 0; an int input has the sign its range in
    the ShapeEnv says (`_signs`), none where the range has both."""
    if name.startswith("u"):
        return sympy.Symbol(name, integer=True, nonnegative=True)
    if name.startswith(("zuf", "zf")):   # the ShapeEnv's floats (an `.item()` of a floating tensor)
        return sympy.Symbol(name, real=True)
    sign = current().signs.get(name)
    if sign is not None:
        return sympy.Symbol(name, integer=True, **sign)
    return sympy.Symbol(name, integer=True, positive=True)


def to_expr(x) -> Expr:
    """An int, a SymInt or a sympy expression of torch's → a sympy expression of ours."""
    if isinstance(x, bool):
        return sympy.Integer(int(x))
    if isinstance(x, int):
        return sympy.Integer(x)
    if isinstance(x, (torch.SymInt, torch.SymFloat, torch.SymBool)):
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
    if isinstance(e, (FloorDiv, ModularIndexing)) and not all(_never_negative(a) for a in args):
        raise SymbolicUnsupported(f"a {type(e).__name__} of a value that may be negative", e)
    if isinstance(e, (FloorDiv, ModularIndexing, SignedFloorDiv, SignedMod)):   # ours already
        return e.func(*args)
    if isinstance(e, _DIVISIONS):
        return _division(e, args)
    if isinstance(e, (torch_fns.IntTrueDiv, torch_fns.FloatTrueDiv)):   # a float made of sizes
        # Python's division raises at 0, where a kernel would give inf (review, session 34); autograd's
        # in C++ gives inf or NaN, as a kernel's float64 division and the wrapper's `float_source` do
        if not nonzero(args[1]) and e not in current().ieee_quotients:
            raise SymbolicUnsupported(f"a {type(e).__name__} by a value that may be 0", e)
        return args[0] / args[1]
    if isinstance(e, torch_fns.ToFloat):
        return args[0]
    if e.is_Float or e in (sympy.true, sympy.false):
        return e
    if isinstance(e, (sympy.core.relational.Relational, sympy.And, sympy.Or, sympy.Not)):   # a SymBool (torch._check)
        return e.func(*args)
    if isinstance(e, (torch_fns.TruncToInt, torch_fns.FloorToInt, torch_fns.CeilToInt, torch_fns.RoundToInt)):
        ratio = _exact_ratio(e.args[0], args[0])
        if ratio is not None:
            return _rounded_quotient(type(e), *ratio)
    if isinstance(e, sympy.Abs) and args[0].is_integer:   # abs(k): Max, which kernels and the wrapper print
        return sympy.Max(args[0], -args[0])
    if isinstance(e, (sympy.Add, sympy.Mul, torch_fns.Max, torch_fns.Min, sympy.Max, sympy.Min)):
        kind = {torch_fns.Max: sympy.Max, torch_fns.Min: sympy.Min}.get(type(e), e.func)
        return kind(*args)
    if isinstance(e, (sympy.Pow, torch_fns.PowByNatural)) and args[1].is_Integer and int(args[1]) >= 0:
        return sympy.Pow(args[0], args[1])
    raise SymbolicUnsupported(f"a size expression with {type(e).__name__}", e)


# torch's integer divisions and moduli: floor division, Python's modulo, ceil division, and the two
# that torch defines for non-negative operands only (ModularIndexing, Mod)
_DIVISIONS = (torch_fns.FloorDiv, torch_fns.ModularIndexing, torch_fns.Mod, torch_fns.PythonMod, sympy.Mod,
              torch_fns.CeilDiv)


def _division(e: sympy.Basic, args: list[Expr]) -> Expr:
    """One of _DIVISIONS as ours, its operands `args` converted. Generated code's // and % truncate
    toward 0: FloorDiv and ModularIndexing where no operand may be negative, else SignedFloorDiv and
    SignedMod, which floor as torch does ((s0 - 5) // 2 at s0 = 4 is -1, not 0; review, session 33).
    A divisor that may be 0 is refused: eager raises there, and a kernel would divide by 0 without a word."""
    name = type(e).__name__
    for d in args[1:]:
        if not nonzero(d):
            raise SymbolicUnsupported(f"a {name} by a value that may be 0", e)
    nonnegative = all(_never_negative(a) for a in args)
    if isinstance(e, (torch_fns.ModularIndexing, torch_fns.Mod)):
        # torch defines these for non-negative operands only: another sign has no meaning to keep
        if not nonnegative:
            raise SymbolicUnsupported(f"a {name} of a value that may be negative", e)
        return ModularIndexing(*args) if len(args) == 3 else ModularIndexing(args[0], sympy.Integer(1), args[1])
    a, b = args
    if isinstance(e, torch_fns.FloorDiv):
        return FloorDiv(a, b) if nonnegative else SignedFloorDiv(a, b)
    if isinstance(e, torch_fns.CeilDiv):   # ceil(a / b) == -floor(-a / b)
        return FloorDiv(a + b - 1, b) if nonnegative else -SignedFloorDiv(-a, b)
    if nonnegative:   # Python's modulo (PythonMod, sympy.Mod)
        return ModularIndexing(a, sympy.Integer(1), b)
    if _never_negative(b):
        # a % b == (a + k*b) % b: a shift that makes the dividend never negative keeps the truncating
        # form (roll by 3 reads (s - 3) % s, and s - 3 < 0 at s = 2; review, session 33)
        for k in (1, 2):
            if _never_negative(a + k * b):
                return ModularIndexing(a + k * b, sympy.Integer(1), b)
    return SignedMod(a, b)


def nonzero(a: Expr) -> bool:
    """a != 0 at every size the graph serves."""
    if a.is_Integer:
        return a != 0
    return bool(a.is_nonzero) or decide(sympy.Ne(a, 0)) is True


def _never_negative(a: Expr) -> bool:
    """a >= 0 at every size the graph serves: from the symbols' signs, else the ShapeEnv's ranges
    ((s0 - 3) // 2 + 1 of a convolution: Dynamo's guards have s0 >= 3)."""
    return never_negative_sum([a]) or decide(a >= 0) is True


def _exact_ratio(theirs: sympy.Basic, a: Expr):
    """(n, d), integer expressions whose quotient n / d rounds to an integer as the float `a` does
    (`theirs` as torch wrote it, `a` converted): a float scale of a size (interpolate's scale_factor=1.5:
    trunc(1.5 * s0)), exact in doubles, or one true division of integers (math.floor(k / 2)), rounded
    once: its distance to the nearest integer it is not is at least 1 / |d|, more than its rounding
    error while |n| < 2**53. Else None."""
    exact = _dyadic_multiple(a)
    if exact is not None:
        num, den, x = exact
        if _within_magnitude(x, 2 ** 32):
            return num * x, den
    if isinstance(theirs, torch_fns.IntTrueDiv):
        n, d = (_convert(x) for x in theirs.args)
        if n.is_integer and d.is_integer and _within_magnitude(n, 2 ** 53):
            return n, d
    return None


def _source_name(src) -> str:
    """A Dynamo Source's text, L['x'].size()[0] (a method in some torch releases, a property in others)."""
    name = src.name
    return name() if callable(name) else str(name)


def _within_magnitude(x: Expr, bound: int) -> bool:
    """|x| < bound at every value, where x reads an int input (whose values are any int: floor(k / 3)
    at k = 3 * 2**55 - 1 is not the floor of the double k / 3, which eager rounds first; review,
    session 35); an expression of tensor sizes alone (Dynamo read each symbol from a `.size()`) is taken
    to be (no dimension holds 2**32 elements of a multiple, nor 2**53 of a quotient)."""
    env = current().shape_env
    if env is not None:
        theirs = {s.name: s for s in env.var_to_sources}

        def read_from_a_size(s) -> bool:
            sources = env.var_to_sources.get(theirs.get(s.name), [])
            return bool(sources) and all(".size()" in _source_name(src) for src in sources)
        if all(read_from_a_size(s) for s in x.free_symbols):
            return True
    return decide(sympy.Lt(x, bound)) is True and decide(sympy.Gt(x, -bound)) is True


def _rounded_quotient(kind: type, n: Expr, d: Expr) -> Expr:
    """floor, ceil, trunc or round (torch's FloorToInt, CeilToInt, TruncToInt, RoundToInt) of n / d,
    integers, d != 0: FloorDiv where both are never negative, else through SignedFloorDiv, which floors
    at either sign; trunc of a quotient of unknown sign is its sign times the quotient of the magnitudes."""
    if _never_negative(-d):
        n, d = -n, -d
    elif not _never_negative(d):
        raise SymbolicUnsupported("a rounded quotient by a value of unknown sign", d)
    if kind is torch_fns.RoundToInt:   # Python's round: half to even; a tie is exact in doubles
        nearest = 2 * n + d   # q = floor(n / d + 1 / 2), less 1 at a tie with q odd
        q = FloorDiv(nearest, 2 * d) if _never_negative(nearest) else SignedFloorDiv(nearest, 2 * d)
        tie = 1 - sympy.Min(SignedMod(nearest, 2 * d), 1)
        return q - tie * SignedMod(q, 2)
    if _never_negative(n):
        return FloorDiv(n + (d - 1 if kind is torch_fns.CeilToInt else 0), d)
    if kind is torch_fns.FloorToInt or (kind is torch_fns.TruncToInt and _never_negative(-n)):
        return SignedFloorDiv(n, d) if kind is torch_fns.FloorToInt else -FloorDiv(-n, d)
    if kind is torch_fns.CeilToInt:
        return -SignedFloorDiv(-n, d)
    return sympy.Max(sympy.Min(n, 1), -1) * FloorDiv(sympy.Max(n, -n), d)


def _dyadic_multiple(a: Expr):
    """(p, q, x) where the float expression `a` is c * x, x an integer expression and c a float p / q
    (q a power of two) whose product with x is exact in double precision, as eager computes it, for
    any |x| below 2**32; None otherwise (1.7 * 10 rounds to 17.0 in doubles, where the exact product
    is just below 17)."""
    c, x = a.as_coeff_Mul()
    if x.has(sympy.Float) or not x.is_integer:
        return None
    r = sympy.Rational(float(c)) if c.is_Float else sympy.Rational(c)
    if r <= 0 or r.p >= 2 ** 20 or r.q & (r.q - 1):
        return None
    return sympy.Integer(r.p), sympy.Integer(r.q), x


def stride_exprs(t: torch.Tensor) -> list[Expr]:
    """A tensor's strides as expressions. A FakeTensor with a size that may be 0 (unbacked u0, or a
    backed difference such as s0 - 4 of a split) has strides such as Max(1, u0) (never 0); at u0 = 0
    the tensor is empty and no stride is observable, so it is u0 wherever it matters, and compares
    equal to the products of sizes that eager's strides are. Where the expression in it may be
    negative (Max(1, Min(s0, s1 - 3)), torch's max(size, 1) of an empty diagonal's length Max(0, ...)),
    it is that length, Max(0, ...): the expression alone was a negative stride at run time, which
    as_strided refuses (fuzz seed 2307 prog 29)."""
    out = []
    for x in t.stride():
        e = sympy.Integer(x) if isinstance(x, int) else to_expr(x)
        if e.free_symbols:
            e = e.replace(lambda a: isinstance(a, sympy.Max) and len(a.args) == 2 and sympy.Integer(1) in a.args,
                          lambda a: _size_of_unit_max(next(x for x in a.args if x != 1)))
        out.append(e)
    return out


def _size_of_unit_max(e: Expr) -> Expr:
    """The size whose max(size, 1) torch's stride Max(1, e) is: e where it is never negative, else Max(0, e)."""
    return e if e.is_nonnegative or decide(e >= 0) is True else sympy.Max(0, e)


def broadcasts(old, new) -> bool:
    """Whether a dim of size `old` becomes `new` by repeating its one element (expand, and a pointwise
    operand's broadcast: lowerings.broadcast_loader). A symbolic
    `old` that is not `new` is 1 only where Dynamo's guards say so (fuzz seed 219 prog 260: a chunk
    of length (s+2)//3, 1 here, expanded to 4 was indexed as if it had 4 elements): decided by the
    ShapeEnv, else not compiled symbolically (the graph is compiled per size)."""
    old, new = sympy.sympify(old), sympy.sympify(new)
    if old == new:
        return False
    if old == 1:
        return True
    if not (old.free_symbols or new.free_symbols):
        return False
    if decide(sympy.Eq(old, 1)):
        return True
    if decide(sympy.Eq(old, new)):
        return False
    raise SymbolicUnsupported(f"a dim of size {old} broadcast to {new}, which is 1 at some sizes only", old)


def is_one(size) -> bool:
    """A size that is 1 at every size the graph serves: 1, or a symbolic size the ShapeEnv's facts fix
    to 1 (x[0::3] of a length-2 x under dynamic shapes: (s0 + 2)//3, which Dynamo's guards bound)."""
    return size == 1 or bool(getattr(size, "free_symbols", None)) and decide(sympy.Eq(size, 1)) is True


def decide(cond) -> bool | None:
    """Whether a relation between sizes holds at every size the graph serves: True or False where
    that is provable (from the symbols' assumptions, then from the ShapeEnv's ranges and the guards
    Dynamo already has), None where it is not. Adds no guard."""
    cond = sympy.sympify(cond)
    if cond in (sympy.true, sympy.false):
        return bool(cond)
    env = current().shape_env
    if env is None:
        return None
    theirs = {s.name: s for s in env.var_to_range}
    if not all(s.name in theirs for s in cond.free_symbols):
        return None
    try:
        cond = cond.xreplace({s: theirs[s.name] for s in cond.free_symbols})
        cond = cond.replace(lambda a: isinstance(a, FloorDiv), lambda a: torch_fns.FloorDiv(*a.args))
        cond = cond.replace(lambda a: isinstance(a, ModularIndexing), lambda a: torch_fns.ModularIndexing(*a.args))
        cond = cond.replace(lambda a: isinstance(a, SignedFloorDiv), lambda a: torch_fns.FloorDiv(*a.args))
        cond = cond.replace(lambda a: isinstance(a, SignedMod), lambda a: torch_fns.PythonMod(*a.args))
        # abs(k), which to_expr writes Max(k, -k): the ShapeEnv's ranges know that Abs is never negative
        cond = cond.replace(lambda a: isinstance(a, sympy.Max) and len(a.args) == 2 and a.args[0] == -a.args[1],
                            lambda a: sympy.Abs(a.args[0]))
        # torch's own Min and Max (the guards' form: `Max(1, s16) <= s77` of x[:max(k, 1)])
        cond = cond.replace(lambda a: isinstance(a, (sympy.Max, sympy.Min)),
                            lambda a: (torch_fns.Max if isinstance(a, sympy.Max) else torch_fns.Min)(*a.args))
        # Dynamo's guards that fix an expression to a number (Eq(s0*s1*s2, 30) of a reshape to
        # [2, 5, 3], fuzz seed 221 prog 275): hold at every size the graph serves
        fixed = _fixed_by_guards(env)
        if fixed:
            cond = cond.xreplace(fixed)
            if cond in (sympy.true, sympy.false):
                return bool(cond)
        found = env._maybe_evaluate_static(cond)
        if found not in (sympy.true, sympy.false):
            # the parts of Dynamo's conjunctions, which its axioms hold only whole: x[:k] guards
            # `(k >= 0) & (k <= s0)`, and `k <= s0` was not provable
            parts = _guard_conjuncts(env)
            if parts:
                found = env._maybe_evaluate_static(cond, axioms=parts)
    except Exception:  # noqa: BLE001  (a private ShapeEnv method: any failure means "not provable")
        return None
    return bool(found) if found in (sympy.true, sympy.false) else None


_CONJUNCTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # ShapeEnv → (guard count, the parts)


def _guard_conjuncts(env) -> tuple:
    """The operands of the ShapeEnv's guards that are conjunctions (read again only when guards were added)."""
    guards = getattr(env, "guards", ())
    cached = _CONJUNCTS.get(env)
    if cached is not None and cached[0] == len(guards):
        return cached[1]
    parts = tuple(p for g in guards if isinstance(getattr(g, "expr", None), sympy.And) for p in g.expr.args)
    _CONJUNCTS[env] = (len(guards), parts)
    return parts


_FIXED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # ShapeEnv → (its guard count when read, the map)


def _fixed_by_guards(env) -> dict:
    """expression → number, for each of the ShapeEnv's guards Eq(expression, number); read again
    only when guards were added (decide runs for many sizes of one graph)."""
    guards = getattr(env, "guards", ())
    try:
        cached = _FIXED.get(env)
    except TypeError:   # not weakly referable: read every time
        cached = None
    if cached is not None and cached[0] == len(guards):
        return cached[1]
    fixed = {}
    for guard in guards:
        expr = getattr(guard, "expr", None)
        if isinstance(expr, sympy.Eq):
            lhs, rhs = expr.args
            if rhs.is_number and not lhs.is_number:
                fixed[lhs] = rhs
            elif lhs.is_number and not rhs.is_number:
                fixed[rhs] = lhs
    try:
        _FIXED[env] = (len(guards), fixed)
    except TypeError:
        pass
    return fixed


def facts_key(gm: torch.fx.GraphModule) -> list[str]:
    """What a dynamic graph's compile decided from besides its text and inputs, for the caches' keys:
    each node's symbolic sizes and strides, the ranges of the graph's symbols and the ShapeEnv's
    guards. Dynamo compiles `x[:k]` again once k passes x's length (a new guard): the same ATen text
    and inputs, but its slice's size is k in one graph and x's length in the other, and the first
    one's module served the second (shape (7, 3) where eager's is (4, 3), reading past x; review,
    session 33). Empty for a static graph."""
    shapes = current()
    env = shapes.shape_env
    if env is None:
        return []
    parts = []
    for node in gm.graph.nodes:
        val = node.meta.get("val")
        for x in (val if isinstance(val, (list, tuple)) else [val]):
            if isinstance(x, torch.Tensor):
                parts.append(f"{node.name}:{tuple(x.shape)}|{x.stride()}|{x.dtype}")
            elif isinstance(x, (torch.SymInt, torch.SymBool, torch.SymFloat)):
                parts.append(f"{node.name}:{x.node.expr}")
    names = {s.name for s in shapes.known()}
    parts += sorted(f"range {s.name} {r.lower} {r.upper}" for s, r in env.var_to_range.items() if s.name in names)
    parts += sorted(str(getattr(g, "expr", g)) for g in getattr(env, "guards", ()))
    return parts


def guard_count() -> int:
    """How many guards this graph's ShapeEnv holds (0 for a static graph): what the compile adds after it is
    kept with the cache entry (pipeline.py, caching/shape_guards.py `pack`)."""
    env = current().shape_env
    return len(getattr(env, "guards", ())) if env is not None else 0


def upper_bound(expr) -> int | None:
    """The greatest value a size can take in this graph: itself if static, a symbol's bound from the
    ShapeEnv (`mark_dynamic(max=...)`, `torch._check`), an expression's over its symbols' bounds
    (`s0 - 1` of x[:, 1:]: sizevars.index_range, as codegen/triton.py sizes a persistent row's block),
    else None (a symbol unbounded, or a function index_range does not take)."""
    expr = sympy.sympify(expr)
    if not expr.free_symbols:
        return int(expr)
    bounds = current().bounds
    if isinstance(expr, sympy.Symbol):
        return bounds.get(expr)
    if not expr.free_symbols <= bounds.keys():
        return None
    span = index_range(expr, {s: sympy.Integer(b + 1) for s, b in bounds.items()})
    return None if span is None else span[1]


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

"""Attention written out in the user's code, found in Dynamo's graph and replaced by one call.

Models spell attention in many ways (`q @ k.transpose(-2, -1)`, `torch.bmm` on folded heads,
`einsum`, a softmax written as exp / sum, masks built from `arange` or `tril`), and AOT autograd
would turn each into a score matrix in memory: two matmuls and a softmax kernel between them. This
pass runs on the torch-level graph the backend receives, before the front cache keys it, so every
later level sees (and caches) the rewritten graph.

What is matched is structure, not spelling:

    S = matmul(A, B)                 matmul / @ / bmm / einsum, A [..., L, E], B [..., E, S]
    Z = pointwise(S, t0, t1, ...)    the modification: every path from S to Z is pointwise
    P = softmax(Z, dim=-1)           or exp(Z - amax(Z)) / sum(...) over the key dim
    P = dropout(P)                   optional
    O = matmul(P, V)

with every node between S and O used only inside the pattern. The modification becomes the
contract's `mod` (mini_inductor/attention/__init__.py): S is `s`, tensors that do not depend on the
scores are `t0, t1, ...` (passed as `extra`), and tensors built from `arange`, `ones(...).tril()`
and their comparisons and slices become expressions in `i` and `j`, so that a causal or sliding
window mask costs no memory. Registered buffers are data: a sliced `tril` buffer is a tensor `t0`.

The call is `F.scaled_dot_product_attention` when the modification is exactly what it computes (a
scale, with or without a causal `j <= i` mask filled with -inf), else the flash-attention op.
Everything found, matched or not, is an `AttentionMatch` record with the reason of a near miss.
"""
from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import math
import operator
from typing import Any, Iterator

import torch
import torch.fx
import torch.nn.functional as F

from ..fx_source import source_line
from ..metrics import AttentionMatch

log = logging.getLogger("mini_inductor.attention")

_flash_override: list[Any] = []


@contextlib.contextmanager
def use_flash_op(op) -> Iterator[None]:
    """Rewrite to `op` (an OpOverload with the contract's signature) instead of
    torch.ops.mini_inductor.flash_attention, inside the block (tests)."""
    _flash_override.append(op)
    try:
        yield
    finally:
        _flash_override.pop()


def flash_target():
    """The flash-attention op a rewrite calls, looked up when it rewrites; None when none is registered."""
    if _flash_override:
        return _flash_override[-1]
    try:
        import importlib
        importlib.import_module("mini_inductor.attention.flash")   # registers the op, when present
    except ImportError:
        pass
    packet = getattr(getattr(torch.ops, "mini_inductor", None), "flash_attention", None)
    try:
        return packet.default if packet is not None else None
    except AttributeError:
        return None


class NearMiss(Exception):
    """Attention found, but not replaced: the message says why."""


class _Untranslatable(Exception):
    """A value the modification's expression language cannot write (it becomes an extra tensor)."""


# ── the ops, whatever their spelling ────────────────────────────────────────────────────────────
_FUNCTIONS = {
    operator.matmul: "matmul", torch.matmul: "matmul", torch.Tensor.matmul: "matmul", torch.bmm: "matmul",
    torch.Tensor.bmm: "matmul", torch.einsum: "einsum",
    torch.softmax: "softmax", F.softmax: "softmax", torch.Tensor.softmax: "softmax",
    F.dropout: "dropout", torch.dropout: "dropout",
    operator.add: "add", torch.add: "add", operator.sub: "sub", torch.sub: "sub", torch.subtract: "sub",
    operator.mul: "mul", torch.mul: "mul", torch.multiply: "mul", operator.truediv: "div", torch.div: "div",
    torch.true_divide: "div", operator.floordiv: "floordiv", torch.floor_divide: "floordiv",
    operator.mod: "mod", torch.remainder: "mod", operator.neg: "neg", torch.neg: "neg", operator.abs: "abs",
    torch.abs: "abs", operator.lt: "lt", torch.lt: "lt", operator.le: "le", torch.le: "le", operator.gt: "gt",
    torch.gt: "gt", operator.ge: "ge", torch.ge: "ge", operator.eq: "eq", torch.eq: "eq", operator.ne: "ne",
    torch.ne: "ne", operator.and_: "and", torch.logical_and: "and", torch.bitwise_and: "and",
    operator.or_: "or", torch.logical_or: "or", torch.bitwise_or: "or", operator.invert: "not",
    torch.logical_not: "not", torch.bitwise_not: "not", torch.where: "where", torch.masked_fill: "masked_fill",
    torch.tanh: "tanh", torch.exp: "exp", torch.log: "log", torch.sigmoid: "sigmoid", torch.sqrt: "sqrt",
    torch.clamp: "clamp", torch.clip: "clamp", torch.clamp_min: "clamp_min", torch.clamp_max: "clamp_max",
    torch.minimum: "minimum", torch.maximum: "maximum", torch.arange: "arange", torch.ones: "ones",
    torch.zeros: "zeros", torch.full: "full", torch.tensor: "tensor", torch.tril: "tril", torch.triu: "triu",
    operator.getitem: "getitem", torch.unsqueeze: "unsqueeze", torch.amax: "amax", torch.sum: "sum",
    torch.transpose: "transpose", torch.permute: "permute", torch.repeat_interleave: "repeat_interleave",
    torch.reshape: "reshape", getattr: "getattr", torch.swapaxes: "transpose",
}
_METHOD_ALIASES = {"bmm": "matmul", "true_divide": "div", "subtract": "sub", "multiply": "mul",
                   "logical_not": "not", "bitwise_not": "not", "logical_and": "and", "bitwise_and": "and",
                   "logical_or": "or", "bitwise_or": "or", "clip": "clamp", "remainder": "mod",
                   "swapaxes": "transpose", "floor_divide": "floordiv"}
_CASTS = {"to", "type", "float", "half", "bfloat16", "bool", "int", "long", "double", "type_as"}
_SAME = {"contiguous", "clone", "detach"}
_BINARY = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%", "lt": "<",
           "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!=", "and": "&", "or": "|"}
_UNARY_CALLS = {"tanh", "exp", "log", "sigmoid", "sqrt", "abs"}
_POINTWISE = (set(_BINARY) | _UNARY_CALLS | _CASTS | _SAME
              | {"neg", "not", "where", "masked_fill", "clamp", "clamp_min", "clamp_max", "minimum", "maximum"})
_ATTENTION_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def _op(node) -> str | None:
    """The node's op under one name ("matmul" for @, torch.bmm and Tensor.matmul alike), or None."""
    if not isinstance(node, torch.fx.Node):
        return None
    if node.op == "call_method":
        return _METHOD_ALIASES.get(node.target, node.target)
    if node.op == "call_function":
        try:
            return _FUNCTIONS.get(node.target)
        except TypeError:       # an unhashable target
            return None
    return None


def _arg(node, index: int, name: str, default=None):
    """Argument `name` of a call, given by position (counting self for methods) or by keyword."""
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def _value(node):
    return node.meta.get("example_value") if isinstance(node, torch.fx.Node) else None


def _shape(node) -> tuple:
    v = _value(node)
    return tuple(v.shape) if isinstance(v, torch.Tensor) else ()


def _known_eq(a, b) -> bool:
    """a == b without adding a guard (sizes may be symbolic)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    from torch.fx.experimental.symbolic_shapes import statically_known_true
    try:
        return bool(statically_known_true(a == b))
    except Exception:  # noqa: BLE001  (a size we cannot decide is not equal)
        return False


def _static(*sizes) -> bool:
    return all(isinstance(s, int) for s in sizes)


# ── the modification as an expression ──────────────────────────────────────────────────────────
# Trees of tuples: ("s",), ("t", n), ("num", value), ("idx", "i"), ("var", n), ("bin", op, a, b),
# ("neg", a), ("not", a), ("call", name, (args...)).
_TRUE, _FALSE = ("bin", "==", ("num", 0), ("num", 0)), ("bin", "!=", ("num", 0), ("num", 0))
_PRECEDENCE = {"|": 2, "&": 3, "+": 4, "-": 4, "*": 5, "/": 5, "//": 5, "%": 5}
_CMP = {"<", "<=", ">", ">=", "==", "!="}
_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "==": "==", "!=": "!="}
_NEGATE = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}


def _prec(e) -> int:
    if e[0] == "bin":
        return 1 if e[1] in _CMP else _PRECEDENCE[e[1]]
    if e[0] in ("neg", "not") or (e[0] == "num" and _number_text(e[1]).startswith("-")):
        return 6
    return 7


def _number_text(v) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, int):
        return str(v)
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return repr(float(v))


def render(e) -> str:
    """The expression as the contract's `mod` text, with the parentheses Python's precedence needs."""
    kind = e[0]
    if kind == "s":
        return "s"
    if kind == "t":
        return f"t{e[1]}"
    if kind == "num":
        return _number_text(e[1])
    if kind == "idx":
        return e[1]
    if kind == "var":
        raise _Untranslatable("an index of a tensor axis that is not the query or key axis")
    if kind in ("neg", "not"):
        inner = render(e[1])
        return ("-" if kind == "neg" else "~") + (f"({inner})" if _prec(e[1]) < 6 else inner)
    if kind == "call":
        return f"{e[1]}({', '.join(render(a) for a in e[2])})"
    op, a, b = e[1], e[2], e[3]
    p = _prec(e)

    def side(x, right: bool) -> str:
        q = _prec(x)
        text = render(x)
        return f"({text})" if q < p or (q == p and (right or p == 1)) else text
    return f"{side(a, False)} {op} {side(b, True)}"


def _subst(e, var: int, by):
    if e[0] == "var":
        return by if e[1] == var else e
    if e[0] in ("neg", "not"):
        return (e[0], _subst(e[1], var, by))
    if e[0] == "bin":
        return ("bin", e[1], _subst(e[2], var, by), _subst(e[3], var, by))
    if e[0] == "call":
        return ("call", e[1], tuple(_subst(a, var, by) for a in e[2]))
    return e


def _as_condition(e):
    """A bool expression for a 0/1 one (where(c, 1, 0)), or None."""
    if e in (_TRUE, _FALSE) or (e[0] == "bin" and e[1] in _CMP | {"&", "|"}) or e[0] == "not":
        return e
    if e[0] == "call" and e[1] == "where" and e[2][1] == ("num", 1) and e[2][2] == ("num", 0):
        return e[2][0]
    return None


def _not(c):
    if c == _TRUE:
        return _FALSE
    if c == _FALSE:
        return _TRUE
    if c[0] == "not":
        return c[1]
    return ("not", c)


def _binary(op: str, a, b):
    """`a op b`, with the simplifications that keep masks readable ("j <= i", not "where(...) == 0")."""
    if op in ("==", "!=") and b[0] == "num" and b[1] in (0, 1) and _as_condition(a) is not None:
        keep = (op == "==") == (b[1] == 1)
        return _as_condition(a) if keep else _not(_as_condition(a))
    if op == "&":
        if a == _TRUE:
            return b
        if b == _TRUE:
            return a
    if op == "|":
        if a == _FALSE:
            return b
        if b == _FALSE:
            return a
    if a[0] == "num" and b[0] == "num" and op in ("+", "-", "*") and not isinstance(a[1], bool):
        return ("num", {"+": operator.add, "-": operator.sub, "*": operator.mul}[op](a[1], b[1]))
    if op in ("+", "-") and b == ("num", 0):
        return a
    return ("bin", op, a, b)


def _where(c, x, y):
    if c == _TRUE:
        return x
    if c == _FALSE:
        return y
    if x == _TRUE and y == _FALSE:
        return c
    return ("call", "where", (c, x, y))


@dataclasses.dataclass(frozen=True)
class _Val:
    """A translated tensor: its expression, its shape, and for each axis counted from the right the
    index variable that varies along it (None: constant along that axis, or data loaded through it)."""

    expr: tuple
    shape: tuple
    axes: tuple          # axes[k]: the variable of the axis k-th from the right, or None
    pure: bool           # built from indices and numbers only (no scores, no extra tensors)
    dtype: torch.dtype | None = None

    def axis(self, k: int):
        return self.axes[k] if k < len(self.axes) else None


class _Translator:
    """The modification between the scores and the softmax, as an expression (see `render`)."""

    def __init__(self, score: torch.fx.Node, dependent: set):
        self.score, self.dependent = score, dependent
        self.extras: list[torch.fx.Node] = []
        self.memo: dict[torch.fx.Node, _Val] = {}
        self.vars = itertools.count()
        self.var_size: dict[int, Any] = {}

    def translate(self, x) -> _Val:
        if isinstance(x, bool):
            return _Val(_TRUE if x else _FALSE, (), (), True, torch.bool)
        if isinstance(x, (int, float)):
            if isinstance(x, float) and math.isnan(x):
                raise _Untranslatable("a NaN constant")
            return _Val(("num", x), (), (), True, torch.float32 if isinstance(x, float) else torch.int64)
        if not isinstance(x, torch.fx.Node):
            raise _Untranslatable(f"an argument {x!r}")
        if x in self.memo:
            return self.memo[x]
        value = _value(x)
        if _op(x) == "item" and isinstance(_value(x.args[0]), torch.Tensor) and _value(x.args[0]).numel() == 1:
            return self.translate(x.args[0])     # a float Dynamo made an input (a 0-dim tensor): data
        if not isinstance(value, torch.Tensor):
            raise _Untranslatable(f"{x.name} is not a tensor (a size or scale computed at run time?)")
        if x is self.score:
            val = _Val(("s",), tuple(value.shape), (), False, value.dtype)
        elif x in self.dependent:
            val = self._node(x, scores=True)
        else:
            mark = (len(self.extras), len(self.memo))
            try:
                val = self._node(x, scores=False)
            except _Untranslatable:
                self.extras[mark[0]:] = []
                for key in list(self.memo)[mark[1]:]:
                    del self.memo[key]
                val = self._extra(x, value)
        self.memo[x] = val
        return val

    def _extra(self, node, value) -> _Val:
        if node not in self.extras:
            self.extras.append(node)
        return _Val(("t", self.extras.index(node)), tuple(value.shape), (), False, value.dtype)

    def _new_var(self, size) -> int:
        n = next(self.vars)
        self.var_size[n] = size
        return n

    # the result's axes: operands broadcast from the right; one variable per axis
    def _combine(self, node, vals: list[_Val]):
        shape = _shape(node)
        exprs = [v.expr for v in vals]
        axes = []
        for k in range(len(shape)):
            chosen = None
            for n, v in enumerate(vals):
                var = v.axis(k)
                if var is None:
                    continue
                if _known_eq(v.shape[-1 - k], 1) and not _known_eq(shape[-1 - k], 1):
                    exprs[n] = _subst(exprs[n], var, ("num", 0))     # a broadcast axis: index 0
                elif chosen is None:
                    chosen = var
                else:
                    exprs[n] = _subst(exprs[n], var, ("var", chosen))
            axes.append(chosen)
        return exprs, tuple(axes), all(v.pure for v in vals)

    def _pointwise(self, node, op: str, operands: list, build) -> _Val:
        vals = [self.translate(a) for a in operands]
        exprs, axes, pure = self._combine(node, vals)
        return _Val(build(exprs, vals), _shape(node), axes, pure, _value(node).dtype)

    def _node(self, node, scores: bool) -> _Val:
        op = _op(node)
        args = list(node.args)
        if op in _BINARY:
            other = _arg(node, 1, "other")
            alpha = node.kwargs.get("alpha", 1)
            if node.kwargs.get("rounding_mode") is not None:
                raise _Untranslatable("div with a rounding mode")
            sym = _BINARY[op]

            def build(e, vals):
                b = e[1] if alpha == 1 else _binary("*", ("num", alpha), e[1])
                return _binary(sym, e[0], b)
            return self._pointwise(node, op, [args[0], other], build)
        if op == "neg":
            return self._pointwise(node, op, [args[0]], lambda e, v: ("neg", e[0]))
        if op == "not":
            if _value(node).dtype != torch.bool:
                raise _Untranslatable("a bitwise not of integers")
            return self._pointwise(node, op, [args[0]], lambda e, v: _not(e[0]))
        if op in _UNARY_CALLS:
            return self._pointwise(node, op, [args[0]], lambda e, v: ("call", op, (e[0],)))
        if op in ("minimum", "maximum"):
            return self._pointwise(node, op, [args[0], _arg(node, 1, "other")],
                                   lambda e, v: ("call", op, (e[0], e[1])))
        if op in ("clamp", "clamp_min", "clamp_max"):
            lo = _arg(node, 1, "min") if op != "clamp_max" else None
            hi = (_arg(node, 2, "max") if op == "clamp" else _arg(node, 1, "max")) if op != "clamp_min" else None
            bounds = [b for b in (lo, hi) if b is not None]

            def build(e, vals):
                out, rest = e[0], list(e[1:])
                if lo is not None:
                    out = ("call", "maximum", (out, rest.pop(0)))
                if hi is not None:
                    out = ("call", "minimum", (out, rest.pop(0)))
                return out
            return self._pointwise(node, op, [args[0], *bounds], build)
        if op == "where":
            if len(args) + len(node.kwargs) != 3:
                raise _Untranslatable("torch.where with one argument")
            return self._pointwise(node, op, [args[0], _arg(node, 1, "input"), _arg(node, 2, "other")],
                                   lambda e, v: _where(_condition(e[0], v[0]), e[1], e[2]))
        if op == "masked_fill":
            return self._pointwise(node, op, [args[0], _arg(node, 1, "mask"), _arg(node, 2, "value")],
                                   lambda e, v: _where(_condition(e[1], v[1]), e[2], e[0]))
        if op in _SAME:
            return self._pointwise(node, op, [args[0]], lambda e, v: e[0])
        if op in _CASTS:
            return self._cast(node, scores)
        if scores:
            raise NearMiss(f"{_describe_op(node)} on the scores is not a pointwise modification")
        return self._index_node(node, op, args)

    def _cast(self, node, scores: bool) -> _Val:
        val = self.translate(node.args[0])
        to, was = _value(node).dtype, val.dtype
        if to == torch.bool and was != torch.bool:
            expr = _binary("!=", val.expr, ("num", 0))
        elif was == torch.bool and to != torch.bool:
            expr = ("call", "where", (val.expr, ("num", 1), ("num", 0)))
        elif to.is_floating_point and (was is None or not was.is_floating_point or val.pure or scores
                                       or to.itemsize >= was.itemsize):
            expr = val.expr       # exact, or the scores' own rounding (computed in float32 here)
        elif not to.is_floating_point and not was.is_floating_point:
            expr = val.expr
        else:
            raise _Untranslatable(f"a cast from {was} to {to}")
        return dataclasses.replace(val, expr=expr, shape=_shape(node), dtype=to)

    # ── tensors built from indices: arange, ones(...).tril(), their slices and comparisons ──────
    def _index_node(self, node, op, args) -> _Val:
        shape = _shape(node)
        dtype = _value(node).dtype
        if op == "arange":
            bounds = [a for a in args]
            if not all(isinstance(b, (int, float)) or isinstance(b, torch.fx.Node) for b in bounds):
                raise _Untranslatable("arange")
            start, step = (0, 1) if len(bounds) == 1 else (bounds[0], bounds[2] if len(bounds) > 2 else 1)
            if not isinstance(start, int) or not isinstance(step, int):
                raise _Untranslatable("arange with a computed start or step")
            var = self._new_var(shape[0])
            expr = _binary("+", ("num", start), _binary("*", ("num", step), ("var", var))) if (start, step) != (0, 1) \
                else ("var", var)
            return _Val(expr, shape, (var,), True, dtype)
        if op in ("ones", "zeros", "full", "tensor"):
            if op == "full":
                fill = _arg(node, 1, "fill_value")
            elif op == "tensor":
                fill = args[0]
            else:
                fill = 1 if op == "ones" else 0
            if not isinstance(fill, (int, float, bool)):
                raise _Untranslatable(f"{op} of a computed value")
            if dtype == torch.bool:
                expr = _TRUE if fill else _FALSE
            else:
                expr = ("num", float(fill) if dtype.is_floating_point else int(fill))
            return _Val(expr, shape, (), True, dtype)
        if op in ("tril", "triu"):
            val = self.translate(args[0])
            if not val.pure or len(shape) < 2:
                raise _Untranslatable(op)
            diagonal = _arg(node, 1, "diagonal", 0)
            if not isinstance(diagonal, int):
                raise _Untranslatable(f"{op} with a computed diagonal")
            row = val.axis(1) if val.axis(1) is not None else self._new_var(shape[-2])
            col = val.axis(0) if val.axis(0) is not None else self._new_var(shape[-1])
            cmp = "<=" if op == "tril" else ">="
            cond = ("bin", cmp, ("var", col), _binary("+", ("var", row), ("num", diagonal)))
            if dtype == torch.bool:
                expr = _binary("&", cond, val.expr)
            else:
                expr = _where(cond, val.expr, ("num", 0))
            return _Val(expr, shape, (col, row) + val.axes[2:], True, dtype)
        if op in ("getitem", "unsqueeze", "reshape", "view", "expand", "expand_as", "transpose", "permute",
                  "getattr"):
            source = self.translate(args[0])
            if not source.pure:
                raise _Untranslatable(f"{op} of a tensor that is not built from indices")
            return self._reshaped(node, op, args, source)
        raise _Untranslatable(_describe_op(node))

    def _reshaped(self, node, op, args, val: _Val) -> _Val:
        """A view of an index-built tensor: its variables follow their axes."""
        shape = _shape(node)
        rank = len(val.shape)
        dims = [val.axis(rank - 1 - d) for d in range(rank)]        # left to right
        expr = val.expr
        if op == "getitem":
            index = args[1] if isinstance(args[1], tuple) else (args[1],)
            if sum(1 for i in index if i is Ellipsis) > 1:
                raise _Untranslatable("getitem")
            used = sum(1 for i in index if i is not None and i is not Ellipsis)
            out, d = [], 0
            for item in index:
                if item is None:
                    out.append(None)
                elif item is Ellipsis:
                    out.extend(dims[d:d + rank - used])
                    d += rank - used
                elif isinstance(item, int):
                    pos = item + val.shape[d] if item < 0 else item
                    if not isinstance(pos, int):
                        raise _Untranslatable("a negative index of a symbolic size")
                    if dims[d] is not None:
                        expr = _subst(expr, dims[d], ("num", pos))
                    d += 1
                elif isinstance(item, slice):
                    start = item.start or 0
                    if item.step not in (None, 1) or not isinstance(start, int) or start < 0 \
                            or (item.stop is not None and not isinstance(item.stop, (int, torch.fx.Node))):
                        raise _Untranslatable("a slice with a step, or a negative or computed start")
                    var = dims[d]
                    if var is not None and start:
                        moved = self._new_var(None)
                        expr = _subst(expr, var, _binary("+", ("var", moved), ("num", start)))
                        var = moved
                    out.append(var)
                    d += 1
                else:
                    raise _Untranslatable("indexing with a tensor")
            out.extend(dims[d:])
            dims = out
        elif op == "unsqueeze":
            d = _arg(node, 1, "dim")
            d = d + rank + 1 if d < 0 else d
            dims = dims[:d] + [None] + dims[d:]
        elif op in ("reshape", "view"):
            kept = [(s, v) for s, v in zip(val.shape, dims) if not _known_eq(s, 1)]
            if [s for s, _ in kept] != [s for s in shape if not _known_eq(s, 1)]:
                raise _Untranslatable("a reshape that merges or splits axes")
            it = iter(v for _, v in kept)
            dims = [None if _known_eq(s, 1) else next(it) for s in shape]
        elif op in ("expand", "expand_as"):
            dims = [None] * (len(shape) - rank) + dims
        elif op in ("transpose", "permute", "getattr"):
            if op == "getattr":
                if args[1] not in ("T", "mT"):
                    raise _Untranslatable(f"attribute {args[1]}")
                order = list(range(rank))[::-1] if args[1] == "T" else list(range(rank - 2)) + [rank - 1, rank - 2]
            elif op == "transpose":
                a, b = (d % rank for d in args[1:3])
                order = list(range(rank))
                order[a], order[b] = order[b], order[a]
            else:
                order = list(args[1]) if len(args) == 2 and isinstance(args[1], (list, tuple)) else list(args[1:])
                order = [d % rank for d in order]
            dims = [dims[d] for d in order]
        if len(dims) != len(shape):
            raise _Untranslatable(f"{op}: axes lost")
        fresh = []
        for var, size in zip(dims, shape):          # fresh variables: two views of one tensor are two tensors
            if var is not None:
                renamed = self._new_var(size)
                expr = _subst(expr, var, ("var", renamed))
                var = renamed
            fresh.append(var)
        dims = fresh
        return _Val(expr, shape, tuple(reversed(dims)), True, val.dtype)

    def finish(self, z: torch.fx.Node, val: _Val):
        """The expression with the score's axes named: j the key axis, i the query axis (h, b for 4-D)."""
        shape = _shape(z)
        names = ["j", "i"] + (["h", "b"] if len(shape) == 4 else [])
        expr = val.expr
        for k, var in enumerate(val.axes):
            if var is None:
                continue
            if _known_eq(self.var_size.get(var, shape[-1 - k]), 1):
                expr = _subst(expr, var, ("num", 0))
            elif k < len(names):
                expr = _subst(expr, var, ("idx", names[k]))
            else:
                raise NearMiss("the modification depends on a batch index that the heads were folded into")
        return expr


def _condition(e, val: _Val):
    c = _as_condition(e)
    if c is None:
        if val.dtype == torch.bool:
            return e
        return _binary("!=", e, ("num", 0))
    return c


def _describe_op(node) -> str:
    target = node.target if node.op == "call_method" else getattr(node.target, "__name__", str(node.target))
    return f"{target} ({node.name})"


# ── the pattern ─────────────────────────────────────────────────────────────────────────────────
@dataclasses.dataclass
class _Found:
    """One attention, analysed, before the graph changes."""

    out: torch.fx.Node                  # the second matmul
    q: torch.fx.Node
    q_perm: list | None
    k: torch.fx.Node                    # [..., S, E] (not transposed)
    k_perm: list | None
    v: torch.fx.Node
    v_perm: list | None
    expr: tuple
    extras: list
    dropout: float
    region: list                        # the nodes the call replaces
    rank: int
    out_shape: tuple
    score_shape: tuple
    kv_heads: Any = None                # Hkv of k and v when fewer than the query heads, or None


def _matmul_operands(node):
    """(left, right, left letters, right letters, output letters) of a matmul or two-operand einsum."""
    op = _op(node)
    if op == "matmul":
        args = node.args if node.op == "call_method" else node.args
        if len(args) != 2:
            return None
        return args[0], args[1], None
    if op == "einsum":
        operands = node.args[1:]
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = operands[0]
        equation = node.args[0]
        if len(operands) != 2 or not isinstance(equation, str) or "..." in equation or "->" not in equation:
            return None
        ins, out = equation.replace(" ", "").split("->")
        left, right = ins.split(",")
        return operands[0], operands[1], (left, right, out)
    return None


def _contraction(letters):
    """For an einsum X·Y: (first operand's index, permutation of it to [batch, row, c],
    permutation of the other to [batch, col, c]) where out = batch + row + col and c is summed."""
    left, right, out = letters
    if len(set(out)) != len(out) or len(out) < 2:
        return None
    summed = (set(left) & set(right)) - set(out)
    if len(summed) != 1 or len(left) != len(out) or len(right) != len(out):
        return None
    (c,) = summed
    batch, row, col = out[:-2], out[-2], out[-1]
    for first, a, b in ((0, left, right), (1, right, left)):
        if set(a) == set(batch + row + c) and set(b) == set(batch + col + c) and len(set(a)) == len(a):
            return first, [a.index(x) for x in batch + row + c], [b.index(x) for x in batch + col + c]
    return None


def _softmax_input(node):
    """(Z, dim, nodes of the softmax) for a softmax node or a written-out one, else None."""
    op = _op(node)
    if op == "softmax":
        return _arg(node, 1, "dim"), node.args[0], [node]
    if op != "div":
        return None
    num, den = node.args[0], _arg(node, 1, "other")
    if _op(num) != "exp" or _op(den) != "sum" or den.args[0] is not num:
        return None
    if not (_arg(den, 2, "keepdim", False) is True):
        return None
    dim = _arg(den, 1, "dim")
    dim = dim[0] if isinstance(dim, (list, tuple)) and len(dim) == 1 else dim
    shifted = num.args[0]
    nodes = [node, num, den]
    if _op(shifted) == "sub":
        z, top = shifted.args[0], shifted.args[1]
        while _op(top) == "detach":
            nodes.append(top)
            top = top.args[0]
        if _op(top) == "amax" and top.args[0] is z and _arg(top, 2, "keepdim", False) is True:
            top_dim = _arg(top, 1, "dim")
            top_dim = top_dim[0] if isinstance(top_dim, (list, tuple)) and len(top_dim) == 1 else top_dim
            if top_dim == dim:
                return dim, z, nodes + [shifted, top]
    return dim, shifted, nodes


def _is_key_dim(dim, rank: int) -> bool:
    return isinstance(dim, int) and dim in (-1, rank - 1)


def _dropout(node, gm):
    """(input, p, training) of a dropout node (F.dropout, torch.dropout, an nn.Dropout module), or None."""
    if node.op == "call_module":
        module = gm.get_submodule(node.target)
        if isinstance(module, torch.nn.Dropout):
            return node.args[0], module.p, module.training
        return None
    if _op(node) != "dropout":
        return None
    p = _arg(node, 1, "p", 0.5)
    training = _arg(node, 2, "train" if node.target is torch.dropout else "training", True)
    return node.args[0], p, training


def _untransposed(node):
    """x for x.transpose(-2, -1) (or .mT, or a permute swapping the last two axes), else None."""
    op, rank = _op(node), len(_shape(node))
    if op == "transpose" and {d % rank for d in node.args[1:3] if isinstance(d, int)} == {rank - 2, rank - 1}:
        return node.args[0]
    if op == "getattr" and node.args[1] == "mT":
        return node.args[0]
    if op == "permute":
        order = list(node.args[1]) if len(node.args) == 2 and isinstance(node.args[1], (list, tuple)) \
            else list(node.args[1:])
        if [d % rank for d in order] == list(range(rank - 2)) + [rank - 1, rank - 2]:
            return node.args[0]
    return None


def _unrepeated(node):
    """(x, Hkv) for the heads of a 4-D x repeated Hq // Hkv times each (repeat_interleave on dim 1, or
    x[:, :, None].expand(...).reshape(...)), else (node, None)."""
    shape = _shape(node)
    if len(shape) != 4:
        return node, None
    if _op(node) == "repeat_interleave":
        source, dim = node.args[0], _arg(node, 2, "dim")
        if isinstance(_arg(node, 1, "repeats"), int) and dim in (1, -3) and len(_shape(source)) == 4:
            return source, _shape(source)[1]
    if _op(node) in ("reshape", "view"):
        expanded = node.args[0]
        if _op(expanded) == "expand" and len(_shape(expanded)) == 5:
            inserted = expanded.args[0]
            source = None
            if _op(inserted) == "getitem" and isinstance(inserted.args[1], tuple) \
                    and len(inserted.args[1]) >= 3 and inserted.args[1][2] is None \
                    and all(i == slice(None) for i in inserted.args[1][:2] + inserted.args[1][3:]):
                source = inserted.args[0]
            elif _op(inserted) == "unsqueeze" and _arg(inserted, 1, "dim") in (2, -3):
                source = inserted.args[0]
            if source is not None and len(_shape(source)) == 4:
                return source, _shape(source)[1]
    return node, None


def _analyse(out, gm) -> _Found | None:
    """The attention ending at `out`, a matmul / einsum; None when `out` is not one; NearMiss when it is
    attention that cannot be replaced."""
    operands = _matmul_operands(out)
    if operands is None:
        return None
    left, right, letters = operands
    v_perm = None
    if letters is not None:
        found = _contraction(letters)
        if found is None:
            return None
        first, p_perm, v_perm = found
        if first == 1:
            left, right = right, left
        if p_perm != list(range(len(p_perm))):
            return None
        v_perm = v_perm[:-2] + [v_perm[-1], v_perm[-2]]      # [batch, S, Ev]
    p, region, dropout = left, [out], 0.0
    while True:
        if not isinstance(p, torch.fx.Node):
            return None
        step = _dropout(p, gm)
        if step is not None:
            region.append(p)
            p, rate, training = step
            dropout = rate if training else dropout
            continue
        if _op(p) in _CASTS | _SAME:
            region.append(p)
            p = p.args[0]
            continue
        break
    softmax = _softmax_input(p)
    if softmax is None:
        return None
    dim, z, softmax_nodes = softmax
    region += softmax_nodes
    score, dependent = _scores(z)
    if score is None:
        return None
    rank = len(_shape(score))
    if not _is_key_dim(dim, len(_shape(z))):
        raise NearMiss(f"the softmax is over dim {dim}, not the key dim (-1)")
    operands = _matmul_operands(score)
    if operands is None:
        return None
    q, k_source, s_letters = operands
    q_perm = k_perm = None
    if s_letters is not None:
        found = _contraction(s_letters)
        if found is None:
            raise NearMiss("the scores' einsum is not a batched q·kᵀ")
        first, q_perm, k_perm = found
        if first == 1:
            q, k_source = k_source, q
        k = k_source
    else:
        k = _untransposed(k_source)
        k_perm = None if k is not None else list(range(rank - 2)) + [rank - 1, rank - 2]
        k = k if k is not None else k_source
    if any(not isinstance(x, torch.fx.Node) for x in (q, k, right)):
        raise NearMiss("an operand is not a tensor of the graph")
    if not (len(_shape(q)) == len(_shape(k_source)) == len(_shape(right)) == rank >= 2):
        raise NearMiss("the matmuls' operands differ in rank (broadcast matmul)")
    # everything between the scores and the output is used only inside the pattern
    inside = set(region) | dependent
    for node in [p] + region[1:]:
        if any(u not in inside for u in node.users):
            raise NearMiss("the attention weights are used elsewhere")
    for node in dependent:
        if any(u not in inside for u in node.users):
            raise NearMiss("the attention scores are used elsewhere")
    dtypes = {_value(x).dtype for x in (q, k, right)}
    if len(dtypes) != 1 or next(iter(dtypes)) not in _ATTENTION_DTYPES:
        raise NearMiss(f"dtype {', '.join(sorted(str(d) for d in dtypes))}: attention takes float16, bfloat16 "
                       "or float32 (one dtype for q, k and v)")
    translator = _Translator(score, dependent)
    try:
        expr = translator.finish(z, translator.translate(z))
        render(expr)
    except _Untranslatable as e:
        raise NearMiss(f"the modification cannot be written as an expression: {e}") from None
    for extra in translator.extras:
        value = _value(extra)
        if value.requires_grad:
            raise NearMiss(f"{extra.name} requires grad: the flash-attention op gives extra tensors no gradient")
        shape = tuple(value.shape)
        if len(shape) > rank or any(not (_known_eq(a, 1) or _known_eq(a, b))
                                    for a, b in zip(shape[::-1], _shape(z)[::-1])):
            raise NearMiss(f"{extra.name} {list(shape)} does not broadcast to the scores {list(_shape(z))}")
    k_heads = v_heads = None
    if rank == 4 and k_perm is None and v_perm is None:
        k_un, k_heads = _unrepeated(k)
        v_un, v_heads = _unrepeated(right)
        if k_heads is not None and k_heads == v_heads:
            k, right = k_un, v_un
        else:
            k_heads = None
        if k_heads is None and _known_eq(_shape(k)[1], 1) and _known_eq(_shape(right)[1], 1):
            k_heads = 1          # one key/value head, broadcast by the matmul over the query heads
    region += sorted(dependent, key=lambda n: -n.meta.get("mini_inductor_order", 0))
    return _Found(out, q, q_perm, k, k_perm, right, v_perm, expr, list(translator.extras), float(dropout),
                  region, rank, _shape(out), _shape(z), k_heads)


def _scores(z):
    """(the score matmul, the nodes on paths from it to z) for the modification ending at z."""
    leaves, seen, stack = set(), set(), [z]
    while stack:
        n = stack.pop()
        if not isinstance(n, torch.fx.Node) or n in seen:
            continue
        seen.add(n)
        op = _op(n)
        if op in ("matmul", "einsum"):
            leaves.add(n)
        elif op in _POINTWISE:
            stack.extend(a for a in list(n.args) + list(n.kwargs.values()) if isinstance(a, torch.fx.Node))
    candidates = [n for n in leaves if len(_shape(n)) >= 2 and _shape(n) == _shape(z)[-len(_shape(n)):]]
    if len(candidates) != 1:
        return None, set()
    score = candidates[0]
    dependent: set = set()
    memo: dict = {}

    def reaches(n) -> bool:
        if n is score:
            return True
        if not isinstance(n, torch.fx.Node) or _op(n) not in _POINTWISE:
            return False
        if n not in memo:
            memo[n] = any(reaches(a) for a in list(n.args) + list(n.kwargs.values()))
        return memo[n]
    reaches(z)
    dependent = {n for n, r in memo.items() if r} | {score}
    if _shape(score) != _shape(z):
        raise NearMiss("the scores are broadcast to a larger shape before the softmax")
    return score, dependent


# ── the choice of the call ───────────────────────────────────────────────────────────────────────
def _scale_of(e):
    """c for s * c (or s / c, or s), else None."""
    if e == ("s",):
        return 1.0
    if e[0] == "bin" and e[1] == "*":
        if e[2] == ("s",) and e[3][0] == "num":
            return float(e[3][1])
        if e[3] == ("s",) and e[2][0] == "num":
            return float(e[2][1])
    if e[0] == "bin" and e[1] == "/" and e[2] == ("s",) and e[3][0] == "num" and e[3][1] != 0:
        return 1.0 / float(e[3][1])
    return None


_I, _J = ("idx", "i"), ("idx", "j")
_KEEP = {("bin", "<=", _J, _I), ("bin", ">=", _I, _J), ("not", ("bin", ">", _J, _I)), ("not", ("bin", "<", _I, _J))}
_MASKED = {("bin", ">", _J, _I), ("bin", "<", _I, _J), ("not", ("bin", "<=", _J, _I)), ("not", ("bin", ">=", _I, _J))}
_NEG_INF = ("num", -math.inf)


def sdpa_form(e):
    """(scale, is_causal) when `e` is what F.scaled_dot_product_attention computes, else None."""
    scale = _scale_of(e)
    if scale is not None:
        return scale, False
    if e[0] == "call" and e[1] == "where":
        cond, x, y = e[2]
        inner = x if cond in _KEEP and y == _NEG_INF else y if cond in _MASKED and x == _NEG_INF else None
        scale = _scale_of(inner) if inner is not None else None
        if scale is not None:
            return scale, True
    if e[0] == "bin" and e[1] in ("*", "/") and e[3][0] == "num" and e[3][1] > 0:
        inner = sdpa_form(e[2])
        if inner is not None and inner[1] and inner[0] == 1.0:
            return (e[3][1] if e[1] == "*" else 1.0 / e[3][1]), True
    return None


# ── the rewrite ──────────────────────────────────────────────────────────────────────────────────
class _Emitter:
    """New nodes before `anchor`, each with its example_value computed under the graph's fake mode."""

    def __init__(self, graph, anchor, fake_mode):
        self.graph, self.anchor, self.fake_mode = graph, anchor, fake_mode
        self.created: list[torch.fx.Node] = []

    def __call__(self, kind: str, target, *args, **kwargs) -> torch.fx.Node:
        with self.graph.inserting_before(self.anchor):
            node = self.graph.create_node(kind, target, args, kwargs)
        self.created.append(node)
        for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
            if key in self.anchor.meta:
                node.meta[key] = self.anchor.meta[key]
        fake_args, fake_kwargs = torch.fx.node.map_arg((args, kwargs), lambda n: n.meta["example_value"])
        # the mode of the graph's own fake values (the tracing context may hold another one)
        mode = next((getattr(n.meta["example_value"], "fake_mode", None) for n in node.all_input_nodes
                     if getattr(n.meta["example_value"], "fake_mode", None) is not None), self.fake_mode)
        with mode if mode is not None else contextlib.nullcontext():
            if kind == "call_method":
                value = getattr(fake_args[0], target)(*fake_args[1:], **fake_kwargs)
            else:
                value = target(*fake_args, **fake_kwargs)
        node.meta["example_value"] = value
        return node

    def undo(self) -> None:
        for node in reversed(self.created):
            self.graph.erase_node(node)


def _to_4d(emit, node, perm, rank: int, batch: tuple, heads=None):
    """`node` with its batch dims folded to [B, H] (the call takes 4-D tensors)."""
    if perm is not None and perm != list(range(rank)):
        node = emit("call_method", "permute", node, *perm)
    shape = _shape(node)
    want = batch[:-1] + ((heads,) if heads is not None else batch[-1:]) if batch else ()
    if tuple(shape[:-2]) != want:
        if any(not _known_eq(a, b) for a, b in zip(shape[:-2], want)):
            if not _static(*want):
                raise NearMiss("symbolic sizes: a broadcast batch dim would need an expand")
            node = emit("call_method", "expand", node, *want, -1, -1)
    if rank == 4:
        return node
    if rank < 4:
        for _ in range(4 - rank):
            node = emit("call_method", "unsqueeze", node, 0)
        return node
    return emit("call_method", "flatten", node, 0, rank - 4)


def _extra_4d(emit, node, rank: int, score_shape: tuple):
    """An extra tensor right-aligned against the scores, padded to the scores' rank and folded like them."""
    shape = _shape(node)
    value = _value(node)
    if not (value.dtype == torch.bool or value.dtype.is_floating_point):
        node = emit("call_method", "to", node, torch.float32)
    for _ in range(rank - len(shape)):
        node = emit("call_method", "unsqueeze", node, 0)
    if rank == 4:
        return node
    if rank < 4:
        for _ in range(4 - rank):
            node = emit("call_method", "unsqueeze", node, 0)
        return node
    batch = _shape(node)[:rank - 3]
    if not all(_known_eq(b, 1) for b in batch) and \
            any(not _known_eq(a, b) for a, b in zip(batch, score_shape[:rank - 3])):
        if not _static(*score_shape[:rank - 3]):
            raise NearMiss("symbolic sizes: an extra tensor would need an expand")
        node = emit("call_method", "expand", node, *score_shape[:rank - 3], -1, -1, -1)
    return emit("call_method", "flatten", node, 0, rank - 4)


def _rewrite(gm, found: _Found, fake_mode, choice) -> None:
    target, scale, causal = choice
    emit = _Emitter(gm.graph, found.out, fake_mode)
    try:
        batch = found.out_shape[:-2]
        rank = found.rank
        if rank > 4 and not _static(*batch):
            raise NearMiss("symbolic sizes: folding more than two batch dims back needs their sizes")
        q = _to_4d(emit, found.q, found.q_perm, rank, batch)
        k = _to_4d(emit, found.k, found.k_perm, rank, batch, found.kv_heads)
        v = _to_4d(emit, found.v, found.v_perm, rank, batch, found.kv_heads)
        gqa = found.kv_heads is not None and not _known_eq(found.kv_heads, _shape(q)[1])
        if not gqa and not _known_eq(_shape(k)[1], _shape(q)[1]):
            gqa = True       # one key/value head broadcast over the query heads
        if target == "sdpa":
            kwargs = {"dropout_p": found.dropout, "is_causal": causal, "scale": scale}
            if gqa:
                kwargs["enable_gqa"] = True
            result = emit("call_function", F.scaled_dot_product_attention, q, k, v, **kwargs)
            result = emit("call_method", "contiguous", result)      # matmul's layout, whatever the backend's
        else:
            extras = [_extra_4d(emit, t, rank, found.score_shape) for t in found.extras]
            result = emit("call_function", target, q, k, v, extras, render(found.expr))
        if rank < 4:
            for _ in range(4 - rank):
                result = emit("call_method", "squeeze", result, 0)
        elif rank > 4:
            result = emit("call_method", "unflatten", result, 0, tuple(batch[:-1]))
    except BaseException:
        emit.undo()
        raise
    found.out.replace_all_uses_with(result)
    _erase_dead(gm.graph, found.region)


def _erase_dead(graph, nodes) -> None:
    """Erase the replaced nodes and what only they used (never placeholders or in-place calls)."""
    stack, erased = list(nodes), set()
    while stack:
        node = stack.pop()
        if node in erased or node.users or node.op not in ("call_function", "call_method", "call_module"):
            continue
        if node.op == "call_method" and str(node.target).endswith("_"):
            continue
        inputs = list(node.all_input_nodes)
        graph.erase_node(node)
        erased.add(node)
        stack.extend(inputs)


def _choose(found: _Found):
    """("sdpa", scale, is_causal), or (the flash op, None, False); NearMiss when neither computes it."""
    form = sdpa_form(found.expr)
    score_shape = found.score_shape
    if form is not None and form[1] and not _known_eq(score_shape[-1], score_shape[-2]):
        form = None          # is_causal only where L == S is known (without a guard)
    if form is not None:
        return "sdpa", form[0], form[1]
    if found.dropout > 0:
        raise NearMiss(f"dropout (p={found.dropout}) in training after a modification SDPA does not compute "
                       f"({render(found.expr)}): the flash-attention op has no dropout")
    op = flash_target()
    if op is None:
        raise NearMiss("no flash-attention op is registered (mini_inductor/attention/flash.py)")
    return op, None, False


def _shapes(found: _Found) -> str:
    parts = [f"{n} {list(_shape(x))}" for n, x in (("q", found.q), ("k", found.k), ("v", found.v))]
    return ", ".join(parts)


def fuse_attention(gm: torch.fx.GraphModule, example_inputs, graph: str) -> list[AttentionMatch]:
    """Replace every attention in Dynamo's graph `gm` (named `graph` in the records) by one call, in
    place; the records of what was found, matched or not."""
    fake_mode = torch._guards.detect_fake_mode(example_inputs)
    if fake_mode is None:
        fake_mode = torch._guards.detect_fake_mode([n.meta.get("example_value") for n in gm.graph.nodes
                                                    if isinstance(n.meta.get("example_value"), torch.Tensor)])
    records = []
    for n, node in enumerate(gm.graph.nodes):
        node.meta["mini_inductor_order"] = n
    alive = set(gm.graph.nodes)
    for node in list(gm.graph.nodes):
        if node not in alive or _op(node) not in ("matmul", "einsum"):
            continue
        where, name = source_line(node), node.name
        try:
            found = _analyse(node, gm)
            if found is None:
                continue
            choice = _choose(found)
            mod, shapes = render(found.expr), _shapes(found)
            _rewrite(gm, found, fake_mode, choice)
            alive = set(gm.graph.nodes)
        except NearMiss as e:
            records.append(AttentionMatch(graph, name, where, "", reason=str(e)))
            continue
        except Exception as e:  # noqa: BLE001  (a pass that finds attention never fails a compile)
            log.warning("mini_inductor: attention at %s not replaced: %s: %s", name, type(e).__name__, e)
            records.append(AttentionMatch(graph, name, where, "", reason=f"internal error: {type(e).__name__}: {e}"))
            continue
        records.append(AttentionMatch(graph, name, where, "sdpa" if choice[0] == "sdpa" else "flash", mod, shapes))
    for node in gm.graph.nodes:
        node.meta.pop("mini_inductor_order", None)
    if any(r.target for r in records):
        gm.graph.lint()
        gm.recompile()
    return records

"""The score modification of an attention as the contract's `mod` expression (attention/__init__.py).

The matcher (match.py) finds the pointwise nodes between the scores and the softmax; this module
says what they compute, as a small expression tree that `render` writes in the contract's language:

    the scores                                  s
    a tensor not computed from the scores       t0, t1, ... (an extra tensor of the call)
    a tensor built from arange / ones().tril()  an expression in i and j (h and b for 4-D scores)

Index-built tensors are followed axis by axis: each axis that varies carries a variable, views
(slices, None, transposes, reshapes adding size-1 axes) move variables between axes, and
broadcasting joins the variables of one axis. At the softmax, the key axis's variable is `j` and the
query axis's `i`: `torch.ones(T, T).tril()` becomes "j <= i" and `arange(T)[None] - arange(T)[:, None]`
"j - i", so that a mask costs the kernel an index comparison and no memory. A view of a tensor that
holds data (a registered buffer, an input) is not followed: it is an extra tensor; except an input
the matcher marked TRIL_DATA (its data is ones(...).tril(), under a guard: match.py), read as "j <= i".

`sdpa_form` says whether an expression is exactly what F.scaled_dot_product_attention computes.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
import operator
from typing import Any

import torch
import torch.fx
import torch.nn.functional as F
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from ..conversions import always_converts, converts


# node.meta key: a placeholder whose compile-time data is ones(...).tril() over its last two dims, with
# every leading dim 1 (match.py `tril_inputs`)
TRIL_DATA = "mini_inductor_tril_data"


class NearMiss(Exception):
    """Attention found, but not replaced: the message says why."""


class Untranslatable(Exception):
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
    # (read by flex.py's score_mod reader; not in POINTWISE, so match.py leaves them as before)
    torch.relu: "relu", F.relu: "relu", torch.sign: "sign", torch.pow: "pow", operator.pow: "pow",
    torch.log1p: "log1p",
}
_METHOD_ALIASES = {"bmm": "matmul", "true_divide": "div", "subtract": "sub", "multiply": "mul",
                   "logical_not": "not", "bitwise_not": "not", "logical_and": "and", "bitwise_and": "and",
                   "logical_or": "or", "bitwise_or": "or", "clip": "clamp", "remainder": "mod",
                   "swapaxes": "transpose", "floor_divide": "floordiv"}
# Under a TorchFunctionMode (torch.set_default_device, say) Dynamo writes operators as their dunder
# methods: ~m is m.__invert__(). The reflected ones of commutative operators keep their meaning.
_METHOD_ALIASES.update({f"__{name}__": op for name, op in (
    ("invert", "not"), ("and", "and"), ("rand", "and"), ("or", "or"), ("ror", "or"), ("add", "add"),
    ("radd", "add"), ("sub", "sub"), ("mul", "mul"), ("rmul", "mul"), ("truediv", "div"),
    ("floordiv", "floordiv"), ("mod", "mod"), ("neg", "neg"), ("abs", "abs"), ("lt", "lt"), ("le", "le"),
    ("gt", "gt"), ("ge", "ge"), ("eq", "eq"), ("ne", "ne"), ("getitem", "getitem"), ("matmul", "matmul"),
    ("pow", "pow"))})
CASTS = {"to", "type", "float", "half", "bfloat16", "bool", "int", "long", "double", "type_as"}
SAME = {"contiguous", "clone", "detach"}
_BINARY = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%", "lt": "<",
           "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!=", "and": "&", "or": "|"}
_UNARY_CALLS = {"tanh", "exp", "log", "sigmoid", "sqrt", "abs"}
POINTWISE = (set(_BINARY) | _UNARY_CALLS | CASTS | SAME
             | {"neg", "not", "where", "masked_fill", "clamp", "clamp_min", "clamp_max", "minimum", "maximum"})
ATTENTION_DTYPES = (torch.float16, torch.bfloat16, torch.float32)


def op_of(node) -> str | None:
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


def arg(node, index: int, name: str, default=None):
    """Argument `name` of a call, given by position (counting self for methods) or by keyword."""
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def value_of(node):
    return node.meta.get("example_value") if isinstance(node, torch.fx.Node) else None


def shape_of(node) -> tuple:
    v = value_of(node)
    return tuple(v.shape) if isinstance(v, torch.Tensor) else ()


def known_eq(a, b) -> bool:
    """a == b without adding a guard (sizes may be symbolic)."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    from torch.fx.experimental.symbolic_shapes import statically_known_true
    try:
        return bool(statically_known_true(a == b))
    except Exception:  # noqa: BLE001  (a size we cannot decide is not equal)
        return False


# ops that give a view of their input: a mutation through the view changes the input too
_VIEWS = {"view", "reshape", "transpose", "permute", "expand", "unsqueeze", "squeeze", "narrow", "select",
          "flatten", "unflatten", "t", "getitem", "unbind", "split", "chunk", "as_strided", "view_as", "getattr"}


# ops that may return their input itself or a view of it (contiguous of a contiguous tensor, a `to` that
# changes nothing, movedim, diagonal): an in-place change through their result changes the input
# (fuzz seeds 132 and 137: attention(...).contiguous().zero_() broke the flash op's backward)
_MAY_ALIAS = {"contiguous", "to", "float", "half", "double", "bfloat16", "type", "type_as", "reshape_as",
              "expand_as", "movedim", "moveaxis", "diagonal", "alias", "unfold", "tensor_split", "split_with_sizes",
              "swapaxes", "swapdims", "detach", "view_as_real", "real", "imag", "resolve_conj", "resolve_neg"}
ALIASING = _VIEWS | _MAY_ALIAS


_OPERATOR_IN_PLACE = {"iadd", "isub", "imul", "itruediv", "ifloordiv", "imod", "ipow", "iand", "ior", "ixor",
                      "ilshift", "irshift", "imatmul"}


def writes_in_place(u: torch.fx.Node) -> bool:
    """A call that writes its first argument in place (a setitem, an in-place method or function such
    as `masked_fill_` or `torch.relu_`, an augmented operator), not counting an `out=`."""
    if u.op not in ("call_function", "call_method"):
        return False
    name = u.target if isinstance(u.target, str) else getattr(u.target, "__name__", "")
    if getattr(u.target, "__module__", None) == "_operator":    # operator.and_ is not in place
        return name == "setitem" or name in _OPERATOR_IN_PLACE
    return name.endswith("_") and not name.endswith("__")


def mutated(node, after=None) -> bool:
    """Whether the graph changes `node`'s tensor in place, directly or through a view of it (a setitem,
    an in-place method such as `masked_fill_`, an `out=`): its value then is not what built it.
    `after`: only changes after that node (in the graph's order) count."""
    def late(u) -> bool:
        return after is None or u.meta.get("mini_inductor_order", 0) > after.meta.get("mini_inductor_order", 0)
    seen, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        for u in n.users:
            if u.op not in ("call_function", "call_method"):
                continue
            name = u.target if isinstance(u.target, str) else getattr(u.target, "__name__", "")
            if u.args and u.args[0] is n and writes_in_place(u) and late(u):
                return True
            if "out" in u.kwargs and late(u):
                return True
            if op_of(u) in ALIASING or name in ALIASING or name == "getitem":
                stack.append(u)
    return False


def static(*sizes) -> bool:
    return all(isinstance(s, int) for s in sizes)


# ── the modification as an expression ──────────────────────────────────────────────────────────
# Trees of tuples: ("s",), ("t", n), ("gather", n, items), ("num", value), ("idx", "i"), ("var", n),
# ("bin", op, a, b), ("neg", a), ("not", a), ("call", name, (args...)).
_TRUE, _FALSE = ("bin", "==", ("num", 0), ("num", 0)), ("bin", "!=", ("num", 0), ("num", 0))
_PRECEDENCE = {"|": 2, "&": 3, "+": 4, "-": 4, "*": 5, "/": 5, "//": 5, "%": 5}
_CMP = {"<", "<=", ">", ">=", "==", "!="}


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
    if kind == "gather":   # ("gather", n, index items): t<n> read at a computed index
        return f"t{e[1]}[{', '.join(render(x) for x in e[2])}]"
    if kind == "num":
        return _number_text(e[1])
    if kind == "idx":
        return e[1]
    if kind == "var":
        raise Untranslatable("an index of a tensor axis that is not the query or key axis")
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


class Translator:
    """The modification between the scores and the softmax, as an expression (see `render`)."""

    def __init__(self, score: torch.fx.Node, dependent: set):
        self.score, self.dependent = score, dependent
        self.extras: list[torch.fx.Node] = []
        self.memo: dict[torch.fx.Node, _Val] = {}
        self.vars = itertools.count()
        self.var_size: dict[int, Any] = {}
        self.data_tril: list[torch.fx.Node] = []   # inputs read as `j <= i` by their data (TRIL_DATA)
        self.sym_scalars: list = []   # SymFloat values of sizes taken as numbers: guarded on a match

    def translate(self, x) -> _Val:
        if isinstance(x, bool):
            return _Val(_TRUE if x else _FALSE, (), (), True, torch.bool)
        if isinstance(x, (int, float)):
            if isinstance(x, float) and math.isnan(x):
                raise Untranslatable("a NaN constant")
            return _Val(("num", x), (), (), True, torch.float32 if isinstance(x, float) else torch.int64)
        if not isinstance(x, torch.fx.Node):
            raise Untranslatable(f"an argument {x!r}")
        if x in self.memo:
            return self.memo[x]
        value = value_of(x)
        if op_of(x) == "item" and isinstance(value_of(x.args[0]), torch.Tensor) and value_of(x.args[0]).numel() == 1:
            return self.translate(x.args[0])     # a float Dynamo made an input (a 0-dim tensor): data
        if isinstance(value, torch.SymFloat) and x not in self.dependent:
            val = self._size_scalar(x, value)
            self.memo[x] = val
            return val
        if not isinstance(value, torch.Tensor):
            raise Untranslatable(f"{x.name} is not a tensor (a size or scale computed at run time?)")
        if x is self.score:
            val = _Val(("s",), tuple(value.shape), (), False, value.dtype)
        elif x in self.dependent:
            val = self._node(x, scores=True)
        else:
            mark = (len(self.extras), len(self.memo), len(self.data_tril))
            try:
                if mutated(x):   # changed in place after it was built: data, not the structure it was built with
                    raise Untranslatable(f"{x.name} is changed in place")
                val = self._node(x, scores=False)
            except Untranslatable:
                self.extras[mark[0]:] = []
                self.data_tril[mark[2]:] = []
                for key in list(self.memo)[mark[1]:]:
                    del self.memo[key]
                val = self._extra(x, value)
        self.memo[x] = val
        return val

    def _size_scalar(self, node, value) -> _Val:
        """A float computed from sizes (1 / sqrt(head dim) under dynamic=True) taken at its value here;
        the match guards on it (`sym_scalars`), so another value recompiles rather than reusing this one.
        Not an int: one made of sizes is likelier an offset that changes every call (a causal mask's
        S - L over a growing cache), which a guard would recompile for each time."""
        hint = value.node.hint
        if hint is None or free_unbacked_symbols(value):
            raise Untranslatable(f"{node.name} is a number read from data at run time")
        self.sym_scalars.append(value)
        return _Val(("num", float(hint)), (), (), True, torch.float32)

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
        shape = shape_of(node)
        exprs = [v.expr for v in vals]
        axes = []
        for k in range(len(shape)):
            chosen = None
            for n, v in enumerate(vals):
                var = v.axis(k)
                if var is None:
                    continue
                if known_eq(v.shape[-1 - k], 1) and not known_eq(shape[-1 - k], 1):
                    exprs[n] = _subst(exprs[n], var, ("num", 0))     # a broadcast axis: index 0
                elif chosen is None:
                    chosen = var
                else:
                    exprs[n] = _subst(exprs[n], var, ("var", chosen))
            axes.append(chosen)
        return exprs, tuple(axes), all(v.pure for v in vals)

    def _pointwise(self, node, op: str, operands: list, build) -> _Val:
        if value_of(node).dtype in (torch.uint8, torch.int8) and op in ("add", "sub", "mul", "neg"):
            # 8-bit arithmetic wraps around (a uint8 0 - 1 is 255); the expression's numbers do not
            raise Untranslatable(f"{op} in {value_of(node).dtype}, which wraps around")
        vals = [self.translate(a) for a in operands]
        exprs, axes, pure = self._combine(node, vals)
        return _Val(build(exprs, vals), shape_of(node), axes, pure, value_of(node).dtype)

    def _node(self, node, scores: bool) -> _Val:
        if node.op == "placeholder" and node.meta.get(TRIL_DATA):
            # an input whose data, at compile time, is a lower triangle of ones (a causal mask buffer):
            # read as the tril it holds; the compiled graph is guarded on that data (match.py)
            shape, dtype = shape_of(node), value_of(node).dtype
            row, col = self._new_var(shape[-2]), self._new_var(shape[-1])
            self.data_tril.append(node)
            cond = _binary("<=", ("var", col), ("var", row))
            if dtype != torch.bool:   # ones and zeros of a number type (nanoGPT's float `bias`)
                one = ("num", 1.0 if dtype.is_floating_point else 1)
                cond = _where(cond, one, ("num", 0.0 if dtype.is_floating_point else 0))
            return _Val(cond, shape, (col, row), True, dtype)
        op = op_of(node)
        args = list(node.args)
        if op in _BINARY:
            other = arg(node, 1, "other")
            alpha = node.kwargs.get("alpha", 1)
            if node.kwargs.get("rounding_mode") is not None:
                raise Untranslatable("div with a rounding mode")
            sym = _BINARY[op]
            _check_converts(node, op, "alpha", [alpha])

            def build(e, vals):
                b = e[1] if alpha == 1 else _binary("*", ("num", alpha), e[1])
                return _binary(sym, e[0], b)
            return self._pointwise(node, op, [args[0], other], build)
        if op == "neg":
            return self._pointwise(node, op, [args[0]], lambda e, v: ("neg", e[0]))
        if op == "not":
            if value_of(node).dtype != torch.bool:
                raise Untranslatable("a bitwise not of integers")
            return self._pointwise(node, op, [args[0]], lambda e, v: _not(e[0]))
        if op in _UNARY_CALLS:
            return self._pointwise(node, op, [args[0]], lambda e, v: ("call", op, (e[0],)))
        if op in ("minimum", "maximum"):
            return self._pointwise(node, op, [args[0], arg(node, 1, "other")],
                                   lambda e, v: ("call", op, (e[0], e[1])))
        if op in ("clamp", "clamp_min", "clamp_max"):
            lo = arg(node, 1, "min") if op != "clamp_max" else None
            hi = (arg(node, 2, "max") if op == "clamp" else arg(node, 1, "max")) if op != "clamp_min" else None
            bounds = [b for b in (lo, hi) if b is not None]
            _check_converts(node, op, "bound", bounds)

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
                raise Untranslatable("torch.where with one argument")
            _check_converts(node, op, "branch", [arg(node, 1, "input"), arg(node, 2, "other")])
            return self._pointwise(node, op, [args[0], arg(node, 1, "input"), arg(node, 2, "other")],
                                   lambda e, v: _where(_condition(e[0], v[0]), e[1], e[2]))
        if op == "masked_fill":
            _check_converts(node, op, "value", [arg(node, 2, "value")])
            _check_value_tensor_converts(node, arg(node, 2, "value"))
            return self._pointwise(node, op, [args[0], arg(node, 1, "mask"), arg(node, 2, "value")],
                                   lambda e, v: _where(_condition(e[1], v[1]), e[2], e[0]))
        if op in SAME:
            return self._pointwise(node, op, [args[0]], lambda e, v: e[0])
        if op in CASTS:
            return self._cast(node, scores)
        if scores:
            raise NearMiss(f"{describe_op(node)} on the scores is not a pointwise modification")
        return self._index_node(node, op, args)

    def _cast(self, node, scores: bool) -> _Val:
        val = self.translate(node.args[0])
        to, was = value_of(node).dtype, val.dtype
        if to == torch.bool and was != torch.bool:
            expr = _binary("!=", val.expr, ("num", 0))
        elif was == torch.bool and to != torch.bool:
            expr = ("call", "where", (val.expr, ("num", 1), ("num", 0)))
        elif to.is_floating_point and (was is None or not was.is_floating_point or val.pure or scores
                                       or to.itemsize >= was.itemsize):
            expr = val.expr       # exact, or the scores' own rounding (computed in float32 here)
        elif not to.is_floating_point and not was.is_floating_point:
            expr = val.expr
        elif was == torch.float32 and to in (torch.float16, torch.bfloat16):
            # a value computed in float32 (ALiBi's slopes times positions) rounded to the inputs' type
            expr = ("call", "f16" if to == torch.float16 else "bf16", (val.expr,))
        else:
            raise Untranslatable(f"a cast from {was} to {to}")
        return dataclasses.replace(val, expr=expr, shape=shape_of(node), dtype=to)

    # ── tensors built from indices: arange, ones(...).tril(), their slices and comparisons ──────
    def _index_node(self, node, op, args) -> _Val:
        shape = shape_of(node)
        dtype = value_of(node).dtype
        if op == "arange":
            bounds = list(args)
            if not bounds or not all(isinstance(b, (int, torch.fx.Node)) for b in bounds):
                raise Untranslatable("arange")
            start, step = (0, 1) if len(bounds) == 1 else (bounds[0], bounds[2] if len(bounds) > 2 else 1)
            if not isinstance(start, int) or not isinstance(step, int):
                raise Untranslatable("arange with a computed start or step")
            var = self._new_var(shape[0])
            expr = _binary("+", ("num", start), _binary("*", ("num", step), ("var", var))) if (start, step) != (0, 1) \
                else ("var", var)
            return _Val(expr, shape, (var,), True, dtype)
        if op in ("ones", "zeros", "full", "tensor"):
            if op == "full":
                fill = arg(node, 1, "fill_value")
            elif op == "tensor":
                fill = args[0]
            else:
                fill = 1 if op == "ones" else 0
            if not isinstance(fill, (int, float, bool)):
                raise Untranslatable(f"{op} of a computed value")
            if op == "full":
                _check_converts(node, op, "fill value", [fill])
            if dtype == torch.bool:
                expr = _TRUE if fill else _FALSE
            else:
                expr = ("num", float(fill) if dtype.is_floating_point else int(fill))
            return _Val(expr, shape, (), True, dtype)
        if op in ("tril", "triu"):
            val = self.translate(args[0])
            if not val.pure or len(shape) < 2:
                raise Untranslatable(op)
            diagonal = arg(node, 1, "diagonal", 0)
            if not isinstance(diagonal, int):
                raise Untranslatable(f"{op} with a computed diagonal")
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
                raise Untranslatable(f"{op} of a tensor that is not built from indices")
            return self._reshaped(node, op, args, source)
        raise Untranslatable(describe_op(node))

    def _reshaped(self, node, op, args, val: _Val) -> _Val:
        """A view of an index-built tensor: its variables follow their axes."""
        shape = shape_of(node)
        rank = len(val.shape)
        dims = [val.axis(rank - 1 - d) for d in range(rank)]        # left to right
        expr = val.expr
        if op == "getitem":
            index = args[1] if isinstance(args[1], tuple) else (args[1],)
            if sum(1 for i in index if i is Ellipsis) > 1:
                raise Untranslatable("getitem")
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
                        raise Untranslatable("a negative index of a symbolic size")
                    if dims[d] is not None:
                        expr = _subst(expr, dims[d], ("num", pos))
                    d += 1
                elif isinstance(item, slice):
                    start = item.start or 0
                    if item.step not in (None, 1) or not isinstance(start, int) or start < 0 \
                            or (item.stop is not None and not isinstance(item.stop, (int, torch.fx.Node))):
                        raise Untranslatable("a slice with a step, or a negative or computed start")
                    var = dims[d]
                    if var is not None and start:
                        moved = self._new_var(None)
                        expr = _subst(expr, var, _binary("+", ("var", moved), ("num", start)))
                        var = moved
                    out.append(var)
                    d += 1
                else:
                    raise Untranslatable("indexing with a tensor")
            out.extend(dims[d:])
            dims = out
        elif op == "unsqueeze":
            d = arg(node, 1, "dim")
            d = d + rank + 1 if d < 0 else d
            dims = dims[:d] + [None] + dims[d:]
        elif op in ("reshape", "view"):
            kept = [(s, v) for s, v in zip(val.shape, dims) if not known_eq(s, 1)]
            if [s for s, _ in kept] != [s for s in shape if not known_eq(s, 1)]:
                raise Untranslatable("a reshape that merges or splits axes")
            it = iter(v for _, v in kept)
            dims = [None if known_eq(s, 1) else next(it) for s in shape]
        elif op in ("expand", "expand_as"):
            dims = [None] * (len(shape) - rank) + dims
        elif op in ("transpose", "permute", "getattr"):
            if op == "getattr":
                if args[1] not in ("T", "mT"):
                    raise Untranslatable(f"attribute {args[1]}")
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
            raise Untranslatable(f"{op}: axes lost")
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
        shape = shape_of(z)
        names = ["j", "i"] + (["h", "b"] if len(shape) == 4 else [])
        expr = val.expr
        for k, var in enumerate(val.axes):
            if var is None:
                continue
            if known_eq(self.var_size.get(var, shape[-1 - k]), 1):
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


def describe_op(node) -> str:
    target = node.target if node.op == "call_method" else getattr(node.target, "__name__", str(node.target))
    return f"{target} ({node.name})"


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


def _check_converts(node, op: str, what: str, numbers) -> None:
    """Numbers eager converts to the node's dtype with a check, raising where one is out of range
    (conversions.py; a where's branch on the CPU excepted, whose ATen call is left to decide): the
    graph is left as written, whose ATen calls raise as eager's."""
    dtype = value_of(node).dtype
    for n in numbers:
        if isinstance(n, (bool, int, float)) and not converts(n, dtype):
            raise Untranslatable(f"the {op} {what} {n!r} cannot be converted to {dtype} without overflow, "
                                 "which eager checks")


def _check_value_tensor_converts(node, value) -> None:
    """masked_fill's 0-d value tensor, whose `.item()` eager converts to the node's dtype with the same
    check: a literal (`torch.tensor(-1e9)`, `torch.full((), x)`) by its number, another by its dtype
    (conversions.always_converts; a float32 value tensor may hold -1e9 at run time)."""
    held = value_of(value)
    if not isinstance(held, torch.Tensor):
        return
    op = op_of(value)
    number = (value.args[0] if op == "tensor" and value.args else
              arg(value, 1, "fill_value") if op == "full" else None)
    dtype = value_of(node).dtype
    if isinstance(number, (bool, int, float)):
        number = torch.tensor(number).to(held.dtype).item()   # (what the tensor holds)
        if not converts(number, dtype):
            raise Untranslatable(f"the masked_fill value tensor of {number!r} cannot be converted to {dtype} "
                                 "without overflow, which eager checks")
    elif not always_converts(held.dtype, dtype):
        raise Untranslatable(f"a masked_fill value tensor of {held.dtype} may not convert to {dtype} without "
                             "overflow, which eager checks")


_I, _J = ("idx", "i"), ("idx", "j")
_KEEP = {("bin", "<=", _J, _I), ("bin", ">=", _I, _J), ("not", ("bin", ">", _J, _I)), ("not", ("bin", "<", _I, _J))}
_MASKED = {("bin", ">", _J, _I), ("bin", "<", _I, _J), ("not", ("bin", "<=", _J, _I)), ("not", ("bin", ">=", _I, _J))}


def _drops(fill, factor: float) -> bool:
    """A causal mask's fill (times `factor`, a scale applied after the mask) that softmax turns into
    exactly 0, as it does -inf: -inf, or a value at or below float16's lowest (-65504; what
    `torch.finfo(dtype).min` gives for the half types; float32's is -3.4e38). The causal mask keeps
    key 0 on every row, so no row is all fill, the one place where a finite fill (uniform weights)
    and -inf (NaN) differ; and exp(fill - the row's max) is 0 unless the row's kept scores are
    themselves near the fill."""
    return fill[0] == "num" and fill[1] * factor <= -65504.0


def sdpa_form(e, factor: float = 1.0):
    """(scale, is_causal) when `e` is what F.scaled_dot_product_attention computes, else None.
    `factor`: what multiplies `e` afterwards (a scale outside the mask)."""
    scale = _scale_of(e)
    if scale is not None:
        return scale, False
    if e[0] == "call" and e[1] == "where":
        cond, x, y = e[2]
        inner = (x if cond in _KEEP and _drops(y, factor) else
                 y if cond in _MASKED and _drops(x, factor) else None)
        scale = _scale_of(inner) if inner is not None else None
        if scale is not None:
            return scale, True
    if e[0] == "bin" and e[1] in ("*", "/") and e[3][0] == "num" and e[3][1] > 0:
        outer = e[3][1] if e[1] == "*" else 1.0 / e[3][1]
        inner = sdpa_form(e[2], factor * outer)
        if inner is not None and inner[1] and inner[0] == 1.0:
            return outer, True
    return None

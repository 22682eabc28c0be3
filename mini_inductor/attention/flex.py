"""flex attention (`torch.nn.attention.flex_attention`) in Dynamo's graph, computed by the flash-attention op.

Dynamo hands the backend a call of the higher-order op

    flex_attention(q, k, v, score_mod, block_mask, scale, kernel_options,
                   score_mod_other_buffers, mask_mod_other_buffers) -> (out, lse[, max_scores])

whose score_mod and mask_mod are FX submodules of 0-d tensors (score, b, h, q_idx, kv_idx, then the
captured tensors), and whose block mask is a tuple ending with the mask_mod. A graph holding a
higher-order op runs eagerly (lowering/graph.py `why_eager`), flex attention's dense math included. This
pass, run where match.py runs (before AOT autograd), rewrites each such call into

    torch.ops.mini_inductor.flash_attention(q, k, v, extra, mod, empty_rows_zero=True)

    mod = where(mask_mod(b, h, i, j), score_mod(s * scale, b, h, i, j), -inf)

or, where `mod` is exactly what ATen's scaled_dot_product_attention computes with its flash kernel (a
causal mask or none, a plain scale, float16/bfloat16, as many key heads as query heads), into that call,
as match.py does for attention written out (on an H200, fp16, B 4, H 16, E 64, L 4096, GPU ms, session
41: SDPA 0.333 forward and 1.33 forward + backward, the generated kernel 0.395 and 1.94);

with each submodule's nodes read as the contract's expression (attention/__init__.py): the index
arguments are b, h, i, j; a captured tensor indexed by them (`bias[h]`, `doc[q_idx] == doc[kv_idx]`) is
an extra tensor tN, viewed in Dynamo's graph to broadcast against [B, Hq, L, S] (one extra per distinct
indexing: `doc` as [1, 1, L, 1] and as [1, 1, 1, S]). What eager flex computes decides the reading:
the score is float32 whatever the inputs' dtype (the submodule's fake values say otherwise), an
operation whose eager result is float16 or bfloat16 is rounded to it (f16, bf16), relu and sign are
written as wheres (relu's gradient 0 at 0, as eager's), a float to the power 2, 3 or 0.5 as products
or sqrt, and a row with
nothing live gives 0, not NaN (empty_rows_zero). The block mask's tensors are not read: eager applies
the mask_mod at every position, and the op derives its own block table from the `mod`.

The log-sum-exp output (return_lse=True) is the forward op's own, in base 2 as the higher-order op
returns it (flash.base2_lse), with its gradient; the rows' max scores
(return_aux=AuxRequest(max_scores=True)) are its row maxima, in base 2 too and with no gradient
(flash.base2_max). A captured float tensor that requires grad (a learned bias table, ALiBi slopes as
parameters) gets its gradient from the op (extra_grads.py). A captured tensor indexed by a computed
index (`rel[h, q_idx - kv_idx + 63]`, T5's relative-position table; a diagonal `t[q_idx, q_idx]`) is
an extra read at that index (`t0[h, i - j + 63]`, score_mod.Gather), where the index is affine in the
indices and stays inside the tensor over the score grid; where it reaches below 0 (`bias[h, q_idx -
kv_idx]` under a causal mask), as eager counts from the end, the tensor is doubled along that dim
and read at the index plus its size (_wrapped_gathers). A table indexed by another captured integer
tensor's values (T5's `bias[bucket[q_idx - kv_idx + c], h]`, Swin's `table[index[q_idx, kv_idx], h]`)
is composed in Dynamo's graph (`_Extras.compose`: index_select by the values, made during the analysis
and taken out again on a near miss) and read at the inner tensor's index. Anything else (arithmetic
on values read from data used as an index, an op outside the expression language, a kernel option not
known here) is left as written and recorded as a near miss with its reason, as match.py records them.
"""
from __future__ import annotations

import dataclasses
import logging
import math
import operator

import torch
import torch.fx
import torch.nn.functional as F
from torch.fx.experimental.symbolic_shapes import guard_scalar

from ..fx_source import source_line
from ..metrics import AttentionMatch
from . import score_mod
from .match import _Emitter, _erase_dead, flash_target
from .flex_extras import (_Captured, _drop_unread, _Expr, _extra_view, _Extras, _shift_gathers,
                          _wrapped_gathers)
from .modification import (_FALSE, _TRUE, ATTENTION_DTYPES, CASTS, SAME, NearMiss, _binary, _not, _where,
                           arg, describe_op, known_eq, op_of, render, sdpa_form, shape_of, static,
                           value_of)

log = logging.getLogger("mini_inductor.attention")

# kernel options that choose how Inductor's kernel runs, not what it computes (eager ignores them all);
# each may also come prefixed with fwd_ or bwd_
KNOWN_KERNEL_OPTIONS = frozenset({
    "num_warps", "num_stages", "BLOCK_M", "BLOCK_N", "BLOCK_M1", "BLOCK_N1", "BLOCK_M2", "BLOCK_N2",
    "PRESCALE_QK", "ROWS_GUARANTEED_SAFE", "BLOCKS_ARE_CONTIGUOUS", "WRITE_DQ", "FORCE_USE_FLEX_ATTENTION",
    "USE_TMA", "kpack", "matrix_instr_nonkdim", "waves_per_eu", "BACKEND", "OUTPUT_LOGSUMEXP", "OUTPUT_MAX",
    "FLOAT32_PRECISION"})   # (float32 dots: the op follows torch.backends.cuda.matmul.allow_tf32 as eager does)
_ARG_NAMES = ("query", "key", "value", "score_mod", "block_mask", "scale", "kernel_options",
              "score_mod_other_buffers", "mask_mod_other_buffers")
_INDEX_NAMES = ("b", "h", "i", "j")             # the submodules' index arguments: b, h, q_idx, kv_idx
_ROUNDED = {torch.float16: "f16", torch.bfloat16: "bf16"}
_HALF_TYPES = tuple(_ROUNDED)


def flex_hop():
    """torch.ops.higher_order.flex_attention, or None on a torch without it."""
    return getattr(torch.ops.higher_order, "flex_attention", None)


def has_flex_attention(gm: torch.fx.GraphModule) -> bool:
    hop = flex_hop()
    return hop is not None and any(n.op == "call_function" and n.target is hop for n in gm.graph.nodes)


# ── values of a submodule's nodes ────────────────────────────────────────────────────────────────
def _number(x) -> _Expr:
    if isinstance(x, bool):
        return _Expr(_TRUE if x else _FALSE, torch.bool)
    if isinstance(x, float) and math.isnan(x):
        raise NearMiss("the modification holds a NaN constant")
    return _Expr(("num", x), None, x)


def _promote(*vals: _Expr) -> torch.dtype:
    """Eager's dtype of an op on these values (0-d tensors and Python numbers)."""
    operands = [v.promotes_as() for v in vals]
    tensors = [o for o in operands if isinstance(o, torch.Tensor)]
    result = tensors[0] if tensors else torch.tensor(operands[0])
    for o in operands:
        result = torch.empty((), dtype=torch.result_type(result, o))
    return result.dtype


def _is_bool(v: _Expr) -> bool:
    return v.dtype == torch.bool


def _rounded(expr: tuple, dtype: torch.dtype | None) -> tuple:
    """`expr` rounded to `dtype` where eager's result is a half type (its kernel computes in float32, then
    rounds), else itself."""
    return ("call", _ROUNDED[dtype], (expr,)) if dtype in _ROUNDED else expr


def _condition(v: _Expr) -> tuple:
    return v.expr if _is_bool(v) else _binary("!=", v.expr, ("num", 0))


# the submodules' operators (by modification.op_of's names) and the contract's symbols for them
_ARITHMETIC = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "mod": "%"}
_COMPARISONS = {"lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_FLOAT_FUNCTIONS = ("tanh", "exp", "log", "log1p", "sigmoid", "sqrt")
# integer exponents of pow written as products, 0.5 as sqrt (eager's values and gradients alike)
_POWERS = {1: lambda x: x, 2: lambda x: ("bin", "*", x, x), 3: lambda x: ("bin", "*", ("bin", "*", x, x), x),
           0.5: lambda x: ("call", "sqrt", (x,))}


class _SubgraphReader:
    """One submodule (score_mod or mask_mod) as an expression: `read(inputs)` with the values of its
    leading placeholders (the score, the indices); its other placeholders are the captured tensors
    `captured` (nodes of Dynamo's graph), turned into extras through `extras` when indexed."""

    def __init__(self, sub: torch.fx.GraphModule, captured: tuple, extras: "_Extras", what: str, lengths: dict):
        self.sub, self.captured, self.extras, self.what = sub, captured, extras, what
        self.lengths = lengths      # the symbols of L and S (under dynamic shapes) → "L", "S"

    def read(self, inputs: list) -> _Expr:
        placeholders = [n for n in self.sub.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != len(inputs) + len(self.captured):
            raise NearMiss(f"the {self.what} takes {len(placeholders)} arguments; expected {len(inputs)} and "
                           f"{len(self.captured)} captured")
        env: dict = {}
        for node, value in zip(placeholders, inputs + [self._captured(c) for c in self.captured]):
            env[node] = value
        result = None
        for node in self.sub.graph.nodes:
            if node.op == "placeholder":
                continue
            if node.op == "output":
                out = node.args[0]
                if isinstance(out, (tuple, list)):
                    if len(out) != 1:
                        raise NearMiss(f"the {self.what} returns {len(out)} values")
                    out = out[0]
                result = self._value(out, env)
                break
            env[node] = self._node(node, env)
        if not isinstance(result, _Expr):
            raise NearMiss(f"the {self.what} returns a captured tensor not indexed by every dim: "
                           f"{result.node.name if isinstance(result, _Captured) else result!r}")
        return result

    def _captured(self, x):
        if isinstance(x, torch.fx.Node) and isinstance(value_of(x), torch.Tensor):
            return self.extras.resolve(_Captured(x))
        if isinstance(x, (bool, int, float)):
            return _number(x)
        if isinstance(x, torch.fx.Node) and isinstance(value_of(x), torch.SymInt):
            expr = _length_expr(value_of(x).node.expr, self.lengths)
            if expr is not None:
                return _Expr(expr, torch.int64)
        return ("unreadable", x)    # another number Dynamo passed in: refused where it is used

    def _value(self, x, env):
        if isinstance(x, torch.fx.Node):
            v = env[x]
        elif isinstance(x, (bool, int, float)):
            v = _number(x)
        else:
            raise NearMiss(f"the {self.what} uses {x!r}, not a tensor or a number")
        if isinstance(v, tuple) and v[0] == "unreadable":
            raise NearMiss(f"the {self.what} uses a captured number {getattr(v[1], 'name', v[1])} (a size?), "
                           "which the modification cannot take")
        return v

    def _expr(self, x, env, node) -> _Expr:
        v = self._value(x, env)
        if isinstance(v, _Captured):
            raise NearMiss(f"the {self.what} uses {v.node.name} indexed by {len(v.index)} of its {v.rank} dims "
                           f"({describe_op(node)})")
        return v

    def _node(self, node: torch.fx.Node, env):
        if node.op not in ("call_function", "call_method"):
            raise NearMiss(f"the {self.what} calls {node.op} {node.target}")
        op = op_of(node)
        if op == "getitem":
            return self._getitem(node, env)
        factory = _factory_value(node)
        if factory is not None:
            return factory
        args = node.args
        if op in _ARITHMETIC:
            if node.kwargs.get("rounding_mode") is not None or node.kwargs.get("alpha", 1) != 1:
                raise NearMiss(f"{describe_op(node)} with a rounding mode or alpha in the {self.what}")
            a, b = self._expr(args[0], env, node), self._expr(arg(node, 1, "other"), env, node)
            dtype = _promote(a, b)
            if op == "div" and not dtype.is_floating_point:
                dtype = torch.get_default_dtype()
            if dtype in (torch.uint8, torch.int8, torch.int16) or dtype == torch.bool:
                raise NearMiss(f"{describe_op(node)} in {dtype}, which wraps around, in the {self.what}")
            return _Expr(_rounded(_binary(_ARITHMETIC[op], a.expr, b.expr), dtype), dtype)
        if op in _COMPARISONS:
            a, b = self._expr(args[0], env, node), self._expr(arg(node, 1, "other"), env, node)
            return _Expr(_binary(_COMPARISONS[op], a.expr, b.expr), torch.bool)
        if op in ("and", "or"):
            a, b = self._expr(args[0], env, node), self._expr(args[1], env, node)
            if not (_is_bool(a) and _is_bool(b)):
                raise NearMiss(f"{describe_op(node)} of integers (bitwise) in the {self.what}")
            return _Expr(_binary("&" if op == "and" else "|", a.expr, b.expr), torch.bool)
        if op == "not":
            a = self._expr(args[0], env, node)
            if not _is_bool(a):
                raise NearMiss(f"{describe_op(node)} of integers (bitwise) in the {self.what}")
            return _Expr(_not(a.expr), torch.bool)
        if op == "neg":
            a = self._expr(args[0], env, node)
            return _Expr(("neg", a.expr), a.dtype, None if a.number is None else -a.number)
        if op == "abs":
            a = self._expr(args[0], env, node)
            return _Expr(("call", "abs", (a.expr,)), a.dtype, None if a.number is None else abs(a.number))
        if op in _FLOAT_FUNCTIONS:
            a = self._expr(args[0], env, node)
            dtype = a.dtype if a.dtype is not None and a.dtype.is_floating_point else torch.get_default_dtype()
            return _Expr(_rounded(("call", op, (a.expr,)), dtype), dtype)
        if op == "relu":   # its gradient as eager's: 0 where x <= 0 (not maximum's half at the tie)
            a = self._expr(args[0], env, node)
            zero = ("num", 0.0 if a.dtype is None or a.dtype.is_floating_point else 0)
            return _Expr(_where(_binary("<=", a.expr, ("num", 0)), zero, a.expr), a.dtype)
        if op == "sign":
            a = self._expr(args[0], env, node)
            kind = float if a.dtype is None or a.dtype.is_floating_point else int
            return _Expr(_where(_binary(">", a.expr, ("num", 0)), ("num", kind(1)),
                                _where(_binary("<", a.expr, ("num", 0)), ("num", kind(-1)), ("num", kind(0)))), a.dtype)
        if op == "pow":
            a, e = self._expr(args[0], env, node), arg(node, 1, "exponent")
            if isinstance(e, bool) or not isinstance(e, (int, float)) or e not in _POWERS \
                    or not (a.dtype is not None and a.dtype.is_floating_point):
                raise NearMiss(f"{describe_op(node)} in the {self.what}: only a float to the power "
                               f"{', '.join(map(str, _POWERS))} is read")
            return _Expr(_rounded(_POWERS[e](a.expr), a.dtype), a.dtype)
        if op in ("minimum", "maximum"):
            a, b = self._expr(args[0], env, node), self._expr(arg(node, 1, "other"), env, node)
            return _Expr(("call", op, (a.expr, b.expr)), _promote(a, b))
        if op in ("clamp", "clamp_min", "clamp_max"):
            return self._clamp(node, op, env)
        if op == "where":
            if len(args) + len(node.kwargs) != 3:
                raise NearMiss(f"torch.where with one argument in the {self.what}")
            c = self._expr(args[0], env, node)
            x, y = self._expr(arg(node, 1, "input"), env, node), self._expr(arg(node, 2, "other"), env, node)
            return _Expr(_where(_condition(c), x.expr, y.expr), _promote(x, y))
        if op == "masked_fill":
            x, c = self._expr(args[0], env, node), self._expr(arg(node, 1, "mask"), env, node)
            fill = self._expr(arg(node, 2, "value"), env, node)
            return _Expr(_where(_condition(c), fill.expr, x.expr), x.dtype)
        if op in SAME:
            return self._expr(args[0], env, node)
        if op in CASTS:
            return self._cast(node, env)
        raise NearMiss(f"{describe_op(node)} in the {self.what} is not in the modification's language")

    def _clamp(self, node, op: str, env) -> _Expr:
        x = self._expr(node.args[0], env, node)
        lo = arg(node, 1, "min") if op != "clamp_max" else None
        hi = (arg(node, 2, "max") if op == "clamp" else arg(node, 1, "max")) if op != "clamp_min" else None
        expr, dtype = x.expr, x.dtype
        for name, bound in (("maximum", lo), ("minimum", hi)):
            if bound is not None:
                b = self._expr(bound, env, node)
                expr, dtype = ("call", name, (expr, b.expr)), _promote(_Expr(expr, dtype, x.number), b)
        return _Expr(expr, dtype)

    def _cast(self, node, env) -> _Expr:
        x = self._expr(node.args[0], env, node)
        to, was = value_of(node).dtype, x.dtype
        if was is None:
            was = torch.bool if isinstance(x.number, bool) else \
                torch.get_default_dtype() if isinstance(x.number, float) else torch.int64
        if to == was:
            return _Expr(x.expr, to)
        if to == torch.bool:
            return _Expr(_binary("!=", x.expr, ("num", 0)), to)
        if was == torch.bool:
            one, zero = (1.0, 0.0) if to.is_floating_point else (1, 0)
            return _Expr(_where(x.expr, ("num", one), ("num", zero)), to)
        if to.is_floating_point and to.itemsize >= 4 and to != torch.float64:
            return _Expr(x.expr, to)        # exact (integers in float32's range), or widening
        if to in _HALF_TYPES:
            return _Expr(_rounded(x.expr, to), to)
        if not to.is_floating_point and not was.is_floating_point and to.itemsize >= 4:
            return _Expr(x.expr, to)
        raise NearMiss(f"a cast from {was} to {to} ({describe_op(node)}) in the {self.what}")

    def _getitem(self, node, env):
        base = self._value(node.args[0], env)
        if not isinstance(base, _Captured):
            raise NearMiss(f"indexing {describe_op(node)} of a value that is not a captured tensor in the {self.what}")
        items = node.args[1] if isinstance(node.args[1], tuple) else (node.args[1],)
        index, tensor = list(base.index), base.node
        for item in items:
            if isinstance(item, torch.fx.Node):
                v = self._value(item, env)
                if isinstance(v, _Expr) and v.expr[0] == "idx" and v.expr[1] in _INDEX_NAMES:
                    index.append(v.expr[1])
                elif isinstance(v, _Expr) and v.expr[0] in ("t", "gather") and v.dtype in (torch.int32, torch.int64):
                    # indexed by another captured tensor's values (T5's bucket of i - j, Swin's index table)
                    tensor, inner_items = self.extras.compose(tensor, len(index), v.expr[1])
                    index.extend(inner_items)
                elif isinstance(v, _Expr) and v.dtype is not None and v.dtype != torch.bool \
                        and not v.dtype.is_floating_point:
                    index.append(v.expr)   # a computed index (q_idx - kv_idx + 63): read as a gather
                else:
                    shown = render(v.expr) if isinstance(v, _Expr) else item.name
                    raise NearMiss(f"{base.node.name} is indexed by {shown}, not an integer index, in the {self.what}")
            elif isinstance(item, int) and not isinstance(item, bool):
                index.append(item)
            else:
                raise NearMiss(f"{base.node.name} is indexed by {item!r} ({describe_op(node)}) in the {self.what}")
        if len(index) > len(shape_of(tensor)):
            raise NearMiss(f"{base.node.name} is indexed by more indices than its {base.rank} dims")
        return self.extras.resolve(_Captured(tensor, tuple(index)))


def _length_expr(expr, lengths: dict):
    """A size Dynamo passed into a submodule (`k.shape[2] - q.shape[2]`, captured by a mask under dynamic
    shapes) as an expression of L and S: sums and products of their symbols and integers; else None."""
    import sympy
    if expr in lengths:
        return ("idx", lengths[expr])          # (rendered as its name)
    if isinstance(expr, sympy.Integer):
        return ("num", int(expr))
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        terms = [_length_expr(a, lengths) for a in expr.args]
        if any(t is None for t in terms):
            return None
        if isinstance(expr, sympy.Mul) and terms[0] == ("num", -1):
            terms = [("neg", _product(terms[1:]))]
        if isinstance(expr, sympy.Mul):
            return _product(terms)
        terms.sort(key=lambda t: t[0] == "neg")           # S + -L → S - L
        out = terms[0]
        for t in terms[1:]:
            out = _binary("-", out, t[1]) if t[0] == "neg" else _binary("+", out, t)
        return out
    return None


def _product(terms: list) -> tuple:
    out = terms[0]
    for t in terms[1:]:
        out = _binary("*", out, t)
    return out


def _factory_value(node) -> _Expr | None:
    """A 0-d constant made by a factory (noop_mask's `b.new_ones((), dtype=torch.bool)`), else None."""
    name = node.target if node.op == "call_method" else getattr(node.target, "__name__", "")
    fills = {"new_ones": 1, "new_zeros": 0, "ones": 1, "zeros": 0, "ones_like": 1, "zeros_like": 0}
    value = value_of(node)
    if name in fills:
        fill = fills[name]
    elif name in ("new_full", "full", "full_like"):     # new_full(self, size, fill), full(size, fill), full_like(x, fill)
        fill = arg(node, 2 if name == "new_full" else 1, "fill_value")
    elif name in ("new_tensor", "tensor", "scalar_tensor"):
        fill = arg(node, 1, "data") if name == "new_tensor" else arg(node, 0, "data" if name == "tensor" else "s")
    else:
        return None
    if not isinstance(value, torch.Tensor) or value.dim() != 0 or not isinstance(fill, (bool, int, float)):
        raise NearMiss(f"{describe_op(node)}: only a 0-d constant is read")
    if value.dtype == torch.bool:
        return _Expr(_TRUE if fill else _FALSE, torch.bool)
    return _Expr(("num", float(fill) if value.dtype.is_floating_point else int(fill)), value.dtype)


# ── the call ─────────────────────────────────────────────────────────────────────────────────────
@dataclasses.dataclass
class _FlexCall:
    q: torch.fx.Node
    k: torch.fx.Node
    v: torch.fx.Node
    mod: str
    extras: list                      # (captured tensor node, its index items)
    outputs: list                     # the getitem(·, 0) nodes reading the attention's output
    sym_scale: object = None          # the scale as a SymFloat (guarded on its value), or None
    shapes: str = ""
    sdpa: tuple | None = None         # (scale, is_causal) where F.scaled_dot_product_attention computes it
    lse_outputs: list = dataclasses.field(default_factory=list)   # getitem(·, 1): the log-sum-exp read
    max_outputs: list = dataclasses.field(default_factory=list)   # getitem(·, 2): the rows' max scores read
    doubled: dict = dataclasses.field(default_factory=dict)   # extra → the dims it is cat to itself along
    decisions: _Extras | None = None  # its decisions on sizes, guarded once the call is rewritten


def _hop_args(node) -> dict:
    values = dict(zip(_ARG_NAMES, node.args))
    for name in _ARG_NAMES[len(node.args):]:
        if name in node.kwargs:
            values[name] = node.kwargs[name]
    values.setdefault("score_mod_other_buffers", ())
    values.setdefault("mask_mod_other_buffers", ())
    missing = [n for n in _ARG_NAMES if n not in values]
    if missing:
        raise NearMiss(f"the flex_attention call has no {', '.join(missing)} (another torch's signature?)")
    return values


def _submodule(gm, node, what: str):
    if not (isinstance(node, torch.fx.Node) and node.op == "get_attr"):
        raise NearMiss(f"the {what} is {node!r}, not a submodule of the graph")
    sub = gm.get_submodule(node.target)
    if not isinstance(sub, torch.fx.GraphModule):
        raise NearMiss(f"the {what} is a {type(sub).__name__}, not an FX graph")
    return sub


def _analyse(gm, node, emit=None) -> _FlexCall:
    a = _hop_args(node)
    q, k, v = a["query"], a["key"], a["value"]
    if not all(isinstance(x, torch.fx.Node) and isinstance(value_of(x), torch.Tensor) for x in (q, k, v)):
        raise NearMiss("q, k or v is not a tensor of the graph")
    outputs, lse_outputs, max_outputs = [], [], []
    for user in list(node.users):
        if user.op == "call_function" and user.target is operator.getitem and _unread(user):
            continue   # an output nothing reads (the lse of `out, _ = flex_attention(..., return_lse=True)`)
        if user.op == "call_function" and user.target is operator.getitem and user.args[1] in (0, 1, 2):
            (outputs, lse_outputs, max_outputs)[user.args[1]].append(user)
        else:
            raise NearMiss(f"flex_attention's outputs are used as {describe_op(user)}")
    qv, kv, vv = value_of(q), value_of(k), value_of(v)
    if not (qv.dim() == kv.dim() == vv.dim() == 4):
        raise NearMiss(f"q, k, v are not 4-D: {list(qv.shape)}, {list(kv.shape)}, {list(vv.shape)}")
    if not (qv.dtype == kv.dtype == vv.dtype) or qv.dtype not in ATTENTION_DTYPES:
        raise NearMiss(f"dtype {qv.dtype}, {kv.dtype}, {vv.dtype}: the flash-attention op takes float16, bfloat16 "
                       "or float32 (one dtype for q, k and v)")
    extras = _Extras(emit, {"b": qv.shape[0], "h": qv.shape[1], "i": qv.shape[2], "j": kv.shape[2]})

    def fit(a, b) -> bool:   # (eager raises unless equal: symbols of their own after a recompile are
        return known_eq(a, b) or extras.decide(a == b)   # guarded equal where the call is rewritten)
    if not (fit(kv.shape[0], vv.shape[0]) and fit(kv.shape[1], vv.shape[1]) and fit(kv.shape[2], vv.shape[2])
            and fit(qv.shape[3], kv.shape[3])):
        raise NearMiss("k and v do not fit q")
    if not (known_eq(kv.shape[0], qv.shape[0]) or known_eq(kv.shape[0], 1)):
        raise NearMiss(f"k's batch {kv.shape[0]} is neither q's {qv.shape[0]} nor 1")
    if not known_eq(qv.shape[1] % kv.shape[1], 0):
        raise NearMiss(f"{qv.shape[1]} query heads are not a known multiple of {kv.shape[1]} key/value heads")
    options = a["kernel_options"]
    if not isinstance(options, dict):
        raise NearMiss(f"kernel_options is {options!r}, not a dict")
    unknown = sorted(o for o in options if (o[4:] if o.startswith(("fwd_", "bwd_")) else o) not in KNOWN_KERNEL_OPTIONS)
    if unknown:
        raise NearMiss(f"kernel option(s) {', '.join(unknown)} not known to mini_inductor")
    scale, sym_scale = a["scale"], None
    if isinstance(scale, torch.fx.Node) and isinstance(value_of(scale), torch.SymFloat):
        sym_scale = value_of(scale)
        if sym_scale.node.hint is None:
            raise NearMiss("the scale is a number read from data at run time")
        scale = float(sym_scale.node.hint)
    if isinstance(scale, bool) or not isinstance(scale, (int, float)):
        raise NearMiss(f"the scale is {scale!r}, not a number")
    block_mask = a["block_mask"]
    if not isinstance(block_mask, (tuple, list)) or not block_mask:
        raise NearMiss("the block mask is not a tuple ending with the mask_mod")

    s = ("s",) if float(scale) == 1.0 else ("bin", "*", ("s",), ("num", float(scale)))
    indices = [_Expr(("idx", n), torch.int64) for n in _INDEX_NAMES]
    lengths = {n.node.expr: name for name, n in (("S", kv.shape[2]), ("L", qv.shape[2]))
               if isinstance(n, torch.SymInt)}          # (L where L and S are one symbol)
    score = _SubgraphReader(_submodule(gm, a["score_mod"], "score_mod"), tuple(a["score_mod_other_buffers"]),
                            extras, "score_mod", lengths).read([_Expr(s, torch.float32)] + indices)
    mask = _SubgraphReader(_submodule(gm, block_mask[-1], "mask_mod"), tuple(a["mask_mod_other_buffers"]),
                           extras, "mask_mod", lengths).read(indices)
    if score.dtype == torch.bool:
        raise NearMiss("the score_mod returns a bool")
    expr = _where(_condition(mask), score.expr, ("num", -math.inf))
    expr = _drop_unread(expr, extras)
    mod = render(expr)
    try:
        parsed = score_mod.parse(mod)
        kinds = {f"t{n}": "bool" if value_of(c).dtype == torch.bool else
                 "float" if value_of(c).dtype.is_floating_point else "int" for n, (c, _) in enumerate(extras.specs)}
        score_mod.kind(parsed.tree, kinds)
    except score_mod.ModError as e:
        raise NearMiss(f"the modification {mod!r} is outside the contract: {e}") from None
    wraps = _wrapped_gathers(parsed, extras, (qv.shape[0], qv.shape[1], qv.shape[2], kv.shape[2]))
    if wraps:
        expr = _shift_gathers(expr, wraps)
        mod = render(expr)
    shapes = f"q {list(qv.shape)}, k {list(kv.shape)}, v {list(vv.shape)}"
    return _FlexCall(q, k, v, mod, list(extras.specs), outputs, sym_scale, shapes,
                     None if lse_outputs or max_outputs else _sdpa_form(expr, qv, kv), lse_outputs, max_outputs,
                     {n: tuple(dims) for n, dims in wraps.items()}, extras)


def _sdpa_form(expr, qv, kv) -> tuple | None:
    """(scale, is_causal) where ATen's scaled_dot_product_attention computes the call as eager flex
    does (its flash kernel: float16 or bfloat16, as many key heads as query heads, a causal mask only
    where L == S, so no row is empty and flex's zeros for one never arise; keys of q's own batch, as an
    expanded one may send SDPA to its math kernel), else None."""
    form = sdpa_form(expr)
    if form is None or qv.dtype not in (torch.float16, torch.bfloat16) or not known_eq(qv.shape[1], kv.shape[1]) \
            or not known_eq(qv.shape[0], kv.shape[0]):
        return None
    if form[1] and not known_eq(qv.shape[2], kv.shape[2]):
        return None
    return form


_SCALINGS = (operator.mul, operator.truediv, torch.mul)   # flex_attention() scales the LSE it returns by ln 2


def _unread(node: torch.fx.Node) -> bool:
    """Whether nothing reads `node`'s value: no users, or only scalings of it that nothing reads."""
    return all(u.op == "call_function" and u.target in _SCALINGS and _unread(u) for u in node.users)


def _erase_unread(graph, node: torch.fx.Node) -> None:
    for user in list(node.users):
        _erase_unread(graph, user)
    graph.erase_node(node)


def _rewrite(gm, node, call: _FlexCall, target) -> None:
    emit = _Emitter(gm.graph, node, None)
    try:
        q, k, v = call.q, call.k, call.v
        qv, kv = value_of(q), value_of(k)
        if not known_eq(kv.shape[0], qv.shape[0]):         # k and v broadcast over q's batch
            batch = emit("call_method", "size", q, 0)
            k = emit("call_method", "expand", k, batch, -1, -1, -1)
            v = emit("call_method", "expand", v, batch, -1, -1, -1)
        sizes: dict = {}

        def size_of(axis: str):
            if axis not in sizes:
                source, dim = {"b": (q, 0), "h": (q, 1), "i": (q, 2), "j": (call.k, 2)}[axis]
                sizes[axis] = emit("call_method", "size", source, dim)
            return sizes[axis]
        extents = {"b": qv.shape[0], "h": qv.shape[1], "i": qv.shape[2], "j": kv.shape[2]}
        extras = [_extra_view(emit, c, index, extents, size_of) for c, index in call.extras]
        for n, dims in call.doubled.items():   # read at an index eager counts from the end (_wrapped_gathers)
            for d in dims:
                extras[n] = emit("call_function", torch.cat, [extras[n], extras[n]], d)
        lse = rows_max = None   # the LSE and the rows' max, where read
        if call.sdpa is not None:   # (no extras: SDPA's form reads none)
            scale, causal = call.sdpa
            result = emit("call_function", F.scaled_dot_product_attention, q, k, v, is_causal=causal, scale=scale)
            result = emit("call_method", "contiguous", result)   # (CUDA's kernels return [B, L, H, E]'s layout)
        elif call.lse_outputs or call.max_outputs:   # the forward op itself, for its LSE or the rows' max,
            from .flash import base2_lse, base2_max      # as the higher-order op's (base 2)
            both = emit("call_function", torch.ops.mini_inductor.flash_attention_forward.default, q, k, v, extras,
                        call.mod, True)
            result = emit("call_function", operator.getitem, both, 0)
            stats = emit("call_function", operator.getitem, both, 1)
            lse = emit("call_function", base2_lse, stats, call.mod) if call.lse_outputs else None
            rows_max = emit("call_function", base2_max, stats, call.mod) if call.max_outputs else None
        else:
            result = emit("call_function", target, q, k, v, extras, call.mod, True)
        result = _with_layout_of(emit, result, value_of(node)[0])
    except BaseException:
        emit.undo()
        raise
    for out in call.outputs:
        out.replace_all_uses_with(result)
        gm.graph.erase_node(out)
    for outs, new in ((call.lse_outputs, lse), (call.max_outputs, rows_max)):
        for out in outs:
            out.replace_all_uses_with(new)
            gm.graph.erase_node(out)
    for unread in [u for u in node.users if u.op == "call_function" and u.target is operator.getitem and _unread(u)]:
        _erase_unread(gm.graph, unread)
    _erase_dead(gm.graph, [node])
    for attr in [a for a in gm.graph.nodes if a.op == "get_attr" and not a.users]:
        gm.graph.erase_node(attr)


def _with_layout_of(emit, result, like):
    """`result` (contiguous) in the dim order of eager flex's output (q's stride order), so views the
    graph takes of it are still views."""
    if not isinstance(like, torch.Tensor):
        return result
    # (a symbolic stride by its hint: a layout, which no result depends on, needs no guard)
    strides = [s.node.hint if isinstance(s, torch.SymInt) else s for s in like.stride()]
    if not static(*strides):
        return result
    order = sorted(range(like.dim()), key=lambda d: -strides[d])
    if order == list(range(like.dim())):
        return result
    inverse = [order.index(d) for d in range(like.dim())]
    dense = emit("call_method", "contiguous", emit("call_method", "permute", result, *order))
    return emit("call_method", "permute", dense, *inverse)


def fuse_flex_attention(gm: torch.fx.GraphModule, graph: str) -> list[AttentionMatch]:
    """Replace every flex_attention call in Dynamo's graph `gm` (named `graph` in the records) by the
    flash-attention op, in place; the records of what was found, rewritten or not."""
    hop = flex_hop()
    records: list[AttentionMatch] = []
    if hop is None:
        return records
    for node in [n for n in gm.graph.nodes if n.op == "call_function" and n.target is hop]:
        where, name = source_line(node), node.name
        made = _Emitter(gm.graph, node, None)   # tensors the analysis makes (indexed by captured values)
        try:
            call = _analyse(gm, node, made)
            target = flash_target()
            if target is None:
                raise NearMiss("no flash-attention op is registered (mini_inductor/attention/flash.py)")
            if call.sym_scale is not None:   # a guard through Dynamo's ShapeEnv: another head dim recompiles
                guard_scalar(call.sym_scale)
            _rewrite(gm, node, call, target)
            call.decisions.guard_pending()
            for made_node in reversed(made.created):   # the analysis's tensors the modification does not read
                if not made_node.users:
                    gm.graph.erase_node(made_node)
        except NearMiss as e:
            made.undo()
            records.append(AttentionMatch(graph, name, where, "", reason=f"flex_attention: {e}"))
            continue
        except Exception as e:  # noqa: BLE001  (a pass that finds attention never fails a compile)
            made.undo()
            log.warning("mini_inductor: flex_attention at %s not replaced: %s: %s", name, type(e).__name__, e)
            records.append(AttentionMatch(graph, name, where, "",
                                          reason=f"flex_attention: internal error: {type(e).__name__}: {e}"))
            continue
        guarded = (f"the scale, made of sizes, taken as {call.sym_scale.node.hint:.6g} (guarded on it)"
                   if call.sym_scale is not None else "")
        records.append(AttentionMatch(graph, name, where, "sdpa" if call.sdpa is not None else "flash", call.mod,
                                      call.shapes, data=guarded))
    if any(r.target for r in records):
        gm.graph.lint()
        gm.recompile()
    return records

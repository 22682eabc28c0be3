"""The lowering registry: each ATen op → a small function that builds IR.

A lowering takes the FX node's arguments with tensors replaced by IR values and returns an IR value
(or a tuple of them). Ops without an entry become fallback ExternKernels (see graph.py), so a graph
never fails to compile for want of a lowering.

Pointwise ops share one recipe (`make_pointwise`): broadcast the inputs, promote their dtypes the
way eager does (fp16/bf16 computed in fp32), call one `ops` function per element, cast the result.
"""
from __future__ import annotations

import math
import operator
from typing import Any, Callable, Sequence

import sympy
import torch
import torch._inductor.inductor_prims  # noqa: F401  (defines prims.fma; torch has loaded it by now anyway)
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from ..conversions import converts
from .ir import IRNode, Layout, Pointwise, current_graph
from .sizevars import Expr, is_relation, sympify_seq
from . import symbolic
from .virtualized import ops

aten = torch.ops.aten
prims = torch.ops.prims
KIND = ELEMENTWISE_TYPE_PROMOTION_KIND

LOWERINGS: dict[Any, Callable] = {}


def register_lowering(*targets):
    """Register `fn` for each target; an OpOverloadPacket registers all of its overloads."""
    def decorator(fn):
        for target in targets:
            if isinstance(target, torch._ops.OpOverloadPacket):
                for name in target.overloads():
                    LOWERINGS[getattr(target, name)] = fn
            else:
                LOWERINGS[target] = fn
        return fn
    return decorator


# ─── dtype promotion and broadcasting ───────────────────────────────────────────────────────────

def _meta_like(x):
    if isinstance(x, IRNode):
        return torch.empty([0] * len(x.get_size()), dtype=x.get_dtype(), device="meta")
    return x


# (dtype and rank of each tensor, type of each scalar, kind) -> promote's answer: torch's promotion
# reads nothing else, and building its meta tensors (under the compile's fake mode) costs more than
# the rest of a pointwise lowering. A handful of entries per model.
_PROMOTIONS: dict[tuple, tuple[torch.dtype, torch.dtype]] = {}


def _as_number(a):
    """A size expression as the Python number it stands for in type promotion: an int input's symbol is
    an int (a bool tensor times it is int64, as eager's), a relation a bool; anything else as it is."""
    if not isinstance(a, sympy.Basic):
        return a
    if a.is_Relational or a.is_Boolean:
        return True
    return 1 if a.is_integer else 1.0


def promote(args, kind: ELEMENTWISE_TYPE_PROMOTION_KIND) -> tuple[torch.dtype, torch.dtype]:
    """(compute dtype, result dtype) for a pointwise op on `args`, as eager computes them."""
    operands = [_as_number(a) for a in args if isinstance(a, (IRNode, bool, int, float, sympy.Basic))]
    key = (kind, *[(a.get_dtype(), len(a.get_size())) if isinstance(a, IRNode) else type(a) for a in operands])
    found = _PROMOTIONS.get(key)
    if found is None:
        found = _PROMOTIONS[key] = elementwise_dtypes(*map(_meta_like, operands), type_promotion_kind=kind)
    return found


def broadcast_sizes(*sizes: Sequence[Expr]) -> list[Expr]:
    ndim = max((len(s) for s in sizes), default=0)
    out: list[Expr] = [sympy.Integer(1)] * ndim
    for size in sizes:
        for i, s in enumerate(size):
            j = ndim - len(size) + i
            if not symbolic.is_one(s):
                if out[j] != 1 and out[j] != s:
                    # a dynamic graph's sizes equal by Dynamo's guards (s0 == 8) broadcast as equal
                    if symbolic.decide(sympy.Eq(out[j], s)) is not True:
                        raise ValueError(f"sizes {[list(map(str, z)) for z in sizes]} do not broadcast")
                    if s.free_symbols and not out[j].free_symbols:
                        continue   # (the static one is kept)
                out[j] = s
    return out


def broadcast_loader(x: IRNode, out_size: Sequence[Expr]) -> Callable:
    size = x.get_size()
    loader = x.make_loader()
    shift = len(out_size) - len(size)
    # the dims x broadcasts along (its size 1, where the output's is not)
    ones = [out_size[shift + i] != 1 and symbolic.broadcasts(s, out_size[shift + i]) for i, s in enumerate(size)]

    def load(idx):
        return loader([sympy.Integer(0) if one else idx[shift + i] for i, one in enumerate(ones)])
    return load


def device_of(args) -> torch.device:
    for a in args:
        if isinstance(a, IRNode):
            return a.get_device()
    # no device to put a kernel on: ATen computes the op on its (wrapped) scalars
    raise NotImplementedError("a pointwise op of scalars only")


def constant(value, dtype: torch.dtype):
    """ops.constant, with an integer wrapped into an integer dtype's range as eager's cast wraps it
    (uint8 + 300 adds 44, uint8 * -1 multiplies by 255)."""
    return ops.constant(wrap_integer(value, dtype), dtype)


def wrap_integer(value, dtype: torch.dtype):
    """An int wrapped into an integer dtype's range as eager's cast wraps it (-1 into uint8 is 255);
    anything else as it is."""
    if isinstance(value, int) and not isinstance(value, bool) and dtype != torch.bool and not dtype.is_floating_point:
        info = torch.iinfo(dtype)
        value = (value - info.min) % (1 << info.bits) + info.min
    return value


def check_converts(value, dtype: torch.dtype, what: str, checked_by: tuple[str, ...]) -> None:
    """Refuse a number that eager's checked conversion to `dtype` rejects (conversions.py): a fill value,
    a clamp bound, a where branch, an alpha, an exponent out of the dtype's range. The node runs in
    ATen, which raises as eager does ("value cannot be converted to type c10::Half without
    overflow"), where a kernel would hold inf or a wrapped integer. A dynamic graph's value (a size
    expression, an int input's symbol) is refused unless its range provably fits.

    Only where eager checks it: the node is one of the ATen ops `checked_by` ("full"), or a
    decomposition of one made it. Another op's decomposition may make the same node of a number that
    op converts unchecked (nan_to_num's posinf becomes a scalar_tensor, which would raise in ATen):
    that number is baked in as it is."""
    if not _made_by(checked_by):
        return
    if isinstance(value, sympy.Basic):
        if not _symbolic_value_converts(value, dtype):
            raise NotImplementedError(f"the {what} {value} may not convert to {dtype} without overflow at "
                                      "some size, which eager checks")
    elif isinstance(value, (bool, int, float, complex)) and not converts(value, dtype):
        raise NotImplementedError(f"the {what} {value!r} cannot be converted to {dtype} without overflow, "
                                  "which eager checks")


def _made_by(ops: tuple[str, ...]) -> bool:
    """Whether the node being lowered is one of the ATen ops `ops`, or a decomposition of one made it
    (its `original_aten`); a node without one (a graph built by hand) counts."""
    node = current_graph().current_node
    original = node.meta.get("original_aten") if node is not None else None
    if original is None:
        return True
    name = str(original).rsplit(".", 1)[0]   # (compared by name: the objects can differ)
    return any(name in (f"aten.{op}", f"aten.{op}_") for op in ops)   # (the op or its in-place twin)


def _symbolic_value_converts(value: sympy.Basic, dtype: torch.dtype) -> bool:
    if dtype in (torch.bool, torch.float64) or is_relation(value):
        return True
    if value.is_integer and dtype in (torch.int64, torch.float32, torch.bfloat16):
        return True   # a size or an int input is an int64, which these hold
    if dtype in (torch.float32, torch.bfloat16) and not any(p.exp.free_symbols for p in value.atoms(sympy.Pow)):
        # taken to fit (`x.shape[0] / 2`): past 3.4e38 it would need sizes whose product passes 2**126,
        # or a size as an exponent (2.0 ** k), which is decided below
        return True
    if dtype.is_floating_point:
        low, high = -torch.finfo(dtype).max, torch.finfo(dtype).max
    elif dtype.is_complex:
        return False
    else:
        info = torch.iinfo(dtype)
        low, high = (-info.max if info.min == 0 and value.is_integer else info.min), info.max
    return symbolic.decide(value >= low) is True and symbolic.decide(value <= high) is True


@register_lowering(aten.masked_fill, aten.threshold, aten.elu, aten.celu, aten.softplus, aten.lerp.Scalar, aten.logit,
                   aten.addcmul, aten.addcdiv)
def kept_whole_for_a_number(*args, **kwargs):
    """These ops reach lowering only where decompositions.py kept them whole (_CHECKED_NUMBERS): given a
    number (masked_fill: or a 0-d value tensor) that eager's checked conversion may refuse. Refused here
    too, so that the node's fallback reason names the number and the dtype."""
    dtype = next(a for a in args if isinstance(a, IRNode)).get_dtype()
    numbers = [a for a in (*args, *kwargs.values())
               if isinstance(a, (int, float, sympy.Basic)) and not isinstance(a, bool)]
    raise NotImplementedError(f"kept whole: {', '.join(map(str, numbers)) or 'its value tensor'} may not convert to "
                              f"{dtype} without overflow, which eager checks")


def make_pointwise(fn: Callable, kind=KIND.DEFAULT, *, result_dtype: torch.dtype | None = None,
                   compute_dtype: torch.dtype | None = None, numbers_round: bool = False) -> Callable:
    """A lowering that applies `fn` (a function of `ops` values) element by element. numbers_round: a
    number operand is rounded to a half type's common dtype first, as eager's kernels that take their
    number through TensorIterator's cast do (fmod, remainder, pow), unlike add, mul and div, which read
    it in float32."""

    def lowering(*args):
        # a relation the ShapeEnv decided (k % 2 == 0 where guards fix k's parity) is a Python bool
        args = tuple(bool(a) if isinstance(a, sympy.logic.boolalg.BooleanAtom) else a for a in args)
        tensors = [a for a in args if isinstance(a, IRNode)]
        cdt, rdt = promote(args, kind)
        cdt = compute_dtype or cdt
        rdt = result_dtype or rdt
        out_size = broadcast_sizes(*[t.get_size() for t in tensors])
        loaders = [broadcast_loader(a, out_size) if isinstance(a, IRNode) else a for a in args]

        # eager casts each operand to the common dtype, then computes in float32 for a half type:
        # an int64 2049 (or a 0-d float32 tensor) next to float16 becomes 2048 first; for a comparison
        # (a bool result) the common dtype is the operands' (bf16 == 1.001 compares 1.0)
        common = promote(args, KIND.DEFAULT)[1] if rdt == torch.bool and kind != KIND.DEFAULT else rdt
        rounds = common in (torch.float16, torch.bfloat16) and cdt != common
        if rounds and numbers_round:
            args = tuple(rounded_number(a, common) for a in args)

        def inner_fn(idx):
            values = []
            for a, ld in zip(args, loaders):
                if isinstance(a, IRNode):
                    v = ld(idx)
                    if rounds and a.get_dtype() != common:
                        v = ops.to_dtype(v, common)
                    values.append(v if a.get_dtype() == cdt and not rounds else ops.to_dtype(v, cdt))
                elif rounds and numbers_round and isinstance(a, sympy.Basic):   # (a size's value: rounded in the kernel)
                    values.append(ops.to_dtype(ops.to_dtype(constant(a, cdt), common), cdt))
                else:
                    values.append(constant(a, cdt))
            out = fn(*values)
            return out if rdt == _result_dtype_of(fn, cdt) else ops.to_dtype(out, rdt)
        return Pointwise.create(device_of(args), rdt, inner_fn, out_size)
    return lowering


def rounded_number(value, dtype: torch.dtype):
    """A Python number as eager's unchecked cast to the floating `dtype` leaves it (float16: 1e6 is inf,
    3.3 is 3.30078, 1e-8 is 0); anything else as it is."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return torch.tensor(value, dtype=torch.float64).to(dtype).item()
    return value


def _result_dtype_of(fn, cdt):
    return torch.bool if getattr(fn, "returns_bool", False) else cdt


def _bool_result(fn):
    fn.returns_bool = True
    return fn


def register_pointwise(target, fn, kind=KIND.DEFAULT, **kw):
    low = make_pointwise(fn, kind, **kw)
    register_lowering(target)(low)
    return low


# ─── pointwise ops ──────────────────────────────────────────────────────────────────────────────

def _op(name):
    return lambda *a: getattr(ops, name)(*a)


for _name in ["neg", "abs", "floor", "ceil", "trunc"]:
    register_pointwise(getattr(aten, _name), _op(_name))
register_pointwise(aten.round.default, _op("round"))
for _name in ["exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "sqrt", "rsqrt", "sin", "cos", "tan",
              "asin", "acos", "atan", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "sigmoid", "erf",
              "erfc", "erfinv", "lgamma", "reciprocal"]:
    register_pointwise(getattr(aten, _name), _op(_name), KIND.INT_TO_FLOAT)
for _op_name, _target in [("i0", aten.i0), ("i1", aten.special_i1), ("ndtri", aten.special_ndtri),
                          ("erfcx", aten.special_erfcx), ("bessel_j0", aten.special_bessel_j0),
                          ("bessel_j1", aten.special_bessel_j1), ("bessel_y0", aten.special_bessel_y0),
                          ("bessel_y1", aten.special_bessel_y1)]:
    register_pointwise(_target, _op(_op_name), KIND.INT_TO_FLOAT)
for _name in ["atan2", "copysign", "hypot", "nextafter"]:
    register_pointwise(getattr(aten, _name), _op(_name), KIND.INT_TO_FLOAT)
for _name in ["relu", "maximum", "minimum", "fmax", "fmin", "remainder", "fmod", "mul", "bitwise_and", "bitwise_or", "bitwise_xor",
              "bitwise_not", "bitwise_left_shift", "bitwise_right_shift"]:
    register_pointwise(getattr(aten, _name), _op(_name))
# a comparison's number is rounded to a half-type tensor's dtype first, on the CPU and on CUDA alike
# (CUDA's compare_scalar_kernel takes it as the tensor's scalar_t): bf16 == 1.001 is 1.0 == 1.0
for _name in ["eq", "ne", "lt", "le", "gt", "ge"]:
    register_pointwise(getattr(aten, _name), _bool_result(_op(_name)), KIND.ALWAYS_BOOL, numbers_round=True)
for _name in ["logical_and", "logical_or", "logical_xor"]:
    register_pointwise(getattr(aten, _name), _bool_result(_op(_name)), KIND.ALWAYS_BOOL)
register_pointwise(aten.logical_not, _bool_result(_op("logical_not")), KIND.ALWAYS_BOOL)
register_pointwise(aten.isnan, _bool_result(_op("isnan")), KIND.ALWAYS_BOOL)
register_pointwise(aten.isinf, _bool_result(_op("isinf")), KIND.ALWAYS_BOOL)
register_pointwise(aten.signbit, _bool_result(_op("signbit")), KIND.ALWAYS_BOOL)


@register_lowering(aten.sign)
def sign(x):
    # a bool is its own sign (the generic body subtracts booleans, which Triton's interpreter refuses)
    return clone(x) if x.get_dtype() == torch.bool else make_pointwise(_op("sign"))(x)


def _shift_by_scalar(name):
    def lowering(x, amount):
        # eager gives 0 (or the sign, shifting right) past the bit width; Triton's shift is undefined there
        if isinstance(amount, IRNode) or not 0 <= amount < torch.iinfo(x.get_dtype()).bits:
            raise NotImplementedError("a shift by a tensor, or by a scalar outside the bit width")
        return make_pointwise(_op(name))(x, amount)
    return lowering


register_lowering(aten.__lshift__.Scalar)(_shift_by_scalar("bitwise_left_shift"))
register_lowering(aten.__rshift__.Scalar)(_shift_by_scalar("bitwise_right_shift"))


@register_lowering(aten.add)
def add_sub(a, b, alpha=1):
    return _add_sub(a, b, alpha, "add")


def _add_sub(a, b, alpha, name):
    if alpha == 1:
        return make_pointwise(_op(name))(a, b)
    cdt, rdt = promote([a, b], KIND.DEFAULT)
    check_converts(alpha, rdt, "alpha", ("add", "sub", "rsub"))   # (against float16 itself, not float32)
    # a ± alpha * b in one body, alpha in the compute dtype as eager scales; `b` may be a scalar. alpha
    # takes no part in promotion (bool + bool with alpha=2 stays bool), so it is a constant of the body
    return make_pointwise(lambda x, y: getattr(ops, name)(x, ops.mul(y, constant(alpha, cdt))))(a, b)


register_lowering(aten.sub)(lambda a, b, alpha=1: _add_sub(a, b, alpha, "sub"))
register_lowering(aten.rsub)(lambda a, b, alpha=1: _add_sub(b, a, alpha, "sub"))


def _refuse_integer_division_by_0(a, b) -> None:
    """An integer division (floor, trunc, remainder, fmod) by a scalar that is or may be 0 runs in ATen,
    which raises as eager does: a kernel divides by 0 without a word (x // k of an int tensor gave 0s at
    k = 0; found by the fuzzer's number arguments). A tensor divisor's zeros are data: not checked."""
    if isinstance(b, IRNode) or not isinstance(b, (int, sympy.Basic)) or isinstance(b, bool):
        return
    if promote([a, b], KIND.DEFAULT)[0].is_floating_point:
        return
    if b == 0 or (isinstance(b, sympy.Basic) and not b.is_Integer and symbolic.decide(sympy.Ne(b, 0)) is not True):
        raise NotImplementedError("an integer division by a scalar that may be 0")   # (ATen raises there)


def _integer_division(name):
    low = make_pointwise(_op(name), numbers_round=True)

    def lowering(a, b):
        _refuse_integer_division_by_0(a, b)
        return low(a, b)
    return lowering


register_lowering(aten.remainder)(_integer_division("remainder"))
register_lowering(aten.fmod)(_integer_division("fmod"))


@register_lowering(prims.fma)
def fma(a, b, c):
    """Dynamo's spelling of `x.addcmul_(t1, t2, value=v)` (Adam's update; `t1 * t2` is its own node before
    it), `x.addcdiv_` and `x.add_(y, alpha=tensor)`: `a * b + c` in the compute dtype, rounded once, as
    eager's addcmul_ and add_ compute it (float32 for a 2-byte float). Rounding `a * b` to float16 first,
    as torch's reference of the prim does, differed from eager by an ulp in 8% of AdamW's elements."""
    return make_pointwise(lambda x, y, z: ops.add(ops.mul(x, y), z))(a, b, c)


@register_lowering(aten.div)
def div(a, b, rounding_mode=None):
    if rounding_mode is None:
        return make_pointwise(_op("truediv"), KIND.INT_TO_FLOAT)(a, b)
    _refuse_integer_division_by_0(a, b)
    if rounding_mode == "floor":
        cdt, _ = promote([a, b], KIND.DEFAULT)
        return make_pointwise(_op("floordiv"))(a, b)
    if rounding_mode == "trunc":
        cdt, _ = promote([a, b], KIND.DEFAULT)
        if cdt.is_floating_point:
            return make_pointwise(lambda x, y: ops.trunc(ops.truediv(x, y)))(a, b)
        return make_pointwise(_op("truncdiv"))(a, b)
    raise ValueError(f"unknown rounding_mode {rounding_mode!r}")


@register_lowering(aten.true_divide)
def true_divide(a, b):
    """div's alias (nearest interpolation's decomposition divides sizes made float64 0-d tensors with it,
    and a symbolic scale such as 1 / sqrt(head dim) traces to it)."""
    return div(a, b)


@register_lowering(aten.floor_divide)
def floor_divide(a, b):
    return div(a, b, rounding_mode="floor")


@register_lowering(aten.round.decimals)
def round_decimals(x, *, decimals=0):
    """As eager: scale by 10**|decimals|, round half to even, scale back."""
    if not x.get_dtype().is_floating_point:
        raise NotImplementedError("round of integers with decimals")
    scale = 10.0 ** abs(decimals)
    if decimals >= 0:
        fn = lambda v, s: ops.truediv(ops.round(ops.mul(v, s)), s)  # noqa: E731
    else:
        fn = lambda v, s: ops.mul(ops.round(ops.truediv(v, s)), s)  # noqa: E731
    return make_pointwise(fn)(x, scale)


@register_lowering(aten.empty.memory_format, aten.empty_strided, aten.new_empty_strided)
def empty(*args, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    """An allocation (values unspecified): an extern call of empty_strided, not a fallback."""
    from .ir import current_graph
    if args and isinstance(args[0], IRNode):  # new_empty_strided(self, size, stride)
        self_, size, stride = args
        dtype, device = dtype or self_.get_dtype(), device or self_.get_device()
    else:
        size = args[0]
        stride = args[1] if len(args) > 1 else None
        if memory_format not in (None, torch.contiguous_format):
            raise NotImplementedError("empty in a non-contiguous memory format")
    dtype = dtype or torch.get_default_dtype()
    device = torch.device(device) if device is not None else torch.device("cpu")
    layout_ = Layout.contiguous(device, dtype, list(size))
    if stride is not None:
        layout_ = Layout(device, dtype, layout_.size, tuple(sympify_seq(stride)))
    return current_graph().make_extern(aten.empty_strided.default, (list(size), list(layout_.stride)),
                                       {"dtype": dtype, "device": device}, layout_)


@register_lowering(aten.pow)
def pow_(a, b):
    if isinstance(a, IRNode) and isinstance(b, (int, float, sympy.Basic)) and not isinstance(b, bool):
        # (x16 ** 1e6 raises; so does x16 ** k of an int input k = 70000)
        check_converts(b, promote([a, b], KIND.BOOL_TO_LONG)[1], "exponent", ("pow",))
    scalar_exponent = isinstance(b, (int, float)) and not isinstance(b, bool) and isinstance(a, IRNode)
    if scalar_exponent:
        if b == 2:
            return make_pointwise(lambda x, _: ops.mul(x, x), KIND.BOOL_TO_LONG)(a, b)
        if b == 0.5:
            return make_pointwise(lambda x, _: ops.sqrt(x), KIND.INT_TO_FLOAT)(a, b)
        if b == 1:
            return make_pointwise(lambda x, _: x, KIND.BOOL_TO_LONG)(a, b)
    cdt, _ = promote([a, b], KIND.BOOL_TO_LONG)
    if cdt.is_floating_point:
        # the exponents eager's pow kernels compute by multiplying (CUDA and CPU alike), as eager does:
        # `0.044715 * x ** 3` of HF's gelu_new through libdevice's pow ran 3x slower than Inductor (H200, s30)
        if scalar_exponent and b in (3, -1, -2):
            power = {3: lambda x: ops.mul(ops.mul(x, x), x), -1: lambda x: ops.truediv(ops.constant(1, cdt), x),
                     -2: lambda x: ops.truediv(ops.constant(1, cdt), ops.mul(x, x))}[b]
            return make_pointwise(lambda x, _: power(x), KIND.BOOL_TO_LONG)(a, b)
        return make_pointwise(_op("pow"), KIND.BOOL_TO_LONG, numbers_round=True)(a, b)   # (x16 ** 3.3 is ** 3.30078)
    if not scalar_exponent or b < 0:
        # eager's integer pow of a tensor exponent loops over its bits; of a negative scalar, it raises
        raise NotImplementedError("integer pow with a tensor or negative exponent")
    return make_pointwise(lambda x, _: _int_power(x, b, cdt), KIND.BOOL_TO_LONG)(a, b)


def _int_power(x, n: int, dtype: torch.dtype):
    """x ** n by squaring: products wrap around in the integer dtype, as eager's do."""
    result = None
    while n:
        if n & 1:
            result = x if result is None else ops.mul(result, x)
        n >>= 1
        if n:
            x = ops.mul(x, x)
    return ops.constant(1, dtype) if result is None else result


@register_lowering(aten.where)
def where(cond, a, b):
    cdt, rdt = promote([a, b], KIND.NO_OPMATH)
    for branch in (a, b):
        check_converts(branch, rdt, "where branch", ("where",))
    tensors = [t for t in (cond, a, b) if isinstance(t, IRNode)]
    out_size = broadcast_sizes(*[t.get_size() for t in tensors])
    ld = [broadcast_loader(t, out_size) if isinstance(t, IRNode) else t for t in (cond, a, b)]

    def inner_fn(idx):
        c = ld[0](idx) if isinstance(cond, IRNode) else ops.constant(bool(cond), torch.bool)
        if isinstance(cond, IRNode) and cond.get_dtype() != torch.bool:
            c = ops.to_dtype(c, torch.bool)
        vals = []
        for t, l in ((a, ld[1]), (b, ld[2])):
            if isinstance(t, IRNode):
                v = l(idx)
                vals.append(v if t.get_dtype() == rdt else ops.to_dtype(v, rdt))
            else:
                vals.append(constant(t, rdt))
        return ops.where(c, *vals)
    return Pointwise.create(device_of(tensors), rdt, inner_fn, out_size)


_CLAMPS = ("clamp", "clamp_min", "clamp_max", "clip", "hardtanh")   # (not hardswish's 0 and 6)


@register_lowering(aten.clamp, aten.clamp_min, aten.clamp_max)
def clamp(x, min=None, max=None):
    for bound in (min, max):
        if bound is not None:
            check_converts(bound, promote([x, bound], KIND.DEFAULT)[1], "clamp bound", _CLAMPS)
    out = x
    if min is not None:
        out = make_pointwise(_op("maximum"))(out, min)
    if max is not None:
        out = make_pointwise(_op("minimum"))(out, max)
    if out is x:
        return make_pointwise(lambda v: v)(x)
    return out


register_lowering(aten.clamp_min.default)(lambda x, min: clamp(x, min=min))
register_lowering(aten.clamp_max.default)(lambda x, max: clamp(x, max=max))


@register_lowering(aten.hardtanh)
def hardtanh(x, min_val=-1.0, max_val=1.0):
    """Unlike clamp, the bounds do not promote: the result has x's dtype, and an integer x clamps
    to the bounds truncated to integers (hardtanh(int32, -1.5, 1.5) is int32, within [-1, 1])."""
    if x.get_dtype() == torch.bool:
        raise NotImplementedError("hardtanh of bool (eager raises)")
    if not x.get_dtype().is_floating_point:
        min_val, max_val = int(min_val), int(max_val)
    return clamp(x, min_val, max_val)


@register_lowering(aten.leaky_relu)
def leaky_relu(x, negative_slope=0.01):
    check_converts(negative_slope, promote([x], KIND.DEFAULT)[0], "negative slope", ("leaky_relu",))   # (in float32)
    return where(lowering_of(aten.gt.Scalar)(x, 0), x, lowering_of(aten.mul.Tensor)(x, negative_slope))


@register_lowering(aten._to_copy)
def to_copy(x, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False, memory_format=None):
    if device is not None and torch.device(device) != x.get_device():
        raise NotImplementedError("device copies run as fallback")
    dtype = dtype or x.get_dtype()
    return to_dtype(x, dtype)


def to_dtype(x: IRNode, dtype: torch.dtype) -> IRNode:
    if x.get_dtype() == dtype:
        return x
    src, loader = x.get_dtype(), x.make_loader()
    return Pointwise.create(x.get_device(), dtype, lambda idx: ops.to_dtype(loader(idx), dtype, src), x.get_size())


@register_lowering(prims.convert_element_type)
def convert_element_type(x, dtype):
    return to_dtype(x, dtype)


@register_lowering(aten.clone, aten.lift_fresh_copy)
def clone(x, memory_format=None):
    return Pointwise.create(x.get_device(), x.get_dtype(), x.make_loader(), x.get_size())


@register_lowering(aten.copy)
def copy(dst, src, non_blocking=False):
    size = dst.get_size()
    src = to_dtype(src, dst.get_dtype()) if isinstance(src, IRNode) else src
    if not isinstance(src, IRNode):
        return full(size, src, dtype=dst.get_dtype(), device=dst.get_device())
    return Pointwise.create(dst.get_device(), dst.get_dtype(), broadcast_loader(src, size), size)


# ─── creation ops ───────────────────────────────────────────────────────────────────────────────

# ops whose eager kernel fills with a checked number, and which decompose to full, full_like or
# scalar_tensor (torch.where's number becomes a scalar_tensor in eager too); not threshold, nan_to_num,
# xlogy, lerp, whose decompositions also make these of numbers
_FILLS = ("full", "full_like", "scalar_tensor", "fill", "new_full", "new_ones", "new_zeros", "zeros", "ones",
          "zeros_like", "ones_like", "masked_fill", "where")


@register_lowering(aten.full)
def full(size, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None):
    if isinstance(fill_value, sympy.Basic) and any(not s.is_integer for s in fill_value.free_symbols):
        raise NotImplementedError("a fill value read from data as a float")   # (the wrapper has it)
    if dtype is None:   # a dynamic graph's size is an int too (a sympy integer expression), its relation a bool
        dtype = (torch.bool if isinstance(fill_value, bool) or is_relation(fill_value) else
                 torch.int64 if isinstance(fill_value, int) or (isinstance(fill_value, sympy.Basic)
                                                                 and fill_value.is_integer)
                 else torch.get_default_dtype())
    check_converts(fill_value, dtype, "fill value", _FILLS)
    device = torch.device(device) if device is not None else torch.device("cpu")
    return Pointwise.create(device, dtype, lambda idx: constant(fill_value, dtype), list(size))


@register_lowering(aten.scalar_tensor, prims.scalar_tensor)   # (xlogy's decomposition makes the prim)
def scalar_tensor(value, *, dtype=None, layout=None, device=None, pin_memory=None):
    return full([], value, dtype=dtype or torch.get_default_dtype(), device=device)


@register_lowering(aten.full_like)
def full_like(x, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None, memory_format=None):
    return full(x.get_size(), fill_value, dtype=dtype or x.get_dtype(), device=device or x.get_device())


@register_lowering(aten.fill)
def fill(x, value):
    if isinstance(value, IRNode):
        return copy(x, value)
    return full_like(x, value)


@register_lowering(prims.iota)
def iota(length, *, start, step, dtype, device, requires_grad):
    return Pointwise.create(torch.device(device), dtype,
                            lambda idx: ops.index_expr(start + step * idx[0], dtype), [length])


@register_lowering(aten.arange.start_step)
def arange(start, end=None, step=1, *, dtype=None, layout=None, device=None, pin_memory=None):
    if not all(isinstance(v, int) for v in (start, end, step)) or dtype not in (None, torch.int64, torch.int32):
        raise NotImplementedError("float arange runs as fallback")
    length = max(0, math.ceil((end - start) / step))
    return iota(length, start=start, step=step, dtype=dtype or torch.int64, device=device or "cpu",
                requires_grad=False)


# ─── normalization ──────────────────────────────────────────────────────────────────────────────

@register_lowering(aten._native_batch_norm_legit_no_training.default)
def batch_norm_inference(x, weight, bias, running_mean, running_var, momentum, eps):
    """(x - mean) * rsqrt(var + eps) * weight + bias with the running statistics of channel dim 1.

    Returns what eager returns: on the CPU (output, empty, empty), on CUDA (output, running mean,
    1/sqrt(running var + eps)); computed in fp32 for fp16/bf16 inputs.
    """
    size, dtype = x.get_size(), x.get_dtype()
    load_x = x.make_loader()

    def per_channel(t):
        if t is None:
            return None
        load = t.make_loader()
        return lambda idx: _as_fp32(load([idx[1]]), t.get_dtype())

    mean, var, w, b = (per_channel(t) for t in (running_mean, running_var, weight, bias))

    def inner_fn(idx):
        inv_std = ops.rsqrt(ops.add(var(idx), ops.constant(float(eps), torch.float32)))
        out = ops.mul(ops.sub(_as_fp32(load_x(idx), dtype), mean(idx)), inv_std)
        if w is not None:
            out = ops.mul(out, w(idx))
        if b is not None:
            out = ops.add(out, b(idx))
        return out if dtype == torch.float32 else ops.to_dtype(out, dtype)
    out = Pointwise.create(x.get_device(), dtype, inner_fn, size)
    if x.get_device().type == "cpu" or running_mean is None or running_var is None:
        # the CPU kernel returns empty statistics in the input's dtype
        stat_dtype = running_mean.get_dtype() if running_mean is not None else dtype
        empty = [Pointwise.create(x.get_device(), stat_dtype, lambda idx: ops.constant(0, stat_dtype), [0])
                 for _ in range(2)]
        return (out, *empty)
    # the CUDA kernel returns the running mean and 1/sqrt(running var + eps), per channel, in the
    # computation dtype (float32, float64 for float64)
    stat_dtype = torch.float64 if dtype == torch.float64 else torch.float32
    load_mean, load_var = running_mean.make_loader(), running_var.make_loader()

    def as_stat(value, src):
        return value if src == stat_dtype else ops.to_dtype(value, stat_dtype)

    def save_mean(idx):
        return as_stat(load_mean(idx), running_mean.get_dtype())

    def save_invstd(idx):
        return ops.rsqrt(ops.add(as_stat(load_var(idx), running_var.get_dtype()), ops.constant(float(eps), stat_dtype)))
    channels = [size[1]]
    return (out, Pointwise.create(x.get_device(), stat_dtype, save_mean, channels),
            Pointwise.create(x.get_device(), stat_dtype, save_invstd, channels))


def _as_fp32(value, dtype: torch.dtype):
    return value if dtype == torch.float32 else ops.to_dtype(value, torch.float32)


def lowering_of(target) -> Callable:
    return LOWERINGS[target]


# getitem on the tuples multi-output lowerings return
LOWERINGS[operator.getitem] = lambda seq, i: seq[i]

# Import for their registrations.
from . import (copy_lowerings, extern_lowerings, indexing_lowerings, pooling_lowerings,  # noqa: E402,F401
               random_lowerings, reduction_lowerings, scan_lowerings, scatter_lowerings, sort_lowerings,
               view_lowerings)
from ..distributed import collectives  # noqa: E402,F401  (the functional collectives' lowerings)

"""The `ops` handler that prints Triton: `TritonOps` turns each op of a node's body into one line of
the kernel's current section (CSE'd through `TritonKernel.emit`), and loads, stores, reductions into
their masked, pointer-indexed Triton forms.

Also here, since the kernel (triton.py) uses them too: the index symbols the kernel's code names
(xindex, yindex, rindex), `CSEVar` (a value an op returns) and `StoreLine` (a store the kernel may
drop once it knows the buffer stays inside it).
"""
from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

import sympy
import torch

from ..errors import CodegenError
from ..lowering.sizevars import (FloorDiv, ModularIndexing, SignedFloorDiv, SignedMod, is_relation, simplify,
                                upper_bound)
from .recompute import recompute_load

if TYPE_CHECKING:
    from .triton import TritonKernel

XINDEX = sympy.Symbol("xindex", integer=True, nonnegative=True)
YINDEX = sympy.Symbol("yindex", integer=True, nonnegative=True)
RINDEX = sympy.Symbol("rindex", integer=True, nonnegative=True)

TL_DTYPES = {
    torch.float32: "tl.float32", torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16",
    torch.float64: "tl.float64", torch.int64: "tl.int64", torch.int32: "tl.int32", torch.int16: "tl.int16",
    torch.int8: "tl.int8", torch.uint8: "tl.uint8", torch.bool: "tl.int1",
}


def tl_dtype(dtype: torch.dtype) -> str:
    try:
        return TL_DTYPES[dtype]
    except KeyError:
        supported = ", ".join(str(d).removeprefix("torch.") for d in TL_DTYPES)
        raise NotImplementedError(f"generated Triton kernels do not take {dtype} values (they take {supported})"
                                  ) from None


def texpr(expr: sympy.Expr, *, python: bool = False) -> str:
    """Print an index expression as Triton (integer) code, or as Python (`python`: the wrapper's
    sizes). The two differ only in torch's floor division and modulo of values of any sign
    (SignedFloorDiv, SignedMod): Python's // and % floor, Triton's truncate, so a kernel calls helpers."""
    def operand(e: sympy.Expr) -> str:
        return _operand(e, python=python)

    if isinstance(expr, sympy.Integer):
        return str(int(expr))
    if isinstance(expr, sympy.Symbol):
        return expr.name
    if isinstance(expr, FloorDiv):
        return f"({operand(expr.args[0])} // {operand(expr.args[1])})"
    if isinstance(expr, ModularIndexing):
        base, div, mod = expr.args
        inner = operand(base) if div == 1 else f"({operand(base)} // {operand(div)})"
        return f"({inner} % {operand(mod)})"
    if isinstance(expr, (SignedFloorDiv, SignedMod)):
        floor = isinstance(expr, SignedFloorDiv)
        if python:
            return f"({operand(expr.args[0])} {'//' if floor else '%'} {operand(expr.args[1])})"
        a, b = (texpr(x) for x in expr.args)
        return f"triton_helpers.{'div_floor_integer' if floor else 'remainder_integer'}({a}, {b})"
    if isinstance(expr, sympy.Add):
        return " + ".join(texpr(a, python=python) for a in sorted(expr.args, key=sympy.default_sort_key))
    if isinstance(expr, sympy.Mul):
        return "*".join(f"({texpr(a, python=python)})" if isinstance(a, sympy.Add) else texpr(a, python=python)
                        for a in expr.args)
    if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and int(expr.exp) > 0:   # a size symbol squared
        return "*".join([operand(expr.base)] * int(expr.exp))
    if isinstance(expr, (sympy.Max, sympy.Min)):   # max(1, n // 2) of a pooled size
        # a + (b - a) * (b > a): the same text is Python (the wrapper) and Triton (a kernel), where
        # max() of runtime values is not
        first, *rest = sorted(expr.args, key=sympy.default_sort_key)
        out = operand(first)
        for b in rest:
            rel = ">" if isinstance(expr, sympy.Max) else "<"
            out = f"({out} + ({texpr(b, python=python)} - {out}) * ({operand(b)} {rel} {out}))"
        return out
    raise NotImplementedError(f"index expression {expr}")


def _operand(expr: sympy.Expr, *, python: bool = False) -> str:
    """`expr` as an operand of // or %: parenthesized unless it is one symbol, number or div/mod."""
    if isinstance(expr, (sympy.Symbol, sympy.Integer, FloorDiv, ModularIndexing, SignedFloorDiv, SignedMod)):
        return texpr(expr, python=python)
    return f"({texpr(expr, python=python)})"


@dataclasses.dataclass(frozen=True)
class CSEVar:
    name: str
    dtype: torch.dtype

    def __str__(self):
        return self.name


@dataclasses.dataclass
class StoreLine:
    buffer: str
    text: str


def _float_literal(v: float) -> str:
    if math.isnan(v):
        return 'float("nan")'
    if math.isinf(v):
        return 'float("inf")' if v > 0 else 'float("-inf")'
    return repr(float(v))


# Triton makes every float constant equal to 0 its null value, +0.0 (`tl.full([1], -0.0, ...)` and a -0.0
# operand are +0.0: semantic.scalar_constant), and its unary minus is 0 - x (+0.0 for x = +0.0): so
# -0.0 is written as its bits, and a float's negation as x * -1, to keep eager's sign of zero
_SIGN_BIT = {torch.float16: ("tl.int16", -2 ** 15), torch.bfloat16: ("tl.int16", -2 ** 15),
             torch.float32: ("tl.int32", -2 ** 31), torch.float64: ("tl.int64", -2 ** 63)}


def _negative_zero(v: float, dtype: torch.dtype) -> str | None:
    """-0.0 of `dtype` as a Triton expression when `v` is -0.0, else None."""
    if v != 0 or math.copysign(1.0, v) > 0 or dtype not in _SIGN_BIT:
        return None
    int_type, bits = _SIGN_BIT[dtype]
    return f"tl.full([1], {bits}, {int_type}).to({tl_dtype(dtype)}, bitcast=True)"


def _both_bool(a, b) -> bool:
    return getattr(a, "dtype", None) == torch.bool and getattr(b, "dtype", None) == torch.bool


class TritonOps:
    """The `ops` handler that writes Triton code into the kernel's current section."""

    def __init__(self, kernel: TritonKernel, inside: bool):
        self.k = kernel
        self.inside = inside
        self.masks: list[str] = []   # masks of the `masked` bodies being evaluated, outermost first

    # memory
    def _index(self, index: sympy.Expr) -> sympy.Expr:
        return simplify(index, self.k.var_ranges)

    def _mask(self, index: sympy.Expr, name: str | None = None) -> str:
        mask = self.k.row_mask
        # an indirect index (a tmp symbol) may come from a load along the reduction: mask it like one
        indirect = any(s.name.startswith("tmp") for s in index.free_symbols)
        if self.k.is_reduction and (RINDEX in index.free_symbols or (indirect and self.inside)):
            mask = "xmask & rmask"
        if name is not None and self.masks and self._in_bounds(name, index):
            # the body's masks only keep addresses in range, and these are: the value a false mask
            # discards is read but never used, and the loads of one index CSE across the bodies
            return mask
        return " & ".join([mask] + self.masks)

    def _in_bounds(self, name: str, index: sympy.Expr) -> bool:
        """Every element of the kernel reads `name` inside its storage at `index` (a linear index of
        the kernel's own variables, no negative terms, an upper bound within the buffer's span)."""
        span = self.k.buffer_spans.get(name)
        ranges = self.k.var_ranges
        if span is None or not all(s in ranges for s in index.free_symbols):
            return False
        bound = upper_bound(index, ranges)
        return bound is not None and bound <= span

    def load(self, name: str, index):
        k = self.k
        index = self._index(index)
        hit = k.store_cache.get((name, index))
        if hit is not None:
            value, sec = hit
            if sec == k.section.index or (sec % 2 == 0 and sec < k.section.index):
                return value
        if name in k.recomputed:
            value = recompute_load(k.recomputed[name], index, k.var_ranges, k.buffer_dtypes[name])
            if value is None:
                raise CodegenError(f"{name} is read at {index}, which names no single element of it",
                                   node=name)
            return value
        if name in k.stores:
            k.load_misses.add(name)
            if not self._stored_at(name, index):
                # read back what this kernel stored, at an index the codegen could not show to be the
                # stored one: the scheduler fused them because they name the same elements, so this
                # program wrote them, but maybe another of its threads. Without a barrier a GPU may
                # read before that thread's store (the interpreter, one thread, cannot show it).
                k.section.lines.append("tl.debug_barrier()")
        elif name not in k.loads:
            k.loads.append(name)
        dtype = k.buffer_dtypes[name]
        kind = "bcast" if name in k.broadcast_reads else ("loop" if k.looped and self.inside else "")
        k.loaded_in.setdefault(name, set()).add(k.section.index)
        return k.emit(f"tl.load({self._pointer(name, index)}, {self._mask(index, name)}@evict:{name}:{kind}@)", dtype)

    def _stored_at(self, name: str, index) -> bool:
        """This kernel stored `name` at `index`, as written or once the loop variables that take one
        value (a range of 1: xindex of a single row) are 0."""
        k = self.k
        if (name, index) in k.store_cache:
            return True
        single = {v: 0 for v, n in k.var_ranges.items() if n == 1}
        if not single:
            return False
        index = index.subs(single)
        return any(key[0] == name and key[1].subs(single) == index for key in k.store_cache)

    def _pointer(self, name: str, index, after_loop: bool = False) -> str:
        # an index without xindex (or yindex) still needs a block of pointers to match the mask
        if self.k.tiling is not None:
            pad = "" if {XINDEX, YINDEX} <= index.free_symbols else " + tl.zeros([YBLOCK, XBLOCK], tl.int32)"
        elif getattr(self.k, "tile_2d", False):   # a matmul template's epilogue: rows in yindex, columns in xindex
            pad = "" if {XINDEX, YINDEX} <= index.free_symbols else " + tl.zeros_like(xindex + yindex)"
        else:
            pad = "" if XINDEX in index.free_symbols else " + tl.zeros_like(xindex)"
        return f"@{name}@ + {_operand(self.k.wide_index(index, after_loop))}{pad}"

    def store(self, name: str, index, value, mode: str | None = None, after_loop: bool = False):
        k = self.k
        index = self._index(index)
        dtype = k.buffer_dtypes[name]
        if name not in k.stores:
            k.stores.append(name)
        if mode == "atomic_add":
            # other programs add to the same elements: nothing to cache, and no plain store
            if value.dtype != dtype:
                value = self.to_dtype(value, dtype)
            k.load_misses.add(name)
            # the value as a block of the pointers' shape, computed (not a broadcast view): Triton's
            # interpreter reads a [1] value (a constant) past its end for every lane; a GPU broadcasts
            pointer = self._pointer(name, index)
            full = f"{value} + tl.zeros(({pointer}).shape, {tl_dtype(value.dtype)})"
            k.section.lines.append(StoreLine(name, f"tl.atomic_add({pointer}, {full}, {self._mask(index)}, "
                                                   f"sem='relaxed')"))
            return
        if mode == "scatter":
            # a plain store to a computed address (scatter without reduce): other programs may store
            # to the same element, so nothing is cached for a later load
            if value.dtype != dtype:
                value = self.to_dtype(value, dtype)
            k.load_misses.add(name)
            k.section.lines.append(StoreLine(name, f"tl.store({self._pointer(name, index)}, {value}, "
                                                   f"{self._mask(index)})"))
            return
        if mode is not None:
            raise NotImplementedError(f"store mode {mode!r}")
        if after_loop:
            # a looped reduction's result exists only after its loop: store it there
            if value.dtype != dtype:
                cast = k.newvar(dtype)
                k.section.finalize.append(f"{cast} = {value}.to({tl_dtype(dtype)})")
                value = cast
            k.store_cache[(name, index)] = (value, k.section.index + 1)
            k.section.finalize.append(StoreLine(name, f"tl.store({self._pointer(name, index, True)}, {value}, xmask)"))
            return
        if value.dtype != dtype:
            value = self.to_dtype(value, dtype)
        k.store_cache[(name, index)] = (value, k.section.index)
        k.section.lines.append(StoreLine(name, f"tl.store({self._pointer(name, index)}, {value}, {self._mask(index)})"))

    def store_reduction(self, name: str, index, value):
        self.store(name, index, value, after_loop=self.k.looped)

    # values
    def constant(self, value, dtype: torch.dtype):
        if is_relation(value):   # a bool made of sizes (a SymBool: k < 3)
            return self.to_dtype(self._size_bool(value), dtype)
        if isinstance(value, sympy.Basic) and value.free_symbols:   # made of a dynamic graph's sizes
            if value.is_integer:
                return self.index_expr(value, dtype)
            return self.to_dtype(self._size_float(value), dtype)
        if dtype == torch.bool:
            lit = "1" if value else "0"
        elif dtype.is_floating_point:
            if (zero := _negative_zero(float(value), dtype)) is not None:
                return self.k.emit(zero, dtype)
            lit = _float_literal(float(value))
        else:
            lit = str(int(value))
        return self.k.emit(f"tl.full([1], {lit}, {tl_dtype(dtype)})", dtype)

    def _size_float(self, expr: sympy.Expr) -> CSEVar:
        """A float made of sizes (a SymFloat: 1 / n, n / (n - 1)) in float64, as Python computes it in
        double. Never in Triton's arithmetic on the bare size arguments: `1.0 / s0` of an integer
        argument and a literal is float32 there. Sizes are exact in float64 (below 2**53), and a
        quotient of integers is one division, rounded once as Python's `n / d` is."""
        f64 = torch.float64
        if expr.is_Number:
            return self.constant(float(expr), f64)
        if expr.is_integer:
            return self.index_expr(expr, f64)
        num, den = sympy.fraction(sympy.together(expr))
        if den != 1:
            return self.truediv(self._size_float(num), self._size_float(den))
        # (Max: a variance's max(0, n - correction))
        folds = {sympy.Add: self.add, sympy.Mul: self.mul, sympy.Max: self.maximum, sympy.Min: self.minimum}
        combine = folds.get(type(expr))
        if combine is not None:
            terms = [self._size_float(a) for a in sorted(expr.args, key=sympy.default_sort_key)]
            out = terms[0]
            for t in terms[1:]:
                out = combine(out, t)
            return out
        if isinstance(expr, sympy.Pow) and expr.exp.is_Integer and int(expr.exp) > 0:
            base = self._size_float(expr.base)
            out = base
            for _ in range(int(expr.exp) - 1):
                out = self.mul(out, base)
            return out
        raise NotImplementedError(f"a float made of sizes: {expr}")

    _RELATIONS = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}

    def _size_bool(self, cond) -> CSEVar:
        """A bool made of sizes used as a value (x * (k < 3), k an int input): each relation as the
        comparison of its sides, in int64, or in float64 where a side is a float made of sizes (as
        Python compares them). Sympy's relations cannot be operands of its arithmetic: such a graph
        was compiled per size."""
        if cond in (sympy.true, sympy.false):
            return self.constant(bool(cond), torch.bool)
        if isinstance(cond, sympy.Not):
            return self.logical_not(self._size_bool(cond.args[0]))
        if isinstance(cond, (sympy.And, sympy.Or)):
            combine = self.logical_and if isinstance(cond, sympy.And) else self.logical_or
            parts = [self._size_bool(a) for a in cond.args]
            out = parts[0]
            for p in parts[1:]:
                out = combine(out, p)
            return out
        if isinstance(cond, sympy.core.relational.Relational) and cond.rel_op in self._RELATIONS:
            if cond.lhs.is_integer and cond.rhs.is_integer:
                lhs, rhs = self.index_expr(cond.lhs, torch.int64), self.index_expr(cond.rhs, torch.int64)
            else:
                lhs, rhs = self._size_float(cond.lhs), self._size_float(cond.rhs)
            return getattr(self, self._RELATIONS[cond.rel_op])(lhs, rhs)
        raise NotImplementedError(f"a bool made of sizes: {cond}")

    def index_expr(self, expr, dtype: torch.dtype):
        expr = self._index(expr)
        if not expr.free_symbols:
            return self.constant(int(expr), dtype)
        if not expr.free_symbols & {XINDEX, YINDEX, RINDEX, *self.k.indirect}:
            # only size symbols (n // 2 of a dynamic graph): a block, as a constant is (a bare scalar
            # argument mixed with blocks trips Triton's interpreter), each symbol made an int64 block
            # before the arithmetic (k * 100000 // 3 at k = 30000 wrapped in the arguments' int32;
            # review, session 34); an indirect index is a block already
            wide = {s: sympy.Symbol(f"tl.full([1], {s.name}, tl.int64)", **s.assumptions0) for s in expr.free_symbols}
            text = texpr(expr.xreplace(wide))
        else:
            text = texpr(self.k.wide_index(expr))
        return self.k.emit(f"({text}).to({tl_dtype(dtype)})", dtype)

    def to_dtype(self, x: CSEVar, dtype: torch.dtype, src_dtype=None):
        if x.dtype == dtype:
            return x
        if dtype == torch.bool:
            return self.k.emit(f"({x} != 0)", torch.bool)
        if dtype == torch.uint8 and x.dtype.is_floating_point:
            # eager wraps a float into uint8 through a wider integer (-1.5 → 255); Triton's direct cast saturates
            return self.k.emit(f"{x}.to(tl.int32).to(tl.uint8)", dtype)
        return self.k.emit(f"{x}.to({tl_dtype(dtype)})", dtype)

    def where(self, c, a, b):
        return self.k.emit(f"tl.where({c}, {a}, {b})", a.dtype)

    def masked(self, mask, body, other):
        """`body()` where `mask` holds (its loads masked, so out-of-range addresses are never read), else `other`."""
        self.masks.append(str(mask))
        try:
            value = body()
        finally:
            self.masks.pop()
        if isinstance(other, CSEVar):
            return self.k.emit(f"tl.where({mask}, {value}, {other})", value.dtype)
        if value.dtype == torch.bool:
            lit = "True" if other else "False"   # 1 would make the value int32 (a looped reduction's accumulator too)
        elif value.dtype.is_floating_point:
            lit = _negative_zero(float(other), value.dtype) or _float_literal(float(other))
        else:
            lit = str(int(other))
        return self.k.emit(f"tl.where({mask}, {value}, {lit})", value.dtype)

    def indirect_indexing(self, value, size, check: bool = True):
        """A loaded integer as an index symbol (named like its variable, so deps see it as indirect).

        Negative indices wrap around as in eager; an out-of-range index is a device-side assert.
        """
        size = sympy.sympify(size)   # a dynamic graph's: an expression of its size symbols (kernel arguments)
        size_text = str(int(size)) if not size.free_symbols else f"({texpr(size)})"
        wrapped = self.k.emit(f"tl.where({value} < 0, {value} + {size_text}, {value})", value.dtype)
        if check and self.k.device_asserts:
            row = "xmask & rmask" if self.k.is_reduction and self.inside else self.k.row_mask
            mask = " & ".join([row] + self.masks)
            line = (f"tl.device_assert((({wrapped} >= 0) & ({wrapped} < {size_text})) | ~({mask}), "
                    f"\"index out of bounds: 0 <= {wrapped} < {size}\")")
            if line not in self.k.section.lines:
                self.k.section.lines.append(line)
        symbol = sympy.Symbol(wrapped.name, integer=True, nonnegative=True)
        self.k.indirect[symbol] = (size, wrapped.dtype)
        return symbol

    def _binary(self, fmt: str, a, b, dtype=None):
        return self.k.emit(fmt.format(a=a, b=b), dtype or a.dtype)

    def _unary(self, fmt: str, a, dtype=None):
        return self.k.emit(fmt.format(a=a), dtype or a.dtype)

    # bool sums and products are eager's `or` and `and`; Triton's 1-bit `+` wraps (True + True is False)
    def add(self, a, b): return self._binary("{a} | {b}" if _both_bool(a, b) else "{a} + {b}", a, b)
    def sub(self, a, b): return self._binary("{a} - {b}", a, b)
    def mul(self, a, b): return self._binary("{a} & {b}" if _both_bool(a, b) else "{a} * {b}", a, b)
    def truediv(self, a, b): return self._binary("{a} / {b}", a, b)
    def truncdiv(self, a, b): return self._binary("{a} // {b}", a, b)

    def floordiv(self, a, b):
        if a.dtype.is_floating_point:
            return self._binary("triton_helpers.div_floor_float({a}, {b})", a, b)
        return self._binary("triton_helpers.div_floor_integer({a}, {b})", a, b)

    def remainder(self, a, b):
        if a.dtype.is_floating_point:
            return self._binary("triton_helpers.remainder_float({a}, {b})", a, b)
        return self._binary("triton_helpers.remainder_integer({a}, {b})", a, b)

    def fmod(self, a, b):
        if a.dtype.is_floating_point:
            return self._binary("libdevice.fmod({a}, {b})", a, b)
        return self._binary("{a} % {b}", a, b)

    def maximum(self, a, b): return self._binary("triton_helpers.maximum({a}, {b})", a, b)
    def minimum(self, a, b): return self._binary("triton_helpers.minimum({a}, {b})", a, b)
    def pow(self, a, b):
        if not a.dtype.is_floating_point:
            raise NotImplementedError("integer pow")
        return self._binary("libdevice.pow({a}, {b})", a, b)
    def atan2(self, a, b): return self._binary("libdevice.atan2({a}, {b})", a, b)
    def copysign(self, a, b): return self._binary("libdevice.copysign({a}, {b})", a, b)
    def hypot(self, a, b): return self._binary("libdevice.hypot({a}, {b})", a, b)
    def nextafter(self, a, b): return self._binary("libdevice.nextafter({a}, {b})", a, b)

    def fmax(self, a, b):  # NaN only where both are NaN
        if not a.dtype.is_floating_point:
            return self.maximum(a, b)
        return self._binary("tl.where({a} != {a}, {b}, tl.where({b} != {b}, {a}, triton_helpers.maximum({a}, {b})))",
                            a, b)

    def fmin(self, a, b):
        if not a.dtype.is_floating_point:
            return self.minimum(a, b)
        return self._binary("tl.where({a} != {a}, {b}, tl.where({b} != {b}, {a}, triton_helpers.minimum({a}, {b})))",
                            a, b)

    def neg(self, a):   # (a float's as x * -1: Triton's -x is 0 - x, +0.0 where eager gives -0.0)
        return self._unary("{a} * -1" if getattr(a, "dtype", None) is not None and a.dtype.is_floating_point
                           else "-{a}", a)
    def abs(self, a): return self._unary("tl.abs({a})", a)
    def reciprocal(self, a): return self._unary("1 / {a}", a)
    def square(self, a): return self._unary("{a} * {a}", a)
    def relu(self, a): return self._unary("tl.where({a} < 0, 0, {a})", a)
    def exp(self, a): return self._unary("tl.exp({a})", a)
    # exp2, sqrt, rsqrt, floor, ceil, trunc and round: PTX instructions for float32 on the GPU (PTX_F32)
    def exp2(self, a): return self._unary(_ptx_f32("exp2", a), a)
    def log(self, a): return self._unary("tl.log({a})", a)
    def log2(self, a): return self._unary("tl.log2({a})", a)
    def sqrt(self, a): return self._unary(_ptx_f32("sqrt", a), a)
    def rsqrt(self, a): return self._unary(_ptx_f32("rsqrt", a), a)
    def sin(self, a): return self._unary("tl.sin({a})", a)
    def cos(self, a): return self._unary("tl.cos({a})", a)
    def sigmoid(self, a): return self._unary("tl.sigmoid({a})", a)
    def erf(self, a):
        if a.dtype == torch.float32 and BRANCHLESS_MATH:
            return self._unary("triton_helpers.erf32({a})", a)
        return self._unary("tl.erf({a})", a)

    def tanh(self, a):
        if a.dtype == torch.float32 and BRANCHLESS_MATH:
            return self._unary("triton_helpers.tanh32({a})", a)
        return self._unary("libdevice.tanh({a})", a)
    def floor(self, a): return self._unary(_ptx_f32("floor", a), a) if a.dtype.is_floating_point else a
    def ceil(self, a): return self._unary(_ptx_f32("ceil", a), a) if a.dtype.is_floating_point else a
    def trunc(self, a): return self._unary(_ptx_f32("trunc", a), a) if a.dtype.is_floating_point else a
    def round(self, a): return self._unary(_ptx_f32("round", a), a) if a.dtype.is_floating_point else a

    def sign(self, a):
        t = tl_dtype(a.dtype)
        return self._unary(f"(0 < {{a}}).to({t}) - ({{a}} < 0).to({t})", a)

    def isnan(self, a): return self._unary("{a} != {a}", a, torch.bool)
    def isinf(self, a): return self._unary("triton_helpers.isinf({a})", a, torch.bool)
    def signbit(self, a): return self._unary("libdevice.signbit({a}).to(tl.int1)", a, torch.bool)

    def eq(self, a, b): return self._binary("{a} == {b}", a, b, torch.bool)
    def ne(self, a, b): return self._binary("{a} != {b}", a, b, torch.bool)
    def lt(self, a, b): return self._binary("{a} < {b}", a, b, torch.bool)
    def le(self, a, b): return self._binary("{a} <= {b}", a, b, torch.bool)
    def gt(self, a, b): return self._binary("{a} > {b}", a, b, torch.bool)
    def ge(self, a, b): return self._binary("{a} >= {b}", a, b, torch.bool)

    def _bool(self, a):
        return a if a.dtype == torch.bool else self.to_dtype(a, torch.bool)

    def logical_and(self, a, b): return self._binary("{a} & {b}", self._bool(a), self._bool(b), torch.bool)
    def logical_or(self, a, b): return self._binary("{a} | {b}", self._bool(a), self._bool(b), torch.bool)
    def logical_xor(self, a, b): return self._binary("{a} ^ {b}", self._bool(a), self._bool(b), torch.bool)
    def logical_not(self, a): return self._unary("{a} == 0", self._bool(a), torch.bool)
    def bitwise_and(self, a, b): return self._binary("{a} & {b}", a, b)
    def bitwise_or(self, a, b): return self._binary("{a} | {b}", a, b)
    def bitwise_xor(self, a, b): return self._binary("{a} ^ {b}", a, b)
    def bitwise_not(self, a):
        return self._unary("{a} == 0", a) if a.dtype == torch.bool else self._unary("~{a}", a)
    def bitwise_left_shift(self, a, b): return self._binary("{a} << {b}", a, b)
    def bitwise_right_shift(self, a, b): return self._binary("{a} >> {b}", a, b)
    def rand(self, seed, offset): return self._binary("tl.rand({a}, {b})", seed, offset, torch.float32)
    def randn(self, seed, offset): return self._binary("tl.randn({a}, {b})", seed, offset, torch.float32)

    def __getattr__(self, name):
        # the rest of the math library through libdevice (one source on GPU and interpreter)
        if name in _LIBDEVICE_UNARY:
            return lambda a: self._unary(f"libdevice.{name}({{a}})", a)
        if name in _LIBDEVICE_RENAMED:
            return lambda a: self._unary(f"libdevice.{_LIBDEVICE_RENAMED[name]}({{a}})", a)
        raise NotImplementedError(f"ops.{name} has no Triton translation")

    # reductions
    def reduction(self, dtype: torch.dtype, src_dtype: torch.dtype, reduction_type: str, value):
        k = self.k
        key = (reduction_type, tuple(v.name for v in value) if isinstance(value, tuple) else value.name, dtype)
        if key in k.reduction_cache:
            return k.reduction_cache[key]
        result = (self._looped_reduction if k.looped else self._persistent_reduction)(dtype, reduction_type, value)
        k.reduction_cache[key] = result
        return result

    def _persistent_reduction(self, dtype, rtype, value):
        k = self.k
        mask = "xmask & rmask"
        if rtype == "welford_reduce":
            # the corrected two-pass algorithm: the deviations from the first pass's mean also sum the
            # error of that mean (`drift`), which corrects both the mean and m2. A constant row then
            # has m2 exactly 0, as eager's Welford gives (its std's gradient is 0 there, and a plain
            # two-pass m2 of a few ulps made it about 1: fuzz seed 151)
            # The first sum runs over the values scaled by 2**-bits <= 1/n, so that it cannot overflow
            # (rows of 1e35 summed to inf and gave a NaN mean and var where eager gives 1e35 and 0); the
            # scaling is exact, and so is dividing by n scaled alike: the same mean as sum / n otherwise
            if isinstance(k.rnumel, int):
                bits = max(0, (k.rnumel - 1).bit_length())
                n = _float_literal(float(k.rnumel))
                scaled_n = _float_literal(float(k.rnumel) * 2.0 ** -bits)
            else:   # a bounded dynamic row (its block is the bound's): the kernel's rnumel argument
                bits = max(0, (k.config.RBLOCK - 1).bit_length())
                n = k.emit(f"rnumel * {_float_literal(1.0)}", dtype)
                scaled_n = f"({n} * {_float_literal(2.0 ** -bits)})"
            total = k.emit(f"tl.sum(tl.where({mask}, {value} * {_float_literal(2.0 ** -bits)}, 0), 1)[:, None]", dtype)
            first = k.emit(f"{total} / {scaled_n}", dtype)
            dev = k.emit(f"tl.where({mask}, {value} - {first}, 0)", dtype)
            squares = k.emit(f"tl.sum({dev} * {dev}, 1)[:, None]", dtype)
            # (rows of values near float32's limit: an infinite drift corrects nothing, the first mean
            # stands (a NaN one is kept: it is eager's mean of a row with an inf); drift / n first where
            # its square overflows; and squares that sum to inf give inf, as eager's do, not inf - inf.
            # One value a row each: no cost that counts)
            summed = k.emit(f"tl.sum({dev}, 1)[:, None]", dtype)
            drift = k.emit(f"tl.where(tl.abs({summed}) == float('inf'), 0.0, {summed})", dtype)
            mean = k.emit(f"{first} + {drift} / {n}", dtype)
            drift2 = k.emit(f"{drift} * {drift}", dtype)
            correction = k.emit(f"tl.where({drift2} == float('inf'), {drift} * ({drift} / {n}), {drift2} / {n})", dtype)
            raw = k.emit(f"tl.where({squares} == float('inf'), {squares}, {squares} - {correction})", dtype)
            m2 = k.emit(f"tl.where({raw} < 0, 0.0, {raw})", dtype)   # rounding's negatives; NaN kept
            weight = k.emit(f"tl.full([1], {n}, {tl_dtype(dtype)})" if isinstance(k.rnumel, int)
                            else f"tl.zeros([1], {tl_dtype(dtype)}) + {n}", dtype)
            return mean, m2, weight
        if rtype == "welford_combine":
            parts = [k.emit(f"tl.where({mask}, {v}, 0)", dtype) for v in value]
            out = [k.newvar(dtype) for _ in range(3)]
            k.section.lines.append(f"{out[0]}, {out[1]}, {out[2]} = triton_helpers.welford({', '.join(map(str, parts))}, 1)")
            k.section.lines += [f"{v} = {v}[:, None]" for v in out]
            return tuple(out)
        if rtype in ("argmax", "argmin"):
            # the masked value is [XBLOCK, RBLOCK] even where `value` does not vary along r (an expanded dim)
            masked = k.emit(f"tl.where({mask}, {value}, {self._identity(rtype, value.dtype)})", value.dtype)
            idx = k.emit(f"tl.broadcast_to(rindex, {masked}.shape)", torch.int32)
            # the index reduces as int32 (rindex's type); the result is cast, since it is typed int64 for
            # what the kernel does with it next (int64 constants, an int64 reduction's identity)
            out = k.emit(f"triton_helpers.{rtype}({masked}, {idx}, 1)[:, None]", torch.int32)
            return self.to_dtype(out, torch.int64)
        ident = self._identity(rtype, dtype)
        masked = k.emit(f"tl.where({mask}, {value}, {ident})", dtype)
        return k.emit(_REDUCE[rtype].format(v=masked, t=tl_dtype(dtype)), dtype)

    def _looped_reduction(self, dtype, rtype, value):
        k = self.k
        sec = k.section
        mask = "xmask & rmask"
        shape = "[XBLOCK, RBLOCK]"
        if rtype in ("welford_reduce", "welford_combine"):
            mean, m2, w = k.newvar(dtype), k.newvar(dtype), k.newvar(dtype)
            sec.init += [f"{v} = tl.zeros({shape}, {tl_dtype(dtype)})" for v in (mean, m2, w)]
            nm, n2, nw = k.newvar(dtype), k.newvar(dtype), k.newvar(dtype)
            if rtype == "welford_reduce":
                sec.lines.append(f"{nm}, {n2}, {nw} = triton_helpers.welford_update({mean}, {m2}, {w}, {value})")
            else:
                sec.lines.append(f"{nm}, {n2}, {nw} = triton_helpers.welford_combine({mean}, {m2}, {w}, "
                                 f"{', '.join(map(str, value))})")
            sec.lines += [f"{mean} = tl.where({mask}, {nm}, {mean})", f"{m2} = tl.where({mask}, {n2}, {m2})",
                          f"{w} = tl.where({mask}, {nw}, {w})"]
            om, o2, ow = k.newvar(dtype), k.newvar(dtype), k.newvar(dtype)
            sec.finalize.append(f"{om}, {o2}, {ow} = triton_helpers.welford({mean}, {m2}, {w}, 1)")
            sec.finalize += [f"{v} = {v}[:, None]" for v in (om, o2, ow)]
            return om, o2, ow
        if rtype in ("argmax", "argmin"):
            acc, acc_i = k.newvar(value.dtype), k.newvar(torch.int64)
            ident = self._identity(rtype, value.dtype)
            sec.init += [f"{acc} = tl.full({shape}, {ident}, {tl_dtype(value.dtype)})",
                         f"{acc_i} = tl.full({shape}, 2147483647, tl.int64)"]
            nv, ni = k.newvar(value.dtype), k.newvar(torch.int64)
            sec.lines.append(f"{nv}, {ni} = triton_helpers.{rtype}_update({acc}, {acc_i}, {value}, "
                             f"tl.broadcast_to(rindex, {acc}.shape).to(tl.int64))")
            sec.lines += [f"{acc} = tl.where({mask}, {nv}, {acc})", f"{acc_i} = tl.where({mask}, {ni}, {acc_i})"]
            out = k.newvar(torch.int64)
            sec.finalize.append(f"{out} = triton_helpers.{rtype}({acc}, {acc_i}, 1)[:, None]")
            return out
        acc = k.newvar(dtype)
        ident = self._identity(rtype, dtype)
        sec.init.append(f"{acc} = tl.full({shape}, {ident}, {tl_dtype(dtype)})")
        combine = {"sum": "{a} + {v}", "prod": "{a} * {v}", "max": "triton_helpers.maximum({a}, {v})",
                   "min": "triton_helpers.minimum({a}, {v})", "any": "{a} | {v}"}[rtype]
        sec.lines.append(f"{acc} = tl.where({mask}, {combine.format(a=acc, v=value)}, {acc})")
        out = k.newvar(dtype)
        sec.finalize.append(f"{out} = " + _REDUCE[rtype].format(v=acc, t=tl_dtype(dtype)))
        return out

    def scan(self, dtype: torch.dtype, scan_type: str, value):
        """The inclusive scan of `value` along the row, in `dtype`: "sum", "prod" and "logsumexp" give
        the scanned values; "max" and "min" (cummax, cummin) give (values, int64 indices).

        Persistent: one scan of the masked row (tl.cumsum, tl.cumprod, or tl.associative_scan over
        triton_helpers' combine functions). Looped: each block's scan combined with a carry, the row's
        value at the block's last column (masked columns hold the identity, so the last column is the
        last element's value), taken out by a sum of that column alone: exact, and a [XBLOCK, 1] block
        of the carry's dtype in every iteration, as a loop-carried value must be. Only the row's last
        block has masked columns, and its carry is never read.
        """
        k = self.k
        key = ("scan", scan_type, value.name, dtype)
        if key in k.reduction_cache:
            return k.reduction_cache[key]
        if value.dtype != dtype:
            value = self.to_dtype(value, dtype)
        if scan_type in ("max", "min"):
            out = self._scan_with_index(dtype, scan_type, value)
        else:
            ident = {"prod": "1", "sum": "0", "logsumexp": 'float("-inf")'}[scan_type]
            masked = k.emit(f"tl.where(xmask & rmask, {value}, {ident})", dtype)
            scanned = k.emit({"sum": "tl.cumsum({v}, 1)", "prod": "tl.cumprod({v}, 1)",
                              "logsumexp": "triton_helpers.logcumsumexp({v}, 1)"}[scan_type].format(v=masked), dtype)
            if not k.looped:
                out = scanned
            else:
                carry = k.newvar(dtype)
                k.section.init.append(f"{carry} = tl.full([XBLOCK, 1], {ident}, {tl_dtype(dtype)})")
                out = k.emit({"sum": "{c} + {s}", "prod": "{c} * {s}",
                              "logsumexp": "triton_helpers.logaddexp({c}, {s})"}[scan_type].format(c=carry, s=scanned),
                             dtype)
                self._carry_last_column(carry, out)
        k.reduction_cache[key] = out
        return out

    def _scan_with_index(self, dtype: torch.dtype, scan_type: str, value):
        """cummax / cummin: a scan over (value, index) pairs, the index the column's (rindex, int64)."""
        k = self.k
        ident = self._identity(scan_type, dtype)
        masked = k.emit(f"tl.where(xmask & rmask, {value}, {ident})", dtype)
        index = k.emit(f"tl.broadcast_to(rindex, {masked}.shape).to(tl.int64)", torch.int64)
        values, indices = k.newvar(dtype), k.newvar(torch.int64)
        k.section.lines.append(f"{values}, {indices} = triton_helpers.cum{scan_type}({masked}, {index}, 1)")
        if not k.looped:
            return values, indices
        # the carry starts at the identity with index 0, which every element replaces (a tie goes to
        # the later element, a NaN always wins)
        carry, carry_i = k.newvar(dtype), k.newvar(torch.int64)
        k.section.init += [f"{carry} = tl.full([XBLOCK, 1], {ident}, {tl_dtype(dtype)})",
                           f"{carry_i} = tl.full([XBLOCK, 1], 0, tl.int64)"]
        out, out_i = k.newvar(dtype), k.newvar(torch.int64)
        k.section.lines.append(f"{out}, {out_i} = triton_helpers.cum{scan_type}_combine({carry}, {carry_i}, "
                               f"{values}, {indices})")
        self._carry_last_column(carry, out)
        self._carry_last_column(carry_i, out_i)
        return out, out_i

    def _carry_last_column(self, carry, out) -> None:
        # -0.0 + v is v for every float v, infinities and NaN too (0.0 + -0.0 is 0.0): the other columns
        # add nothing
        zero = "-0.0" if out.dtype.is_floating_point else "0"
        self.k.section.lines.append(f"{carry} = tl.sum(tl.where(rbase == RBLOCK - 1, {out}, {zero}), 1)[:, None]"
                                    f".to({tl_dtype(out.dtype)})")

    def sort(self, dtype: torch.dtype, descending: bool, value):
        """The row of `value` sorted in `dtype` (ir.Sort): (values, int64 indices). The kernel is always
        persistent (triton.py): the columns past the row, padded to the block's power of 2, hold a value
        that sorts last in either direction (NaN or the type's max rising; -inf or its min falling) at
        indices past the row's, so ties with them keep the row's elements first."""
        k = self.k
        key = ("sort", descending, value.name, dtype)
        if key in k.reduction_cache:
            return k.reduction_cache[key]
        if k.looped:
            raise NotImplementedError("a sort in a looped kernel (a row longer than its block)")
        if value.dtype != dtype:
            value = self.to_dtype(value, dtype)
        if dtype.is_floating_point:
            pad = 'float("-inf")' if descending else 'float("nan")'
        else:
            pad = str(torch.iinfo(dtype).min if descending else torch.iinfo(dtype).max)
        masked = k.emit(f"tl.where(xmask & rmask, {value}, {pad})", dtype)
        index = k.emit(f"tl.broadcast_to(rindex, {masked}.shape).to(tl.int64)", torch.int64)
        values, indices = k.newvar(dtype), k.newvar(torch.int64)
        k.section.lines.append(f"{values}, {indices} = triton_helpers.sort_with_index({masked}, {index}, "
                               f"{bool(descending)})")
        k.reduction_cache[key] = (values, indices)
        return values, indices

    @staticmethod
    def _identity(rtype: str, dtype: torch.dtype) -> str:
        if rtype in ("sum", "welford_reduce"):
            return "0"
        if rtype == "prod":
            return "1"
        if rtype == "any":
            return "0"
        largest = rtype in ("min", "argmin")
        if dtype.is_floating_point:
            return 'float("inf")' if largest else 'float("-inf")'
        if dtype == torch.bool:
            return "1" if largest else "0"
        info = torch.iinfo(dtype)
        return str(info.max if largest else info.min)


_REDUCE = {
    "sum": "tl.sum({v}, 1)[:, None]",
    "prod": "triton_helpers.prod({v}, 1)[:, None]",
    "max": "triton_helpers.max2({v}, 1)[:, None]",
    "min": "triton_helpers.min2({v}, 1)[:, None]",
    "any": "(tl.max({v}.to(tl.int8), 1) != 0)[:, None]",
}

# float32 math on the GPU as one PTX instruction each (triton_helpers.ptx_f32), not through libdevice,
# which a kernel calling any of its functions has parsed and linked in (57 ms of its compile on the H200
# machine, GIL held). exp2 and rsqrt are libdevice's own instructions (flush-to-zero, as Triton compiles
# libdevice); sqrt is sqrt.rn, correctly rounded as eager's (libdevice's was sqrt.approx.ftz); floor
# and ceil keep denormals as eager does (libdevice's flushed them: floor(-1e-40) gave -0.0, eager
# -1.0); trunc and round are libdevice's instructions. The entry after each: what other dtypes get
# (and what triton_helpers.INTERPRETED runs for the instruction under Triton's interpreter).
PTX_F32 = {"exp2": ("ex2.approx.ftz.f32", "tl.exp2"), "rsqrt": ("rsqrt.approx.ftz.f32", "tl.rsqrt"),
           "sqrt": ("sqrt.rn.f32", "tl.sqrt"), "floor": ("cvt.rmi.f32.f32", "tl.floor"),
           "ceil": ("cvt.rpi.f32.f32", "tl.ceil"), "trunc": ("cvt.rzi.f32.f32", "libdevice.trunc"),
           "round": ("cvt.rni.f32.f32", "libdevice.nearbyint")}


def _ptx_f32(op: str, a) -> str:
    """The unary format of `op` for the value `a` (PTX_F32)."""
    instruction, other = PTX_F32[op]
    if a.dtype == torch.float32:
        return f'triton_helpers.ptx_f32({{a}}, "{instruction} $0, $1;")'
    return other + "({a})"


# float32 erf and tanh from triton_helpers (erf32, tanh32: no branch per element), not libdevice's erff and
# tanhf (H200, fp16 GELU over 50M elements: 0.0579 ms against 0.0680; benchmarks/gelu_variants.py, and
# benchmarks/pointwise.py's mini_inductor_libdevice column). False: libdevice's (the benchmarks' switch)
BRANCHLESS_MATH = True

_LIBDEVICE_UNARY = {"expm1", "log1p", "log10", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
                    "acosh", "atanh", "erfc", "erfinv", "lgamma"}
# ops named otherwise in libdevice (CUDA's math library)
_LIBDEVICE_RENAMED = {"i0": "cyl_bessel_i0", "i1": "cyl_bessel_i1", "ndtri": "normcdfinv", "erfcx": "erfcx",
                      "bessel_j0": "j0", "bessel_j1": "j1", "bessel_y0": "y0", "bessel_y1": "y1"}

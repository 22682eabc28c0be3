"""Reductions: sum, prod, amax/amin, argmax/argmin, any, mean, and var/var_mean through Welford."""
from __future__ import annotations

import sympy
import torch

from .ir import ComputedBuffer, IRNode, Layout, Pointwise, Reduction, StorageBox, View, current_graph
from .lowerings import register_lowering, to_dtype
from .sizevars import product, static_int, sympify_seq
from .symbolic import decide
from .split_reduction import make_split_reduction, split_factor
from .virtualized import ops

aten = torch.ops.aten
prims = torch.ops.prims


def _dims(x: IRNode, dim) -> list[int]:
    ndim = len(x.get_size())
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(ndim))
    dims = dim if isinstance(dim, (list, tuple)) else [dim]
    return sorted({d + ndim if d < 0 else d for d in dims}) if ndim else []


def _acc_dtype(reduction_type: str, dtype: torch.dtype) -> torch.dtype:
    if reduction_type in ("argmax", "argmin"):
        return torch.int64
    if reduction_type == "any":
        return torch.bool
    if dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    if reduction_type in ("sum", "prod") and (dtype == torch.bool or not dtype.is_floating_point and dtype != torch.int64):
        return torch.int64
    return dtype


def make_reduction(x: IRNode, dims: list[int], reduction_type: str, *, out_dtype=None, keepdim=False,
                   output_index: int = 0, src_dtype=None) -> IRNode:
    """Realize `reduction_type` of `x` over `dims` into a buffer; return it (reshaped when keepdim)."""
    size = x.get_size()
    kept = [s for i, s in enumerate(size) if i not in dims]
    reduced = [size[i] for i in dims]
    loader = x.make_loader()
    src_dtype = src_dtype or x.get_dtype()
    acc = _acc_dtype(reduction_type, src_dtype)
    compute = acc if reduction_type not in ("argmax", "argmin", "any") else (
        torch.float32 if src_dtype in (torch.float16, torch.bfloat16) else src_dtype)
    if reduction_type == "any":
        compute = torch.bool

    def inner_fn(index, rindex):
        full, ki, ri = [], iter(index), iter(rindex)
        for i in range(len(size)):
            full.append(next(ri) if i in dims else next(ki))
        v = loader(full)
        return v if x.get_dtype() == compute else ops.to_dtype(v, compute)

    out_dtype = out_dtype or acc
    graph = current_graph()
    split = _split(kept, reduced, reduction_type, graph)
    if split > 1:
        # too few rows to fill the GPU: a first pass over chunks of each row, a second over the partials
        buf = make_split_reduction(x.get_device(), acc, compute, inner_fn, sympify_seq(kept), sympify_seq(reduced),
                                   reduction_type, output_index, split, inner=len(size) - 1 in dims,
                                   source=x, dims=tuple(dims))
    else:
        # origins: the graph gives the reduction its own node and the inlined producers it reads
        red = Reduction(x.get_device(), acc, inner_fn, sympify_seq(kept), (), sympify_seq(reduced),
                        reduction_type, compute, output_index)
        # Store the accumulator's dtype; a cast to the output dtype is a pointwise that gets inlined.
        buf = ComputedBuffer(graph.new_buffer_name(), Layout.contiguous(x.get_device(), acc, kept), red)
        graph.register_buffer(buf)
    result: IRNode = StorageBox(buf)
    if out_dtype != acc:
        result = to_dtype(result, out_dtype)
    if keepdim:
        result = _keepdim(result, size, dims)
    return result


def _split(kept, reduced, reduction_type: str, graph) -> int:
    if not getattr(graph.cfg, "split_reductions", True):
        return 1
    try:
        numel, rnumel = static_int(product(kept)), static_int(product(reduced))
    except NotImplementedError:
        return 1
    return split_factor(numel, rnumel, reduction_type)


def _keepdim(x: IRNode, size, dims) -> IRNode:
    new = [sympy.Integer(1) if i in dims else s for i, s in enumerate(size)]
    return View(x, new, lambda idx: [v for i, v in enumerate(idx) if i not in dims])


def _reduction_lowering(reduction_type):
    def lowering(x, dim=None, keepdim=False, *, dtype=None):
        if dtype is not None:
            x = to_dtype(x, dtype)
        out_dtype = dtype if dtype is not None else _out_dtype(reduction_type, x.get_dtype())
        return make_reduction(x, _dims(x, dim), reduction_type, out_dtype=out_dtype, keepdim=keepdim)
    return lowering


def _out_dtype(reduction_type, dtype):
    if reduction_type in ("sum", "prod") and (dtype == torch.bool or not dtype.is_floating_point):
        return torch.int64
    if reduction_type == "any":
        return torch.bool
    return dtype


register_lowering(aten.sum.dim_IntList)(_reduction_lowering("sum"))
register_lowering(aten.amax)(_reduction_lowering("max"))
register_lowering(aten.amin)(_reduction_lowering("min"))


@register_lowering(aten.sum.default)
def sum_all(x, *, dtype=None):
    return _reduction_lowering("sum")(x, None, False, dtype=dtype)


@register_lowering(aten.prod.dim_int)
def prod_dim(x, dim, keepdim=False, *, dtype=None):
    return _reduction_lowering("prod")(x, dim, keepdim, dtype=dtype)


@register_lowering(aten.prod.default)
def prod_all(x, *, dtype=None):
    return _reduction_lowering("prod")(x, None, False, dtype=dtype)


@register_lowering(aten.any.dim, aten.any.dims, aten.any.default)
def any_(x, dim=None, keepdim=False):
    # eager keeps uint8 for a uint8 input (its old boolean type)
    out_dtype = torch.uint8 if x.get_dtype() == torch.uint8 else torch.bool
    return make_reduction(x, _dims(x, dim), "any", out_dtype=out_dtype, keepdim=keepdim)


def _arg_lowering(kind):
    def lowering(x, dim=None, keepdim=False):
        if x.get_dtype() == torch.bool:   # eager raises ("does not support bool input"): ATen says so
            raise NotImplementedError(f"{kind} of a bool tensor (eager refuses it)")
        if dim is None:
            flat = View(x, [product(x.get_size())], _flat_reindex(x.get_size()))
            out = make_reduction(flat, [0], kind, out_dtype=torch.int64)
            if keepdim:
                out = View(out, [sympy.Integer(1)] * len(x.get_size()), lambda idx: [])
            return out
        return make_reduction(x, _dims(x, dim), kind, out_dtype=torch.int64, keepdim=keepdim)
    return lowering


def _flat_reindex(size):
    from .view_lowerings import reshape_reindexer
    return reshape_reindexer(list(size), [product(size)])


register_lowering(aten.argmax)(_arg_lowering("argmax"))
register_lowering(aten.argmin)(_arg_lowering("argmin"))


def _value_and_index(value_kind, index_kind):
    def lowering(x, dim, keepdim=False):
        dims = _dims(x, dim)
        values = make_reduction(x, dims, value_kind, out_dtype=x.get_dtype(), keepdim=keepdim)
        indices = make_reduction(x, dims, index_kind, out_dtype=torch.int64, keepdim=keepdim)
        return values, indices
    return lowering


register_lowering(aten.max.dim)(_value_and_index("max", "argmax"))
register_lowering(aten.min.dim)(_value_and_index("min", "argmin"))


@register_lowering(aten.max.default)
def max_all(x):
    return make_reduction(x, _dims(x, None), "max", out_dtype=x.get_dtype())


@register_lowering(aten.min.default)
def min_all(x):
    return make_reduction(x, _dims(x, None), "min", out_dtype=x.get_dtype())


@register_lowering(aten.mean.dim, aten.mean.default)
def mean(x, dim=None, keepdim=False, *, dtype=None):
    if dtype is not None:
        x = to_dtype(x, dtype)
    dims = _dims(x, dim)
    n = product([x.get_size()[d] for d in dims])
    total = make_reduction(x, dims, "sum", keepdim=keepdim)  # kept in the accumulation dtype
    return _divide(total, _count(n), x.get_dtype())


def _count(n):
    """A count of elements as the divisor of a mean: a float, or (a dynamic graph's) its expression."""
    return float(n) if not n.free_symbols else n


def _divide(x: IRNode, divisor, out_dtype) -> IRNode:
    """x / divisor in out_dtype's compute dtype (float32 for fp16/bf16/float32, float64 for float64)."""
    ld = x.make_loader()
    src = x.get_dtype()
    cdt = torch.float64 if torch.float64 in (src, out_dtype) else torch.float32

    def inner_fn(idx):
        v = ld(idx)
        v = v if src == cdt else ops.to_dtype(v, cdt)
        out = ops.truediv(v, ops.constant(divisor, cdt))
        return out if out_dtype == cdt else ops.to_dtype(out, out_dtype)
    return Pointwise.create(x.get_device(), out_dtype, inner_fn, x.get_size())


def _welford(x: IRNode, dims, keepdim, correction):
    """(var, mean) of x over dims, through one Welford reduction read twice."""
    n = product([x.get_size()[d] for d in dims])
    mean_ = make_reduction(x, dims, "welford_reduce", output_index=0, keepdim=keepdim)
    m2 = make_reduction(x, dims, "welford_reduce", output_index=1, keepdim=keepdim)
    if n.free_symbols:
        # eager divides by max(0, n - correction): NaN or inf where that is 0 (an empty row, or one
        # element with correction 1). Where n - correction may be 0 or below at some size (a slice by
        # an int argument; a length read from data), the Max stays in the divisor (0 / (0 - 1) gave -0,
        # review, session 33); an input's dynamic size is at least 2 (Dynamo specializes 0 and 1)
        denom = n - correction if decide(n - correction >= 1) is True else sympy.Max(0, n - correction)
    else:
        denom = float(max(int(n) - correction, 0))
    var = _divide(m2, denom, x.get_dtype())
    if n.free_symbols and decide(n >= 1) is not True:
        mean_ = _nan_where_empty(mean_, n)
    return var, to_dtype(mean_, x.get_dtype())


def _nan_where_empty(mean_: IRNode, n) -> IRNode:
    """A Welford mean over n elements, NaN where n is 0 as eager's (the reduction's mean of nothing is
    0): times n / n, 1 exactly or NaN (a row read from data, or a slice by an int argument)."""
    ld = mean_.make_loader()

    def inner_fn(idx):
        count = ops.index_expr(n, torch.float64)
        return ops.mul(ld(idx), ops.to_dtype(ops.truediv(count, count), mean_.get_dtype()))
    return Pointwise.create(mean_.get_device(), mean_.get_dtype(), inner_fn, mean_.get_size())


def _correction(correction, unbiased=None):
    if correction is None:
        return 1 if unbiased is None or unbiased else 0
    return correction


@register_lowering(aten.var_mean.correction)
def var_mean(x, dim=None, *, correction=None, keepdim=False):
    if not x.get_dtype().is_floating_point:
        raise NotImplementedError("var_mean of integers")
    return _welford(x, _dims(x, dim), keepdim, _correction(correction))


@register_lowering(aten.var.correction)
def var(x, dim=None, *, correction=None, keepdim=False):
    if not x.get_dtype().is_floating_point:
        raise NotImplementedError("var of integers")
    return _welford(x, _dims(x, dim), keepdim, _correction(correction))[0]

"""Ops that read their input at computed positions: pad, cat, flip, gather, index, embedding
(index_put, which writes through the same positions, is in scatter_lowerings.py).

Two tools do the work:
  * `ops.masked(mask, body, other)`: `body()` where `mask` holds, `other` elsewhere; the loads inside
    are masked too, so positions outside an input (padding, another input of a cat) are never read;
  * `ops.indirect_indexing(value, size)`: a loaded integer becomes an index symbol (negative values
    wrap around as in eager), so `x[idx]` is a load whose address depends on another load.
"""
from __future__ import annotations

import functools
from typing import Callable

import sympy
import torch

from .ir import IRNode, Pointwise
from .lowerings import broadcast_loader, broadcast_sizes, check_converts, register_lowering, to_dtype, wrap_integer
from .symbolic import decide
from .view_lowerings import _norm_dim, unsqueeze, view
from .virtualized import ops

aten = torch.ops.aten

# A cat of more inputs than this runs in ATen (one masked load per input per element).
MAX_CAT_INPUTS = 8


def _in_range(expr, lo: int | None, hi: int | None):
    """An `ops` bool: lo <= expr < hi (either bound may be None)."""
    def bound(b):   # a dynamic graph's bound is an expression of its size symbols
        if isinstance(b, sympy.Basic) and b.free_symbols:
            return ops.index_expr(b, torch.int64)
        return ops.constant(int(b), torch.int64)
    conds = []
    if lo is not None:
        conds.append(ops.ge(ops.index_expr(expr, torch.int64), bound(lo)))
    if hi is not None:
        conds.append(ops.lt(ops.index_expr(expr, torch.int64), bound(hi)))
    return functools.reduce(ops.logical_and, conds)


def _fill_value(value, dtype: torch.dtype):
    if dtype == torch.bool:
        return bool(value)
    if dtype.is_floating_point:
        return float(value)
    return int(value)


@register_lowering(aten.constant_pad_nd)
def constant_pad_nd(x: IRNode, pad, value=0):
    """Each padded dim's output element i reads input element i - lo where lo <= i < lo + size, the
    fill elsewhere. A negative pad cuts the input, and the same form computes it: a bound that holds
    at every element (its pad provably <= 0: symbolic.decide) is not tested. So a pad of an int input
    whose sign only the run time knows (F.pad(x, (k, k))) needs no guard; its lowering compared
    `k >= 0` and ran in ATen."""
    size = list(x.get_size())   # (a dynamic graph's symbolic sizes too)
    ndim = len(size)
    if len(pad) % 2 or len(pad) // 2 > ndim:
        raise NotImplementedError("malformed padding")
    pads = {ndim - 1 - i: (sympy.sympify(pad[2 * i]), sympy.sympify(pad[2 * i + 1])) for i in range(len(pad) // 2)}
    out_size = [s + sum(pads.get(d, ())) for d, s in enumerate(size)]
    if any(decide(n < 0) is True for n in out_size):   # (eager raises; a symbolic one, Dynamo's guard)
        raise NotImplementedError("padding larger than the input")
    for d, (lo, hi) in pads.items():
        # eager cuts by each negative pad in turn (narrow): a dim with a cut bigger than the input
        # raises there even where the other pad makes the output's length valid (F.pad(t, (5, -5)) of
        # 4 rows; review, session 35). Pads of one sign need nothing more than the output's length
        if lo != hi and decide(lo * hi >= 0) is not True and decide(size[d] + sympy.Min(lo, 0) + sympy.Min(hi, 0) >= 0) is not True:
            raise NotImplementedError("a pad that may cut more than the input holds")   # (ATen raises as eager)
    loader, dtype = x.make_loader(), x.get_dtype()
    check_converts(value, dtype, "pad value", ("constant_pad_nd", "pad"))   # (ATen raises as eager does)
    fill = wrap_integer(_fill_value(value, dtype), dtype)   # (-1 into uint8 is 255, as eager's)
    # per padded dim: the bounds lo <= i and i < lo + size that some element may break
    bounds = {d: (None if decide(lo <= 0) is True else lo, None if decide(hi <= 0) is True else lo + size[d])
              for d, (lo, hi) in sorted(pads.items())}
    tested = [d for d, (low, high) in bounds.items() if low is not None or high is not None]

    def source(idx):
        return [i - pads[d][0] if d in pads else i for d, i in enumerate(idx)]
    if not tested:   # only cuts: a shifted read
        return Pointwise.create(x.get_device(), dtype, lambda idx: loader(source(idx)), out_size)

    def inner_fn(idx):
        mask = functools.reduce(ops.logical_and, [_in_range(idx[d], *bounds[d]) for d in tested])
        return ops.masked(mask, lambda: loader(source(idx)), fill)
    return Pointwise.create(x.get_device(), dtype, inner_fn, out_size)


@register_lowering(aten.cat)
def cat(tensors, dim=0):
    # legacy behaviour: 1-D empty tensors are skipped whatever the other inputs' rank
    tensors = [t for t in tensors if not (len(t.get_size()) == 1 and t.get_size()[0] == 0)]
    if not tensors:
        raise NotImplementedError("cat of empty tensors")
    if len(tensors) > MAX_CAT_INPUTS:
        raise NotImplementedError(f"cat of more than {MAX_CAT_INPUTS} inputs")
    dtype = functools.reduce(torch.promote_types, [t.get_dtype() for t in tensors])
    tensors = [to_dtype(t, dtype) for t in tensors]
    ndim = len(tensors[0].get_size())
    dim = _norm_dim(dim, ndim)
    # a dynamic graph's parts have symbolic lengths (never 0: Dynamo specializes sizes 0 and 1), and
    # the boundaries between them are expressions of its symbols
    sizes = [list(t.get_size()) for t in tensors]
    starts = [sympy.Integer(0)]
    for s in sizes:
        starts.append(starts[-1] + s[dim])
    out_size = list(sizes[0])
    out_size[dim] = starts[-1]
    parts = [(t.make_loader(), starts[i], starts[i + 1]) for i, t in enumerate(tensors) if sizes[i][dim] != 0]
    if len(parts) == 1:
        loader, start, _ = parts[0]
        return Pointwise.create(tensors[0].get_device(), dtype,
                                lambda idx: loader(_shift(idx, dim, start)), out_size)
    zero = _fill_value(0, dtype)

    def inner_fn(idx):
        value = None
        for loader, start, end in reversed(parts):
            first, last = start == 0, end == starts[-1]
            mask = _in_range(idx[dim], None if first else start, None if last else end)
            part = ops.masked(mask, (lambda ld, s: lambda: ld(_shift(idx, dim, s)))(loader, start), zero)
            value = part if value is None else ops.where(mask, part, value)
        return value
    return Pointwise.create(tensors[0].get_device(), dtype, inner_fn, out_size)


def _shift(idx, dim, start):
    idx = list(idx)
    idx[dim] = idx[dim] - start
    return idx


@register_lowering(aten.flip)
def flip(x: IRNode, dims):
    size = x.get_size()
    dims = {_norm_dim(d, len(size)) for d in dims}
    loader = x.make_loader()

    def inner_fn(idx):
        return loader([size[d] - 1 - i if d in dims else i for d, i in enumerate(idx)])
    return Pointwise.create(x.get_device(), x.get_dtype(), inner_fn, size)


def _indirect(index_value, size):
    return ops.indirect_indexing(index_value, size)


def strict_indirect(index_value, size, dtype: torch.dtype):
    """An index that must lie in 0 .. size - 1, negative ones refused as eager's gather, index_select,
    embedding and scatter refuse them (x[i] wraps them; `_indirect`): moved below -size, where the
    wrap leaves them negative, so the device-side assert fails. `dtype`: the index tensor's; an int32
    index stays int32 where the size fits it (codegen widens it only where offsets need 64 bits)."""
    static = not (isinstance(size, sympy.Basic) and size.free_symbols)
    if dtype != torch.int32 or not static or int(size) >= 2**31:
        dtype = torch.int64
    i = ops.to_dtype(index_value, dtype)
    n = ops.constant(int(size), dtype) if static else ops.index_expr(size, dtype)
    return ops.indirect_indexing(ops.where(ops.lt(i, ops.constant(0, dtype)), ops.sub(i, n), i), size)


@register_lowering(aten.gather)
def gather(x: IRNode, dim, index: IRNode, sparse_grad=False):
    size = x.get_size()
    if not size:
        if len(index.get_size()) > 1:
            raise NotImplementedError("gather of a 0-d input with a multi-dim index")
        return view(gather(view(x, [1]), 0, view(index, [1])), index.get_size())
    if len(index.get_size()) != len(size):
        raise NotImplementedError("gather with an index of another rank")
    dim = _norm_dim(dim, len(size))
    x_loader, index_loader = x.make_loader(), index.make_loader()

    def inner_fn(idx):
        src = list(idx)
        src[dim] = strict_indirect(index_loader(idx), size[dim], index.get_dtype())
        return x_loader(src)
    return Pointwise.create(x.get_device(), x.get_dtype(), inner_fn, index.get_size())


@register_lowering(aten.index.Tensor)
def index(x: IRNode, indices, negatives_wrap: bool = True):
    out_size, source = index_positions(x, indices, negatives_wrap)
    loader = x.make_loader()
    return Pointwise.create(x.get_device(), x.get_dtype(), lambda idx: loader(source(idx)), out_size)


def index_positions(x: IRNode, indices, negatives_wrap: bool = True) -> tuple[list, Callable]:
    """`x[indices]` (advanced indexing, a None for a dim taken whole) as (output size, source), where
    `source(idx)` is the element of `x` that output element `idx` reads (it loads the index tensors).
    A negative index counts from the end, or, without `negatives_wrap`, is out of range (index_select).

    index_put writes through the same map: element `idx` of the values goes to `source(idx)`.
    """
    size = x.get_size()   # a dynamic graph's symbolic sizes too: a loaded index wraps by them
    if len(indices) > len(size):
        raise NotImplementedError("more indices than dims")
    positions = [d for d, t in enumerate(indices) if t is not None]
    if not positions:
        raise NotImplementedError("index without index tensors")
    tensors = [indices[d] for d in positions]
    if any(t.get_dtype() in (torch.bool, torch.uint8) for t in tensors):
        raise NotImplementedError("boolean masks make the output size data-dependent")
    bshape = broadcast_sizes(*[t.get_size() for t in tensors])
    loaders = [broadcast_loader(t, bshape) for t in tensors]
    rest = [d for d in range(len(size)) if d not in positions]
    adjacent = positions == list(range(positions[0], positions[-1] + 1))
    # where the broadcast index dims go in the output: in place when adjacent, else first
    at = positions[0] if adjacent else 0
    before = [d for d in rest if d < at] if adjacent else []
    after = [d for d in rest if d not in before]
    out_size = [size[d] for d in before] + list(bshape) + [size[d] for d in after]
    nb = len(bshape)

    def source(idx):
        bidx = list(idx[len(before):len(before) + nb])
        src = [None] * len(size)
        for d, i in zip(before, idx[:len(before)]):
            src[d] = i
        for d, i in zip(after, idx[len(before) + nb:]):
            src[d] = i
        for d, ld, t in zip(positions, loaders, tensors):
            src[d] = _indirect(ld(bidx), size[d]) if negatives_wrap else \
                strict_indirect(ld(bidx), size[d], t.get_dtype())
        return src
    return out_size, source


@register_lowering(aten._unsafe_index.Tensor)
def unsafe_index(x, indices):
    return index(x, indices)


@register_lowering(aten.index_select)
def index_select(x: IRNode, dim, index_: IRNode):
    if not x.get_size():
        # a 0-d input gives a 0-d output (its one element, the index checked in range 1)
        flat = view(x, [1])
        return view(index(flat, [view(index_, [1])], negatives_wrap=False), [])
    dim = _norm_dim(dim, len(x.get_size()))
    if not index_.get_size():
        index_ = unsqueeze(index_, 0)
    return index(x, [None] * dim + [index_], negatives_wrap=False)


@register_lowering(aten.embedding)
def embedding(weight: IRNode, indices: IRNode, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    if len(weight.get_size()) != 2:
        raise NotImplementedError("embedding of a weight that is not 2-D")
    return index(weight, [indices], negatives_wrap=False)


@register_lowering(aten.take)
def take(x: IRNode, index_: IRNode):
    """x.flatten()[index] (its decomposition cannot be traced with static shapes)."""
    return index(view(x, [x.get_numel()]), [index_])

"""The `*_copy` variants of views (what functionalized graphs may hold): the view, then a copy; and
repeat, a tiled copy."""
from __future__ import annotations

import sympy
import torch

from .ir import Pointwise
from .sizevars import ModularIndexing, sympify_seq
from .lowerings import register_lowering
from . import view_lowerings as views

aten = torch.ops.aten


def _copied(view_fn):
    def lowering(x, *args, **kwargs):
        out = view_fn(x, *args, **kwargs)
        if isinstance(out, (list, tuple)):
            return type(out)(_copy(o) for o in out)
        return _copy(out)
    return lowering


def _copy(x):
    return Pointwise.create(x.get_device(), x.get_dtype(), x.make_loader(), x.get_size())


def _narrow(x, dim, start, length):
    return views.slice_(x, dim, start, start + length)


def _unbind(x, dim=0):
    dim = views._norm_dim(dim, len(x.get_size()))
    return [views.select(x, dim, i) for i in range(int(x.get_size()[dim]))]


for _target, _view in [(aten.view_copy.default, views.view), (aten._reshape_copy.default, views.view),
                       (aten.permute_copy.default, views.permute), (aten.narrow_copy.default, _narrow),
                       (aten.unbind_copy.int, _unbind), (aten.select_copy.int, views.select),
                       (aten.slice_copy.Tensor, views.slice_), (aten.detach_copy.default, lambda x: x),
                       (aten.as_strided_copy.default, views.as_strided)]:
    register_lowering(_target)(_copied(_view))


@register_lowering(aten.narrow)
def narrow(x, dim, start, length):
    if not isinstance(start, int) or not isinstance(length, int):
        raise NotImplementedError("narrow with a tensor start")
    if start < 0:
        start += int(x.get_size()[views._norm_dim(dim, len(x.get_size()))])
    return _narrow(x, dim, start, length)


@register_lowering(aten.unbind.int)
def unbind(x, dim=0):
    return _unbind(x, dim)


@register_lowering(aten.diagonal.default)
def diagonal(x, offset=0, dim1=0, dim2=1):
    size = x.get_size()
    ndim = len(size)
    d1, d2 = views._norm_dim(dim1, ndim), views._norm_dim(dim2, ndim)
    if d1 == d2:
        raise NotImplementedError("diagonal of one dim with itself")
    # (a dynamic graph's sizes and an int input's offset are symbolic: Min and Max of them)
    offset = sympy.sympify(offset)
    below, above = sympy.Max(-offset, 0), sympy.Max(offset, 0)
    length = sympy.Max(0, sympy.Min(size[d1] - below, size[d2] - above))
    rest = [d for d in range(ndim) if d not in (d1, d2)]

    def reindex(idx):
        out = [None] * ndim
        for d, i in zip(rest, idx[:-1]):
            out[d] = i
        out[d1] = idx[-1] + below
        out[d2] = idx[-1] + above
        return out
    return views.View(x, [size[d] for d in rest] + [length], reindex)


@register_lowering(aten.repeat.default)
def repeat(x, repeats):
    """`x` tiled `repeats[d]` times along each dim (extra leading repeats add dims): one kernel writing
    a new tensor, contiguous as eager's (torch's decomposition, expand + clone + permute + view, gave
    the output the permuted strides of its clone)."""
    repeats = sympify_seq(repeats)   # (an int input's symbol: torch checked that it is never negative)
    size = x.get_size()
    lead = len(repeats) - len(size)
    if lead < 0:
        raise NotImplementedError("repeat with fewer repeats than dims")   # eager raises
    out_size = list(repeats[:lead]) + [s * r for s, r in zip(size, repeats[lead:])]
    load = x.make_loader()

    def inner_fn(idx):
        return load([i if r == 1 else ModularIndexing(i, 1, s)
                     for i, s, r in zip(idx[lead:], size, repeats[lead:])])
    return Pointwise.create(x.get_device(), x.get_dtype(), inner_fn, out_size)

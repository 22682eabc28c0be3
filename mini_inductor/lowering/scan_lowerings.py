"""Cumulative sums and products as reductions over a masked square.

    out[..., i] = sum over j of (x[..., j] if j <= i else 0)

Each output element reduces the whole scanned dim with the later positions masked out: n² work
instead of n, but it is an ordinary reduction (fusable, persistent when the row fits in a block)
and needs no scan support in the scheduler. Long dims run in ATen; so does a dynamic graph's
symbolic length unless the ShapeEnv bounds it within MAX_SCAN_LENGTH.
"""
from __future__ import annotations

import sympy
import torch

from .ir import IRNode, Pointwise
from .lowerings import register_lowering, to_dtype
from .reduction_lowerings import make_reduction
from .symbolic import upper_bound
from .view_lowerings import _norm_dim
from .virtualized import ops

aten = torch.ops.aten

# Scanned dims longer than this run in ATen (the masked square grows as n²).
MAX_SCAN_LENGTH = 256


def _scan_dtype(x: IRNode, dtype) -> torch.dtype:
    if dtype is not None:
        return dtype
    src = x.get_dtype()
    return torch.int64 if src == torch.bool or not (src.is_floating_point or src.is_complex) else src


def _cumulative(reduction_type: str, identity):
    def lowering(x: IRNode, dim, *, dtype=None):
        out_dtype = _scan_dtype(x, dtype)
        if out_dtype == torch.bool:   # ATen has no bool scan on the CPU: its error (or CUDA's result) is eager's
            raise NotImplementedError(f"cum{reduction_type} into bool")
        x = to_dtype(x, out_dtype)
        size = x.get_size()
        if not size:
            return to_dtype(Pointwise.create(x.get_device(), out_dtype, x.make_loader(), []), out_dtype)
        dim = _norm_dim(dim, len(size))
        n = size[dim]
        longest = upper_bound(n)
        if longest is None:
            raise NotImplementedError(f"a scan over the symbolic length {n}, which has no upper bound "
                                      f"(mark_dynamic(..., max={MAX_SCAN_LENGTH}) or torch._check gives one)")
        if longest > MAX_SCAN_LENGTH:
            raise NotImplementedError(f"a scan over {n} > {MAX_SCAN_LENGTH} elements")
        if longest <= 1:
            return Pointwise.create(x.get_device(), out_dtype, x.make_loader(), size)
        loader = x.make_loader()
        fill = identity if out_dtype.is_floating_point else int(identity)

        def square(idx):
            *outer, j = idx
            src = list(outer)
            src[dim] = j
            keep = ops.le(ops.index_expr(j, torch.int64), ops.index_expr(outer[dim], torch.int64))
            return ops.masked(keep, lambda: loader(src), fill)

        squared = Pointwise.create(x.get_device(), out_dtype, square, list(size) + [n])
        return make_reduction(squared, [len(size)], reduction_type, out_dtype=out_dtype)
    return lowering


register_lowering(aten.cumsum.default)(_cumulative("sum", 0.0))
register_lowering(aten.cumprod.default)(_cumulative("prod", 1.0))

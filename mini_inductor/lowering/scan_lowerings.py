"""Cumulative ops: cumsum and cumprod (a scan kernel, or for short static rows a masked square),
logcumsumexp, cummax and cummin (always a scan kernel).

    length n of the scanned dim            cumsum, cumprod lowered as
    ─────────────────────────────────────  ───────────────────────────────────────────────────────
    at most 1                              a copy (cast to the result's dtype)
    2 .. MAX_SQUARE_LENGTH, or a symbol    a reduction over a masked square (n² work, an ordinary
      the ShapeEnv bounds within it        reduction: fuses as one)
    longer, or an unbounded symbol         ir.Scan: rows on xindex, the dim on rindex; the block's
                                           tl.cumsum plus a carry across blocks (codegen/triton_ops.py
                                           TritonOps.scan), any length, sizes as kernel arguments

The masked square:

    out[..., i] = sum over j of (x[..., j] if j <= i else 0)

Accumulation is eager's: float16 and bfloat16 in float32, integers and bools into int64 (`dtype=`
chooses the result's type; integers are scanned in int64 and wrapped to it on the store, which
gives the wrapped sums a narrower accumulator would).

logcumsumexp, cummax and cummin are an ir.Scan at every length above 1 (a copy below), scanned with
triton_helpers' combine functions: a stable log-add-exp, and (value, index) pairs where the later
element wins a tie and a NaN wins always, as eager's cummax and cummin do.
"""
from __future__ import annotations

import torch

from .ir import ComputedBuffer, IRNode, Layout, Pointwise, Scan, StorageBox, current_graph
from .lowerings import register_lowering, to_dtype
from .reduction_lowerings import make_reduction
from .sizevars import sympify_seq
from .symbolic import upper_bound
from .view_lowerings import _norm_dim
from .virtualized import ops

aten = torch.ops.aten

# Scanned dims up to this length (static, or bounded by the ShapeEnv) are masked squares, which fuse
# like reductions; longer ones are scan kernels. On an H200 (session 37, benchmarks/scans.py, 4096 rows
# of float32, alone and fused) the scan kernel was as fast at 16 (0.0021 against 0.0026 ms) and faster
# from 64 on (0.0024 against 0.0089; at 256, 0.0035 against 0.130)
MAX_SQUARE_LENGTH = 16


def _scan_dtype(x: IRNode, dtype) -> torch.dtype:
    if dtype is not None:
        return dtype
    src = x.get_dtype()
    return torch.int64 if src == torch.bool or not (src.is_floating_point or src.is_complex) else src


def _compute_dtype(out_dtype: torch.dtype) -> torch.dtype:
    if out_dtype in (torch.float16, torch.bfloat16):
        return torch.float32
    return out_dtype if out_dtype.is_floating_point else torch.int64


def row_loader(x: IRNode, dim: int, compute: torch.dtype):
    """The body of a scan or sort over `dim` of `x`: (row index, [position in the row]) → the element,
    in `compute`."""
    loader = x.make_loader()

    def inner_fn(index, rindex):
        full = list(index)
        full.insert(dim, rindex[0])
        value = loader(full)
        return value if x.get_dtype() == compute else ops.to_dtype(value, compute)
    return inner_fn


def make_scan(x: IRNode, dim: int, scan_type: str, out_dtype: torch.dtype, compute: torch.dtype | None = None,
              output_index: int = 0) -> StorageBox:
    """The scan of `x` (already of `out_dtype`, but for cummax's and cummin's indices) along `dim`,
    realized into a contiguous buffer; its producer's body is inlined where the kernel loads it.
    `compute`: the dtype the kernel scans in (by default _compute_dtype's)."""
    size = x.get_size()
    compute = compute or _compute_dtype(out_dtype)
    inner_fn = row_loader(x, dim, compute)
    rows = [s for i, s in enumerate(size) if i != dim]
    scan = Scan(x.get_device(), out_dtype, inner_fn, sympify_seq(rows), (), sympify_seq([size[dim]]),
                scan_type, compute, dim, output_index)
    graph = current_graph()
    buf = ComputedBuffer(graph.new_buffer_name(), Layout.contiguous(x.get_device(), out_dtype, size), scan)
    graph.register_buffer(buf)
    return StorageBox(buf)


def _masked_square(x: IRNode, dim: int, scan_type: str, identity, out_dtype: torch.dtype) -> IRNode:
    size = x.get_size()
    n = size[dim]
    loader = x.make_loader()
    fill = identity if out_dtype.is_floating_point else int(identity)

    def square(idx):
        *outer, j = idx
        src = list(outer)
        src[dim] = j
        keep = ops.le(ops.index_expr(j, torch.int64), ops.index_expr(outer[dim], torch.int64))
        return ops.masked(keep, lambda: loader(src), fill)

    squared = Pointwise.create(x.get_device(), out_dtype, square, list(size) + [n])
    return make_reduction(squared, [len(size)], scan_type, out_dtype=out_dtype)


def _cumulative(scan_type: str, identity):
    def lowering(x: IRNode, dim, *, dtype=None):
        out_dtype = _scan_dtype(x, dtype)
        if out_dtype == torch.bool:   # ATen has no bool scan on the CPU: its error (or CUDA's result) is eager's
            raise NotImplementedError(f"cum{scan_type} into bool")
        x = to_dtype(x, out_dtype)
        size = x.get_size()
        if not size:
            return to_dtype(Pointwise.create(x.get_device(), out_dtype, x.make_loader(), []), out_dtype)
        dim = _norm_dim(dim, len(size))
        longest = upper_bound(size[dim])
        if longest is not None and longest <= 1:
            return Pointwise.create(x.get_device(), out_dtype, x.make_loader(), size)
        if longest is not None and longest <= MAX_SQUARE_LENGTH:
            return _masked_square(x, dim, scan_type, identity, out_dtype)
        return make_scan(x, dim, scan_type, out_dtype)
    return lowering


register_lowering(aten.cumsum.default)(_cumulative("sum", 0.0))
register_lowering(aten.cumprod.default)(_cumulative("prod", 1.0))


def _at_most_one(size, dim) -> bool:
    """A 0-d input, or a scanned dim of length 0 or 1 (static, or bounded so): every element is its
    own prefix."""
    if not size:
        return True
    longest = upper_bound(size[dim])
    return longest is not None and longest <= 1


@register_lowering(aten.logcumsumexp.default)
def logcumsumexp(x: IRNode, dim):
    # always a scan kernel: the masked square would need a log-sum-exp reduction (two passes)
    dtype = x.get_dtype()
    if not dtype.is_floating_point:   # eager refuses integers and bools; complex is not generated
        raise NotImplementedError(f"logcumsumexp of {dtype}")
    size = x.get_size()
    dim = _norm_dim(dim, len(size)) if size else 0
    if _at_most_one(size, dim):
        return Pointwise.create(x.get_device(), dtype, x.make_loader(), size)
    return make_scan(x, dim, "logsumexp", dtype)


def _value_and_index_scan(scan_type: str):
    """cummax / cummin: values in the input's dtype and int64 indices, two Scans of one (value, index)
    scan. Compared in float32 for 16-bit floats (exact: the values are only selected, and the
    interpreter compares bfloat16 by its bits), in int8 for bools."""
    def lowering(x: IRNode, dim):
        dtype = x.get_dtype()
        if dtype.is_complex:
            raise NotImplementedError(f"cum{scan_type} of {dtype}")
        size = x.get_size()
        dim = _norm_dim(dim, len(size)) if size else 0
        if _at_most_one(size, dim):
            zeros = Pointwise.create(x.get_device(), torch.int64, lambda idx: ops.constant(0, torch.int64), size)
            return Pointwise.create(x.get_device(), dtype, x.make_loader(), size), zeros
        compute = (torch.float32 if dtype in (torch.float16, torch.bfloat16) else
                   torch.int8 if dtype == torch.bool else dtype)
        values = make_scan(x, dim, scan_type, dtype, compute, output_index=0)
        indices = make_scan(x, dim, scan_type, torch.int64, compute, output_index=1)
        return values, indices
    return lowering


register_lowering(aten.cummax.default)(_value_and_index_scan("max"))
register_lowering(aten.cummin.default)(_value_and_index_scan("min"))

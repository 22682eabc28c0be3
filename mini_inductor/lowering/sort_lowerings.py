"""sort (sort.default, sort.stable), and through it argsort, and topk: an ir.Sort kernel for rows that
fit one block, an ATen call beyond.

    length n of the sorted dim                       lowered as
    ───────────────────────────────────────────────  ─────────────────────────────────────────────
    at most 1 (or a 0-d input)                       a copy, and indices of 0
    2 .. MAX_SORT_LENGTH, static or a symbol (or     two ir.Sort buffers (values, int64 indices)
      an expression of symbols, s0 - 1) that the     of one sort in a persistent kernel: rows on
      ShapeEnv bounds within it                      xindex, the sorted dim on rindex
    longer, or an unbounded symbol                   an ATen call (NotImplementedError: counted,
                                                     with its reason)

The kernel sorts a total order, by value then by input index, so its result is stable in either
direction: what eager's stable=True gives, and one of the orders eager's sort without it may give
(it documents none for equal values). Values compare as eager's do: NaN above every number (last
rising, first falling), -0.0 equal to 0.0 (their input order kept); float16 and bfloat16 compared in
float32, bools as int8, exactly.

topk(k, dim, largest, sorted) is the row sorted whole (falling for `largest`), of which the kernel
stores the first k columns (ir.Sort's `kept`: buffers of k columns, the store masked to them), so one
kernel; its values are eager's, its indices too where values are not tied; on ties they are
distinct indices of equal values, in input order (eager documents no order there either). `sorted=
False` gets them sorted, which is one of the orders it allows.

Outputs take eager's layout: the node's FakeTensor strides (eager_strides.py makes sort's the dense
input's); the kernel stores at any strides, so no copy follows.
"""
from __future__ import annotations

import torch

from .ir import ComputedBuffer, IRNode, Layout, Pointwise, Sort, StorageBox, current_graph
from .layout_opt import is_non_overlapping_and_dense
from .lowerings import register_lowering
from .sizevars import sympify_seq
from .symbolic import stride_exprs, upper_bound
from .view_lowerings import _norm_dim
from .scan_lowerings import row_loader
from .virtualized import ops

aten = torch.ops.aten

# The longest row generated as a sort kernel (static, or the ShapeEnv's bound of a symbolic length):
# the row, padded to a power of 2, is one block of (value, int64 index) pairs, sorted in
# log2(n)·(log2(n)+1)/2 compare-exchange steps (55 at 1024). Longer rows run in ATen.
MAX_SORT_LENGTH = 1024

# dtypes the kernel compares in: 16-bit floats in float32 (exact both ways), bools as int8
_COMPUTE = {torch.float16: torch.float32, torch.bfloat16: torch.float32, torch.bool: torch.int8}
_SORTABLE = {torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.bool, torch.uint8, torch.int8,
             torch.int16, torch.int32, torch.int64}


def _eager_strides(meta, size):
    """eager's strides for an output of `size` (its FakeTensor's where dense), else contiguous (None)."""
    if isinstance(meta, torch.Tensor) and is_non_overlapping_and_dense(meta) and len(meta.shape) == len(size):
        return tuple(stride_exprs(meta))
    return None


def _sorted_buffer(x: IRNode, dim: int, descending: bool, output_index: int, dtype: torch.dtype,
                   stride, kept=None) -> StorageBox:
    """One result of the sort of `x` along `dim`: its first `kept` columns (a topk's k), else the
    whole row, at `stride` (None: contiguous)."""
    size = x.get_size()
    compute = _COMPUTE.get(x.get_dtype(), x.get_dtype())
    inner_fn = row_loader(x, dim, compute)
    rows = [s for i, s in enumerate(size) if i != dim]
    sort = Sort(x.get_device(), dtype, inner_fn, sympify_seq(rows), (), sympify_seq([size[dim]]),
                "sort", compute, dim, output_index, descending, kept)
    device = x.get_device()
    if kept is not None:
        size = list(size)
        size[dim] = kept
    layout = (Layout(device, dtype, tuple(sympify_seq(size)), tuple(sympify_seq(stride))) if stride is not None
              else Layout.contiguous(device, dtype, size))
    graph = current_graph()
    buf = ComputedBuffer(graph.new_buffer_name(), layout, sort)
    graph.register_buffer(buf)
    return StorageBox(buf)


def make_sort(x: IRNode, dim, descending: bool, metas=(None, None), kept=None) -> tuple[IRNode, IRNode]:
    """(values, int64 indices) of `x` sorted along `dim`, stably, or their first `kept` columns (a
    topk's); `metas`: the FakeTensors whose dense strides the two buffers take. Raises
    NotImplementedError where the row does not fit a block."""
    dtype = x.get_dtype()
    if dtype not in _SORTABLE:
        raise NotImplementedError(f"a sort of {dtype}")
    size = x.get_size()
    dim = _norm_dim(dim, len(size)) if size else 0
    longest = upper_bound(size[dim]) if size else 1
    if longest is None:
        raise NotImplementedError(f"a sorted dim of symbolic length {size[dim]} that the ShapeEnv does not bound "
                                  f"within {MAX_SORT_LENGTH}")
    if longest > MAX_SORT_LENGTH:
        raise NotImplementedError(f"a sorted dim of {longest} elements: rows longer than {MAX_SORT_LENGTH} "
                                  "are not generated")
    out = list(size)
    if kept is not None:
        out[dim] = kept
    if longest <= 1:   # every element is its row: itself, at index 0
        zeros = Pointwise.create(x.get_device(), torch.int64, lambda idx: ops.constant(0, torch.int64), out)
        return Pointwise.create(x.get_device(), dtype, x.make_loader(), out), zeros
    values = _sorted_buffer(x, dim, descending, 0, dtype, _eager_strides(metas[0], out), kept)
    indices = _sorted_buffer(x, dim, descending, 1, torch.int64, _eager_strides(metas[1], out), kept)
    return values, indices


def _node_metas():
    meta = current_graph().current_node.meta.get("val")
    return tuple(meta) if isinstance(meta, (tuple, list)) and len(meta) == 2 else (None, None)


@register_lowering(aten.sort.default)
def sort(x: IRNode, dim=-1, descending=False):
    return make_sort(x, dim, descending, _node_metas())


@register_lowering(aten.sort.stable)
def sort_stable(x: IRNode, *, stable=None, dim=-1, descending=False):
    return make_sort(x, dim, descending, _node_metas())


@register_lowering(aten.topk.default)
def topk(x: IRNode, k, dim=-1, largest=True, sorted=True):
    if x.get_dtype() == torch.bool:   # eager's topk refuses bools (sort takes them): ATen raises as it does
        raise NotImplementedError("topk of bool")
    size = x.get_size()
    k = sympify_seq([k])[0]   # a dynamic graph's may be a symbol (k = x.size(1) // 2)
    if not size:
        if k != 1:   # k = 0 of a 0-d tensor: eager's result is an uninitialized 0-d tensor on CUDA
            raise NotImplementedError(f"topk(k={k}) of a 0-d tensor")
        return make_sort(x, 0, largest, _node_metas())
    dim = _norm_dim(dim, len(size))
    # the sort kernel stores the first k columns of the sorted row, masked (k a symbol too)
    return make_sort(x, dim, largest, _node_metas(), kept=None if k == size[dim] else k)

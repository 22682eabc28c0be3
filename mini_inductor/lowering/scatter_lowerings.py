"""Scatters written as gathers, where each output element has only a few candidate writers.

    scatter(self, dim, index, src)[p] = src[p with dim = m]  for the last m < K with index[p with dim = m] == p[dim]
                                        self[p]              when there is none
    scatter_add                       = self[p] + the sum of src over every such m

K = index.size(dim). Each output element compares its own position with K index values, so no
store goes to a computed address and the result is an ordinary Pointwise (fused, no atomics). This is
what the backward of cross-entropy (nll_loss_backward scatters -1 into zeros, K = 1) needs. A
scatter_add along a longer span (K > MAX_SCATTER_SPAN, or a symbolic K in a dynamic graph), or with
an index smaller than self in another dim, adds with atomics instead, as index_put does (below); a
scatter without add there stores each src element at its position in a copy of self (a ScatterBuffer
of mode "scatter": of duplicate positions any one store lands, which eager documents too; under
torch.use_deterministic_algorithms ATen runs it). The backwards of sort and topk are such scatters.
Every index is an indirect index with a device-side assert: out of range, a negative one too, it
raises as eager's does.

slice_scatter, the same way: an element in the slice reads src, the others self (torch's
decomposition returns a contiguous result; eager's has self's strides, which an in-place op on a slice
of an intermediate shows).

max_pool2d_with_indices_backward, the same way: an input position is in at most ceil(k / s) windows
per dim; it gathers the output gradient of each window whose saved index points at it.

index_fill, the same way: element p takes the value where some index[m] == p[dim] (duplicates fill
once). A longer index (or a symbolic length) first marks the filled positions of dim in a small int32
buffer with atomic adds of 1 (exact, so in any order), which each element then reads.

index_put with accumulate=True (what embedding_dense_backward decomposes to) cannot be a gather: an
element's writers are wherever the index tensor points. It is two kernels instead,

    target  = copy of self                                (fp16/bf16: upcast to fp32)
    target[index(i)] += values[i]   for every i           ScatterBuffer: tl.atomic_add
    result  = target                                      (fp16/bf16: cast back, inlined into readers)

so duplicate indices add up, in an unspecified order (not under torch.use_deterministic_algorithms).
fp16/bf16 accumulate in fp32: Triton 3.6 accepts bf16 atomic_add, but the hardware add needs sm90
and the interpreter rejects bf16 atomics ("Unsupported data type"); fp32 sums also round once, not
at every add. Boolean-mask indices (data-dependent positions) and int64/bool/int8/int16 (no atomic
add used for them, as in Inductor) run in ATen; so does accumulate=False.
"""
from __future__ import annotations

import math

import sympy
import torch
from torch._prims_common import get_computation_dtype
from torch._subclasses.fake_tensor import unset_fake_temporarily

from ..conversions import always_converts, converts
from .indexing_lowerings import _fill_value, _in_range, index_positions, strict_indirect
from .ir import IRNode, Pointwise, ScatterBuffer, current_graph
from .lowerings import broadcast_loader, broadcast_sizes, check_converts, constant, register_lowering, to_dtype
from .pooling_lowerings import _geometry, backward_out_size
from .sizevars import FloorDiv, ModularIndexing
from .layout_opt import is_non_overlapping_and_dense
from .symbolic import decide, stride_exprs
from .view_lowerings import _norm_dim, slice_bounds, symbolic_slice_bounds, view
from .virtualized import ops

aten = torch.ops.aten

MAX_SCATTER_SPAN = 8  # index.size(dim) above this runs in ATen (K compares per output element)
# Accumulator dtypes index_put adds with tl.atomic_add (fp16/bf16 accumulate in fp32).
ATOMIC_ADD_DTYPES = (torch.float32, torch.float64, torch.int32)


def _same_size(a, b) -> bool:
    return a == b or decide(sympy.Eq(a, b)) is True


def _scatter(x: IRNode, dim, index: IRNode, src, accumulate: bool) -> IRNode:
    size, isize = list(x.get_size()), list(index.get_size())
    if not size or len(isize) != len(size):
        raise NotImplementedError("scatter of a 0-d tensor or with an index of another rank")
    dim = _norm_dim(dim, len(size))
    span = isize[dim]
    short_span = isinstance(span, (int, sympy.Integer)) and 0 < int(span) <= MAX_SCATTER_SPAN
    if not (short_span and all(_same_size(i, s) for d, (i, s) in enumerate(zip(isize, size)) if d != dim)):
        # any span, any index shape: atomic adds, or stores to the positions
        return (_scatter_add_atomic if accumulate else _scatter_store)(x, dim, index, src)
    span = int(span)
    dtype = x.get_dtype()
    cdt = get_computation_dtype(dtype)
    x_loader, index_position = x.make_loader(), _scatter_position(index, dim, size[dim])
    src_loader = src.make_loader() if isinstance(src, IRNode) else None

    def value_at(at):
        if src_loader is None:   # (-1 into uint8 wraps to 255, as eager's)
            return constant(_fill_value(src, dtype), cdt)
        v = src_loader(at)
        return v if src.get_dtype() == cdt else ops.to_dtype(v, cdt)

    def inner_fn(idx):
        out = x_loader(idx)
        out = out if dtype == cdt else ops.to_dtype(out, cdt)
        position = ops.index_expr(idx[dim], torch.int64)
        for m in range(span):
            at = list(idx)
            at[dim] = sympy.Integer(m)
            # an indirect index for its device-side assert: eager raises on one out of range
            hit = ops.eq(ops.index_expr(index_position(at)[dim], torch.int64), position)
            out = ops.where(hit, ops.add(out, value_at(at)) if accumulate else value_at(at), out)
        return out if dtype == cdt else ops.to_dtype(out, dtype)
    return Pointwise.create(x.get_device(), dtype, inner_fn, size)


@register_lowering(aten.scatter.value, aten.scatter.src)
def scatter(x, dim, index, src):
    check_converts(src, x.get_dtype(), "scatter value", ("scatter",))   # (ATen raises as eager does)
    return _scatter(x, dim, index, src, accumulate=False)


@register_lowering(aten.scatter_add.default)
def scatter_add(x, dim, index, src):
    return _scatter(x, dim, index, src, accumulate=True)


def _scatter_position(index: IRNode, dim: int, n):
    """position(q): the element of a size-`n` dim that scatter's index sends element q to, as an indirect
    index whose device-side assert fails out of 0 .. n - 1, a negative one too, as eager refuses it."""
    index_loader = index.make_loader()

    def position(idx):
        at = list(idx)
        at[dim] = strict_indirect(index_loader(idx), n, index.get_dtype())
        return at
    return position


def _scatter_add_atomic(x: IRNode, dim: int, index: IRNode, src) -> IRNode:
    """scatter_add along a long span (or with an index smaller than self): out[p with dim =
    index[q]] += src[q] for every q of index's shape, with atomic adds."""
    isize, size = list(index.get_size()), x.get_size()
    if isinstance(src, IRNode):
        src_loader, src_dtype = src.make_loader(), src.get_dtype()
    else:
        src_loader, src_dtype = (lambda idx: ops.constant(src, x.get_dtype())), x.get_dtype()
    return _atomic_add_into(x, "scatter_add", isize, src_loader, src_dtype, _scatter_position(index, dim, size[dim]))


def _scatter_store(x: IRNode, dim: int, index: IRNode, src) -> IRNode:
    """scatter without reduce along a long or symbolic span (or with an index smaller than self):
    out[p with dim = index[q]] = src[q] (or the value) for every q of index's shape, as stores to the
    computed positions (a ScatterBuffer of mode "scatter") into a copy of x:

        target  = copy of x, at eager's strides           an ordinary kernel
        target[position(q)] = src[q]   for every q        a kernel of its own, after the copy
        readers load target                               after every store

    Of duplicate positions any one store lands. Eager documents that as nondeterministic too, except
    under torch.use_deterministic_algorithms, where its result is defined: ATen runs it there."""
    if torch.are_deterministic_algorithms_enabled():
        raise NotImplementedError("scatter along a long span under torch.use_deterministic_algorithms (of "
                                  "duplicate positions eager keeps a defined write, stores here any one)")
    device, dtype, size = x.get_device(), x.get_dtype(), x.get_size()
    box = Pointwise.create(device, dtype, x.make_loader(), size)
    target = box.realize(_eager_strides(size))
    isize = list(index.get_size())
    if any(s == 0 for s in isize):
        return box   # nothing to store
    if isinstance(src, IRNode):
        src_loader = src.make_loader()

        def value(idx):
            v = src_loader(idx)
            return v if src.get_dtype() == dtype else ops.to_dtype(v, dtype)
    else:
        def value(idx):   # (-1 into uint8 wraps to 255, as eager's)
            return constant(_fill_value(src, dtype), dtype)
    graph = current_graph()
    graph.register_buffer(ScatterBuffer(graph.new_buffer_name(), target, Pointwise(device, dtype, value, isize),
                                        _scatter_position(index, dim, size[dim]), mode="scatter"))
    return box


def _eager_strides(size):
    """The strides of the node's FakeTensor (eager's layout) where dense, else None (contiguous)."""
    node = current_graph().current_node
    meta = node.meta.get("val") if node is not None else None
    if isinstance(meta, torch.Tensor) and len(meta.shape) == len(size) and is_non_overlapping_and_dense(meta):
        return tuple(stride_exprs(meta))
    return None


def _atomic_add_into(x: IRNode, what: str, out_size, values_loader, values_dtype, position) -> IRNode:
    """A copy of `x` to which values_loader(i) is added at position(i) for every i of `out_size`
    (a ScatterBuffer: atomic adds, so duplicate positions all count)."""
    if torch.are_deterministic_algorithms_enabled():
        raise NotImplementedError(f"{what} under torch.use_deterministic_algorithms (atomic adds sum in no "
                                  "fixed order)")
    dtype = x.get_dtype()
    acc = get_computation_dtype(dtype)
    if acc not in ATOMIC_ADD_DTYPES:
        raise NotImplementedError(f"{what} of {dtype} (no atomic add for it)")
    device, size = x.get_device(), x.get_size()
    x_loader = x.make_loader()

    def initial(idx):
        v = x_loader(idx)
        return v if dtype == acc else ops.to_dtype(v, acc)

    def value(idx):
        v = values_loader(idx)
        return v if values_dtype == acc else ops.to_dtype(v, acc)

    box = Pointwise.create(device, acc, initial, size)
    if any(s == 0 for s in out_size):
        return _cast(box, dtype)  # nothing to add
    # at eager's strides: where no cast follows, this buffer is the result (index_put of a transposed
    # input keeps its layout in eager; a fuzz seed got contiguous strides)
    target = box.realize(_eager_strides(size))
    graph = current_graph()
    graph.register_buffer(ScatterBuffer(graph.new_buffer_name(), target, Pointwise(device, acc, value, list(out_size)),
                                        position))
    return _cast(box, dtype)


@register_lowering(aten.index_put.default, aten._unsafe_index_put.default)
def index_put(x: IRNode, indices, values: IRNode, accumulate=False):
    if not accumulate:
        raise NotImplementedError("index_put without accumulate (of duplicate indices eager keeps one write)")
    out_size, position = index_positions(x, indices)
    try:
        fits = broadcast_sizes(values.get_size(), out_size) == list(out_size)
    except ValueError:
        fits = False
    if not fits:
        raise NotImplementedError("index_put with values that do not broadcast to the indexed shape")
    return _atomic_add_into(x, "index_put with accumulate", out_size, broadcast_loader(values, out_size),
                            values.get_dtype(), position)


def _cast(x: IRNode, dtype: torch.dtype) -> IRNode:
    if x.get_dtype() == dtype:
        return x
    loader = x.make_loader()
    return Pointwise.create(x.get_device(), dtype, lambda idx: ops.to_dtype(loader(idx), dtype), x.get_size())


@register_lowering(aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)
def index_fill(x: IRNode, dim, index: IRNode, value):
    """x with every element whose position along `dim` is in `index` (negative ones wrap) set to value."""
    size = list(x.get_size())
    if not size:   # a 0-d tensor fills as one element
        return view(index_fill(view(x, [1]), 0, index, value), [])
    if len(index.get_size()) > 1 or index.get_dtype() != torch.int64:
        raise NotImplementedError("index_fill with an index that is not a 1-d int64 tensor")   # (eager raises)
    if isinstance(value, IRNode) and (value.get_size() or value.get_device() != x.get_device()):
        raise NotImplementedError("index_fill with a value tensor that is not 0-d on x's device")
    dim = _norm_dim(dim, len(size))
    n = size[dim]
    dtype = x.get_dtype()
    x_loader = x.make_loader()
    if isinstance(value, IRNode):
        if not _value_tensor_converts(value, dtype):
            # eager converts the value's `.item()` with the check (a float32 1e6 into float16 raises)
            raise NotImplementedError(f"index_fill of {dtype} with a {value.get_dtype()} value, which may not "
                                      "convert without overflow (eager checks)")
        value_loader = value.make_loader()

        def fill():
            v = value_loader([])
            return v if value.get_dtype() == dtype else ops.to_dtype(v, dtype, value.get_dtype())
    else:
        check_converts(value, dtype, "fill value", ("index_fill",))   # (ATen raises as eager does)

        def fill():
            return constant(_fill_value(value, dtype), dtype)   # (-1 into uint8 wraps to 255, as eager's)
    span = index.get_size()[0] if index.get_size() else sympy.Integer(1)
    if isinstance(span, (int, sympy.Integer)) and int(span) <= MAX_SCATTER_SPAN:
        index_loader = index.make_loader()

        def filled(idx):
            position = ops.index_expr(idx[dim], torch.int64)
            hits = []
            for m in range(int(span)):
                # an indirect index: wrapped if negative, and out of range a device-side assert as for a
                # gather (compared as a plain value, an index eager rejects filled nothing)
                target = ops.indirect_indexing(index_loader([sympy.Integer(m)] if index.get_size() else []), n)
                hits.append(ops.eq(ops.index_expr(target, torch.int64), position))
            return _any(hits)
    else:
        marks = _marked_positions(x.get_device(), n, index).make_loader()

        def filled(idx):
            return ops.gt(marks([idx[dim]]), ops.constant(0, torch.int32))

    def inner_fn(idx):
        hit = filled(idx)
        return ops.where(hit, fill(), x_loader(idx))
    return Pointwise.create(x.get_device(), dtype, inner_fn, size)


def _value_tensor_converts(value: IRNode, dtype: torch.dtype) -> bool:
    """Whether index_fill's 0-d value tensor surely converts to `dtype`, as eager converts its `.item()`:
    by its number where it is a graph constant (`torch.tensor(-1e4)` in the compiled code, lifted), else
    by its dtype (conversions.always_converts)."""
    graph = current_graph()
    node = graph.current_node
    arg = (node.args[3] if len(node.args) > 3 else node.kwargs.get("value")) if node is not None else None
    while isinstance(arg, torch.fx.Node) and arg.target in (aten.lift_fresh_copy.default, aten.clone.default):
        arg = arg.args[0]
    held = getattr(graph.gm, arg.target, None) if isinstance(arg, torch.fx.Node) and arg.op == "get_attr" else None
    if isinstance(held, torch.Tensor) and held.numel() == 1 and held.dtype == value.get_dtype():
        with unset_fake_temporarily():   # (the compile's fake mode would refuse to read it)
            return converts(held.item(), dtype)
    return always_converts(value.get_dtype(), dtype)


def _marked_positions(device, n, index: IRNode) -> IRNode:
    """An int32 buffer of n counts: how often each position appears in the 1-d `index` (wrapped)."""
    zeros = Pointwise.create(device, torch.int32, lambda idx: ops.constant(0, torch.int32), [n])
    target = zeros.realize()
    index_loader = index.make_loader()
    graph = current_graph()
    ones = Pointwise(device, torch.int32, lambda idx: ops.constant(1, torch.int32), list(index.get_size()))
    graph.register_buffer(ScatterBuffer(graph.new_buffer_name(), target, ones,
                                        lambda idx: [ops.indirect_indexing(index_loader(idx), n)]))
    return zeros


@register_lowering(aten.max_pool2d_with_indices_backward.default)
def max_pool2d_with_indices_backward(grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    """grad_input[.., ih, iw] = sum of grad[.., oh, ow] over the windows whose max was at (ih, iw)."""
    size, k, s, p, d, out = _geometry(x, kernel_size, stride, padding, dilation, ceil_mode)
    if d != [1, 1]:
        raise NotImplementedError("dilated max-pool backward")
    out = backward_out_size(grad, out, "max-pool backward")
    h, w = size[-2:]
    dtype = x.get_dtype()
    cdt = get_computation_dtype(dtype)
    grad_loader, index_loader = grad.make_loader(), indices.make_loader()
    tries = [math.ceil(k[0] / s[0]), math.ceil(k[1] / s[1])]  # windows holding one position, per dim

    def inner_fn(idx):
        *lead, ih, iw = idx
        me = ops.index_expr(ih * w + iw, torch.int64)
        total = ops.constant(0.0, cdt)
        # the last window starting at or before this position, then the ones before it
        top = [FloorDiv(ih + p[0], s[0]), FloorDiv(iw + p[1], s[1])]
        for jh in range(tries[0]):
            for jw in range(tries[1]):
                oh, ow = top[0] - jh, top[1] - jw
                valid = _all(_in_range(oh, 0, out[0]), _in_range(ow, 0, out[1]),
                             # the window starting at oh*s - p reaches this position
                             ops.ge(ops.index_expr(oh * s[0] - p[0] + k[0] - 1 - ih, torch.int64),
                                    ops.constant(0, torch.int64)),
                             ops.ge(ops.index_expr(ow * s[1] - p[1] + k[1] - 1 - iw, torch.int64),
                                    ops.constant(0, torch.int64)))

                def contribution(oh=oh, ow=ow):
                    at = list(lead) + [oh, ow]
                    g = grad_loader(at)
                    g = g if grad.get_dtype() == cdt else ops.to_dtype(g, cdt)
                    chosen = ops.eq(index_loader(at), me)
                    return ops.where(chosen, g, ops.constant(0.0, cdt))
                total = ops.add(total, ops.masked(valid, contribution, 0.0))
        return total if dtype == cdt else ops.to_dtype(total, dtype)
    return Pointwise.create(x.get_device(), dtype, inner_fn, size)


@register_lowering(aten.slice_scatter)
def slice_scatter(x, src, dim=0, start=None, end=None, step=1):
    size = x.get_size()
    dim = _norm_dim(dim, len(size))
    if isinstance(size[dim], sympy.Integer) and not isinstance(start, sympy.Basic) \
            and not isinstance(end, sympy.Basic):
        start, end = slice_bounds(int(size[dim]), start, end)
    else:   # a dynamic graph's: each bound where the ShapeEnv proves it, else ATen
        start, end = symbolic_slice_bounds(size[dim], start, end)
        if step > 1 and start.free_symbols:
            raise NotImplementedError(f"a strided slice_scatter from a symbolic start {start}")
    dtype = x.get_dtype()
    load_x, load_src = x.make_loader(), to_dtype(src, dtype).make_loader()

    def inner_fn(idx):
        i = idx[dim]
        conds = [_in_range(i, start, end)]
        if step > 1:   # (i - start) % step == 0, on a non-negative operand
            phase = ModularIndexing(i + step - start % step, 1, step)
            conds.append(ops.eq(ops.index_expr(phase, torch.int64), ops.constant(0, torch.int64)))
        inside = _all(*conds)
        at = list(idx)
        at[dim] = FloorDiv(i - start, step)
        return ops.where(inside, ops.masked(inside, lambda: load_src(at), _zero(dtype)), load_x(idx))
    return Pointwise.create(x.get_device(), dtype, inner_fn, size)


def _zero(dtype: torch.dtype):
    return False if dtype == torch.bool else 0.0 if dtype.is_floating_point else 0


def _all(*conds):
    out = conds[0]
    for c in conds[1:]:
        out = ops.logical_and(out, c)
    return out


def _any(conds):
    out = conds[0]
    for c in conds[1:]:
        out = ops.logical_or(out, c)
    return out

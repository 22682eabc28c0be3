"""Views: index remaps over their input, never copies."""
from __future__ import annotations

import sys

import sympy
import torch

from .ir import Buffer, InputBuffer, IRNode, ReinterpretView, StorageBox, View, Layout, current_graph
from .lowerings import register_lowering
from .sizevars import FloorDiv, ModularIndexing, product, sympify_seq
from .symbolic import SymbolicUnsupported, broadcasts, decide, is_one

aten = torch.ops.aten


def _norm_dim(d: int, ndim: int) -> int:
    return d + ndim if d < 0 else d


@register_lowering(aten.permute)
def permute(x: IRNode, dims):
    ndim = len(x.get_size())
    dims = [_norm_dim(d, ndim) for d in dims]
    size = [x.get_size()[d] for d in dims]
    inv = [dims.index(i) for i in range(ndim)]
    return View(x, size, lambda idx: [idx[inv[i]] for i in range(ndim)])


@register_lowering(aten.t)
def t(x):
    return permute(x, list(reversed(range(len(x.get_size())))))


@register_lowering(aten.transpose.int)
def transpose(x, d0, d1):
    ndim = len(x.get_size())
    dims = list(range(ndim))
    d0, d1 = _norm_dim(d0, ndim), _norm_dim(d1, ndim)
    dims[d0], dims[d1] = dims[d1], dims[d0]
    return permute(x, dims)


@register_lowering(aten.alias, aten.detach)
def alias(x):
    """The same elements, as eager's alias/detach share the storage (a clone here made outputs that
    eager returns as views of each other, transpose(0, 0) or t() of a 1-d tensor, separate tensors)."""
    return View(x, x.get_size(), list)


@register_lowering(aten.expand)
def expand(x, size, implicit=False):
    old = x.get_size()
    size = sympify_seq(size)
    shift = len(size) - len(old)
    size = [old[i - shift] if s == -1 else s for i, s in enumerate(size)]

    broadcast = [broadcasts(o, size[shift + i]) for i, o in enumerate(old)]

    def reindex(idx):
        return [sympy.Integer(0) if b else idx[shift + i] for i, b in enumerate(broadcast)]
    return View(x, size, reindex)


@register_lowering(aten.slice.Tensor)
def slice_(x, dim=0, start=None, end=None, step=1):
    size = x.get_size()
    dim = _norm_dim(dim, len(size))
    if isinstance(size[dim], sympy.Integer) and not isinstance(start, sympy.Basic) \
            and not isinstance(end, sympy.Basic):
        start, end = slice_bounds(int(size[dim]), start, end)
        length = sympy.Integer((end - start + step - 1) // step)
    else:
        start, end = symbolic_slice_bounds(size[dim], start, end)
        length = FloorDiv(end - start + step - 1, step) if step != 1 else end - start
    return _strided_part(x, dim, start, length, step)


def _strided_part(x, dim: int, start, length, step=1):
    """The view of elements start, start + step, ... (`length` of them) of `x` along `dim`, in range."""
    new = list(x.get_size())
    new[dim] = length

    def reindex(idx):
        idx = list(idx)
        idx[dim] = start + step * idx[dim]
        return idx
    return View(x, new, reindex)


def slice_bounds(n: int, start, end) -> tuple[int, int]:
    """start and end of [start:end] on a dim of n elements, as 0 <= start <= end <= n."""
    start = 0 if start is None else start
    end = n if end is None else end
    start = max(0, min(n, start + n if start < 0 else start))
    return start, max(start, min(n, end + n if end < 0 else end))


def symbolic_slice_bounds(n, start, end) -> tuple:
    """slice_bounds for a dynamic size or bound: each clamp decided at every size the graph serves
    (symbolic.decide), else NotImplementedError (the slice then runs in ATen)."""
    n = sympify_seq([n])[0]
    start = sympy.Integer(0) if start is None else sympify_seq([start])[0]
    end = n if end is None or end == sys.maxsize else sympify_seq([end])[0]

    def clamp(b):
        if decide(b < 0):
            b = b + n
        elif decide(b >= 0) is not True:
            raise NotImplementedError(f"slice bound {b} of a dim of {n}: its sign is not known")
        if decide(b <= n) is True and decide(b >= 0) is True:
            return b
        if decide(b >= n) is True:
            return n
        if decide(b <= 0) is True:
            return sympy.Integer(0)
        raise NotImplementedError(f"slice bound {b} of a dim of {n}: not provably within it")
    start = clamp(start)
    end = clamp(end)
    if decide(end >= start) is True:
        return start, end
    if decide(end <= start) is True:
        return start, start
    raise NotImplementedError(f"slice [{start}:{end}]: not provably ordered")


@register_lowering(aten.select.int)
def select(x, dim, index):
    size = x.get_size()
    dim = _norm_dim(dim, len(size))
    index = sympy.sympify(index)
    negative = decide(index < 0)   # an int input of a dynamic graph: by the sign its range gives
    if negative is None:
        raise NotImplementedError(f"select at {index}: its sign is not known")
    if negative:
        index = index + size[dim]
    new = size[:dim] + size[dim + 1:]
    return View(x, new, lambda idx: list(idx[:dim]) + [index] + list(idx[dim:]))


@register_lowering(aten.unsqueeze)
def unsqueeze(x, dim):
    size = x.get_size()
    dim = _norm_dim(dim, len(size) + 1)
    new = size[:dim] + [sympy.Integer(1)] + size[dim:]
    return View(x, new, lambda idx: list(idx[:dim]) + list(idx[dim + 1:]))


@register_lowering(aten.squeeze)
def squeeze(x, dim=None):
    size = x.get_size()
    if not size:
        return View(x, [], lambda idx: [])
    if dim is None:
        dims = [i for i, s in enumerate(size) if is_one(s)]
    else:
        dims = [_norm_dim(d, len(size)) for d in (dim if isinstance(dim, (list, tuple)) else [dim])]
        dims = [d for d in dims if is_one(size[d])]
    keep = [i for i in range(len(size)) if i not in dims]
    new = [size[i] for i in keep]

    def reindex(idx):
        full = [sympy.Integer(0)] * len(size)
        for j, i in enumerate(keep):
            full[i] = idx[j]
        return full
    return View(x, new, reindex)


@register_lowering(aten.view, aten._unsafe_view, aten.reshape)
def view(x, size):
    old = x.get_size()
    size = list(size)
    if -1 in size:
        known = product(sympify_seq([s for s in size if s != -1]))
        inferred = product(old) / known
        if inferred.is_integer is not True or any(isinstance(a, sympy.Pow) and a.exp < 0
                                                  for a in sympy.preorder_traversal(inferred)):
            # a dynamic graph's quotient of sizes (exact): a sum over 4 left s/4 + m/4 in the index
            # (review, session 33)
            inferred = FloorDiv(product(old), known)
        size[size.index(-1)] = inferred
    new = sympify_seq(size)
    return View(x, new, reshape_reindexer(old, new))


@register_lowering(aten.view.dtype)
def view_dtype(x, dtype):
    raise NotImplementedError("bitcast views run as fallback")


def _reshape_groups(old, new) -> list[tuple[list[int], list[int]]] | None:
    """The shortest runs of old and new dims with equal products, or None where they cannot be found."""
    groups = []  # (old dims, new dims)
    i = j = 0
    while i < len(old) or j < len(new):
        oi, nj = [], []
        po = pn = sympy.Integer(1)
        if i < len(old):
            oi.append(i); po = old[i]; i += 1
        if j < len(new):
            nj.append(j); pn = new[j]; j += 1
        while po != pn and sympy.expand(po - pn) != 0:
            if (po.is_Integer and pn.is_Integer and int(po) < int(pn)) and i < len(old) or j >= len(new):
                if i >= len(old):
                    return None
                oi.append(i); po = po * old[i]; i += 1
            else:
                nj.append(j); pn = pn * new[j]; j += 1
        groups.append((oi, nj))
    return groups


def reshape_reindexer(old, new):
    """Map an index of shape `new` to one of shape `old` (same numel), dimension group by group.

    Groups are the shortest runs of old and new dims with equal products; a 1→1 group passes the
    index through, others flatten and unflatten within the group only, so indices stay simple.
    """
    groups = _reshape_groups(old, new)
    if groups is None:
        # products of a dynamic graph's sizes that do not match term by term ([16] as [s, t] where
        # s*t is 16 by Dynamo's guards): one group, all of old flattened and unflattened into new
        groups = [(list(range(len(old))), list(range(len(new))))]

    def reindex(idx):
        out = [sympy.Integer(0)] * len(old)
        for oi, nj in groups:
            if not oi:
                continue
            flat = sympy.Integer(0)
            for k in nj:
                flat = flat * new[k] + idx[k]
            if len(oi) == 1:
                out[oi[0]] = flat
                continue
            # the outermost dim of size > 1 takes the quotient with no modulo (a size-1 dim before it
            # must not make it `flat % n`, which hides that the view is strided: [1, 3] -> [1, 1, 3])
            outer = next((k for k in oi if old[k] != 1), oi[0])
            divisor = sympy.Integer(1)
            for k in reversed(oi):
                if old[k] == 1:
                    continue
                out[k] = ModularIndexing(flat, divisor, old[k]) if k != outer else FloorDiv(flat, divisor)
                divisor = divisor * old[k]
        return out
    return reindex


@register_lowering(aten.as_strided)
def as_strided(x, size, stride, storage_offset=None):
    """A view of `x`'s storage. Eager's offset is counted from the storage's start: an explicit one, or
    `x`'s own (a view's, not its base's). The base is an intermediate realized with eager's strides
    (graph.py prefers them for every base an as_strided reads), or a graph input, whose storage
    offset can change from call to call without a recompile: there an explicit offset runs in ATen."""
    node = current_graph().current_node
    source = node.args[0].meta.get("val") if node is not None and node.args and \
        getattr(node.target, "overloadpacket", None) is aten.as_strided and \
        isinstance(node.args[0], torch.fx.Node) else None
    if isinstance(x, View):
        base, _ = x.unwrap()
        x = base
    if isinstance(x, ReinterpretView):
        x = x.data
    if isinstance(x, StorageBox):
        x = x.realize()
    assert isinstance(x, Buffer)
    if isinstance(x, InputBuffer):
        if storage_offset is not None:
            raise NotImplementedError("as_strided of a graph input with an explicit storage offset (the "
                                      "input's own offset may differ at the next call)")
        # x's own offset, relative to the input's data (where the kernels index from)
        offset = _view_offset(source) - x.storage_offset if source is not None else 0
    else:
        offset = storage_offset if storage_offset is not None else \
            (_view_offset(source) if source is not None else 0)
    layout = Layout(x.get_device(), x.get_dtype(), tuple(sympify_seq(size)), tuple(sympify_seq(stride)),
                    sympy.sympify(offset))
    return ReinterpretView(x, layout)


def _view_offset(val) -> int:
    """The traced tensor's storage offset, as an int (a symbolic one: this case runs in ATen)."""
    offset = val.storage_offset()
    if not isinstance(offset, int):
        raise NotImplementedError(f"as_strided of a tensor with a symbolic storage offset ({offset})")
    return offset


@register_lowering(aten.unfold)
def unfold(x, dimension, size, step):
    """The windows x[.., i*step : i*step + size, ..] along `dimension`, each a new last dim: a view
    (x.unfold(1, k, 1), a dynamic graph's length too; it ran in ATen, which cut the kernels apart)."""
    sizes = x.get_size()
    if not sizes:
        raise NotImplementedError("unfold of a 0-d tensor")
    d = _norm_dim(dimension, len(sizes))
    span = sympy.sympify(sizes[d] - size)
    if span.free_symbols and decide(span >= 0) is not True:
        raise NotImplementedError(f"unfold of a length {sizes[d]} that may be shorter than its window {size}")
    if not span.free_symbols and span < 0:
        raise NotImplementedError("unfold with a window longer than the dim")   # (eager raises)
    new = list(sizes)
    new[d] = FloorDiv(span, step) + 1
    new.append(sympy.sympify(size))

    def reindex(idx):
        src = list(idx[:-1])
        src[d] = src[d] * step + idx[-1]
        return src
    return View(x, new, reindex)


@register_lowering(aten.split_with_sizes)
def split_with_sizes(x, split_sizes, dim=0):
    """Consecutive parts, each in range: torch checked that the sizes are never negative and sum to the
    dim's (x.split(k) of an int input k: a slice's clamp could not prove k <= s0 from Dynamo's
    -2*k + s0 >= 0, and the split ran in ATen)."""
    dim = _norm_dim(dim, len(x.get_size()))
    out, start = [], sympy.Integer(0)
    for size in sympify_seq(split_sizes):
        out.append(_strided_part(x, dim, start, size))
        start += size
    return out


@register_lowering(aten.split.Tensor)
def split(x, split_size, dim=0):
    n = int(x.get_size()[_norm_dim(dim, len(x.get_size()))])
    sizes = [min(split_size, n - s) for s in range(0, n, split_size)] if split_size else [n]
    return split_with_sizes(x, sizes, dim)

"""Decompositions wrapped to end in eager's layout (decompositions.py adds them to the table AOT autograd
traces with): batch norm's, pointwise ops' (a decomposition may expand a broadcast operand before its
first op, heaviside, which then orders the dims by it), slice/select/diagonal scatters' (self's layout),
masked_fill's, adaptive average pooling's, and on the CPU max unpooling's and roll's. What eager's layout
is comes from eager_strides.py.
"""
from __future__ import annotations

import torch

from .eager_strides import (_BATCH_NORMS, _batch_norm_output_format, _hint, _is_pointwise,
                            _same_where_observable, _static, _suggest_memory_format, _traced_batch_norm_format,
                            as_iterated, elementwise_strides)

aten = torch.ops.aten


def decompositions(table: dict) -> dict:
    """Entries of `table` for batch norm and for pointwise ops, wrapped so that the (first) output
    has eager's layout: a decomposition may expand a broadcast operand before its first op (heaviside),
    which then orders the dims by it."""
    out = {}
    for target, decomp in table.items():
        if target in _BATCH_NORMS:
            out[target] = _ending_in_eager_layout(target, decomp)
        elif isinstance(target, torch._ops.OpOverload) and _is_pointwise(target):
            out[target] = _elementwise_in_eager_layout(target, decomp, _all_tensors)
        elif getattr(target, "overloadpacket", None) in _COPIES_OF_SELF:
            out[target] = _elementwise_in_eager_layout(None, decomp, _self_only)
        elif getattr(target, "overloadpacket", None) is aten.masked_fill:
            out[target] = _contiguous_result(decomp)
        elif target is aten.max_unpool2d.default:
            out[target] = _unpool_in_eager_layout(decomp)
        elif target is aten.roll.default:
            out[target] = _roll_in_eager_layout(decomp)
    return out


def _roll_in_eager_layout(decomp):
    """roll's decomposition (an index_select: a contiguous result) followed, on the CPU, by a copy into
    the layout of eager's CPU kernel, which rolls one dim as a cat of two narrows (roll_cpu), so its
    result is laid out as that cat's (channels last for a channels-last input; fuzz seed 5014 prog 26),
    and several dims one after the other. Eager's CUDA kernel's result is contiguous, as the
    decomposition's. A dynamic graph's layout is decided on the traced sizes and shifts, as batch
    norm's, with a guard where it turns on a symbol: a shift that is a multiple of its dim's size
    makes the cat's second narrow empty, and the result contiguous (fuzz seed 5606 prog 3: traced at
    size 2, shift -2; called at size 3)."""
    def run(self, shifts, dims=(), *args, **kwargs):
        result = decomp(self, shifts, dims, *args, **kwargs)
        if not isinstance(result, torch.Tensor) or self.device.type != "cpu" or self.dim() < 2:
            return result
        shifts, dims = list(shifts), list(dims)
        hinted = [_hint(n) for n in shifts]
        want = _stand_in_strides(self, lambda t: _eager_cpu_roll(t, hinted, dims))
        if want is None:
            return result
        _guard_whole_turns(self, shifts, dims, hinted, want)
        if _same_where_observable(result, want):
            return result
        return _permuted_copy(result, want)
    run.__name__ = f"{getattr(decomp, '__name__', 'decomposition')}_in_eager_layout"
    return run


def _guard_whole_turns(x: torch.Tensor, shifts: list, dims: list, hinted: list, want: list) -> None:
    """Guards, for each symbolic roll of one dim whose layout `want` would change had its shift been
    a whole number of turns (or not), on whether it is one."""
    if len(dims) != len(shifts):
        return
    for k, (shift, dim) in enumerate(zip(shifts, dims)):
        size = x.shape[dim]
        if isinstance(shift, int) and isinstance(size, int) or _hint(size) < 2:
            continue   # static, or a dim of one element (every shift a whole number of turns)
        whole = (_hint(size) - hinted[k]) % _hint(size) == 0
        flipped = hinted[:k] + [0 if not whole else 1] + hinted[k + 1:]
        other = _stand_in_strides(x, lambda t: _eager_cpu_roll(t, flipped, dims))
        if other is not None and other != want:
            bool((size - shift) % size == 0)   # a guard: Dynamo re-checks it, a change recompiles


def _eager_cpu_roll(t: torch.Tensor, shifts: list, dims: list) -> torch.Tensor:
    """ATen's roll_cpu (and roll_common) on a meta tensor: for its result's layout."""
    if t.numel() == 0:
        return t.clone()
    if len(dims) == 0 and len(shifts) == 1:
        return _eager_cpu_roll(t.contiguous().view(-1), shifts, [0]).view(t.shape)
    if len(shifts) != 1 or len(dims) != 1:
        return _eager_cpu_roll(_eager_cpu_roll(t, shifts[:1], dims[:1]), shifts[1:], dims[1:])
    dim = dims[0]
    size = t.shape[dim]
    start = (size - shifts[0]) % size
    return torch.cat([t.narrow(dim, start, size - start), t.narrow(dim, 0, start)], dim)


def _stand_in_strides(x: torch.Tensor, fn) -> list | None:
    """The strides of `fn` of a stand-in of `x` (`_on_stand_in`)."""
    return _on_stand_in(x, lambda t: list(fn(t).stride()))


def _on_stand_in(x: torch.Tensor, fn):
    """`fn` of a meta stand-in of `x` at its traced sizes and strides (deciding on the SymInts would
    guard on them), outside the trace; None where a size has no hint or `fn` raises."""
    from torch.utils._python_dispatch import _disable_current_modes

    try:
        with _disable_current_modes():
            stand_in = torch.empty_strided([_hint(n) for n in x.shape], [_hint(st) for st in x.stride()],
                                           dtype=x.dtype, device="meta")
            return fn(stand_in)
    except Exception:   # noqa: BLE001  (a size without a hint: the decomposition's layout stays)
        return None


def _unpool_in_eager_layout(decomp):
    """max_unpool2d's decomposition (an index_put into contiguous zeros) followed by a copy into the
    input's suggested memory format where that is channels last, on the CPU: eager's CPU kernel
    allocates a 4-D output so (fuzz seed 5000 prog 17: a channels-last input's unpooling came back
    contiguous); its CUDA kernel, like the decomposition, allocates it contiguous. A dynamic graph's
    format is decided on the traced sizes, as batch norm's."""
    def run(self, indices, output_size, *args, **kwargs):
        result = decomp(self, indices, output_size, *args, **kwargs)
        if not isinstance(result, torch.Tensor) or self.device.type != "cpu" or self.dim() != 4:
            return result
        if _suggested_format(self) is not torch.channels_last:
            return result
        return aten.clone.default(result, memory_format=torch.channels_last)
    run.__name__ = f"{getattr(decomp, '__name__', 'decomposition')}_in_eager_layout"
    return run


def _suggested_format(x: torch.Tensor):
    """suggest_memory_format of `x`; of a stand-in at its traced sizes where they are symbolic; None
    where a size has no hint."""
    return _suggest_memory_format(x) if _static([x]) else _on_stand_in(x, _suggest_memory_format)


def _contiguous_result(decomp):
    """`decomp` (masked_fill's: a `where`) followed by a contiguous clone, always: eager fills a
    contiguous copy of self. At trace time the `where` may look contiguous already and a conditional
    copy would be left out, yet `correct_metas` later gives it eager's TensorIterator layout, which
    follows its operands (fuzz seed 239 prog 12: masked_fill by a mask whose eager layout is
    transposed came back with strides (1, 3), eager's (2, 1)). Lowering inlines the copy."""
    def run(*args, **kwargs):
        result = decomp(*args, **kwargs)
        if not isinstance(result, torch.Tensor):
            return result
        return aten.clone.default(result, memory_format=torch.contiguous_format)
    run.__name__ = f"{getattr(decomp, '__name__', 'decomposition')}_contiguous"
    return run


# scatters into a copy of `self` that eager makes with self's layout (clone, preserve_format)
_COPIES_OF_SELF = {aten.slice_scatter, aten.select_scatter, aten.diagonal_scatter}


def _all_tensors(args, kwargs) -> list:
    return [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]


def _self_only(args, kwargs) -> list:
    x = args[0] if args else kwargs.get("self", kwargs.get("input"))
    return [x] if isinstance(x, torch.Tensor) else []


def _elementwise_in_eager_layout(target, decomp, operands_of):
    """`decomp` followed by a copy into the layout eager's TensorIterator gives its result over the
    operands `operands_of(args, kwargs)` picks, when the decomposition's result has another."""
    def run(*args, **kwargs):
        result = decomp(*args, **kwargs)
        if not isinstance(result, torch.Tensor) or kwargs.get("memory_format") not in (None, torch.preserve_format):
            return result
        operands = operands_of(args, kwargs)
        if not operands or not _static([result, *operands]) or any(t.device != result.device and t.dim() > 0 for t in operands):
            return result
        if target is not None:
            operands = as_iterated(target, operands, result.dtype)
        want = elementwise_strides(list(result.shape), operands)
        if _same_where_observable(result, want):
            return result
        return _permuted_copy(result, want)
    run.__name__ = f"{getattr(decomp, '__name__', 'decomposition')}_in_eager_layout"
    return run


def _permuted_copy(x: torch.Tensor, stride: list[int]) -> torch.Tensor:
    """A copy of `x` with the dense `stride`: the dims permuted outermost-first, made contiguous, and
    permuted back (ops lowering inlines)."""
    order = sorted(range(x.dim()), key=lambda d: (-stride[d], d))
    inverse = [order.index(d) for d in range(x.dim())]
    copy = aten.clone.default(aten.permute.default(x, order), memory_format=torch.contiguous_format)
    return aten.permute.default(copy, inverse)


def _ending_in_eager_layout(target, decomp):
    def run(*args, **kwargs):
        result = decomp(*args, **kwargs)
        if _static(list(args)):
            fmt = _batch_norm_output_format(target, args, kwargs)
        else:   # a dynamic graph: decided on the traced sizes, as for pointwise ops (fuzz seed 120)
            fmt = _traced_batch_norm_format(target, args, kwargs)
        # always the copy (inlined by lowering): what the decomposition's last node is traced with
        # here is not always what its FakeTensor propagation gives the graph
        if fmt is None or not isinstance(result[0], torch.Tensor):
            return result
        return (aten.clone.default(result[0], memory_format=fmt), *result[1:])
    run.__name__ = f"{getattr(decomp, '__name__', 'decomposition')}_in_eager_layout"
    return run

"""Decompositions wrapped to end in eager's layout (decompositions.py adds them to the table AOT autograd
traces with): batch norm's, pointwise ops' (a decomposition may expand a broadcast operand before its
first op, heaviside, which then orders the dims by it), slice/select/diagonal scatters' (self's layout),
masked_fill's and adaptive average pooling's. What eager's layout is comes from eager_strides.py.
"""
from __future__ import annotations

import torch

from .eager_strides import (_BATCH_NORMS, _batch_norm_output_format, _is_pointwise, _same_where_observable,
                            _static, _traced_batch_norm_format, as_iterated, elementwise_strides)

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
    return out


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

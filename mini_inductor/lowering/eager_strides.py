"""Eager's output strides where the graph's FakeTensors say otherwise.

Lowering realizes graph outputs (and the bases of returned views, and the inputs of ATen calls) with
the strides of their FX node's FakeTensor (`node.meta["val"]`). Those are eager's strides for most
ops, not all:

    op                                   FakeTensor                  eager
    ──────────────────────────────────   ─────────────────────────   ────────────────────────────────
    sort of a dense input                contiguous strides on its   the input's strides exactly
                                         size-1 dims
    pointwise ops run as Python refs     orders dims by the first    TensorIterator: operands' dims
    (logical_and, floor_divide, ...)     operand, broadcast or not   of size 1 / stride 0 do not count
    pointwise ops of operands of one     orders the dims again,      copies the layout whole, size-1
    dense, non-contiguous layout (exp    size-1 dims' strides        dims' strides too
    of x.unfold(0, 3, 2) of 3 rows)      recomputed
    a dynamic graph's constant_pad_nd    the input's suggested       a clone of the input cut by the
    where no pad is positive (F.pad(     memory format               negative pads: the input's layout
    x.t(), (k, k)) at k = 0)
    batch norm (native / legit ops)      the input's layout          CPU: contiguous or channels last;
                                                                     CUDA: cuDNN likewise, else input's
    pointwise ops on the CPU with an      orders dims by the input    converts it with .to() first: an
    input of another dtype (atan2 of      as it is                    expanded input becomes dense and
    an expanded bool)                                                 then orders them (`as_iterated`)
    decomposed ops (batch norm's         their decomposition's       as above; slice/select/diagonal
    functional form, heaviside,          last op's (heaviside        scatters: self's layout
    slice_scatter, ...)                  expands first)

`correct_metas(graph)` rewrites the `val` of such nodes (and re-derives the nodes that read them) before
lowering; eager_layout_decomps.py `decompositions(table)` wraps the decompositions so that their result
ends in eager's layout (a copy lowering inlines). aten.repeat is lowered whole (copy_lowerings.py), contiguous.
"""
from __future__ import annotations

import functools
import logging
import operator
from typing import Any, Sequence

import sympy
import torch
import torch.fx

from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode, statically_known_true

from .layout_opt import is_non_overlapping_and_dense

aten = torch.ops.aten
log = logging.getLogger("mini_inductor")

# ops whose first output is batch norm's normalized input: op → its training flag, or the name of
# the schema argument that holds it
_BATCH_NORMS = {
    aten.native_batch_norm.default: "training",
    aten._native_batch_norm_legit.default: "training",
    aten._native_batch_norm_legit.no_stats: "training",
    aten._native_batch_norm_legit_functional.default: "training",
    aten._native_batch_norm_legit_no_training.default: False,
}
for _name, _training in (("_batch_norm_with_update", True), ("_batch_norm_with_update_functional", True),
                         ("_batch_norm_no_update", False)):
    _packet = getattr(aten, _name, None)   # torch 2.3+
    if _packet is not None:
        _BATCH_NORMS[_packet.default] = _training


# sort's values and indices: eager allocates them like a dense input, size-1 dims' strides included
# (the FakeTensor's are the contiguous ones there); an advanced index of a permutation of them orders
# its output's dims by those strides (fuzz seed 259 prog 339: sort, movedim, x[:, idx])
_SORTS = {aten.sort.default, aten.sort.stable}


# ─── TensorIterator's output layout ───────────────────────────────────────────────────────────────

def elementwise_strides(shape: Sequence[int], operands: Sequence[torch.Tensor],
                        wrapped_number: bool = False) -> list[int]:
    """The strides eager's TensorIterator gives the output of shape `shape` computed from `operands`.

    Operands with the output's shape that are all contiguous (or all channels last, or all of one
    dense layout) give that layout. Otherwise dims are ordered innermost-first by the operands'
    strides, the first operand that orders two dims deciding; an operand's broadcast dims (missing,
    size 1 where the output's is not, or stride 0) do not order anything, and equal strides put the
    smaller dim inside. `wrapped_number`: a Python number is an operand too (`x + 1`, `x == 0`), of
    shape (), so the operands never all have the output's shape: the dims are ordered as above (a dim
    of size 1 then gets stride 1 where the operand's is 1, not the contiguous layout's).
    """
    shape = [int(s) for s in shape]
    ndim = len(shape)
    tensors = [t for t in operands if isinstance(t, torch.Tensor)]
    if ndim == 0:
        return []
    if tensors and not wrapped_number and all(list(t.shape) == shape for t in tensors):
        for fmt in _formats(ndim):
            if all(t.is_contiguous(memory_format=fmt) for t in tensors):
                return _format_strides(shape, fmt)
        if all(is_non_overlapping_and_dense(t) and t.stride() == tensors[0].stride() for t in tensors):
            return list(tensors[0].stride())
    strides = [_broadcast_strides(t, shape) for t in tensors]

    def should_swap(d0: int, d1: int) -> int:
        for st in strides:
            s0, s1 = st[d0], st[d1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 != s1:
                return -1 if s0 < s1 else 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    perm = list(range(ndim))[::-1]         # perm[0]: the innermost dim
    for i in range(1, ndim):
        d1 = i
        for d0 in range(i - 1, -1, -1):
            order = should_swap(perm[d0], perm[d1])
            if order > 0:
                perm[d0], perm[d1] = perm[d1], perm[d0]
                d1 = d0
            elif order < 0:
                break
    if perm == list(range(ndim))[::-1]:
        return _format_strides(shape, torch.contiguous_format)
    out = [0] * ndim
    step = 1
    for d in perm:
        out[d] = step
        step *= shape[d]
    return out


def index_strides(x: torch.Tensor, indices: Sequence) -> list[int] | None:
    """The strides eager gives `aten.index.Tensor(x, indices)` (integer index tensors; None for a dim
    taken whole), of concrete sizes; None for boolean masks.

    Eager broadcasts the index tensors together (expanded views), moves the indexed dims to the front
    when they are not adjacent, converts int32 (or another device's) indices with `.to()`, and runs a
    TensorIterator over `x` restrided (stride 0 over the index dims, which replace the indexed ones) and
    each index viewed with size-1 dims around it (the FakeTensor's meta function orders the dims
    otherwise in about 2% of random cases, observably in half of those).
    """
    idx = list(indices) + [None] * (x.dim() - len(indices))
    tensors = [t for t in idx if t is not None]
    if not tensors or any(not isinstance(t, torch.Tensor) or t.dtype in (torch.bool, torch.uint8) for t in tensors):
        return None
    shape = list(torch.broadcast_shapes(*[t.shape for t in tensors]))
    converted = {id(t) for t in tensors if t.dtype != torch.int64 or t.device != x.device}
    expanded = iter([(_meta_like(t).expand(shape), id(t) in converted) for t in tensors])
    idx = [next(expanded) if t is not None else None for t in idx]
    base = _meta_like(x)
    positions = [d for d, t in enumerate(idx) if t is not None]
    if positions != list(range(positions[0], positions[-1] + 1)):   # not adjacent: to the front
        order = positions + [d for d in range(base.dim()) if d not in positions]
        base = base.permute(order)
        idx = [idx[d] for d in positions] + [None] * (base.dim() - len(positions))
        positions = list(range(len(positions)))
    idx = [None if t is None else _converted(t[0], torch.int64) if t[1] else t[0] for t in idx]
    first, last = positions[0], positions[-1]
    src_shape = list(base.shape[:first]) + shape + list(base.shape[last + 1:])
    src_stride = list(base.stride()[:first]) + [0] * len(shape) + list(base.stride()[last + 1:])
    src = torch.empty_strided(src_shape, src_stride, dtype=x.dtype, device="meta")
    around = [1] * first + shape + [1] * (base.dim() - last - 1)
    viewed = [t.reshape(around) for t in idx if t is not None]
    return elementwise_strides(src_shape, [src] + viewed)


def _meta_like(t: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="meta")


def as_iterated(target, operands: Sequence[torch.Tensor], out_dtype: torch.dtype) -> list[torch.Tensor]:
    """The operands as eager's TensorIterator orders dims by them for pointwise op `target`.

    On the CPU it first converts every input whose dtype is not the common one with `.to()` (meta and
    fake tensors skip that step): a dense input keeps its strides, any other (expanded, sliced) becomes
    dense, which can change how it orders the output's dims (a stride 0 no longer abstains). Elsewhere, and
    for inputs already of the common dtype, the operands are what they were.
    """
    tensors = [t for t in operands if isinstance(t, torch.Tensor)]
    if not tensors or any(t.device.type != "cpu" for t in tensors):
        return list(operands)
    kept = tensors[:1] if getattr(target, "overloadpacket", None) is aten.where else []   # the condition
    promoted = [t for t in tensors if not any(t is k for k in kept)]
    if not promoted:
        return list(operands)
    common = _common_dtype(promoted, out_dtype)
    return [t if not isinstance(t, torch.Tensor) or any(t is k for k in kept) or t.dtype == common
            else _converted(t, common) for t in operands]


def _common_dtype(tensors: Sequence[torch.Tensor], out_dtype: torch.dtype) -> torch.dtype:
    from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

    _, common = elementwise_dtypes(*tensors, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.NO_OPMATH)
    # ops that compute integer inputs in floating point (sin, atan2, true division) promote to the
    # float type they return; a Python float operand (not among the tensors) does the same
    if (out_dtype.is_floating_point or out_dtype.is_complex) and not (common.is_floating_point or common.is_complex):
        return out_dtype
    return common


def _converted(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A meta tensor with the layout `t.to(dtype)` has in eager (`preserve_format`): a dense `t`'s
    strides, else dense strides that keep the order of `t`'s (a stride 0 leaves its dim in place)."""
    stride = list(t.stride()) if is_non_overlapping_and_dense(t) else elementwise_strides(list(t.shape), [t])
    return torch.empty_strided(tuple(t.shape), tuple(stride), dtype=dtype, device="meta")


def _broadcast_strides(t: torch.Tensor, shape: list[int]) -> list[int]:
    lead = len(shape) - t.dim()
    out = [0] * lead
    for size, stride, full in zip(t.shape, t.stride(), shape[lead:]):
        out.append(0 if size == 1 and full != 1 else int(stride))
    return out


def _formats(ndim: int) -> tuple:
    """The memory formats a tensor of `ndim` dims can have, in the order eager tries them."""
    return (torch.contiguous_format,) + {4: (torch.channels_last,), 5: (torch.channels_last_3d,)}.get(ndim, ())


def _format_strides(shape: list[int], fmt: torch.memory_format) -> list[int]:
    """Strides of a dense tensor of `shape` in memory format `fmt` (what empty(memory_format=) gives)."""
    order = list(range(len(shape)))[::-1]                 # innermost first
    if fmt is torch.channels_last or fmt is torch.channels_last_3d:
        order = [1] + list(range(len(shape) - 1, 1, -1)) + [0]
    out = [0] * len(shape)
    step = 1
    for d in order:
        out[d] = step
        step *= max(shape[d], 1)
    return out


# ─── batch norm's output layout ───────────────────────────────────────────────────────────────────

def batch_norm_format(x: torch.Tensor, *, weight, bias, running_mean, training: bool, eps: float,
                      aten_op_called: bool = False):
    """The memory format of eager batch norm's output for input `x`, or None: the input's own layout.

    The CPU kernel allocates it contiguous or channels last (as the input is, else as its strides
    suggest); on CUDA, F.batch_norm does likewise when it picks cuDNN, and otherwise (as does the ATen
    op called directly, `aten_op_called`) allocates it like the input.
    """
    if x.device.type == "cuda" and (aten_op_called or not _uses_cudnn(x, weight, bias, running_mean, training, eps)):
        return None
    for fmt in _formats(x.dim()):
        if x.is_contiguous(memory_format=fmt):
            return fmt
    return _suggest_memory_format(x)


def _uses_cudnn(x, weight, bias, running_mean, training: bool, eps: float) -> bool:
    """Eager's choice of cuDNN for batch norm on CUDA (ATen's _select_batch_norm_backend)."""
    if weight is None or bias is None or x.dim() < 3 or torch.version.hip is not None:
        return False
    if torch.bfloat16 in (x.dtype, weight.dtype) or (x.dtype == torch.float16 and weight.dtype != torch.float32):
        return False
    if running_mean is None and not training:
        return False
    if x.shape[0] > (880801 if training else 65535) or x.numel() >= 2**31 - 1:
        return False
    return bool(torch.backends.cudnn.is_available() and torch.backends.cudnn.enabled and eps >= 1e-5)


def _suggest_memory_format(x: torch.Tensor):
    try:
        from torch._prims_common import suggest_memory_format
    except ImportError:   # an older torch: no channels-last guess
        return torch.contiguous_format
    return suggest_memory_format(x)


def _batch_norm_output_format(target, args, kwargs, aten_op_called: bool = False):
    """The memory format of output 0 of batch norm op `target` on FakeTensor arguments in eager, or
    None where it is the input's own layout."""
    bound = _bind(target, args, kwargs)
    x = bound.get("input")
    if not isinstance(x, torch.Tensor) or x.dim() < 2:
        return None
    flag = _BATCH_NORMS[target]
    training = bool(bound.get(flag)) if isinstance(flag, str) else flag
    return batch_norm_format(x, weight=bound.get("weight"), bias=bound.get("bias"),
                             running_mean=bound.get("running_mean"), training=training,
                             eps=float(bound.get("eps", 1e-5)), aten_op_called=aten_op_called)


def _aten_op_called(node: torch.fx.Node) -> bool:
    """Whether the user called a batch norm ATen op itself (torch.native_batch_norm, ...) rather than
    F.batch_norm or a BatchNorm module: on CUDA only the latter may go to cuDNN."""
    stack = node.meta.get("source_fn_stack") or []
    fn = stack[-1][1] if stack and isinstance(stack[-1], tuple) and len(stack[-1]) > 1 else None
    return getattr(fn, "__name__", None) in {t.__name__.split(".")[0] for t in _BATCH_NORMS}


def _bind(target, args, kwargs) -> dict[str, Any]:
    names = [a.name for a in target._schema.arguments]
    bound = dict(zip(names, args))
    bound.update(kwargs)
    return bound


# ─── the graph pass ───────────────────────────────────────────────────────────────────────────────

def correct_metas(graph: torch.fx.Graph) -> dict[torch.fx.Node, Any]:
    """Give every node whose FakeTensor's strides are not eager's a FakeTensor with eager's strides,
    and re-derive the nodes that read one (views of it take its new strides). Returns the changed
    nodes' old FakeTensors (a forward graph's tensors saved for backward are returned with those
    strides: the backward graph reads them so)."""
    changed: dict[torch.fx.Node, Any] = {}
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        val = node.meta.get("val")
        old = val
        if any(a in changed for a in node.all_input_nodes) and not _writes_arguments(node.target):
            new = rerun(node)
            if new is not None:
                val = node.meta["val"] = new
                changed.setdefault(node, old)
        try:
            _correct(node, val, old, changed)
        except GuardOnDataDependentSymNode as e:   # a size read from data decides it: the FakeTensor's stay
            log.debug("eager strides: %s left as traced: %s", node.name, e)
    if changed:
        log.debug("eager strides: %d FX nodes restrided (%s)", len(changed), ", ".join(n.name for n in changed))
    return changed


def _correct(node: torch.fx.Node, val, old, changed: dict) -> None:
    """Give `node` eager's strides where `_eager_strides` knows them and they differ (`changed` gets it)."""
    want, index = _eager_strides(node)
    copied = _dense_operand_strides(node)
    if copied is not None:
        want, index = copied, None
    if want is None:
        return
    # size-1 dims' strides too, where the FakeTensor's are known to differ from eager's: nothing reads
    # them, but a later op orders its output's dims by them (an advanced index of a permutation:
    # fuzz seed 259 prog 339; a pointwise op with a number between), and a dense operand's are copied.
    # Not for other ops: empty_like kernels (clone, hardtanh) keep a dense input's, as the FakeTensor
    # does (review, session 31)
    exact = node.target in _SORTS or node.target is aten.index.Tensor or _exact_pointwise(node) or \
        copied is not None or node.target is aten.constant_pad_nd.default
    for k in (index if isinstance(index, tuple) else (index,)):
        current = val[k] if isinstance(val, (list, tuple)) and k is not None else val
        if not isinstance(current, torch.Tensor) or (   # (as text: SymInts compared would guard)
                list(map(str, current.stride())) == list(map(str, want)) if exact
                else _same_where_observable(current, want)):
            continue
        fixed = _restrided(current, want)
        if fixed is None:
            continue
        val = node.meta["val"] = fixed if k is None else type(val)(
            fixed if i == k else v for i, v in enumerate(val))
        changed.setdefault(node, old)


def first_saved_output() -> int:
    """The position of a forward graph's first output past its user-visible ones (and mutated inputs):
    from there on, the tensors AOT autograd saves for the backward graph, as its metadata counts."""
    try:
        from torch._guards import TracingContext
        return int(TracingContext.try_get().fw_metadata.num_forward_returns)
    except Exception:   # noqa: BLE001  (no metadata: every output keeps its FakeTensor's strides)
        return 0


def _eager_strides(node: torch.fx.Node) -> tuple[list[int] | None, int | None]:
    """(eager's strides, the output they are for: None for the only one) where we know better than
    the FakeTensor; (None, None) elsewhere."""
    target = node.target
    if target in _SORTS:
        x = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
        return (list(x.stride()) if _dense_at_hints(x) else None), (0, 1)
    if target is aten.index.Tensor:
        return _index_node_strides(node), None
    if target in _CONTIGUOUS_OUTPUT:
        val = node.meta.get("val")
        return (_contiguous_strides(list(val.shape)) if isinstance(val, torch.Tensor) else None), None
    if not _static(node.meta.get("val")) or not all(_static(a.meta.get("val")) for a in node.all_input_nodes):
        if target in _BATCH_NORMS:
            return _symbolic_batch_norm_strides(node), 0
        if target is aten.constant_pad_nd.default:
            return _symbolic_pad_strides(node), None
        return _symbolic_pointwise_strides(node), None
    if target in _BATCH_NORMS:
        args, kwargs = _metas_of((node.args, node.kwargs))
        fmt = _batch_norm_output_format(target, args, kwargs, _aten_op_called(node))
        x = _bind(target, args, kwargs).get("input")
        return (None if fmt is None else _format_strides(list(x.shape), fmt)), 0
    if not _is_pointwise(target):
        return None, None
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None, None
    args, kwargs = _metas_of((node.args, node.kwargs))
    if kwargs.get("memory_format") not in (None, torch.preserve_format):   # clone(memory_format=...)
        return None, None
    operands = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]
    if not operands or any(t.device != val.device and t.dim() > 0 for t in operands):
        return None, None
    return elementwise_strides(list(val.shape), as_iterated(target, operands, val.dtype),
                               _wrapped_number(target, args, kwargs)), None


# binary ops whose number overloads (`.Scalar`, `.Scalar_Tensor`, `.Scalar_Other`, `.x_scalar`, ...) compute
# with the number as an operand of their TensorIterator (not pow's: pow.Scalar allocates a contiguous
# output, pow.Tensor_Scalar takes its exponent as a parameter; nor lerp's weight)
_SCALAR_OPERAND = {"add", "sub", "rsub", "mul", "div", "remainder", "fmod", "floor_divide", "eq", "ne", "lt",
                   "le", "gt", "ge", "bitwise_and", "bitwise_or", "bitwise_xor", "maximum", "minimum",
                   "copysign", "xlogy", "special_xlog1py", "special_zeta"}
_SCALAR_OVERLOADS = {"Scalar", "Scalar_Tensor", "Scalar_Self", "Scalar_Other"}


def _contiguous_strides(shape: list) -> list:
    """Row-major strides of `shape` (ints or SymInts)."""
    out, acc = [0] * len(shape), 1
    for d in reversed(range(len(shape))):
        out[d] = acc
        acc = acc * shape[d]
    return out


def _exact_pointwise(node: torch.fx.Node) -> bool:
    """A pointwise op with a number operand that eager itself runs (not one of a decomposition's: eager's
    threshold is one kernel on its fast path, its decomposition's `le` is not)."""
    original = node.meta.get("original_aten")   # (compared by name: the objects can differ)
    if original is not None and str(original) != str(node.target) and not _scalar_overload(original):
        return False   # (rsub.Scalar decomposed to a sub still had its number operand)
    if not _is_pointwise(node.target):
        return False
    args, kwargs = _metas_of((node.args, node.kwargs))
    return _wrapped_number(node.target, args, kwargs)


# pointwise ops whose eager kernel is a composite through an op with a number, which orders the dims
# again (isinf: abs(x) == inf): the only ones of torch 2.13's pointwise ops on the CPU that do not keep
# a dense operand's strides on its size-1 dims (a sweep in session 36; the FakeTensor's are eager's)
_OPERAND_LAYOUT_NOT_KEPT = {aten.isinf, aten.isfinite, aten.ldexp, aten.native_dropout_backward}


def _dense_operand_strides(node: torch.fx.Node) -> list | None:
    """The strides of a pointwise op's operands where eager gives its output exactly those: operands
    all of the output's shape and of one non-overlapping, dense layout that is neither contiguous nor
    channels last, and no number among them (TensorIterator's fast path copies the layout, and so
    does an empty_like kernel). Size-1 dims' strides included, where the FakeTensor of an op run as a
    Python ref orders the dims again: the exp of x.unfold(0, 3, 2), x of 3 rows, had stride 3n on
    the one window's dim where eager's is the unfold's 2n (session 36). A dynamic graph's only where
    that holds at every size, which needs no guard: no dim that may be 1 at some sizes only (a count of
    windows), and a layout dense by its expressions (not just at the traced sizes). None elsewhere,
    and for a decomposition's ops (eager runs the op it stands for)."""
    val = node.meta.get("val")
    if not _is_pointwise(node.target) or not isinstance(val, torch.Tensor) or val.dim() == 0 or \
            getattr(node.target, "overloadpacket", None) in _OPERAND_LAYOUT_NOT_KEPT:
        return None
    original = node.meta.get("original_aten")   # (compared by name: the objects can differ)
    if original is not None and str(original) != str(node.target):
        return None
    args, kwargs = _metas_of((node.args, node.kwargs))
    if kwargs.get("memory_format") not in (None, torch.preserve_format) or _wrapped_number(node.target, args, kwargs):
        return None
    operands = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]
    if not operands or any(t.device != val.device or list(map(str, t.shape)) != list(map(str, val.shape))
                           or list(map(str, t.stride())) != list(map(str, operands[0].stride())) for t in operands):
        return None   # (as text: SymInts compared would guard)
    first = operands[0]
    if not (_static(val) and _static(first)):
        if any(not isinstance(n, int) and not statically_known_true(n >= 2) for n in val.shape):
            return None
        mode = _fake_mode(val)
        try:
            if mode is None or not is_non_overlapping_and_dense(first):
                return None
            (first,) = _traced(mode, [first])
        except Exception as e:   # noqa: BLE001  (a size without a hint: the FakeTensor's strides stay)
            log.debug("eager strides: no traced sizes for %s: %s", node.name, e)
            return None
    if not is_non_overlapping_and_dense(first) or any(first.is_contiguous(memory_format=fmt)
                                                      for fmt in _formats(first.dim())):
        return None
    return list(operands[0].stride())


def _scalar_overload(target) -> bool:
    """A binary op's overload that takes a number as an operand of its TensorIterator."""
    overload = getattr(target, "_overloadname", "")
    packet = getattr(getattr(target, "overloadpacket", None), "__name__", "")
    return (overload in _SCALAR_OVERLOADS or overload.endswith("_scalar")) and (
        packet in _SCALAR_OPERAND or (packet.startswith("special_") and "polynomial" in packet))


def _wrapped_number(target, args, kwargs) -> bool:
    """Whether eager runs `target` with a Python number among its TensorIterator's operands: one given
    where the schema takes a Tensor (`aten.add.Tensor(x, 1)`), or the other operand of a binary op's
    `.Scalar` overload (`aten.eq.Scalar(x, 0)`). A number that is a parameter (pow's exponent, clamp's
    bounds, leaky_relu's slope) is not one."""
    schema = getattr(target, "_schema", None)
    if schema is None:
        return False
    scalar_operand = _scalar_overload(target)
    values = list(zip(schema.arguments, args)) + [(a, kwargs[a.name]) for a in schema.arguments if a.name in kwargs]
    for arg, value in values:
        if isinstance(value, (int, float, complex)) and not isinstance(value, torch.SymInt):
            if isinstance(arg.type, torch.TensorType) or scalar_operand:
                return True
    return False


def _symbolic_pointwise_strides(node: torch.fx.Node) -> list | None:
    """Eager's strides for a pointwise op of a dynamic graph, as SymInts: TensorIterator's order of the
    dims, decided on the sizes the graph was traced with, over the output's symbolic sizes."""
    val = node.meta.get("val")
    if not _is_pointwise(node.target) or not isinstance(val, torch.Tensor) or val.dim() == 0:
        return None
    mode = _fake_mode(val)
    args, kwargs = _metas_of((node.args, node.kwargs))
    if mode is None or kwargs.get("memory_format") not in (None, torch.preserve_format):
        return None
    operands = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)]
    if not operands or any(t.device != val.device and t.dim() > 0 for t in operands):
        return None
    try:
        traced = _traced(mode, operands)
        shape = [_hint(n) for n in val.shape]
        strides = elementwise_strides(shape, as_iterated(node.target, traced, val.dtype),
                                      _wrapped_number(node.target, args, kwargs))
    except Exception as e:   # noqa: BLE001  (a size without a hint: the FakeTensor's strides stay)
        log.debug("eager strides: no traced sizes for %s: %s", node.name, e)
        return None
    return _in_order_over(val, strides, shape)


def _traced(mode, tensors: list) -> list:
    """Stand-ins of `tensors` (None kept) at the sizes the graph was traced with: deciding on the
    SymInts themselves would guard on them."""
    with mode:
        return [None if t is None else torch.empty_strided([_hint(n) for n in t.shape], [_hint(st) for st in t.stride()],
                                                           dtype=t.dtype, device=t.device) for t in tensors]


def _in_order_over(val: torch.Tensor, strides: list[int], shape: list[int]) -> list:
    """Dense strides over `val`'s symbolic sizes, its dims in the order `strides` (of the traced sizes
    `shape`) gives them."""
    out: list = [0] * val.dim()
    acc = 1
    for d in sorted(range(val.dim()), key=lambda d: (strides[d], shape[d])):   # innermost first
        out[d] = acc
        acc = acc * val.shape[d]
    return out


def _index_node_strides(node: torch.fx.Node) -> list | None:
    """Eager's strides for an aten.index.Tensor node (`index_strides`); a dynamic graph's decided on
    the sizes it was traced with and laid over its symbolic sizes, as SymInts."""
    val = node.meta.get("val")
    args, _ = _metas_of((node.args, node.kwargs))
    if not isinstance(val, torch.Tensor) or val.dim() == 0 or len(args) < 2 or not isinstance(args[0], torch.Tensor):
        return None
    tensors = [args[0]] + list(args[1])
    if _static(val) and _static(tensors):
        return index_strides(tensors[0], tensors[1:])
    mode = _fake_mode(val)
    if mode is None:
        return None
    try:
        traced = _traced(mode, tensors)
        strides = index_strides(traced[0], traced[1:])
    except Exception as e:   # noqa: BLE001  (a size without a hint: the FakeTensor's strides stay)
        log.debug("eager strides: no index layout for %s: %s", node.name, e)
        return None
    return None if strides is None else _in_order_over(val, strides, [_hint(n) for n in val.shape])


def _dense_at_hints(x) -> bool:
    """A tensor of at least one dim, non-overlapping and dense at the sizes it was traced with."""
    if not isinstance(x, torch.Tensor) or not x.dim():
        return False
    try:
        traced = torch.empty_strided([_hint(n) for n in x.shape], [_hint(st) for st in x.stride()],
                                     dtype=x.dtype, device="meta")
    except Exception:   # noqa: BLE001  (a size without a hint)
        return False
    return is_non_overlapping_and_dense(traced)


def _symbolic_batch_norm_strides(node: torch.fx.Node) -> list | None:
    """Eager's strides for output 0 of a batch norm of a dynamic graph, as SymInts: its memory format
    decided on the traced sizes (fuzz seed 120: a transposed input's kept the input's layout)."""
    val = node.meta.get("val")
    out = val[0] if isinstance(val, (list, tuple)) and val else val
    if not isinstance(out, torch.Tensor):
        return None
    args, kwargs = _metas_of((node.args, node.kwargs))
    fmt = _traced_batch_norm_format(node.target, args, kwargs, _aten_op_called(node))
    return None if fmt is None else _symbolic_format_strides(list(out.shape), fmt)


def _symbolic_format_strides(shape: list, fmt: torch.memory_format) -> list:
    """`_format_strides` over sizes that may be SymInts (a symbolic one is never 0: no max to guard on)."""
    order = list(range(len(shape)))[::-1]                  # innermost first
    if fmt is torch.channels_last or fmt is torch.channels_last_3d:
        order = [1] + list(range(len(shape) - 1, 1, -1)) + [0]
    strides: list = [0] * len(shape)
    step = 1
    for d in order:
        strides[d] = step
        step = step * (max(shape[d], 1) if isinstance(shape[d], int) else shape[d])
    return strides


def _symbolic_pad_strides(node: torch.fx.Node) -> list | None:
    """Eager's layout of a constant pad in a dynamic graph. Where no pad is positive ATen clones the
    input cut by its negative pads (`narrow`), in that view's layout (clone's preserve_format);
    otherwise it fills a new tensor in the input's suggested memory format. The FakeTensor (torch's
    ref, which clones only where every pad is negative) has the latter at every pad. Where the two
    differ and only the run time knows whether a pad is positive (F.pad(x.t(), (k, k // 2)) at k = 0;
    session 36), the graph is specialized on it: a guard, and Dynamo compiles the other case again."""
    val = node.meta.get("val")
    args, _ = _metas_of((node.args, node.kwargs))
    x = args[0] if args else None
    mode = _fake_mode(val)
    if not isinstance(val, torch.Tensor) or not isinstance(x, torch.Tensor) or x.dim() != val.dim() \
            or val.dim() == 0 or mode is None or len(args) < 2:
        return None
    pads = list(args[1])
    try:
        (traced,) = _traced(mode, [x])
        shape, x_strides = [_hint(n) for n in val.shape], [_hint(st) for st in x.stride()]
    except Exception as e:   # noqa: BLE001  (a size without a hint: the FakeTensor's strides stay)
        log.debug("eager strides: no traced sizes for %s: %s", node.name, e)
        return None
    fmt = _suggest_memory_format(traced)
    cloned = x_strides if is_non_overlapping_and_dense(traced) else elementwise_strides(list(traced.shape), [traced])
    if cloned == _format_strides(list(traced.shape), fmt):
        return None   # one layout either way: the input's is its suggested format's
    for p in pads:
        if isinstance(p, int) and p <= 0 or not isinstance(p, int) and statically_known_true(p <= 0):
            continue
        if isinstance(p, int) or statically_known_true(p > 0):
            return _symbolic_format_strides(list(val.shape), fmt)
        env = p.node.shape_env
        if env.frozen or getattr(env, "_error_on_new_guards", False):
            # (Dynamo has made its guards: a backward's would be ignored) compiled per size instead
            from .symbolic import SymbolicUnsupported
            raise SymbolicUnsupported("a pad whose sign only the run time knows decides the layout", p.node.expr)
        if bool(p > 0):   # the guard
            return _symbolic_format_strides(list(val.shape), fmt)
    # (here the traced pads are <= 0 too) the input cut as eager cuts it, cloned
    cut = _meta_like(traced)
    for i, p in enumerate(_hint(p) for p in pads):
        d = x.dim() - 1 - i // 2
        if p < 0:
            cut = cut.narrow(d, -p if i % 2 == 0 else 0, cut.shape[d] + p)
    if is_non_overlapping_and_dense(cut):
        return list(x.stride())   # the clone's strides are the cut's, which are the input's
    return _in_order_over(val, elementwise_strides(shape, [cut]), shape)


def _hint(n) -> int:
    """A size's value at tracing, or for one read from data (unbacked, no hint) the value the compiler
    assumes for it (symbolic.UNBACKED_HINT within its range)."""
    if isinstance(n, int):
        return n
    if n.node.hint is not None:
        return int(n.node.hint)
    from . import symbolic
    expr = n.node.expr
    if not isinstance(expr, sympy.Symbol):
        raise TypeError(f"no hint for {expr}")
    return int(symbolic._unbacked_hint(n.node.shape_env, expr))


# pointwise-tagged ops whose eager kernel does not lay its output out by TensorIterator's rule:
# masked_fill fills a contiguous copy of self, mvlgamma sums over an added dim
_OWN_LAYOUT = {aten.masked_fill, aten.mvlgamma}
# and single overloads whose eager output is a new contiguous tensor, whatever the input's layout: a
# number to the power of a tensor (review, session 31: `2 ** x` of a transposed x came out transposed,
# as its FakeTensor says)
_CONTIGUOUS_OUTPUT = {aten.pow.Scalar, aten.float_power.Scalar}


def _static(val) -> bool:
    tensors = [t for t in (val if isinstance(val, (list, tuple)) else [val]) if isinstance(t, torch.Tensor)]
    return all(isinstance(n, int) for t in tensors for n in (*t.shape, *t.stride()))


@functools.lru_cache(maxsize=None)   # one entry per op the graphs call
def _is_pointwise(target) -> bool:
    tags = getattr(target, "tags", ())
    if torch.Tag.pointwise not in tags or getattr(target, "overloadpacket", None) in _OWN_LAYOUT or \
            target in _CONTIGUOUS_OUTPUT:
        return False
    schema = getattr(target, "_schema", None)   # in-place and out= forms write a tensor they were given
    return bool(schema) and not any(a.alias_info is not None for a in schema.arguments) and \
        not any(r.alias_info is not None for r in schema.returns)


def _writes_arguments(target) -> bool:
    schema = getattr(target, "_schema", None)
    return bool(schema) and any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)


def _metas_of(tree):
    return torch.fx.node.map_arg(tree, lambda n: n.meta.get("val"))


def rerun(node: torch.fx.Node):
    """`node`'s FakeTensor computed again from its inputs' (some restrided), or None if it cannot be."""
    if node.target is operator.getitem:
        seq, i = _metas_of(node.args)
        return seq[i] if isinstance(seq, (list, tuple)) else None
    val = node.meta.get("val")
    mode = _fake_mode(val)
    if mode is None and not isinstance(val, (torch.SymInt, torch.SymBool)):
        return None
    args, kwargs = _metas_of((node.args, node.kwargs))
    try:
        if mode is None:   # arithmetic and comparisons on sizes (`sym_size_int == sym_size_int`)
            return node.target(*args, **kwargs)
        with mode:
            return node.target(*args, **kwargs)
    except Exception as e:   # noqa: BLE001  (the old FakeTensor stays; lowering is then as before)
        log.debug("eager strides: cannot re-run %s (%s): %s", node.name, node.target, e)
        return None


def _fake_mode(val):
    for t in (val if isinstance(val, (list, tuple)) else [val]):
        mode = getattr(t, "fake_mode", None)
        if mode is not None:
            return mode
    return None


def _restrided(val: torch.Tensor, stride: list[int]):
    mode = _fake_mode(val)
    if mode is None:
        return None
    with mode:
        return torch.empty_strided(tuple(val.shape), tuple(stride), dtype=val.dtype, device=val.device)


def _same_where_observable(t: torch.Tensor, stride: Sequence[int]) -> bool:
    """Equal strides on every dim of more than one element. Symbolic sizes and strides are compared
    without a guard: `n <= 1` on a SymInt added Dynamo guards (s86 > 1) while the forward was lowered,
    and the backward's cache key (its ShapeEnv's guards) differed on a warm start, where the forward
    was served from disk unlowered (review, session 33)."""
    def small(n) -> bool:
        return n <= 1 if isinstance(n, int) else statically_known_true(n <= 1)

    def same(a, b) -> bool:
        if isinstance(a, int) and isinstance(b, int):
            return a == b
        return str(a) == str(b) or statically_known_true(a == b)
    return all(small(n) or same(s, w) for n, s, w in zip(t.shape, t.stride(), stride))


def _traced_batch_norm_format(target, args, kwargs, aten_op_called: bool = False):
    """_batch_norm_output_format for symbolic arguments, on stand-ins with their traced sizes and
    strides (deciding on the SymInts would guard on them); None where a size has no hint."""
    from torch.utils._python_dispatch import _disable_current_modes

    mode = _fake_mode([a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.Tensor)])
    if mode is None:
        return None

    def stand_in(a):
        if not isinstance(a, torch.Tensor):
            return a
        return torch.empty_strided([_hint(n) for n in a.shape], [_hint(s) for s in a.stride()],
                                   dtype=a.dtype, device=a.device)
    try:
        with _disable_current_modes(), mode:   # not traced into the graph being decomposed
            return _batch_norm_output_format(target, [stand_in(a) for a in args],
                                             {k: stand_in(v) for k, v in kwargs.items()}, aten_op_called)
    except Exception as e:   # noqa: BLE001  (a size without a hint: the decomposition's layout stays)
        log.debug("eager strides: no traced sizes for %s: %s", target, e)
        return None

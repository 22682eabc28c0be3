"""The decomposition table aot_autograd traces with: torch's core-ATen decompositions, some composite
ops taken apart into ops that have lowerings, the ops we lower whole kept out, our own
decompositions where torch's lose precision (_OWN_DECOMPS), every entry ending in eager's output
layout (eager_layout_decomps.decompositions), and ops given a number eager's checked conversion
rejects (_CHECKED_NUMBERS) or a dtype eager's kernel refuses (_KERNEL_DTYPES) kept whole; for ops
torch takes apart before this table sees them, early_decompositions.py reads the same two tables."""
from __future__ import annotations

import functools
import math

import torch
from torch._decomp import core_aten_decompositions, get_decompositions
from torch._prims_common import get_computation_dtype

from ..conversions import converts, opmath_dtype, tensor_value_converts
from . import eager_layout_decomps

aten = torch.ops.aten

# Composite ops we want as smaller ops; var_mean/var stay whole (lowered through Welford).
_EXTRA_DECOMPS = [aten._softmax, aten._log_softmax, aten.native_layer_norm, aten.gelu,
                  aten.native_layer_norm_backward, aten._softmax_backward_data, aten._log_softmax_backward_data,
                  aten.gelu_backward, aten.silu, aten.silu_backward, aten.mse_loss, aten.hardswish,
                  aten._native_batch_norm_legit_functional, aten.native_batch_norm_backward, aten.linalg_vector_norm,
                  # to pointwise/index/reduction ops that have lowerings
                  aten.clamp.Tensor, aten.elu, aten.arange.start_step,
                  aten.upsample_nearest2d.vec, aten.upsample_bilinear2d.default, aten.upsample_bilinear2d.vec]
# (aten._adaptive_avg_pool2d is lowered whole: pooling_lowerings.py; torch's decomposition guards on the sizes)
_KEEP_WHOLE = {aten.var_mean.correction, aten.var.correction,
               aten.take.default,  # lowered as an indirect load (its decomposition reads a size from data)
               aten.index_fill.int_Scalar, aten.index_fill.int_Tensor,  # a gather (torch's: index_put)
               aten.addmm.default,  # lowered as mm + epilogue (torch's decomposition computes it in fp32)
               # views lowered whole (view_lowerings.py): their decompositions, through torch's refs, cost
               # 64 ms of the 0.9 s AOT autograd took over ViT-B/16's 133 of them (CPU machine)
               aten.t.default, aten.transpose.int,
               # attention stays one library call (its decompositions also change output strides)
               aten._scaled_dot_product_flash_attention_for_cpu.default,
               aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
               aten.scaled_dot_product_attention.default,
               # decomposing these before functionalization leaves a mutating op in the graph
               aten.native_batch_norm.default, aten._native_batch_norm_legit.default,
               aten._native_batch_norm_legit.no_stats, aten._native_batch_norm_legit_no_training.default,
               # torch's decomposition reads the targets after a row's -1 terminator (torch 2.13: a row
               # [3, 0, -1, 1, 2] gave 2.6 where eager gives 0.8; aot_eager alike): ATen computes it
               aten.multilabel_margin_loss_forward.default}


# ─── our own decompositions ──────────────────────────────────────────────────────────────────────

def native_group_norm_backward(grad_out, input, mean, rstd, gamma, N, C, HxW, group: int, output_mask):
    """Group norm's gradients in the normalized-input form.

    With xhat = (x - mean) * rstd for each (sample, group) and g = dy * gamma (dy without gamma):
        dx     = rstd * (g - mean(g) - xhat * mean(g * xhat))      means over the group's elements
        dgamma = sum of dy * xhat over samples and spatial positions, per channel
        dbeta  = sum of dy over samples and spatial positions, per channel
    torch's decomposition writes dx as c1*dy + c2*x + c3, c2 with rstd cubed: where a group's variance
    is 0 (groups of one element), rstd = 1/sqrt(eps) scales the rounding in c2*x + c3, terms that should
    cancel, by about 3e7 (fuzz seed 168 prog 394: 2**-10 where eager gives 0). Here that case gives
    xhat = 0 and g - mean(g) = 0 exactly. Half types compute in float32; sizes stay symbolic.
    """
    cdt = get_computation_dtype(input.dtype)   # float32 for the half types
    per_group = C // group
    shape4 = (N, group, per_group, HxW)            # (sample, group, channel of the group, position)
    dy = grad_out.to(cdt).reshape(shape4)
    rstd3 = rstd.to(cdt).reshape(N, group, 1)
    centered = input.to(cdt).reshape(shape4) - mean.to(cdt).reshape(N, group, 1, 1)
    param_dtype = gamma.dtype if gamma is not None else input.dtype

    d_input = d_gamma = d_beta = None
    if output_mask[0]:
        xhat = centered * rstd3.unsqueeze(-1)
        g = dy if gamma is None else dy * gamma.to(cdt).reshape(1, group, per_group, 1)
        g_mean = g.mean(dim=[2, 3], keepdim=True)
        gx_mean = (g * xhat).mean(dim=[2, 3], keepdim=True)
        d_input = (rstd3.unsqueeze(-1) * (g - g_mean - xhat * gx_mean)).reshape(input.shape).to(input.dtype)
    if output_mask[1]:
        # per (sample, channel): rstd times the sum of dy * (x - mean), as eager orders it (a group
        # without elements, rstd NaN, gives NaN as in eager); then over the samples
        d_gamma = ((dy * centered).sum(dim=3) * rstd3).sum(dim=0).reshape(C).to(param_dtype)
    if output_mask[2]:
        d_beta = dy.sum(dim=3).sum(dim=0).reshape(C).to(param_dtype)
    return d_input, d_gamma, d_beta


def _number_operand_rounded(op, number_first: bool):
    """xlogy (or xlog1py) of a tensor and a number, the number first rounded to the result dtype: eager
    casts the wrapped number to it (float16's 1e6 is inf, 3.3 is 3.30078), unchecked; torch's
    decomposition computed with the number in float32 (xlogy(x16, 1e6) was 13.8 * x, eager's inf)."""
    def decomp(a, b):
        tensor, number = (b, a) if number_first else (a, b)
        dtype = torch.result_type(tensor, number)
        wrapped = torch.scalar_tensor(number, dtype=torch.float64, device=tensor.device).to(dtype)   # (unchecked, as eager)
        return op(wrapped, tensor) if number_first else op(tensor, wrapped)
    return decomp


# entries that replace torch's decomposition of the op
_OWN_DECOMPS = {aten.native_group_norm_backward.default: native_group_norm_backward,
                aten.xlogy.Scalar_Other: _number_operand_rounded(aten.xlogy.Tensor, False),
                aten.xlogy.Scalar_Self: _number_operand_rounded(aten.xlogy.Tensor, True),
                aten.special_xlog1py.other_scalar: _number_operand_rounded(aten.special_xlog1py.default, False),
                aten.special_xlog1py.self_scalar: _number_operand_rounded(aten.special_xlog1py.default, True)}


# ops whose eager kernels refuse a negative index, where their decompositions' index_put counts it
# from the end (index_select, gather and embedding are lowered whole: indexing_lowerings.strict_indirect)
_NEGATIVE_INDEX_REFUSED = (aten.index_add.default, aten.index_add_.default, aten.index_copy.default,
                           aten.index_copy_.default)


def _negative_index_refused(decomp):
    """`decomp` of index_add or index_copy given an index whose negative entries are moved below
    -size, which index_put refuses as eager's kernel refuses them (not the rest: they stay in range)."""
    def run(x, dim, index, *args, **kwargs):
        n = x.size(dim) if x.dim() else 1
        return decomp(x, dim, torch.where(index < 0, index - n, index), *args, **kwargs)
    run.__name__ = f"{getattr(decomp, '__name__', 'decomposition')}_negative_index_refused"
    return run


@functools.lru_cache(None)
def decomposition_table() -> dict:
    table = _core_aten_table()
    table.update(get_decompositions(_EXTRA_DECOMPS))
    for op in _KEEP_WHOLE:
        table.pop(op, None)
    table.update(_OWN_DECOMPS)
    table.update({op: _negative_index_refused(table[op]) for op in _NEGATIVE_INDEX_REFUSED if op in table})
    table.update(eager_layout_decomps.decompositions(table))   # results in eager's layout (pointwise, batch norm, scatters)
    table.update(_checking_numbers(table))   # (outermost: a kept op is no decomposition's to wrap)
    table.update(_checking_kernel_dtypes(table))
    return table


def _core_aten_table() -> dict:
    """torch's core-ATen decompositions without the CompositeImplicitAutograd entries.

    `core_aten_decompositions()` (export's default table) adds some 500 CompositeImplicitAutograd ops,
    each mapped to its own C++ decomposition, which is what tracing runs for them anyway; listing them
    takes 0.2 s of every compile's first call (it walks the dispatcher's registrations). The
    post-autograd table plus the six nearest-neighbour upsamplings (the other entries export's table
    adds) is the same table in effect, in a few milliseconds.
    """
    from torch import _decomp
    post_autograd = getattr(_decomp, "_core_aten_decompositions_post_autograd", None)
    if post_autograd is None:   # an older torch: take the whole table
        return dict(core_aten_decompositions())
    table = dict(post_autograd())
    table.update(get_decompositions([aten.upsample_nearest1d.default, aten._upsample_nearest_exact1d.default,
                                     aten.upsample_nearest2d.default, aten._upsample_nearest_exact2d.default,
                                     aten.upsample_nearest3d.default, aten._upsample_nearest_exact3d.default]))
    return table


# ─── numbers eager converts with a check ─────────────────────────────────────────────────────────

# Decomposed ops whose eager kernel converts a number argument with c10's check, raising "value cannot
# be converted to type c10::Half without overflow" where it is out of range (conversions.py), and
# the dtype it converts to: the first tensor's own, or the one it computes in (float32 for the half
# types). Each checked against eager (tests/e2e/test_scalar_conversion_overflow.py). Their decompositions would
# bake the number into a kernel (masked_fill's into a where, which does not check), so such a number
# keeps the op whole: it runs in ATen, which raises as eager does.
_OWN, _OPMATH = "own", "opmath"
_CHECKED_NUMBERS = {
    **dict.fromkeys([aten.masked_fill, aten.masked_fill_], {"value": _OWN}),
    **dict.fromkeys([aten.threshold, aten.threshold_], {"threshold": _OPMATH, "value": _OWN}),
    **dict.fromkeys([aten.logit, aten.logit_], {"eps": _OWN}),
    **dict.fromkeys([aten.elu, aten.elu_], {"alpha": _OPMATH, "scale": _OPMATH, "input_scale": _OPMATH}),
    **dict.fromkeys([aten.celu, aten.celu_], {"alpha": _OPMATH}),
    aten.softplus: {"beta": _OPMATH, "threshold": _OPMATH},
    **dict.fromkeys([aten.lerp, aten.lerp_], {"weight": _OPMATH}),
    **dict.fromkeys([aten.addcmul, aten.addcmul_, aten.addcdiv, aten.addcdiv_], {"value": _OPMATH}),
    aten.hardshrink: {"lambd": _OWN},
}


def _checking_numbers(table: dict) -> dict:
    """The entries of `table` for _CHECKED_NUMBERS's ops, wrapped to return NotImplemented (make_fx then
    keeps the op whole) where a checked argument may not convert."""
    return {target: _kept_whole_unless_converts(target, decomp, _CHECKED_NUMBERS[target.overloadpacket])
            for target, decomp in table.items()
            if getattr(target, "overloadpacket", None) in _CHECKED_NUMBERS}


def _kept_whole_unless_converts(target, decomp, checked: dict):
    def run(*args, **kwargs):
        if _number_may_not_convert(target, args, kwargs, checked):
            return NotImplemented
        return decomp(*args, **kwargs)
    run.__name__ = f"{getattr(decomp, '__name__', 'decomposition')}_of_checked_numbers"
    return run


def _number_may_not_convert(target, args, kwargs, checked: dict) -> bool:
    """Whether one of the arguments `checked` names may not convert as eager's kernel checks it."""
    bound = {**dict(zip([a.name for a in target._schema.arguments], args)), **kwargs}
    tensor = next((a for a in args if isinstance(a, torch.Tensor)), None)
    for name, kind in checked.items():
        value = bound.get(name)
        if isinstance(value, torch.Tensor) and value.dim() != 0:
            continue   # (lerp.Tensor's weight: no number)
        if tensor is not None and value is not None and not _surely_converts(
                value, tensor.dtype if kind == _OWN else opmath_dtype(tensor.dtype)):
            return True
    return False


def _surely_converts(value, dtype: torch.dtype) -> bool:
    """Whether `value` surely converts to `dtype`: a number as conversions.converts says, a 0-d tensor as
    tensor_value_converts, a symbolic int or float by its type alone (only an int64 fits every SymInt)."""
    if isinstance(value, torch.Tensor):
        return tensor_value_converts(value, dtype)
    if isinstance(value, torch.SymBool):
        return True
    if isinstance(value, torch.SymInt):
        return dtype in (torch.bool, torch.int64, torch.float32, torch.bfloat16, torch.float64)
    if isinstance(value, torch.SymFloat):
        return dtype in (torch.bool, torch.float64)
    return not isinstance(value, (bool, int, float, complex)) or converts(value, dtype)


# ─── dtypes eager has no kernel for ──────────────────────────────────────────────────────────────

def _float8(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point and dtype.itemsize == 1   # (eager computes nothing in float8)


def _floating(dtype: torch.dtype) -> bool:
    return dtype.is_floating_point and not _float8(dtype)


def _not_bool(dtype: torch.dtype) -> bool:
    return dtype != torch.bool and not _float8(dtype)


def _floating_or_uint8(dtype: torch.dtype) -> bool:
    return _floating(dtype) or dtype == torch.uint8   # (the nearest upsamplings: images' bytes)


# Ops whose eager kernels refuse some input dtypes ('"silu_cpu" not implemented for 'Long'', "Boolean
# inputs not supported for relu", "Subtraction, the `-` operator, with a bool tensor is not
# supported") where their decompositions or our lowerings would compute a value: the dtypes they
# take (on the CPU), checked on every tensor argument. Another dtype keeps the op whole and runs it
# in ATen, which raises as eager does (and computes, on a device whose kernel takes the dtype).
# Where eager promotes first and computes (hypot of an int and a float tensor, clamp of a bool with
# int bounds, lerp with a 0-d float weight, addcdiv of a bool by a float), ATen computes it too: a
# fallback, never a different value. Checked against eager (tests/e2e/test_eager_kernel_dtypes.py).
# (hardshrink, softshrink, max_pool1d and the upsamplings reach the table already taken apart:
# early_decompositions.py keeps them whole before, by the same entries.)
_KERNEL_DTYPES = {
    **dict.fromkeys([aten.threshold, aten.threshold_, aten.relu, aten.relu_, aten.abs, aten.abs_, aten.neg,
                     aten.neg_, aten.sub, aten.sub_, aten.rsub,
                     aten.round, aten.round_, aten.floor, aten.floor_, aten.ceil, aten.ceil_, aten.trunc,
                     aten.trunc_, aten.fix, aten.fix_, aten.trace, aten.clamp, aten.clamp_, aten.clamp_min,
                     aten.clamp_min_, aten.clamp_max, aten.clamp_max_, aten.addcmul, aten.addcmul_, aten.addcdiv,
                     aten.addcdiv_], _not_bool),
    **dict.fromkeys([aten.hardshrink, aten.softshrink, aten.gelu, aten.gelu_, aten.silu, aten.silu_, aten.hardswish,
                     aten.hardswish_, aten.hardsigmoid, aten.hardsigmoid_, aten.mish, aten.mish_, aten.elu,
                     aten.elu_, aten.celu, aten.celu_, aten.selu, aten.selu_, aten.softplus, aten.leaky_relu,
                     aten.leaky_relu_, aten.log_sigmoid_forward,
                     aten._softmax, aten._log_softmax, aten.frac, aten.frac_, aten.logaddexp, aten.logaddexp2,
                     aten.glu, aten._prelu_kernel, aten.hypot, aten.hypot_, aten.nextafter, aten.nextafter_,
                     aten.lerp, aten.lerp_, aten.max_pool1d], _floating),
    **dict.fromkeys([aten.upsample_nearest1d, aten.upsample_nearest2d, aten.upsample_nearest3d,
                     aten._upsample_nearest_exact1d, aten._upsample_nearest_exact2d, aten._upsample_nearest_exact3d],
                    _floating_or_uint8),
}


def eager_kernel_refusal(target, args, kwargs) -> str | None:
    """Why eager's kernel of `target` refuses these arguments' dtypes (_KERNEL_DTYPES), or None. Takes
    FX or IR values: anything with `get_dtype()` or `dtype`."""
    packet = getattr(target, "overloadpacket", target)
    takes = _KERNEL_DTYPES.get(packet)
    if takes is None:
        return None
    if packet in (aten.sub, aten.sub_, aten.rsub) and any(type(a) is bool for a in (*args, *kwargs.values())):
        return "eager refuses a subtraction with a bool"
    for a in (*args, *kwargs.values()):
        dtype = a.get_dtype() if hasattr(a, "get_dtype") else getattr(a, "dtype", None)
        if isinstance(dtype, torch.dtype) and not takes(dtype):
            return f"eager's {getattr(target, '__name__', target)} has no kernel for {dtype}"
    return None


def checked_packets() -> tuple:
    """The op packets `kept_whole` checks."""
    return (*_KERNEL_DTYPES, *_CHECKED_NUMBERS)


def kept_whole(target, args, kwargs) -> bool:
    """Whether the table keeps this call of `target` whole: a dtype eager's kernel refuses
    (_KERNEL_DTYPES), or a number its checked conversion may reject (_CHECKED_NUMBERS). Takes FakeTensors."""
    checked = _CHECKED_NUMBERS.get(getattr(target, "overloadpacket", None))
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    return eager_kernel_refusal(target, tensors, {k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)}) \
        is not None or (checked is not None and _number_may_not_convert(target, args, kwargs, checked))


def _checking_kernel_dtypes(table: dict) -> dict:
    """The entries of `table` for _KERNEL_DTYPES's ops, wrapped to return NotImplemented (make_fx then
    keeps the op whole) for a dtype eager's kernel refuses."""
    return {target: _kept_whole_for_kernel_dtypes(target, decomp) for target, decomp in table.items()
            if getattr(target, "overloadpacket", None) in _KERNEL_DTYPES}


def _kept_whole_for_kernel_dtypes(target, decomp):
    def run(*args, **kwargs):
        if eager_kernel_refusal(target, [a for a in args if isinstance(a, torch.Tensor)],
                                {k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor)}):
            return NotImplemented
        return decomp(*args, **kwargs)
    run.__name__ = f"{getattr(decomp, '__name__', 'decomposition')}_of_kernel_dtypes"
    return run


# ─── Dynamo's graph, before AOT autograd ─────────────────────────────────────────────────────────

_FMA_PRODUCTS = {torch.mul: torch.addcmul, torch.div: torch.addcdiv}


def undo_split_fma(gm: torch.fx.GraphModule) -> int:
    """Dynamo traces `x.addcmul_(t1, t2, value=v)` (AdamW's update) as `p = t1 * t2` then
    `prims.fma(p, v, x)`, and `addcdiv_` with `t1 / t2`: the product is rounded to the tensors' dtype
    before the scaled add. Eager's addcmul_ computes `x + v * t1 * t2` in float32 for a 2-byte float
    and rounds once; the split differed from it by an ulp in a tenth of a float16 AdamW step's elements.
    Where the product is used by the fma alone and `v` is a number, the pair becomes the one op again
    (whose decomposition computes as eager does). The number of pairs rejoined."""
    fma = torch.ops.prims.fma.default
    joined = 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not fma or len(node.args) != 3 or node.kwargs:
            continue
        product, value, x = node.args
        whole = _FMA_PRODUCTS.get(getattr(product, "target", None))
        if whole is None or product.op != "call_function" or len(product.users) != 1 or product.kwargs \
                or len(product.args) != 2 or not all(isinstance(a, torch.fx.Node) for a in product.args) \
                or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        value = _value_as_eager_casts(value, [x, *product.args])
        if value is None:
            continue
        with gm.graph.inserting_before(node):
            new = gm.graph.call_function(whole, (x, *product.args), {"value": value})
        new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
        gm.graph.erase_node(product)
        joined += 1
    if joined:
        gm.recompile()
    return joined


def _value_as_eager_casts(value, tensors):
    """`value` as eager's addcmul_ takes it: cast to the tensors' dtype, so a float truncates where they are
    all integers (x.addcmul_(a, b, value=0.5) of int64 tensors adds 0; torch.addcmul's decomposition
    refuses the float). None where the dtypes are unknown or the float has no integer value."""
    metas = [t.meta.get("example_value") if isinstance(t, torch.fx.Node) else t for t in tensors]
    if not all(isinstance(m, torch.Tensor) for m in metas):
        return None
    if not isinstance(value, float) or any(m.dtype.is_floating_point or m.dtype.is_complex for m in metas):
        return value
    return int(value) if math.isfinite(value) else None

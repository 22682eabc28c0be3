"""Ops torch takes apart before AOT autograd's decomposition table sees them, kept whole where that
table would keep them (decompositions.py `kept_whole`: a dtype eager's kernel refuses, a number its
checked conversion may reject), so that they run in ATen and raise as eager does.

    with early_decompositions_checked():      # around aot_module_simplified (backend.py)
        ...

AOT autograd traces under the Python dispatcher, which runs two kinds of decomposition above the
table, at the autograd key:
  * Python kernels that torch/_refs and torch/_decomp register with `py_impl` at the Autograd or
    CompositeImplicitAutograd key: hardshrink, softshrink, the nearest-neighbour upsamplings
    (F.interpolate). A call the table keeps whole skips its Python kernel for the C++ one at the same
    key (hardshrink's autograd kernel), or for the overload that has one (upsample_nearest2d.vec →
    upsample_nearest2d, as its C++ composite does, symbolic sizes too): it reaches the table whole.
  * C++ composites that eager's CPU kernel does not follow: max_pool1d, whose composite (the one
    tracing takes: FakeTensors are subclass-like) is max_pool2d_with_indices, which computes integers,
    where CPU's max_pool1d_impl refuses them. A composite op cannot reach the graph whole, so a refused
    call becomes `mini_inductor::max_pool1d`, an opaque op that calls aten.max_pool1d (a fallback).
Other calls take torch's path unchanged.

One backward formula is ours too: cumprod's of a real floating input (`_Cumprod`). Where autograd
traces the backward with grad mode on (torch 2.11), torch's formula is the one that can be
differentiated again: a loop over the scanned length, with a prod, a cumprod and a cat per position:
4394 ATen nodes for a length of 400, compiled into 1196 kernels in 34 s (H200, session 40). Ours is
linear whatever the grad mode, for inputs with zeros too (AOT autograd refuses double backward, so
nothing differentiates it again).

The kernels are swapped only while AOT autograd traces (Dynamo's compile lock keeps two compiles
apart) and put back after.
"""
from __future__ import annotations

import contextlib
import functools

import torch
from torch._C import DispatchKey
from torch._decomp.decompositions import upsample_compute_output_size

from .decompositions import checked_packets, kept_whole

aten = torch.ops.aten


@torch.library.custom_op("mini_inductor::max_pool1d", mutates_args=(),
                         schema="(Tensor self, int[1] kernel_size, int[1] stride, int[1] padding, int[1] dilation, "
                                "bool ceil_mode) -> Tensor")
def max_pool1d(self, kernel_size, stride, padding, dilation, ceil_mode):
    """aten.max_pool1d, opaque to tracing: eager's kernel for the device raises or computes."""
    return aten.max_pool1d.default(self, kernel_size, stride, padding, dilation, ceil_mode)


@max_pool1d.register_fake
def _max_pool1d_fake(self, kernel_size, stride, padding, dilation, ceil_mode):
    return aten.max_pool1d_with_indices.default(self, kernel_size, stride, padding, dilation, ceil_mode)[0]


def _max_pool1d_whole(self, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    def listed(v):
        return [v] if isinstance(v, int) else list(v)
    return torch.ops.mini_inductor.max_pool1d(self, listed(kernel_size), listed(stride), listed(padding),
                                              listed(dilation), ceil_mode)


def _upsample_vec_whole(default):
    """An upsample .vec overload as its C++ composite computes it: the output size, then `default`."""
    def whole(input, output_size, scale_factors):
        size = upsample_compute_output_size(input.size(), output_size, scale_factors)
        return default(input, size, *(scale_factors or [None] * len(size)))
    return whole


# What a call the table keeps whole becomes, where not the C++ kernel at its Python kernel's key (and
# for a composite without a Python kernel of torch's, which gets one at CompositeImplicitAutograd)
_KEPT_WHOLE_AS = {
    aten.max_pool1d.default: _max_pool1d_whole,
    **{getattr(aten, f"{name}{d}d").vec: _upsample_vec_whole(getattr(aten, f"{name}{d}d").default)
       for name in ("upsample_nearest", "_upsample_nearest_exact") for d in (1, 2, 3)},
}


# torch's Python kernels that compute something other than eager's kernel, set aside while AOT
# autograd traces (the op reaches the table, which keeps it whole: decompositions.py _KEEP_WHOLE):
# multilabel_margin_loss's read a row's targets past its -1 terminator (torch 2.13; aot_eager alike)
_WRONG_PYTHON_KERNELS = ((aten.multilabel_margin_loss_forward.default, DispatchKey.Autograd),)

_installed: list = []   # non-empty while the kernels are swapped


@contextlib.contextmanager
def early_decompositions_checked():
    """While AOT autograd traces: the calls the decomposition table keeps whole skip torch's Python
    kernels (_python_kernels) and the composites of _KEPT_WHOLE_AS."""
    if _installed:   # (a nested compile: already in place)
        yield
        return
    kernels = _python_kernels() | {(op, DispatchKey.CompositeImplicitAutograd) for op in _KEPT_WHOLE_AS}
    saved = {op: dict(op.py_kernels) for op, _ in kernels} | {aten.cumprod.default: dict(aten.cumprod.default.py_kernels)}
    saved |= {op: dict(op.py_kernels) for op, _ in _WRONG_PYTHON_KERNELS}
    try:
        for op, key in _WRONG_PYTHON_KERNELS:
            op.py_kernels.pop(key, None)
            op._dispatch_cache.clear()
        for op, key in kernels:
            in_cpp = functools.partial(op._op_dk, key)
            op.py_kernels[key] = _whole_where_kept(op, op.py_kernels.get(key, in_cpp),
                                                   _KEPT_WHOLE_AS.get(op, in_cpp))
            op._dispatch_cache.clear()
        aten.cumprod.default.py_kernels[DispatchKey.Autograd] = cumprod_with_our_backward
        aten.cumprod.default._dispatch_cache.clear()
        _installed.append(True)
        yield
    finally:
        _installed.clear()
        for op, torch_kernels in saved.items():
            op.py_kernels.clear()
            op.py_kernels.update(torch_kernels)
            op._dispatch_cache.clear()


@functools.lru_cache(None)
def _python_kernels() -> frozenset:
    """(overload, key) for the table's checked ops' Python kernels of torch's at the Autograd and
    CompositeImplicitAutograd keys (the dispatcher takes the second for an op without a backend
    kernel), where a C++ kernel sits at the same key or _KEPT_WHOLE_AS says what a call kept whole
    becomes."""
    return frozenset((op, key) for packet in checked_packets()
                     for op in (getattr(packet, name) for name in packet.overloads())
                     for key in (DispatchKey.Autograd, DispatchKey.CompositeImplicitAutograd)
                     if key in op.py_kernels and (op in _KEPT_WHOLE_AS or
                                                  torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), key)))


def _whole_where_kept(op, decomposing, whole):
    def run(*args, **kwargs):
        return (whole if kept_whole(op, args, kwargs) else decomposing)(*args, **kwargs)
    run.__name__ = f"{op.__name__}_unless_kept_whole"
    return run


def cumprod_with_our_backward(x, dim, *, dtype=None):
    """aten.cumprod at the autograd key: `_Cumprod` where a real floating input needs a gradient
    outside functorch's transforms (torch.func.grad, vmap, jvp: an autograd.Function without
    setup_context, vmap and jvp rules fails under them), else torch's own kernel (a complex input's
    gradient, a forward-mode tangent: run below autograd, the output had neither)."""
    if torch.is_grad_enabled() and x.requires_grad and x.dtype.is_floating_point \
            and not torch._C._are_functorch_transforms_active():
        return _Cumprod.apply(x, dim, dtype)
    return aten.cumprod.default._op_dk(DispatchKey.Autograd, x, dim, dtype=dtype)


class _Cumprod(torch.autograd.Function):
    """cumprod with `cumprod_backward` as its backward."""

    @staticmethod
    def forward(ctx, x, dim, dtype):
        with torch._C._AutoDispatchBelowAutograd():
            y = aten.cumprod.default(x, dim, dtype=dtype)
        ctx.dim = dim
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return cumprod_backward(grad, x, y, ctx.dim), None, None


def cumprod_backward(grad: torch.Tensor, x: torch.Tensor, y: torch.Tensor, dim: int) -> torch.Tensor:
    """The gradient of y = cumprod(x, dim) in O(length), with zeros in x.

    For y_i = x_0 ... x_i and upstream gradient g, d/dx_k = sum over i >= k of g_i * y_i / x_k where
    x_k is not 0. Along each line let z be the position of the first zero: before it that sum is a
    reversed cumsum of g * y divided by x; past it every term still holds x_z, so 0; at z itself the
    terms are (x_0 ... x_{z-1}) * g_i * (x_{z+1} ... x_i), summed while no second zero is reached.
    Positions where a formula does not apply divide by 1, not by 0, so nothing computes a NaN."""
    if x.numel() <= 1 or x.dim() == 0 or x.shape[dim] == 1:   # (g, not g * x / x: an inf x, as eager)
        return grad.to(x.dtype)
    g = grad.to(x.dtype)
    zero = x == 0
    zeros_so_far = torch.cumsum(zero, dim)
    before = zeros_so_far == 0
    # only the terms before the first zero, as eager's: past it y is 0 where finite, but NaN where an
    # inf or NaN follows the zero, which must not reach the positions before it
    reversed_sum = torch.flip(torch.cumsum(torch.flip(torch.where(before, g * y, 0), [dim]), dim), [dim])
    grad_before = torch.where(before, reversed_sum / torch.where(before, x, 1), 0)
    at_first = zero & (zeros_so_far == 1)
    until_second = (zeros_so_far == 1) & ~zero     # after the first zero, before a second one
    prefix = torch.cumprod(torch.where(before, x, 1), dim)            # x_0 ... x_{z-1} at z
    after = torch.cumprod(torch.where(until_second, x, 1), dim)       # x_{z+1} ... x_i
    first_terms = torch.sum(torch.where(zeros_so_far == 1, g * after, 0), dim, keepdim=True)
    return torch.where(at_first, prefix * first_terms, grad_before).to(x.dtype)

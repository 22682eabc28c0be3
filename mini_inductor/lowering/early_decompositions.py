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
Other calls take torch's path unchanged. The kernels are swapped only while AOT autograd traces
(Dynamo's compile lock keeps two compiles apart) and put back after.
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


_installed: list = []   # non-empty while the kernels are swapped


@contextlib.contextmanager
def early_decompositions_checked():
    """While AOT autograd traces: the calls the decomposition table keeps whole skip torch's Python
    kernels (_python_kernels) and the composites of _KEPT_WHOLE_AS."""
    if _installed:   # (a nested compile: already in place)
        yield
        return
    kernels = _python_kernels() | {(op, DispatchKey.CompositeImplicitAutograd) for op in _KEPT_WHOLE_AS}
    saved = {op: dict(op.py_kernels) for op, _ in kernels}
    try:
        for op, key in kernels:
            in_cpp = functools.partial(op._op_dk, key)
            op.py_kernels[key] = _whole_where_kept(op, op.py_kernels.get(key, in_cpp),
                                                   _KEPT_WHOLE_AS.get(op, in_cpp))
            op._dispatch_cache.clear()
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

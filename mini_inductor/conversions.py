"""Eager's checked conversion of a Python number to a tensor's dtype (c10's `checked_convert`).

Eager converts an op's Scalar argument to the dtype it computes in with a check, and raises "value
cannot be converted to type c10::Half without overflow" where the number is out of that dtype's
range: a fill (fill_, full, masked_fill, index_fill, scatter's value, constant_pad_nd's value), a
clamp bound, an alpha, a pow exponent, threshold's value, an activation's parameter. A kernel given
that number would hold inf (a floating dtype) or wrap it (an integer one) without a word.

Where `converts` says no, the number is not baked into a kernel: a lowering refuses (the node runs in
ATen: lowering/lowerings.py `check_converts`), a decomposition keeps its op whole
(lowering/decompositions.py), the attention matcher leaves the graph as written
(attention/modification.py). ATen then raises as eager does, or computes what eager computes where
its own conversion is not checked (a one-element CPU tensor filled with 1e6 is float16 inf; a where's
number branch on the CPU). Refusing a number eager would have taken costs an ATen call, never a value.
"""
from __future__ import annotations

import math

import torch
from torch.utils._python_dispatch import _disable_current_modes

_SCALAR_INTS = (-2**63, 2**64 - 1)   # what eager's Scalar holds: an int64, or a uint64 above it


def converts(value, dtype: torch.dtype) -> bool:
    """Whether eager's checked conversion of the number `value` (bool, int, float or complex) to
    `dtype` succeeds, as c10's `overflows` decides:

        a bool, or to bool                 always
        a float to a floating dtype        inf and NaN do; a finite one within ±finfo.max
        a float to an integer dtype        within [min, max]: NaN and inf never, and no wrapping
                                           (-1.0 into uint8 fails, where -1 is 255)
        an int to a floating dtype         within ±finfo.max (only float16's can be exceeded)
        an int to an integer dtype         within [min, max]; an unsigned dtype also takes -max..-1,
                                           which wrap (-1 into uint8 is 255)
        an int beyond int64 and uint64     never (eager's Scalar cannot hold it)
        to a complex dtype                 each part as to its real dtype
    """
    if isinstance(value, int) and not isinstance(value, bool) and not _SCALAR_INTS[0] <= value <= _SCALAR_INTS[1]:
        return False
    if isinstance(value, bool) or dtype == torch.bool:
        return True
    if dtype.is_complex:
        real = dtype.to_real()
        if isinstance(value, complex):
            return converts(value.real, real) and converts(value.imag, real)
        return converts(value, real)
    if isinstance(value, complex):
        return False   # (eager refuses a complex number for a real tensor)
    if isinstance(value, int):
        if dtype.is_floating_point:
            return abs(value) <= torch.finfo(dtype).max
        info = torch.iinfo(dtype)
        low = -info.max if info.min == 0 else info.min
        return low <= value <= info.max
    if isinstance(value, float):
        if dtype.is_floating_point:
            return not math.isfinite(value) or abs(value) <= torch.finfo(dtype).max
        info = torch.iinfo(dtype)
        # (False for NaN.) c10 compares in double, where int64's max is 2.0**63: that one float it lets
        # through (to an undefined conversion) is refused here
        return info.min <= value <= info.max
    raise TypeError(f"converts() takes a Python number, not {type(value).__name__}")


def always_converts(source: torch.dtype, dtype: torch.dtype) -> bool:
    """Whether every value a `source` tensor can hold converts to `dtype` (`converts`): eager converts a
    0-d value tensor with `.item()` and the same check (masked_fill, index_fill with a tensor value)."""
    if dtype == torch.bool or source == torch.bool or source == dtype:
        return True
    if source.is_complex or dtype.is_complex:
        return False
    if source.is_floating_point:
        return dtype.is_floating_point and torch.finfo(source).max <= torch.finfo(dtype).max
    info = torch.iinfo(source)
    return converts(info.min, dtype) and converts(info.max, dtype)


def tensor_value_converts(value: torch.Tensor, dtype: torch.dtype) -> bool:
    """Whether the 0-d tensor `value`, as eager converts its `.item()` (masked_fill and index_fill with a
    tensor value), surely converts to `dtype`: by its value where tracing knows it (the FakeTensor of a
    constant, `torch.tensor(-1e4)` in the compiled code), else by its dtype (`always_converts`)."""
    constant = getattr(value, "constant", None)   # (a FakeTensor's real value)
    if constant is not None and constant.numel() == 1:
        with _disable_current_modes():   # (read outside the tracing and fake modes)
            return converts(constant.item(), dtype)
    return always_converts(value.dtype, dtype)


def opmath_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype eager computes a `dtype` tensor's pointwise op in, and converts its parameters to
    (elu's alpha, lerp's weight): float32 for the half types."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype

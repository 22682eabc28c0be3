"""Let kernels that call libdevice run under Triton's CPU interpreter (TRITON_INTERPRET=1).

The interpreter cannot run `extern_elementwise` calls, which is what every `libdevice.*` function
is. While it is on, we replace those module attributes by stand-ins that apply the matching torch
function to the numpy arrays the interpreter holds, so CI and the GPU share one kernel source.
"""
from __future__ import annotations

import numpy as np
import torch

from ..config import interpreting

_INSTALLED = False

# libdevice symbol stem → torch function of the arguments
_TORCH_FNS = {
    "tanh": torch.tanh, "log1p": torch.log1p, "expm1": torch.expm1, "pow": torch.pow, "powf": torch.pow,
    "powi": torch.pow, "lgamma": torch.lgamma, "erf": torch.erf, "erfc": torch.erfc, "erfinv": torch.erfinv,
    "atan2": torch.atan2, "atan": torch.atan, "asin": torch.asin, "acos": torch.acos, "tan": torch.tan,
    "sinh": torch.sinh, "cosh": torch.cosh, "asinh": torch.asinh, "acosh": torch.acosh, "atanh": torch.atanh,
    "log10": torch.log10, "log2": torch.log2, "exp2": torch.exp2, "isnan": torch.isnan, "isinf": torch.isinf,
    "signbit": torch.signbit, "copysign": torch.copysign, "fmod": torch.fmod, "hypot": torch.hypot,
    "nearbyint": torch.round, "rint": torch.round, "round": torch.round, "trunc": torch.trunc,
    "floor": torch.floor, "ceil": torch.ceil, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "exp": torch.exp,
    "log": torch.log, "sin": torch.sin, "cos": torch.cos, "fabs": torch.abs, "abs": torch.abs,
    "fmax": torch.fmax, "fmin": torch.fmin, "nextafter": torch.nextafter, "cyl_bessel_i0": torch.i0,
    "cyl_bessel_i1": torch.special.i1, "normcdfinv": torch.special.ndtri, "erfcx": torch.special.erfcx,
    "j0": torch.special.bessel_j0, "j1": torch.special.bessel_j1, "y0": torch.special.bessel_y0,
    "y1": torch.special.bessel_y1, "cbrt": lambda x: torch.sign(x) * torch.abs(x) ** (1 / 3),
}


_BOOL_RESULTS = {"isnan", "isinf", "signbit"}


def _standin(name: str, fn):
    import triton.language as tl
    from triton.runtime import interpreter

    def call(*args, _semantic=None, **kwargs):
        tensors = [a for a in args if isinstance(a, tl.tensor)]
        like = tensors[0]
        arrays = [torch.from_numpy(np.ascontiguousarray(a.handle.data)) if isinstance(a, tl.tensor)
                  else torch.tensor(a) for a in args]
        out = fn(*arrays)
        scalar = tl.int1 if name in _BOOL_RESULTS else like.dtype
        data = out.numpy().astype(interpreter._get_np_dtype(scalar), copy=False)
        shape = np.broadcast_shapes(*[a.handle.data.shape for a in tensors])
        data = np.broadcast_to(data, shape).copy()
        ty = like.type.with_element_ty(scalar) if isinstance(like.type, tl.block_type) else scalar
        if isinstance(ty, tl.block_type) and list(ty.shape) != list(shape):
            ty = tl.block_type(scalar, list(shape))
        return tl.tensor(interpreter.TensorHandle(data, scalar), ty)
    call.__name__ = name
    return call


def install() -> None:
    """Replace libdevice's functions by torch-backed stand-ins once; a no-op when the interpreter is off."""
    global _INSTALLED
    if _INSTALLED or not interpreting():
        return
    from triton.language.extra import libdevice

    for name, fn in _TORCH_FNS.items():
        if hasattr(libdevice, name):
            setattr(libdevice, name, _standin(name, fn))
    _round_bfloat16_to_nearest_even()
    _INSTALLED = True


def _round_bfloat16_to_nearest_even() -> None:
    """The interpreter truncates float32 → bfloat16; the GPU (and eager) round to nearest even."""
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    original = builder.cast_impl

    def cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            rounded = torch.from_numpy(np.ascontiguousarray(src.data)).to(torch.bfloat16)
            return interpreter.TensorHandle(rounded.view(torch.int16).numpy().view(np.uint16), dst_type.scalar)
        return original(self, src, dst_type)

    builder.cast_impl = cast_impl
    builder.create_fp_trunc = lambda self, src, dst_type: self.cast_impl(src, dst_type)

"""Let kernels that call libdevice run under Triton's CPU interpreter (TRITON_INTERPRET=1).

The interpreter cannot run `extern_elementwise` calls, which is what every `libdevice.*` function
is. While it is on, we replace those module attributes by stand-ins that apply the matching torch
function to the numpy arrays the interpreter holds, so CI and the GPU share one kernel source.

It also runs `tl.reduce` with a combine function of its own one element at a time, in Python (a
max-pool or a Welford kernel took a minute). The combine functions of triton_helpers get numpy
versions with the same semantics (NaN propagation, lowest index on ties, Welford merging). Its
`tl.associative_scan` with a combine function is as slow (a call per element): for triton_helpers'
scans (logcumsumexp, cummax, cummin) the combine function itself runs on whole arrays, log2(n) times.

And it gets bfloat16 wrong (casts from anything but float32, constants, tl.dot) and ~ of unsigned ints:
those builder methods are replaced by ones that convert through torch, rounding as eager does. Its
tl.minimum / tl.maximum of a NaN return NaN, where the GPU's return the other operand: they return
the other operand here too.
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
    _patch_casts_and_constants()
    _vectorize_helper_reductions()
    _vectorize_helper_scans()
    _patch_scalar_index()
    _patch_bf16_dot()
    _patch_min_max_nan()
    _patch_float_comparisons()
    _check_device_asserts()
    _INSTALLED = True


def _patch_float_comparisons() -> None:
    """A comparison of floats gave the interpreter's handle float data (binary_op casts its result to
    the left operand's dtype), so `(t == 0.0) & (j <= i)` raised in numpy's bitwise_and (a flash
    attention mask of a per-head float tensor; found by the review of session 43). Here it is bool
    data of type int1, as on the GPU."""
    import triton.language as tl
    from triton.runtime import interpreter

    def boolean(create):
        def compare(self, lhs, rhs):
            out = create(self, lhs, rhs)
            return interpreter.TensorHandle(np.asarray(out.data).astype(bool), tl.int1)
        return compare

    for name in dir(interpreter.InterpreterBuilder):
        if name.startswith("create_fcmp"):
            setattr(interpreter.InterpreterBuilder, name, boolean(getattr(interpreter.InterpreterBuilder, name)))


def _check_device_asserts() -> None:
    """The interpreter's builder has Triton's `debug` off (its options are fixed), so `tl.device_assert`
    was dropped, and its assert, when on, tested the truth of a handle object, never its values. Here
    asserts are on (as runtime/triton_helpers.checked_jit compiles them on the GPU), each element is
    checked, and int32 overflow is not (eager wraps; see checked_jit). An index out of range then
    raises where it read and wrote past a buffer on the CPU (a long index_fill crashed the process)."""
    import dataclasses

    from triton.runtime import interpreter

    init = interpreter.InterpreterBuilder.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self.options = dataclasses.replace(self.options, debug=True, sanitize_overflow=False)

    def create_assert(self, condition, message):
        if not np.all(condition.data):
            raise AssertionError(message)

    interpreter.InterpreterBuilder.__init__ = __init__
    interpreter.InterpreterBuilder.create_assert = create_assert
    builder = interpreter.interpreter_builder   # (the one every kernel runs with, made at import)
    builder.options = dataclasses.replace(builder.options, debug=True, sanitize_overflow=False)


def _patch_min_max_nan() -> None:
    """tl.minimum and tl.maximum of floats (without propagate_nan) are PTX min.f32 and max.f32 on the
    GPU, which return the operand that is not NaN; the interpreter's np.minimum returned NaN. erf32's
    clamp took NaN to 1.0 on the GPU and passed every CPU test (session 30). Here the interpreter
    returns what the GPU does, so that CPU tests see such kernels' GPU answers."""
    from triton.runtime import interpreter

    interpreter.InterpreterBuilder.create_minnumf = lambda self, lhs, rhs: self.binary_op(lhs, rhs, np.fmin)
    interpreter.InterpreterBuilder.create_maxnumf = lambda self, lhs, rhs: self.binary_op(lhs, rhs, np.fmax)


def _patch_bf16_dot() -> None:
    """tl.dot of bfloat16 operands (the matmul templates): the interpreter multiplies their uint16 bits
    as integers. Widen them to float32 first (exact), as the tensor cores read them."""
    import triton.language as tl
    from triton.runtime import interpreter

    original = interpreter.InterpreterBuilder.create_dot

    def create_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        def widened(x):
            if x.dtype.scalar != tl.bfloat16:
                return x
            bits = torch.from_numpy(np.ascontiguousarray(x.data).view(np.int16))
            return interpreter.TensorHandle(bits.view(torch.bfloat16).float().numpy(), tl.float32)
        return original(self, widened(a), widened(b), d, input_precision, max_num_imprecise_acc)

    interpreter.InterpreterBuilder.create_dot = create_dot


def _patch_scalar_index() -> None:
    """An int argument of a kernel (a dynamic graph's sizes) is a one-element array in the interpreter;
    `range(0, rnumel, RBLOCK)` takes its `__index__`, which the interpreter computes with `int(array)`:
    numpy 2.x refuses that for an array of one dimension. Read the element instead."""
    from triton.runtime import interpreter

    original = interpreter._patch_lang_tensor

    def patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0])
                       if self.handle.data.size == 1 else int(self.handle.data))

    interpreter._patch_lang_tensor = patch_lang_tensor


def _patch_casts_and_constants() -> None:
    """bfloat16 casts and constants, and unsigned all-ones values, as the GPU (and eager) compute them.

    The interpreter holds a bfloat16 as its bits in a uint16 array: it truncates float32 → bfloat16,
    casts any other dtype to or from bfloat16 with a plain numpy astype (of the bits: garbage), and
    has no builder method for a bfloat16 constant. Torch's own conversions round to nearest even.
    """
    import triton.language as tl
    from triton.runtime import interpreter

    builder = interpreter.InterpreterBuilder
    original = builder.cast_impl

    def cast_impl(self, src, dst_type):
        src_ty, dst_ty = src.dtype.scalar, dst_type.scalar
        if src_ty == tl.bfloat16 and src.data.dtype == np.bool_:
            src_ty = tl.int1   # Triton 3.9 labels a comparison of bfloat16 values with their dtype
        if (src_ty == tl.bfloat16) == (dst_ty == tl.bfloat16) or not _torch_castable(src_ty, dst_ty):
            return original(self, src, dst_type)
        data = np.ascontiguousarray(src.data)
        value = (torch.from_numpy(data.view(np.int16)).view(torch.bfloat16) if src_ty == tl.bfloat16
                 else torch.from_numpy(data))
        out = value.to(_TORCH_DTYPES[dst_ty.name])
        return interpreter.TensorHandle(_as_numpy(out), dst_ty)

    def get_bf16(self, value):
        bits = _as_numpy(torch.tensor([value], dtype=torch.bfloat16))
        return interpreter.TensorHandle(bits, tl.bfloat16)

    def get_all_ones_value(self, type):
        # the interpreter's own fills -1 into the dtype, which numpy refuses for an unsigned one (~uint8)
        np_type = interpreter._get_np_dtype(type)
        if np_type.kind != "u":
            return original_all_ones(self, type)
        return interpreter.TensorHandle(np.full(1, np.iinfo(np_type).max, dtype=np_type), type.scalar)

    original_all_ones = builder.get_all_ones_value
    builder.cast_impl = cast_impl
    builder.get_bf16 = get_bf16
    builder.get_all_ones_value = get_all_ones_value
    # the interpreter binds these to its own cast_impl at class creation: point them at ours
    for name in ("create_fp_trunc", "create_fp_ext", "create_si_to_fp", "create_ui_to_fp", "create_fp_to_si",
                 "create_fp_to_ui"):
        setattr(builder, name, lambda self, src, dst_type: self.cast_impl(src, dst_type))


# Triton scalar type name → torch dtype, for the casts torch computes in place of the interpreter
_TORCH_DTYPES = {"int1": torch.bool, "int8": torch.int8, "uint8": torch.uint8, "int16": torch.int16,
                 "int32": torch.int32, "int64": torch.int64, "fp16": torch.float16, "bf16": torch.bfloat16,
                 "fp32": torch.float32, "fp64": torch.float64}


def _torch_castable(src_ty, dst_ty) -> bool:
    return src_ty.name in _TORCH_DTYPES and dst_ty.name in _TORCH_DTYPES


def _as_numpy(t: torch.Tensor) -> np.ndarray:
    """`t` as the interpreter holds it: a bfloat16 as its bits in uint16."""
    return t.view(torch.int16).numpy().view(np.uint16) if t.dtype == torch.bfloat16 else t.numpy()


def _vectorize_helper_reductions() -> None:
    """tl.reduce over triton_helpers' combine functions in numpy, along the whole axis at once."""
    from triton.runtime import interpreter

    reduce_ops = interpreter.ReduceOps
    original = reduce_ops.apply_impl

    def apply_impl(self, input):
        fast = _numpy_reduction(self.combine_fn) if self.axis is not None else None
        if fast is None:
            return original(self, input)
        axis = self.axis
        results = fast(axis, *[t.handle.data for t in input])
        return [self.to_tensor(np.expand_dims(r, axis) if self.keep_dims else r, t.dtype)
                for r, t in zip(results, input)]

    apply_impl.element_by_element = original  # the interpreter's own loop, for tests to compare with
    reduce_ops.apply_impl = apply_impl


def _vectorize_helper_scans() -> None:
    """tl.associative_scan over triton_helpers' combine functions as a log-step scan (Hillis and
    Steele): at step d every element combines with the partial result d places before it. It calls
    the kernel's own combine function, on whole arrays, and like the GPU's scan it combines in a
    tree, not element by element."""
    from triton.runtime import interpreter

    from . import triton_helpers as th

    scan_ops = interpreter.ScanOps
    original = scan_ops.generic_scan
    ours = {th.logaddexp, th.cummax_combine, th.cummin_combine}

    def generic_scan(self, input):
        if self.combine_fn not in ours:
            return original(self, input)
        axis, dtypes = self.axis, [t.dtype for t in input]
        parts = [t.handle.data for t in input]
        n = parts[0].shape[axis]
        position = np.arange(n).reshape([-1 if d == axis else 1 for d in range(parts[0].ndim)])
        step = 1
        with np.errstate(all="ignore"):   # inf - inf in lanes a tl.where drops: no warnings
            while step < n:
                # whole blocks (Triton's shapes are powers of 2): the first `step` elements' results,
                # combined with the row's wrapped-around end, are dropped
                earlier = [self.to_tensor(np.roll(p, step, axis), dt) for p, dt in zip(parts, dtypes)]
                later = [self.to_tensor(p, dt) for p, dt in zip(parts, dtypes)]
                combined = self.combine_fn.fn(*earlier, *later)
                combined = combined if isinstance(combined, tuple) else (combined,)
                parts = [np.where(position >= step, c.handle.data.astype(p.dtype), p) for p, c in zip(parts, combined)]
                step *= 2
        return [self.to_tensor(p, dt) for p, dt in zip(parts, dtypes)]

    generic_scan.element_by_element = original
    scan_ops.generic_scan = generic_scan


def _numpy_reduction(combine_fn):
    from . import triton_helpers as th

    return {th.maximum: lambda axis, v: (np.max(v, axis),),
            th.minimum: lambda axis, v: (np.min(v, axis),),
            th._prod_combine: lambda axis, v: (np.prod(v, axis, dtype=v.dtype),),
            th._argmax_combine: lambda axis, v, i: _arg_extreme(axis, v, i, np.max),
            th._argmin_combine: lambda axis, v, i: _arg_extreme(axis, v, i, np.min),
            th._welford_combine: _welford_merge}.get(combine_fn)


def _arg_extreme(axis, values, index, extreme):
    """(extreme value, its lowest index); NaN counts as the extreme, as in the combine functions."""
    nan = np.isnan(values) if values.dtype.kind == "f" else np.zeros(values.shape, bool)
    best = extreme(values, axis)  # NaN where the row holds one
    at_best = (values == np.expand_dims(best, axis)) | (nan & np.expand_dims(nan.any(axis), axis))
    lowest = np.where(at_best, index, np.iinfo(index.dtype).max).min(axis)
    return best, lowest


def _welford_merge(axis, mean, m2, weight):
    """Merged (mean, m2, weight) of all partial results: m2 = sum(m2_i) + sum(w_i * (mean_i - mean)^2)."""
    m64, w64 = mean.astype(np.float64), weight.astype(np.float64)
    total = w64.sum(axis)
    merged = np.where(total == 0, np.take(m64, 0, axis), (w64 * m64).sum(axis) / np.where(total == 0, 1, total))
    spread = (w64 * (m64 - np.expand_dims(merged, axis)) ** 2).sum(axis)
    m2_total = m2.astype(np.float64).sum(axis) + spread
    return merged.astype(mean.dtype), m2_total.astype(m2.dtype), total.astype(weight.dtype)

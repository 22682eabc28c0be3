"""Triton device functions that generated kernels call (eager's semantics where Triton's differ), and
`checked_jit`, the decorator of a kernel that checks its indices.

Imports Triton only: compile worker processes (launch/compile_worker.py) load this file by itself."""
import os

import triton
import triton.language as tl
from triton.language.extra import libdevice
from triton.runtime.jit import JITFunction


def interpreting() -> bool:
    """config.interpreting(), which this file cannot import (see above)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


class _CheckedJIT(JITFunction):
    """A kernel compiled with Triton's `debug` on, so that its `tl.device_assert`s run (without it
    they compile to nothing: an index out of range read or wrote past a buffer where eager raises), and
    with `sanitize_overflow` off, which `debug` would otherwise turn on for every signed int32 `+ - *`
    of the kernel (eager wraps int32 arithmetic, Philox's key schedule wraps by design). Inductor
    compiles every kernel this way."""

    # the compile options `run` adds (precompile.py binds a kernel's arguments as `run` does)
    run_defaults = {"sanitize_overflow": False}

    def run(self, *args, grid, warmup, **kwargs):
        return super().run(*args, grid=grid, warmup=warmup, **dict(self.run_defaults, **kwargs))


def checked_jit(fn=None, **kwargs):
    """`triton.jit` for a kernel with device-side asserts (codegen/triton.py emits it for those alone).
    Under Triton's interpreter, the asserts are checked by runtime/interpreter.py's shim."""
    if fn is None:
        return lambda f: checked_jit(f, **kwargs)
    if interpreting():
        return triton.jit(fn, **kwargs)
    return _CheckedJIT(fn, debug=True, **kwargs)


@triton.jit
def is_floating(x):
    return x.dtype.is_floating()


@triton.jit
def maximum(a, b):
    # torch.maximum propagates NaN
    mask = a > b
    if is_floating(a):
        mask |= a != a
    return tl.where(mask, a, b)


@triton.jit
def minimum(a, b):
    mask = a < b
    if is_floating(a):
        mask |= a != a
    return tl.where(mask, a, b)


@triton.jit
def max2(a, dim):
    return tl.reduce(a, dim, maximum)


@triton.jit
def min2(a, dim):
    return tl.reduce(a, dim, minimum)


@triton.jit
def _prod_combine(a, b):
    return a * b


@triton.jit
def prod(a, dim):
    return tl.reduce(a, dim, _prod_combine)


@triton.jit
def _argmax_combine(a, a_i, b, b_i):
    # the larger value wins (NaN is largest), ties go to the lower index
    a_nan = a != a
    b_nan = b != b
    take_a = (a > b) | (a_nan & ~b_nan) | ((a == b) | (a_nan & b_nan)) & (a_i < b_i)
    return tl.where(take_a, a, b), tl.where(take_a, a_i, b_i)


@triton.jit
def _argmin_combine(a, a_i, b, b_i):
    a_nan = a != a
    b_nan = b != b
    take_a = (a < b) | (a_nan & ~b_nan) | ((a == b) | (a_nan & b_nan)) & (a_i < b_i)
    return tl.where(take_a, a, b), tl.where(take_a, a_i, b_i)


@triton.jit
def argmax(value, index, dim):
    _, i = tl.reduce((value, index), dim, _argmax_combine)
    return i


@triton.jit
def argmin(value, index, dim):
    _, i = tl.reduce((value, index), dim, _argmin_combine)
    return i


@triton.jit
def argmax_update(acc, acc_i, value, index):
    return _argmax_combine(acc, acc_i, value, index)


@triton.jit
def argmin_update(acc, acc_i, value, index):
    return _argmin_combine(acc, acc_i, value, index)


@triton.jit
def welford_update(mean, m2, weight, value):
    # one more sample into a running (mean, m2, count)
    weight = weight + 1
    delta = value - mean
    mean = mean + delta / weight
    m2 = m2 + delta * (value - mean)
    return mean, m2, weight


@triton.jit
def _welford_combine(mean_a, m2_a, w_a, mean_b, m2_b, w_b):
    w = w_a + w_b
    delta = mean_b - mean_a
    frac = tl.where(w == 0.0, 0.0, w_b / w)
    return mean_a + delta * frac, m2_a + m2_b + delta * delta * w_a * frac, w


@triton.jit
def welford_combine(mean_a, m2_a, w_a, mean_b, m2_b, w_b):
    # two running (mean, m2, count) triples into one (a split Welford's second pass)
    return _welford_combine(mean_a, m2_a, w_a, mean_b, m2_b, w_b)


@triton.jit
def welford(mean, m2, weight, dim):
    return tl.reduce((mean, m2, weight), dim, _welford_combine)


@triton.jit
def div_floor_integer(a, b):
    # Python's floor division for integers (Triton's // truncates)
    quot = a // b
    rem = a % b
    return tl.where((rem != 0) & ((rem < 0) != (b < 0)), quot - 1, quot)


@triton.jit
def remainder_integer(a, b):
    rem = a % b
    return tl.where((rem != 0) & ((rem < 0) != (b < 0)), rem + b, rem)


@triton.jit
def remainder_float(a, b):
    # eager's: fmod, moved into the divisor's sign (exact, unlike a - b * floor(a / b))
    mod = libdevice.fmod(a, b)
    return tl.where((mod != 0) & ((b < 0) != (mod < 0)), mod + b, mod)


@triton.jit
def div_floor_float(a, b):
    # eager's: the quotient of a - fmod(a, b), rounded to the nearest integer, one less when
    # the remainder's sign differs from the divisor's; a zero quotient keeps the sign of a / b
    mod = libdevice.fmod(a, b)
    div = (a - mod) / b
    div = tl.where((mod != 0) & ((b < 0) != (mod < 0)), div - 1.0, div)
    floored = tl.floor(div)
    floored = tl.where(div - floored > 0.5, floored + 1.0, floored)
    zero = tl.where((a / b) < 0, -0.0, 0.0)
    return tl.where(b == 0, a / b, tl.where(div != 0, floored, zero))


@triton.jit
def round_tf32(x):
    """float32 rounded to TF32 (10 mantissa bits) to nearest, ties away from zero, as cuBLAS rounds
    the operands of torch's TF32 matmuls. Tensor cores given float32 bits drop the low 13 instead:
    every product then shrinks by about 2**-10 on average, and a long dot product (a language model's
    logits) comes out that much too small. Other dtypes, infinities and NaNs pass unchanged."""
    if x.dtype == tl.float32:
        bits = x.to(tl.uint32, bitcast=True)
        rounded = (((bits + 0x1000) >> 13) << 13).to(tl.float32, bitcast=True)
        x = tl.where((bits & 0x7F800000) == 0x7F800000, x, rounded)
    return x


# float32 math as single PTX instructions, without libdevice. A kernel that calls any libdevice
# function has the whole library parsed and linked into it: 57 ms of each such kernel's compile on
# the H200 machine's host (30 ms on the CPU machine), with the GIL held, so that concurrent compiles
# wait for it (compile_pool.py). codegen/triton_ops.py `PTX_F32` emits `ptx_f32` for float32 values;
# tanh32, erf32 and the flash kernels call `exp2`, libdevice's own instruction (Triton compiles
# libdevice with flush-to-zero: ex2.approx.ftz). Triton's interpreter cannot run inline assembly: there
# each instruction is the tl or libdevice function it stands for (INTERPRETED).
INTERPRETED = {"ex2.approx.ftz.f32": "exp2", "rsqrt.approx.ftz.f32": "rsqrt", "sqrt.rn.f32": "sqrt",
               "cvt.rmi.f32.f32": "floor", "cvt.rpi.f32.f32": "ceil", "cvt.rzi.f32.f32": "libdevice.trunc",
               "cvt.rni.f32.f32": "libdevice.nearbyint"}

if interpreting():
    @triton.jit
    def ptx_f32(x, ASM: tl.constexpr):
        # the function read at each call: runtime/interpreter.py replaces libdevice's after this import
        name = INTERPRETED[getattr(ASM, "value", ASM).split()[0]]
        return getattr(libdevice, name[len("libdevice."):])(x) if name.startswith("libdevice.") else getattr(tl, name)(x)
else:
    @triton.jit
    def ptx_f32(x, ASM: tl.constexpr):
        """`ASM` ("instruction $0, $1;") applied to each float32 element of x."""
        return tl.inline_asm_elementwise(ASM, "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)


@triton.jit
def exp2(x):
    if x.dtype == tl.float32:
        return ptx_f32(x, "ex2.approx.ftz.f32 $0, $1;")
    else:
        return tl.exp2(x)


@triton.jit
def isinf(x):
    return tl.abs(x) == float("inf")


# erf and tanh of float32 without branches. libdevice's erff and tanhf branch per element on |x| (two
# ranges, two polynomials); over random data every warp takes both sides of every branch. erf32
# evaluates both ranges' polynomials in full and selects once: an fp16 GELU kernel over 50M elements
# took 0.0579 ms on an H200 against 0.0680 with erff and eager's 0.0651 (one polynomial with its
# coefficients selected per element, 11 selects for 7 FMAs: 0.0674; benchmarks/gelu_variants.py,
# session 30). The coefficients are our own fits (benchmarks/erf_fit.py: least squares reweighted
# toward the largest error, rounded to float32); max error 1.4 ulp (erf) and 1.6 ulp (tanh) in float32
# arithmetic, checked by tests/codegen/test_branchless_math.py against float64. On the GPU, exp2 is
# ex2.approx and tanh32's division div.full (each within 2 ulp): erf32's largest error over [-6, 6] was
# 6.9e-8 there, erff's 6.4e-8 (benchmarks/gelu_variants.py, H200).

@triton.jit
def erf32(x):
    # |x| < 1:     erf(|x|) = |x| + |x| * P(x^2)
    # 1 <= |x|:    erf(|x|) = 1 - 2^(-b * (1 + Q(b))), b = min(|x|, 3.92) (erf is 1 in float32 past it)
    # then x's sign bit (-0 stays -0)
    a = tl.abs(x)
    u = a * a
    p = 7.889093831181526e-05 * u - 0.0008020834065973759
    p = p * u + 0.005189534742385149
    p = p * u - 0.026854444295167923
    p = p * u + 0.11283600330352783
    p = p * u - 0.3761262595653534
    p = p * u + 0.12837916612625122
    small = p * a + a
    b = tl.minimum(a, 3.92)
    q = 2.0393423255882226e-05 * b - 0.0005083335563540459
    q = q * b + 0.005431359633803368
    q = q * b - 0.03466169908642769
    q = q * b + 0.15371811389923096
    q = q * b + 0.9160510301589966
    q = q * b + 0.6283658146858215
    large = 1.0 - exp2(-(q * b + b))
    # NaN takes `small` (NaN): `large` is finite at NaN on the GPU, whose min.f32 returns the non-NaN operand
    y = tl.where(a >= 1.0, large, small)
    sign = x.to(tl.uint32, bitcast=True) & 0x80000000
    return (y.to(tl.uint32, bitcast=True) | sign).to(tl.float32, bitcast=True)


@triton.jit
def tanh32(x):
    # |x| < 0.625:    tanh(|x|) = |x| + |x|^3 * P(x^2)
    # else:           tanh(|x|) = 1 - 2 / (e^(2|x|) + 1)
    # then x's sign bit, as in erf32
    a = tl.abs(x)
    t = a * a
    p = -0.00611318601295352 * t + 0.021010082215070724
    p = p * t - 0.053854070603847504
    p = p * t + 0.13332794606685638
    p = p * t - 0.333333283662796
    small = (a * t) * p + a
    large = 1.0 - 2.0 / (exp2(a * 2.8853900817779268) + 1.0)
    y = tl.where(a >= 0.625, large, small)   # NaN takes `small`, NaN (as in erf32)
    sign = x.to(tl.uint32, bitcast=True) & 0x80000000
    return (y.to(tl.uint32, bitcast=True) | sign).to(tl.float32, bitcast=True)


# Scans with a combine function of their own (lowering/scan_lowerings.py): logcumsumexp, cummax, cummin.
# `a` is always the earlier part of the row and `b` the later one, both in the persistent scan and where
# a looped kernel combines its carry with a block's scan.

@triton.jit
def logaddexp(a, b):
    # log(exp(a) + exp(b)) as hi + log1p(exp(lo - hi)), which neither overflows nor loses the smaller
    # term. Two infinities of one sign (both -inf: an empty sum) would give inf - inf = NaN: they give
    # themselves. NaN in either operand is NaN, as eager's.
    a_first = (a > b) | (a != a)
    hi = tl.where(a_first, a, b)
    lo = tl.where(a_first, b, a)
    same_infinity = (hi == lo) & (tl.abs(hi) == float("inf"))
    return tl.where(same_infinity, hi, hi + libdevice.log1p(tl.exp(lo - hi)))


@triton.jit
def logcumsumexp(value, dim):
    return tl.associative_scan(value, dim, logaddexp)


@triton.jit
def cummax_combine(a, a_i, b, b_i):
    # eager's cummax keeps the later element on ties (the last index), and a NaN once seen, moving its
    # index to each later NaN; a NaN compares false, so `b >= a` is false after one
    take_b = b >= a
    if is_floating(b):
        take_b |= b != b
    return tl.where(take_b, b, a), tl.where(take_b, b_i, a_i)


@triton.jit
def cummin_combine(a, a_i, b, b_i):
    take_b = b <= a
    if is_floating(b):
        take_b |= b != b
    return tl.where(take_b, b, a), tl.where(take_b, b_i, a_i)


@triton.jit
def cummax(value, index, dim):
    return tl.associative_scan((value, index), dim, cummax_combine)


@triton.jit
def cummin(value, index, dim):
    return tl.associative_scan((value, index), dim, cummin_combine)


# Sorting a row held whole (lowering/sort_lowerings.py): a bitonic network over (value, index) pairs.
# The order is total: values by eager's comparison (NaN above everything, -0.0 equal to 0.0), then
# indices, so equal values keep their input order and the result is stable in either direction. A
# row shorter than its block is padded by the kernel with values that sort last, at indices past the
# row's (codegen/triton_ops.py TritonOps.sort).

@triton.constexpr_function
def _log2_of(n):
    return n.bit_length() - 1


@triton.constexpr_function
def _bits_type(dtype):
    # an integer as wide as `dtype`, to move a float's bits exactly (sums of NaN or -0.0 would not)
    return tl.dtype(f"int{dtype.primitive_bitwidth}") if dtype.is_floating() else dtype


@triton.jit
def _pair_partner(x):
    # x: [rows, groups, 2, half]; each lane gets the other lane of its pair along axis 2: the pair's
    # sum less its own value, in integer arithmetic, which is exact even where it wraps
    bits = x.to(_bits_type(x.dtype), bitcast=True)
    total = tl.sum(bits, 2, keep_dims=True)
    other = (total - bits).to(bits.dtype)
    return other.to(x.dtype, bitcast=True)


@triton.jit
def _comes_first(a, a_i, b, b_i, DESCENDING: tl.constexpr):
    # (a, a_i) goes before (b, b_i) in the sorted row: by value, NaN the largest, then by index
    if DESCENDING:
        lo = b
        hi = a
    else:
        lo = a
        hi = b
    below = lo < hi
    same = lo == hi
    if is_floating(a):
        below |= (lo == lo) & (hi != hi)
        same |= (lo != lo) & (hi != hi)
    return below | (same & (a_i < b_i))


@triton.jit
def _bitonic_step(value, index, ROWS: tl.constexpr, WIDTH: tl.constexpr, STAGE: tl.constexpr,
                  STEP: tl.constexpr, DESCENDING: tl.constexpr):
    # stage STAGE sorts runs of 2**STAGE elements, alternately rising and falling (the last stage's one
    # run rises); step STEP of it compares each element with the one HALF places away
    HALF: tl.constexpr = 1 << (STAGE - 1 - STEP)
    GROUPS: tl.constexpr = WIDTH // (2 * HALF)
    v = tl.reshape(value, [ROWS, GROUPS, 2, HALF])
    i = tl.reshape(index, [ROWS, GROUPS, 2, HALF])
    pv = _pair_partner(v)
    pi = _pair_partner(i)
    second = tl.arange(0, 2)[None, None, :, None]
    # a group of 2 * HALF elements lies in a falling run where bit STAGE of its position is set
    falling = (tl.arange(0, GROUPS)[None, :, None, None] >> STEP) & 1
    take = tl.where((second ^ falling) == 1, _comes_first(v, i, pv, pi, DESCENDING),
                    _comes_first(pv, pi, v, i, DESCENDING))
    v = tl.where(take, pv, v)
    i = tl.where(take, pi, i)
    return tl.reshape(v, [ROWS, WIDTH]), tl.reshape(i, [ROWS, WIDTH])


@triton.jit
def sort_with_index(value, index, DESCENDING: tl.constexpr):
    """Sorts each row of value [ROWS, WIDTH] (WIDTH a power of 2) with its int64 `index`, ascending or
    DESCENDING, stable; returns (values, indices)."""
    ROWS: tl.constexpr = value.shape[0]
    WIDTH: tl.constexpr = value.shape[1]
    for stage in tl.static_range(1, _log2_of(WIDTH) + 1):
        for step in tl.static_range(stage):
            value, index = _bitonic_step(value, index, ROWS, WIDTH, stage, step, DESCENDING)
    return value, index

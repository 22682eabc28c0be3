"""2-D pooling as reductions over the window.

    window[n, c, oh, ow, kh, kw] = x[n, c, oh*s - p + kh*d, ow*s - p + kw*d]   (masked outside x)
    avg_pool2d               = sum(window) / divisor(oh, ow)
    max_pool2d_with_indices  = max(window), argmax(window) turned into the flat h*W + w of x
    avg_pool2d_backward      = a gather: each x position sums grad / divisor over the <= ceil(k/s) windows
                               per dim that hold it (max_pool2d's backward, the same way, is in
                               scatter_lowerings.py)
    adaptive_max_pool2d      = the same over windows [floor(o*n/m), ceil((o+1)*n/m)) read at the longest
                               window's length; its backward a gather like avg_pool2d's (below)
    _adaptive_avg_pool2d     = the sum over those windows, 0 past each one's end, / its own element count;
                               its backward a gather over the windows holding each position

The window is an unrealized Pointwise inlined into the reduction: no copy of the input is made.
The values of a max pool with a small window (at most UNROLLED_WINDOW elements, ResNet's 3x3) are
a pointwise kernel instead, one load per window element: as a persistent reduction over the 9
elements, the 3x3 pool of ResNet-18's stem took 154 us on the H100 for 64 MB moved, 7 times its
memory-bound time (torch.profiler, benchmarks/call_profile.py --gpu). The indices (argmax, by ATen's
rule) are a second pointwise node over the same outputs, which the scheduler fuses with the values.
"""
from __future__ import annotations

import functools
import math

import sympy
import torch

from .indexing_lowerings import _in_range
from .ir import IRNode, Pointwise
from .lowerings import register_lowering
from .reduction_lowerings import make_reduction
from .sizevars import FloorDiv, ModularIndexing
from .symbolic import decide, size_value
from .virtualized import ops

aten = torch.ops.aten

# Windows with more elements than this run in ATen.
MAX_WINDOW = 64
# Max-pool windows up to this size get their values from a pointwise kernel (see above).
UNROLLED_WINDOW = 16


def _pair(v, default=None):
    if v is None or (isinstance(v, (list, tuple)) and len(v) == 0):
        return default
    if isinstance(v, int):
        return [v, v]
    return list(v) * 2 if len(v) == 1 else list(v)


def _out_len(n, k, s, p, d, ceil_mode):
    span = n + 2 * p - d * (k - 1) - 1
    if isinstance(n, sympy.Basic):   # a dynamic graph's length: Dynamo's guards make the output nonempty
        if decide(span + (s - 1 if ceil_mode else 0) >= 0) is not True:
            raise NotImplementedError(f"pooling of a length {n} that may be shorter than the window")
        if not ceil_mode:
            return FloorDiv(span, s) + 1
        # at most one window too many (padding is at most half the window), which the bound on the
        # windows starting before n + p takes off
        return sympy.Min(FloorDiv(span + s - 1, s) + 1, FloorDiv(n + p - 1, s) + 1)
    out = (math.ceil(span / s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= n + p:
        out -= 1  # the last window must start inside the input or its left padding
    return out


def _geometry(x, kernel_size, stride, padding, dilation, ceil_mode):
    size = [size_value(s) for s in x.get_size()]   # (an int, or a dynamic graph's expression)
    if len(size) not in (3, 4):
        raise NotImplementedError("pooling of a tensor that is not 3-D or 4-D")
    k = _pair(kernel_size)
    s = _pair(stride, k)
    p = _pair(padding, [0, 0])
    d = _pair(dilation, [1, 1])
    if k[0] * k[1] > MAX_WINDOW:
        raise NotImplementedError("a large pooling window")
    h, w = size[-2:]
    out = [_out_len(h, k[0], s[0], p[0], d[0], ceil_mode), _out_len(w, k[1], s[1], p[1], d[1], ceil_mode)]
    if any(_holds(o <= 0) for o in out):
        raise NotImplementedError("empty pooling output")
    return size, k, s, p, d, out


def _window_misses_x(n, k, s, p, d, out) -> bool:
    """Whether some pooling window along a dim of size n has no element inside it (only a dilated one
    with padding can: its elements may straddle the input); a dynamic graph's sizes: if it may."""
    if d == 1 or p == 0:
        return False
    if not all(isinstance(v, int) for v in (n, out)):
        return True
    return any(all(not 0 <= o * s - p + kk * d < n for kk in range(k)) for o in range(out))


def _holds(cond) -> bool:
    """A relation of pooling sizes, provably true (a dynamic graph's: at every size it serves)."""
    return bool(cond) if isinstance(cond, bool) else decide(cond) is True


def _int64(n):
    """A size as an int64 `ops` value: a literal, or a dynamic graph's expression."""
    return ops.index_expr(n, torch.int64) if isinstance(n, sympy.Basic) else ops.constant(n, torch.int64)


def _window(x: IRNode, size, k, s, p, d, out, fill) -> IRNode:
    """x's pooling windows as a Pointwise of size [..., OH, OW, KH, KW], `fill` outside x."""
    loader = x.make_loader()
    h, w = size[-2:]

    def inner_fn(idx):
        *lead, oh, ow, kh, kw = idx
        ih = oh * s[0] - p[0] + kh * d[0]
        iw = ow * s[1] - p[1] + kw * d[1]
        if p[0] == 0 and p[1] == 0 and _holds((out[0] - 1) * s[0] + (k[0] - 1) * d[0] < h) and \
                _holds((out[1] - 1) * s[1] + (k[1] - 1) * d[1] < w):
            return loader(list(lead) + [ih, iw])
        conds = []
        for v, n in ((ih, h), (iw, w)):
            e = ops.index_expr(v, torch.int64)
            conds += [ops.ge(e, ops.constant(0, torch.int64)), ops.lt(e, _int64(n))]
        mask = ops.logical_and(ops.logical_and(conds[0], conds[1]), ops.logical_and(conds[2], conds[3]))
        return ops.masked(mask, lambda: loader(list(lead) + [ih, iw]), fill)
    return Pointwise.create(x.get_device(), x.get_dtype(), inner_fn, size[:-2] + out + k)


@register_lowering(aten.avg_pool2d)
def avg_pool2d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    if not x.get_dtype().is_floating_point:
        raise NotImplementedError("avg_pool2d of integers")
    size, k, s, p, d, out = _geometry(x, kernel_size, stride, padding, 1, ceil_mode)
    window = _window(x, size, k, s, p, d, out, 0.0)
    nd = len(size)
    total = make_reduction(window, [nd, nd + 1], "sum")  # in the accumulation dtype
    loader, dtype = total.make_loader(), x.get_dtype()
    cdt = torch.float64 if dtype == torch.float64 else torch.float32   # float64 is not divided in float32

    def inner_fn(idx):
        value = loader(idx)
        divisor = _avg_divisor(idx[-2], idx[-1], size, k, s, p, count_include_pad, divisor_override, cdt)
        result = ops.truediv(ops.to_dtype(value, cdt), divisor)
        return result if dtype == cdt else ops.to_dtype(result, dtype)
    return Pointwise.create(x.get_device(), dtype, inner_fn, size[:-2] + out)


def _avg_divisor(oh, ow, size, k, s, p, count_include_pad, divisor_override, cdt):
    """What avg_pool2d divides window (oh, ow)'s sum by, as eager counts it: the window clipped to the
    padded input, then to the input itself unless count_include_pad."""
    if divisor_override:
        return ops.constant(float(divisor_override), cdt)

    def count(o, kk, ss, pp, n):
        start = ops.index_expr(o * ss - pp, torch.int64)
        end = ops.minimum(ops.add(start, ops.constant(kk, torch.int64)), _int64(n + pp))
        if not count_include_pad:
            start = ops.maximum(start, ops.constant(0, torch.int64))
            end = ops.minimum(end, _int64(n))
        return ops.sub(end, start)
    h, w = size[-2:]
    return ops.to_dtype(ops.mul(count(oh, k[0], s[0], p[0], h), count(ow, k[1], s[1], p[1], w)), cdt)


def backward_out_size(grad: IRNode, out: list, what: str) -> list:
    """The pooled size a backward's grad has: ours where static (which must agree), else the grad's
    own (a dynamic graph's, which torch's shape function wrote its own way)."""
    if any(isinstance(o, sympy.Basic) and o.free_symbols for o in out):
        return list(grad.get_size()[-2:])
    if [int(v) for v in grad.get_size()[-2:]] != [int(o) for o in out]:
        raise NotImplementedError(f"{what} with an unexpected output size")
    return out


@register_lowering(aten.avg_pool2d_backward.default)
def avg_pool2d_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override=None):
    """grad_input[.., ih, iw] = sum of grad[.., oh, ow] / divisor(oh, ow) over the windows holding (ih, iw):
    at most ceil(k / s) per dim, the last starting at or before the position, and the ones before it."""
    if not x.get_dtype().is_floating_point:
        raise NotImplementedError("avg_pool2d_backward of integers")
    size, k, s, p, _, out = _geometry(x, kernel_size, stride, padding, 1, ceil_mode)
    out = backward_out_size(grad, out, "avg_pool2d_backward")
    dtype = x.get_dtype()
    cdt = torch.float64 if dtype == torch.float64 else torch.float32
    grad_loader = grad.make_loader()
    tries = [math.ceil(k[0] / s[0]), math.ceil(k[1] / s[1])]

    def inner_fn(idx):
        *lead, ih, iw = idx
        total = ops.constant(0.0, cdt)
        top = [FloorDiv(ih + p[0], s[0]), FloorDiv(iw + p[1], s[1])]
        for jh in range(tries[0]):
            for jw in range(tries[1]):
                oh, ow = top[0] - jh, top[1] - jw
                # a window in the output that reaches this position (it starts at or before it)
                valid = functools.reduce(ops.logical_and, [
                    _in_range(oh, 0, out[0]), _in_range(ow, 0, out[1]),
                    _in_range(oh * s[0] - p[0] + k[0] - 1 - ih, 0, None),
                    _in_range(ow * s[1] - p[1] + k[1] - 1 - iw, 0, None)])

                def share(oh=oh, ow=ow):
                    g = grad_loader(list(lead) + [oh, ow])
                    g = g if grad.get_dtype() == cdt else ops.to_dtype(g, cdt)
                    divisor = _avg_divisor(oh, ow, size, k, s, p, count_include_pad, divisor_override, cdt)
                    if not divisor_override:   # (a window outside the output counts 0 elements: masked, not 0/0)
                        divisor = ops.maximum(divisor, ops.constant(1.0, cdt))
                    return ops.truediv(g, divisor)
                total = ops.add(total, ops.masked(valid, share, 0.0))
        return total if dtype == cdt else ops.to_dtype(total, dtype)
    return Pointwise.create(x.get_device(), dtype, inner_fn, size)


@register_lowering(aten.max_pool2d_with_indices)
def max_pool2d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    if not x.get_dtype().is_floating_point:
        raise NotImplementedError("max_pool2d of integers")
    size, k, s, p, d, out = _geometry(x, kernel_size, stride, padding, dilation, ceil_mode)
    if p[0] > k[0] // 2 or p[1] > k[1] // 2:
        raise NotImplementedError("padding larger than half the window")
    if any(_window_misses_x(n, *dim) for n, dim in zip(size[-2:], zip(k, s, p, d, out))):
        # eager's index for such a window is a position it never read, which its backward writes at
        raise NotImplementedError("a dilated window that lies wholly in the padding")
    window = _window(x, size, k, s, p, d, out, float("-inf"))
    nd = len(size)
    window_loader = window.make_loader()
    # one reduction dim, so that argmax counts positions in the window row-major
    flat = Pointwise.create(x.get_device(), x.get_dtype(), lambda idx: window_loader(
        list(idx[:-1]) + [FloorDiv(idx[-1], k[1]), ModularIndexing(idx[-1], 1, k[1])]),
        size[:-2] + out + [k[0] * k[1]])
    if k[0] * k[1] <= UNROLLED_WINDOW:
        h, w = size[-2:]
        inside = p == [0, 0] and _holds((out[0] - 1) * s[0] + (k[0] - 1) * d[0] < h) and \
            _holds((out[1] - 1) * s[1] + (k[1] - 1) * d[1] < w)

        def in_x(oh, ow, kh, kw):
            conds = []
            for v, n in ((oh * s[0] - p[0] + kh * d[0], h), (ow * s[1] - p[1] + kw * d[1], w)):
                e = ops.index_expr(v, torch.int64)
                conds += [ops.ge(e, ops.constant(0, torch.int64)), ops.lt(e, _int64(n))]
            return ops.logical_and(ops.logical_and(conds[0], conds[1]), ops.logical_and(conds[2], conds[3]))

        dtype = x.get_dtype()
        wide = dtype in (torch.float16, torch.bfloat16)   # compared in float32 (the interpreter's 16-bit
        #                                                   floats are bit patterns, which compare as ints)

        def unrolled(idx, position: bool):
            """The max, or its position in the window, with ATen's rule: the first element inside x, then
            a later one wins if it is greater or NaN (so a NaN max, at the last NaN); padding never wins."""
            best = pos = found = None
            for kh in range(k[0]):
                for kw in range(k[1]):
                    v = window_loader(list(idx) + [kh, kw])
                    v = ops.to_dtype(v, torch.float32) if wide else v
                    r = ops.constant(kh * k[1] + kw, torch.int64) if position else None
                    valid = None if inside else in_x(idx[-2], idx[-1], kh, kw)
                    if best is None:
                        best, pos, found = v, r, valid
                        continue
                    take = ops.logical_or(ops.gt(v, best), ops.isnan(v))
                    if valid is not None:
                        take = ops.logical_and(valid, ops.logical_or(ops.logical_not(found), take))
                        found = ops.logical_or(found, valid)
                    best = ops.where(take, v, best)
                    pos = ops.where(take, r, pos) if position else None
            if position:
                return pos
            return ops.to_dtype(best, dtype) if wide else best
        # two Pointwise nodes over one iteration space: the scheduler fuses them into one kernel
        values = Pointwise.create(x.get_device(), x.get_dtype(), lambda idx: unrolled(idx, False), size[:-2] + out)
        arg = Pointwise.create(x.get_device(), torch.int64, lambda idx: unrolled(idx, True), size[:-2] + out)
    else:
        values = make_reduction(flat, [nd], "max", out_dtype=x.get_dtype())
        arg = make_reduction(flat, [nd], "argmax", out_dtype=torch.int64)
    arg_loader = arg.make_loader()
    w = size[-1]

    def index_fn(idx):
        r = arg_loader(idx)
        oh, ow = idx[-2:]
        kk = ops.constant(k[1], torch.int64)
        ih = ops.add(ops.index_expr(oh * s[0] - p[0], torch.int64),
                     ops.mul(ops.floordiv(r, kk), ops.constant(d[0], torch.int64)))
        iw = ops.add(ops.index_expr(ow * s[1] - p[1], torch.int64),
                     ops.mul(ops.remainder(r, kk), ops.constant(d[1], torch.int64)))
        return ops.add(ops.mul(ih, _int64(w)), iw)
    indices = Pointwise.create(x.get_device(), torch.int64, index_fn, size[:-2] + out)
    return values, indices


# ─── adaptive max pooling ────────────────────────────────────────────────────────────────────────
#
# Output o of m along a dim of length n pools x[start(o) : end(o)], start = floor(o * n / m) and
# end = ceil((o + 1) * n / m), as eager takes them. Windows differ in length by at most one; each is
# read as a window of the longest length, -inf past its end.

def _adaptive_bounds(o, n, m):
    return FloorDiv(o * n, m), FloorDiv((o + 1) * n + m - 1, m)


def _longest_window(n, m):
    """The longest adaptive window along a dim: exact for static sizes, else a bound."""
    if isinstance(n, int) and isinstance(m, int):
        return max(((o + 1) * n + m - 1) // m - o * n // m for o in range(m))
    if m == 1:
        return n
    return FloorDiv(n + m - 1, m) + 1   # ceil(n / m) + 1


def _windows_per_position(n, m):
    """How many adaptive windows along a dim may hold one input position (a bound for a dynamic graph)."""
    if isinstance(n, int) and isinstance(m, int):
        if n > 4096:   # (the exact count loops over the positions)
            return min(m, -(-m // n) + 1)
        return max(((i + 1) * m + n - 1) // n - i * m // n for i in range(n))
    if m == 1:
        return 1
    if _holds(sympy.sympify(n) >= m):
        return 2
    if isinstance(m, int) and _holds(sympy.sympify(n) >= 2):   # (Dynamo's symbolic sizes are >= 2)
        return min(m, -(-m // 2) + 1)
    raise NotImplementedError("adaptive max-pool backward of a length that may be far shorter than its output")


@register_lowering(aten.adaptive_max_pool2d.default)
def adaptive_max_pool2d(x, output_size):
    """Values and int64 indices (flat h*W + w) with eager's choice: the first max, or the last NaN."""
    if not x.get_dtype().is_floating_point:
        raise NotImplementedError("adaptive_max_pool2d of integers")
    size = [size_value(v) for v in x.get_size()]
    if len(size) not in (3, 4):
        raise NotImplementedError("adaptive pooling of a tensor that is not 3-D or 4-D")
    out = [size_value(o) for o in _pair(output_size)]
    (h, w), nd = size[-2:], len(size)
    k = [_longest_window(h, out[0]), _longest_window(w, out[1])]
    # windows of one length need no bound check (n a multiple of m)
    ragged = [not (isinstance(n, int) and isinstance(m, int) and n % m == 0) for n, m in ((h, out[0]), (w, out[1]))]
    x_loader, device, dtype = x.make_loader(), x.get_device(), x.get_dtype()
    # compared in float32 (Triton's interpreter compares bfloat16 by its bits: -1 > -2 is false there)
    cdt = torch.float64 if dtype == torch.float64 else torch.float32

    def loader(at):
        v = x_loader(at)
        return v if dtype == cdt else ops.to_dtype(v, cdt)

    def element(idx, kh, kw):
        """Element (kh, kw) of output idx's window; -inf past the window's end."""
        *lead, oh, ow = idx
        return _window_element(lead, oh, ow, kh, kw, (h, w), out, ragged, loader, float("-inf"))

    def flat_index(idx, r):
        """The flat h*W + w of x of window position r (row-major in the k[0] x k[1] window)."""
        oh, ow = idx[-2:]
        kw = _int64(k[1])
        ih = ops.add(ops.index_expr(_adaptive_bounds(oh, h, out[0])[0], torch.int64), ops.floordiv(r, kw))
        iw = ops.add(ops.index_expr(_adaptive_bounds(ow, w, out[1])[0], torch.int64), ops.remainder(r, kw))
        return ops.add(ops.mul(ih, _int64(w)), iw)

    out_size = size[:-2] + out
    if all(isinstance(v, int) for v in k) and k[0] * k[1] <= UNROLLED_WINDOW:
        def unrolled(idx, position: bool):
            """Eager's scan: a later element wins if greater or NaN; past a window's end is -inf, never taken."""
            best = pos = None
            for kh in range(k[0]):
                for kw in range(k[1]):
                    v = element(idx, kh, kw)
                    r = ops.constant(kh * k[1] + kw, torch.int64)
                    if best is None:
                        best, pos = v, r
                        continue
                    take = ops.logical_or(ops.gt(v, best), ops.isnan(v))
                    best = ops.where(take, v, best)
                    pos = ops.where(take, r, pos) if position else None
            return flat_index(idx, pos) if position else best if dtype == cdt else ops.to_dtype(best, dtype)
        values = Pointwise.create(device, dtype, lambda idx: unrolled(idx, False), out_size)
        indices = Pointwise.create(device, torch.int64, lambda idx: unrolled(idx, True), out_size)
        return values, indices
    # a reduction over the flattened window: argmax gives the first max (and the first NaN); a NaN
    # max is at the last NaN instead, a max reduction of the NaNs' positions
    window = Pointwise.create(device, cdt, lambda idx: element(
        idx[:-1], FloorDiv(idx[-1], k[1]), ModularIndexing(idx[-1], 1, k[1])), out_size + [k[0] * k[1]])
    window_loader = window.make_loader()
    nan_at = Pointwise.create(device, torch.int64, lambda idx: ops.where(
        ops.isnan(window_loader(idx)), ops.index_expr(idx[-1], torch.int64), ops.constant(-1, torch.int64)),
        out_size + [k[0] * k[1]])
    values = make_reduction(window, [nd], "max", out_dtype=dtype)
    first = make_reduction(window, [nd], "argmax", out_dtype=torch.int64).make_loader()
    last_nan = make_reduction(nan_at, [nd], "max", out_dtype=torch.int64).make_loader()

    def index_fn(idx):
        nan = last_nan(idx)
        r = ops.where(ops.ge(nan, ops.constant(0, torch.int64)), nan, first(idx))
        return flat_index(idx, r)
    return values, Pointwise.create(device, torch.int64, index_fn, out_size)


def _window_element(lead, oh, ow, kh, kw, hw, out, ragged, load, fill):
    """Element (kh, kw) of adaptive window (oh, ow) of an input of H, W = `hw` pooled to `out`, read
    through `load`; `fill` past the window's end, checked along the dims `ragged` says may end early."""
    (h0, h1), (w0, w1) = _adaptive_bounds(oh, hw[0], out[0]), _adaptive_bounds(ow, hw[1], out[1])
    at = list(lead) + [h0 + kh, w0 + kw]
    conds = [_in_range(i, None, end) for i, end, check in ((h0 + kh, h1, ragged[0]), (w0 + kw, w1, ragged[1]))
             if check]
    if not conds:
        return load(at)
    return ops.masked(functools.reduce(ops.logical_and, conds), lambda: load(at), fill)


def _add_where(total, conds, value):
    """total + value() where every condition of `conds` holds (value() is not evaluated elsewhere)."""
    if not conds:
        return ops.add(total, value())
    return ops.add(total, ops.masked(functools.reduce(ops.logical_and, conds), value, 0.0))


def _adaptive_backward_geometry(grad, x, kind: str):
    """(input size, output size (H, W), windows over a position along each dim, dtype, compute dtype) of
    an adaptive pool's backward, or NotImplementedError where it is an ATen call."""
    if not x.get_dtype().is_floating_point:
        raise NotImplementedError(f"adaptive_{kind}_pool2d_backward of integers")
    size = [size_value(v) for v in x.get_size()]
    if len(size) not in (3, 4) or len(grad.get_size()) != len(size):
        raise NotImplementedError("adaptive pooling of a tensor that is not 3-D or 4-D")
    (h, w), out = size[-2:], [size_value(o) for o in grad.get_size()[-2:]]
    tries = [_windows_per_position(h, out[0]), _windows_per_position(w, out[1])]
    if tries[0] * tries[1] > MAX_WINDOW:
        raise NotImplementedError(f"adaptive {kind}-pool backward with many windows over each position")
    dtype = x.get_dtype()
    return size, out, tries, dtype, torch.float64 if dtype == torch.float64 else torch.float32


@register_lowering(aten.adaptive_max_pool2d_backward.default)
def adaptive_max_pool2d_backward(grad, x, indices):
    """grad_input[.., ih, iw] = sum of grad[.., oh, ow] over the windows whose saved index is (ih, iw): a
    gather over the few windows that hold the position, the first at floor(ih * OH / H)."""
    size, out, tries, dtype, cdt = _adaptive_backward_geometry(grad, x, "max")
    h, w = size[-2:]
    grad_loader, index_loader = grad.make_loader(), indices.make_loader()

    def inner_fn(idx):
        *lead, ih, iw = idx
        me = ops.index_expr(ih * w + iw, torch.int64)
        first = [FloorDiv(ih * out[0], h), FloorDiv(iw * out[1], w)]   # (inside the output)
        total = ops.constant(0.0, cdt)
        for jh in range(tries[0]):
            for jw in range(tries[1]):
                oh, ow = first[0] + jh, first[1] + jw

                def contribution(oh=oh, ow=ow):
                    at = list(lead) + [oh, ow]
                    g = grad_loader(at)
                    g = g if grad.get_dtype() == cdt else ops.to_dtype(g, cdt)
                    return ops.where(ops.eq(index_loader(at), me), g, ops.constant(0.0, cdt))
                conds = ([_in_range(oh, None, out[0])] if jh else []) + ([_in_range(ow, None, out[1])] if jw else [])
                total = _add_where(total, conds, contribution)
        return total if dtype == cdt else ops.to_dtype(total, dtype)
    return Pointwise.create(x.get_device(), dtype, inner_fn, size)


# ─── adaptive average pooling ────────────────────────────────────────────────────────────────────
#
# Kept whole (lowering/decompositions.py): torch's decomposition branches on `n % m == 0` and unrolls
# the longest window's length, each a guard, so Dynamo compiled a dynamic graph again for every new
# n // m (and Inductor's lowering specializes every size). Here the windows are the adaptive max
# pool's, their bounds floor divisions of the sizes, read at a bound of the longest one's length.

def _window_count(o, n, m):
    """How many elements adaptive window o of m over n holds, as an int64 `ops` value."""
    start, end = _adaptive_bounds(o, n, m)
    return ops.index_expr(end - start, torch.int64)


@register_lowering(aten._adaptive_avg_pool2d.default)
def adaptive_avg_pool2d(x, output_size):
    """Each output the mean of its window: a sum reduction over the longest window's k[0] x k[1]
    elements (0 past the window's own end where windows differ in length), divided by its count."""
    if not x.get_dtype().is_floating_point:
        raise NotImplementedError("adaptive_avg_pool2d of integers")   # (eager's kernel refuses them)
    size = [size_value(v) for v in x.get_size()]
    if len(size) not in (3, 4):
        raise NotImplementedError("adaptive pooling of a tensor that is not 3-D or 4-D")
    out = [size_value(o) for o in _pair(output_size)]
    if any(_holds(sympy.sympify(o) <= 0) or _holds(sympy.sympify(n) <= 0) for o, n in zip(out, size[-2:])):
        raise NotImplementedError("empty adaptive pooling")   # (ATen gives eager's result or error)
    (h, w), nd = size[-2:], len(size)
    k = [_longest_window(h, out[0]), _longest_window(w, out[1])]
    ragged = [not (isinstance(n, int) and isinstance(m, int) and n % m == 0) for n, m in ((h, out[0]), (w, out[1]))]
    x_loader, dtype = x.make_loader(), x.get_dtype()
    cdt = torch.float64 if dtype == torch.float64 else torch.float32

    def element(idx):
        *lead, oh, ow, r = idx
        kh, kw = FloorDiv(r, k[1]), ModularIndexing(r, 1, k[1])
        return _window_element(lead, oh, ow, kh, kw, (h, w), out, ragged, x_loader, 0.0)

    out_size = size[:-2] + out
    window = Pointwise.create(x.get_device(), dtype, element, out_size + [k[0] * k[1]])
    total = make_reduction(window, [nd], "sum").make_loader()   # (in the accumulation dtype)

    def inner_fn(idx):
        oh, ow = idx[-2:]
        count = ops.mul(_window_count(oh, h, out[0]), _window_count(ow, w, out[1]))
        mean = ops.truediv(ops.to_dtype(total(idx), cdt), ops.to_dtype(count, cdt))
        return mean if dtype == cdt else ops.to_dtype(mean, dtype)
    return Pointwise.create(x.get_device(), dtype, inner_fn, out_size)


@register_lowering(aten._adaptive_avg_pool2d_backward.default)
def adaptive_avg_pool2d_backward(grad, x):
    """grad_input[.., ih, iw] = sum of grad[.., oh, ow] / count(oh, ow) over the windows that hold
    (ih, iw): along a dim, from floor(ih * m / n) while a window starts at or before ih."""
    size, out, tries, dtype, cdt = _adaptive_backward_geometry(grad, x, "avg")
    h, w = size[-2:]
    grad_loader = grad.make_loader()

    def inner_fn(idx):
        *lead, ih, iw = idx
        first = [FloorDiv(ih * out[0], h), FloorDiv(iw * out[1], w)]   # (the first window holding it)
        total = ops.constant(0.0, cdt)
        for jh in range(tries[0]):
            for jw in range(tries[1]):
                oh, ow = first[0] + jh, first[1] + jw

                def share(oh=oh, ow=ow):
                    g = grad_loader(list(lead) + [oh, ow])
                    g = g if grad.get_dtype() == cdt else ops.to_dtype(g, cdt)
                    count = ops.mul(_window_count(oh, h, out[0]), _window_count(ow, w, out[1]))
                    return ops.truediv(g, ops.to_dtype(count, cdt))
                # a later window holds the position where it starts at or before it (so inside the output)
                conds = ([_in_range(ih - _adaptive_bounds(oh, h, out[0])[0], 0, None)] if jh else []) + \
                        ([_in_range(iw - _adaptive_bounds(ow, w, out[1])[0], 0, None)] if jw else [])
                total = _add_where(total, conds, share)
        return total if dtype == cdt else ops.to_dtype(total, dtype)
    return Pointwise.create(x.get_device(), dtype, inner_fn, size)

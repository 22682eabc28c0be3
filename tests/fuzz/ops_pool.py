"""The pooling family: the pools user code writes, with their parameters as users pass them (see ops.py).

    F.max_pool1d/2d       kernel, stride, padding (at most half the kernel), dilation, ceil_mode,
                          return_indices (the values, or the indices of an exact operand)
    F.avg_pool1d/2d       padding, ceil_mode, count_include_pad, divisor_override (2-D)
    F.adaptive_avg_pool1d/2d, F.adaptive_max_pool1d/2d (values, or indices)
                          output sizes that divide the input's, that do not, larger ones, None (2-D: that
                          dim kept) and sizes read off the operand (`{a}.shape[-1] // 2`)
    F.lp_pool1d/2d        norm_type 1, 2 or 3
    F.max_unpool1d/2d     of a max pool's values and indices (distinct windows: stride >= kernel)

Operands are live values of the right rank (batched or not; an integer one now and then) or a fresh
input, float32, float16 or bfloat16, channels-last now and then (an input's layout, or
`.contiguous(memory_format=...)` in the program). The parameters are drawn valid for eager where that is easy (padding <= kernel // 2, a
dilated window that fits the padded input); what eager still refuses the generator drops.
Indices and unpooling take exact operands only: a last-bit difference between a fused float
computation and eager's would move an argmax.
"""
from __future__ import annotations

from .ops import OPS, OpSpec

POOL_DTYPES = ["float32", "float32", "float16", "bfloat16"]


def _row(name: str, keeps_exact: bool = False):
    def register(make):
        OPS.append(OpSpec(name, "pooling", make, keeps_exact))
        return make
    return register


def _operand(c, nd: int, exact: bool | None = None) -> str | None:
    """A float value of rank nd + 1 (unbatched) or nd + 2 with no empty dim, or a fresh input; a 2-D
    pool's 4-D operand is channels-last now and then."""
    rng = c.rng

    def fits(v):
        return v.dim() in (nd + 1, nd + 2) and all(n > 0 for n in v.shape)
    # now and then an integer or bool value (eager's kernels take some; our lowerings leave them to ATen)
    a = c.pick(fits, exact=exact, float_only=rng.random() < 0.9) if rng.random() < 0.6 else None
    if a is None:
        from .generate import MAX_INPUTS
        if c.tensor_inputs() >= MAX_INPUTS:
            return None
        shape = ([rng.randint(1, 2)] if rng.random() < 0.7 else []) + [rng.randint(1, 3)]
        shape += [rng.randint(2, c.max_size + 3) for _ in range(nd)]
        layout = "channels_last" if len(shape) == 4 and rng.random() < 0.4 else None
        a = c.new_input(tuple(shape), rng.choice(POOL_DTYPES), layout=layout)
    if nd == 2 and c.t(a).dim() == 4 and rng.random() < 0.15:
        a = f"{a}.contiguous(memory_format=torch.channels_last)"
    return a


def _shape(c, a: str) -> tuple:
    """The operand's shape (an operand may be `x0.contiguous(...)`: its value's)."""
    return tuple(c.t(a.split(".")[0]).shape)


def _window(c, n: int, dilation: bool = True, padding: bool = True) -> tuple:
    """(kernel, stride, padding, dilation) along a dim of length n; stride None is the kernel's."""
    rng = c.rng
    # mostly small windows; now and then one of more elements than a max pool unrolls (pooling_lowerings)
    k = rng.randint(1, max(1, min(4 if rng.random() < 0.75 else 7, n + 1)))
    p = rng.randint(0, k // 2) if padding and rng.random() < 0.6 else 0
    d = 2 if dilation and k > 1 and rng.random() < 0.25 else 1
    if d * (k - 1) + 1 > n + 2 * p:
        d = 1
    s = rng.choice([None, None, 1, 2, 3])
    return k, s, p, d


def _arg(values: list, default) -> str | None:
    """An argument as users write it: one int where the dims agree, else a tuple; None where default."""
    if all(v == default for v in values):
        return None
    if all(v == values[0] for v in values):
        return str(values[0])
    return str(tuple(values))


def _windows(c, a: str, nd: int, dilation: bool = True, padding: bool = True) -> tuple[list, str]:
    """The windows of an nd-dim pool over `a`: (per dim (k, s, p, d), its arguments as source)."""
    dims = [_window(c, n, dilation, padding) for n in _shape(c, a)[-nd:]]
    if c.rng.random() < 0.5:   # one window for every dim: an int
        dims = [dims[0]] * nd
    ks, ss, ps, ds = (list(col) for col in zip(*dims))
    if any(s is None for s in ss):
        ss = [None] * nd
    args = [_arg(ks, None)]
    stride = None if ss[0] is None else _arg(ss, None)
    for name, value in (("stride", stride), ("padding", _arg(ps, 0)), ("dilation", _arg(ds, 1))):
        if value is not None:
            args.append(f"{name}={value}")
    return dims, ", ".join(args)


def _max_pool(c, nd: int, indices: bool) -> str | None:
    a = _operand(c, nd, exact=indices or None)
    if a is None:
        return None
    _, args = _windows(c, a, nd)
    if c.rng.random() < 0.4:
        args += ", ceil_mode=True"
    if indices or c.rng.random() < 0.2:
        return f"F.max_pool{nd}d({a}, {args}, return_indices=True)[{int(indices)}]"
    return f"F.max_pool{nd}d({a}, {args})"


def _avg_pool(c, nd: int) -> str | None:
    a = _operand(c, nd)
    if a is None:
        return None
    _, args = _windows(c, a, nd, dilation=False)
    rng = c.rng
    if rng.random() < 0.4:
        args += ", ceil_mode=True"
    if "padding" in args and rng.random() < 0.5 or rng.random() < 0.1:
        args += f", count_include_pad={rng.random() < 0.3}"
    if nd == 2 and rng.random() < 0.2:
        args += f", divisor_override={rng.randint(1, 5)}"
    return f"F.avg_pool{nd}d({a}, {args})"


def _adaptive_size(c, a: str, n: int, dim: int, allow_none: bool) -> str:
    """An adaptive output size for a dim of length n: a divisor of n, a size that does not divide
    it, one larger than n, the operand's own size halved, or (2-D) None, which keeps the dim."""
    rng = c.rng
    divisors = [m for m in range(1, n + 1) if n % m == 0]
    other = [m for m in range(2, n) if n % m]
    kind = rng.choice(["divides", "divides", "other", "other", "other", "larger", "half", "none"])
    if kind == "other" and other:
        return str(rng.choice(other))
    if kind == "larger":
        return str(n + rng.randint(1, 3))
    if kind == "half" and n >= 2:
        return f"{a}.shape[{dim}] // 2"
    if kind == "none" and allow_none:
        return "None"
    return str(rng.choice(divisors))


def _adaptive(c, kind: str, nd: int, indices: bool = False) -> str | None:
    a = _operand(c, nd, exact=indices or None)
    if a is None:
        return None
    shape = _shape(c, a)
    sizes = [_adaptive_size(c, a.split(".")[0], shape[d], d, nd == 2) for d in range(-nd, 0)]
    if nd == 1:
        out = sizes[0]
    elif sizes[0] == sizes[1] and c.rng.random() < 0.7 and sizes[0] != "None":
        out = sizes[0]
    else:
        out = f"({sizes[0]}, {sizes[1]})"
    if kind == "max" and (indices or c.rng.random() < 0.2):
        return f"F.adaptive_max_pool{nd}d({a}, {out}, return_indices=True)[{int(indices)}]"
    return f"F.adaptive_{kind}_pool{nd}d({a}, {out})"


for _nd in (1, 2):
    OPS.append(OpSpec(f"max_pool{_nd}d", "pooling", lambda c, nd=_nd: _max_pool(c, nd, False), True))
    OPS.append(OpSpec(f"max_pool{_nd}d_indices", "pooling", lambda c, nd=_nd: _max_pool(c, nd, True), True))
    OPS.append(OpSpec(f"avg_pool{_nd}d", "pooling", lambda c, nd=_nd: _avg_pool(c, nd)))
    OPS.append(OpSpec(f"adaptive_avg_pool{_nd}d", "pooling", lambda c, nd=_nd: _adaptive(c, "avg", nd)))
    OPS.append(OpSpec(f"adaptive_max_pool{_nd}d", "pooling", lambda c, nd=_nd: _adaptive(c, "max", nd), True))
    OPS.append(OpSpec(f"adaptive_max_pool{_nd}d_indices", "pooling",
                      lambda c, nd=_nd: _adaptive(c, "max", nd, indices=True), True))


@_row("lp_pool")
def _lp_pool(c):
    nd = c.rng.choice([1, 2, 2])
    a = _operand(c, nd)
    if a is None:
        return None
    _, args = _windows(c, a, nd, dilation=False, padding=False)
    args = f"{c.rng.choice([1, 2, 2, 3])}, {args}"
    if c.rng.random() < 0.3:
        args += ", ceil_mode=True"
    return f"F.lp_pool{nd}d({a}, {args})"


@_row("max_unpool", keeps_exact=True)
def _max_unpool(c):
    """A max pool's values put back where its indices say (windows that do not overlap: each index is
    written once), at the input's size or at unpool's default one."""
    nd = c.rng.choice([1, 2])
    a = _operand(c, nd, exact=True)
    if a is None:
        return None
    dims, _ = _windows(c, a, nd, dilation=False)
    ks = [k for k, _, _, _ in dims]
    ss = [max(k, s or k) for k, s, _, _ in dims]
    ps = [p for _, _, p, _ in dims]
    k, s, p = _arg(ks, None), _arg(ss, None), _arg(ps, 0) or "0"
    size = f", output_size={a.split('.')[0]}.shape[-{nd}:]" if c.rng.random() < 0.5 else ""
    return (f"F.max_unpool{nd}d(*F.max_pool{nd}d({a}, {k}, {s}, {p}, return_indices=True), "
            f"{k}, {s}, {p}{size})")

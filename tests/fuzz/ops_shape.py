"""The op table's second half: views, indexing, scans, sorts, matmuls and in-place ops (see ops.py)."""
from __future__ import annotations

import random

from .ops import OPS, OpSpec, row


# --- views and reshapes -------------------------------------------------------------------
def _factor(rng: random.Random, n: int) -> tuple:
    """A random shape with `n` elements (a -1 in it now and then)."""
    dims = []
    rest = n
    for _ in range(rng.randint(0, 2)):
        divisors = [d for d in range(1, 7) if rest % d == 0] if rest else [0, 1, 2]
        d = rng.choice(divisors)
        dims.append(d)
        rest = rest // d if d else rest
    if n == 0 and 0 not in dims:
        dims.append(0)
    else:
        dims.append(rest if n else rng.randint(1, 3))
    rng.shuffle(dims)
    if n and rng.random() < 0.3:
        dims[rng.randrange(len(dims))] = -1
    return tuple(dims)


def _slice(c, n: int) -> str:
    start = c.rng.randint(0, max(0, n - 1)) if c.rng.random() < 0.5 else ""
    stop = c.rng.randint(0, n) if c.rng.random() < 0.3 else ""
    step = c.rng.choice([1, 2, 3]) if c.rng.random() < 0.6 else ""
    return f"{start}:{stop}" + (f":{step}" if step else "")


@row("view", "view", keeps_exact=True)
def _view(c):
    a = c.pick()
    fn = c.rng.choice(["view", "reshape"])
    n = c.t(a).numel()
    dims = list(_factor(c.rng, n))
    if n and -1 not in dims:
        # its largest dim as -1 (the same shape here): the dim that takes up other sizes (sizes.py)
        dims[dims.index(max(dims))] = -1
    return f"{a}.{fn}{tuple(dims)}".replace(",)", ")")


@row("permute", "view", keeps_exact=True)
def _permute(c):
    a = c.pick(lambda v: v.dim() >= 2)
    if a is None:
        return None
    perm = list(range(c.t(a).dim()))
    c.rng.shuffle(perm)
    return f"{a}.permute{tuple(perm)}"


@row("transpose", "view", keeps_exact=True)
def _transpose(c):
    a = c.pick(lambda v: v.dim() >= 1)
    if a is None:
        return None
    if c.t(a).dim() <= 2 and c.rng.random() < 0.3:
        return f"{a}.t()"
    return f"{a}.transpose({c.dim(a)}, {c.dim(a)})"


@row("expand", "view", keeps_exact=True)
def _expand(c):
    a = c.pick()
    # a dim that is not broadcast keeps its size: -1, whatever size it has (sizes.py)
    shape = [c.rng.randint(1, 4) if n == 1 else -1 for n in c.t(a).shape]
    if c.rng.random() < 0.4:
        shape.insert(0, c.rng.randint(0, 3))
    return f"{a}.expand({', '.join(map(str, shape))})" if shape else f"{a}.expand(())"


@row("slice", "view", keeps_exact=True)
def _slice_row(c):
    a = c.pick(lambda v: v.dim() >= 1)
    if a is None:
        return None
    t = c.t(a)
    parts = [_slice(c, n) for n in t.shape[:c.rng.randint(1, t.dim())]]
    if c.rng.random() < 0.2:
        parts[0] = str(c.rng.randint(-t.shape[0], max(0, t.shape[0] - 1))) if t.shape[0] else ":"
    return f"{a}[{', '.join(parts)}]"


@row("narrow_select", "view", keeps_exact=True)
def _narrow(c):
    a = c.pick(lambda v: v.dim() >= 1 and min(v.shape) > 0)
    if a is None:
        return None
    d = c.dim(a)
    n = c.t(a).shape[d]
    if c.rng.random() < 0.5:
        return f"{a}.select({d}, {c.rng.randrange(n)})"
    start = c.rng.randrange(n)
    return f"{a}.narrow({d}, {start}, {c.rng.randint(0, n - start)})"


for _name, _tpl in [("unsqueeze", "{a}.unsqueeze({u})"), ("squeeze_dim", "{a}.squeeze({d})"),
                    ("squeeze", "{a}.squeeze()"), ("flatten", "{a}.flatten()"),
                    ("flatten_from", "torch.flatten({a}, {d})"), ("contiguous", "{a}.contiguous()"),
                    ("clone", "{a}.clone()"), ("movedim", "torch.movedim({a}, {d}, 0)"),
                    ("diagonal", "torch.diagonal({a}, 0, {d}, {e})"), ("unbind", "torch.unbind({a}, {d})[0]"),
                    ("split", "torch.split({a}, 2, {d})[-1]"), ("chunk", "torch.chunk({a}, 3, {d})[0]"),
                    ("unflatten", "{a}.unflatten({d}, (1, -1))"), ("mT", "{a}.mT"),
                    ("flip", "torch.flip({a}, ({d},))"), ("roll", "torch.roll({a}, 1, {d})"),
                    ("repeat", "{a}.repeat({r})"), ("tril", "torch.tril({a})"), ("triu", "torch.triu({a}, 1)")]:
    def _make(c, _tpl=_tpl):
        a = c.pick(lambda v: v.dim() >= 1)
        if a is None:
            return None
        n = c.t(a).dim()
        d = c.dim(a)
        e = c.rng.choice([x for x in range(n) if x != d % n] or [d])
        reps = tuple(c.rng.choice([1, 1, 2]) for _ in range(n + c.rng.randint(0, 1)))
        return _tpl.format(a=a, d=d, e=e, u=c.rng.randint(-n - 1, n), r=reps)
    OPS.append(OpSpec(_name, "view", _make, True))


# --- indexing, gather/scatter, cat/pad ----------------------------------------------------
@row("gather", "indexing", keeps_exact=True)
def _gather(c):
    a = c.pick(lambda v: v.dim() >= 1 and min(v.shape) > 0)
    if a is None:
        return None
    d = c.dim(a)
    shape = list(c.t(a).shape)
    shape[d] = c.rng.randint(1, 4)
    idx = c.index_input(c.t(a).shape[d], shape)
    return f"torch.gather({a}, {d}, {idx})"


@row("scatter", "indexing", keeps_exact=True)
def _scatter(c):
    # distinct indices along the dim: with duplicates eager's result is unspecified
    kind = c.rng.choice(["scatter", "scatter_add", "scatter_reduce_amax"])
    # amax's backward splits the gradient between self and src where they tie: a self rounded
    # differently from eager's (a bfloat16 prod, seed 4269) ties where eager's does not
    a = c.pick(lambda v: v.dim() >= 1 and min(v.shape) > 0, exact=kind == "scatter_reduce_amax" or None)
    if a is None:
        return None
    d = c.dim(a)
    shape = list(c.t(a).shape)
    shape[d] = c.rng.randint(1, shape[d])
    idx = c.index_input(c.t(a).shape[d], shape, unique_along=d)
    src = c.new_input(tuple(shape), str(c.t(a).dtype).split(".")[-1], layout="contiguous")
    if kind == "scatter_reduce_amax":
        return f"torch.scatter_reduce({a}, {d}, {idx}, {src}, 'amax', include_self={c.rng.random() < 0.5})"
    return f"torch.{kind}({a}, {d}, {idx}, {src})"


@row("index_select", "indexing", keeps_exact=True)
def _index_select(c):
    a = c.pick(lambda v: v.dim() >= 1)
    if a is None:
        return None
    d = c.dim(a)
    idx = c.index_input(c.t(a).shape[d], (c.rng.randint(0, 4),))
    if idx is None:
        return None
    if c.rng.random() < 0.4:
        return f"{a}[{idx}]" if c.rng.random() < 0.5 or c.t(a).dim() < 2 else f"{a}[:, {idx}]"
    return f"torch.index_select({a}, {d}, {idx})"


@row("index_put", "indexing", keeps_exact=True)
def _index_put(c):
    a = c.pick(lambda v: v.dim() >= 1 and v.shape[0] > 0)
    if a is None:
        return None
    k = c.rng.randint(1, c.t(a).shape[0])
    acc = c.rng.random() < 0.3
    idx = c.index_input(c.t(a).shape[0], (k,), unique_along=None if acc else 0)
    v = c.new_input((k,) + tuple(c.t(a).shape[1:]), str(c.t(a).dtype).split(".")[-1], layout="contiguous")
    return f"torch.index_put({a}, ({idx},), {v}, accumulate={acc})"


@row("cat", "indexing", keeps_exact=True)
def _cat(c):
    a = c.pick(lambda v: v.dim() >= 1)
    if a is None:
        return None
    d = c.dim(a)
    shape = list(c.t(a).shape)
    shape[d] = c.rng.randint(0, 3)
    others = [c.pick(lambda v: v.dim() == len(shape) and all(
        x == y for i, (x, y) in enumerate(zip(v.shape, shape)) if i != d % len(shape)))]
    if others[0] is None or c.rng.random() < 0.5:
        others = [c.new_input(tuple(shape), c.dtype(str(c.t(a).dtype).split(".")[-1]))]
    fn = "torch.cat" if c.rng.random() < 0.8 else "torch.stack"
    if fn == "torch.stack":
        return f"torch.stack([{a}, {a}], {d})"
    return f"{fn}([{a}, {others[0]}], {d})"


@row("pad", "indexing", keeps_exact=True)
def _pad(c):
    a = c.pick(lambda v: v.dim() >= 1)
    if a is None:
        return None
    pads = tuple(c.rng.randint(-1, 2) for _ in range(2 * c.rng.randint(1, min(2, c.t(a).dim()))))
    if c.rng.random() < 0.2 and c.t(a).is_floating_point():
        return f"F.pad({a}, {pads[:2]}, mode='replicate')"
    return f"F.pad({a}, {pads}, value={c.rng.choice(['0.0', '1.5', '-1'])})"


# --- scans, sort, topk --------------------------------------------------------------------
for _name, _tpl, _ex, _keep in [("cumsum", "torch.cumsum({a}, {d})", False, False),
                                ("cumprod", "torch.cumprod({a}.clamp(-1.5, 1.5), {d})", False, False),
                                ("logcumsumexp", "torch.logcumsumexp({a}, {d})", False, False),
                                ("cummax", "torch.cummax({a}, {d}).values", False, True),
                                ("cummin", "torch.cummin({a}, {d}).values", False, True),
                                # indices of exact values: a tie rounded differently would move them
                                ("cummax_indices", "torch.cummax({a}, {d}).indices", True, True),
                                ("cummin_indices", "torch.cummin({a}, {d}).indices", True, True),
                                ("cumsum_int", "torch.cumsum({a}, {d}, dtype=torch.int64)", True, True)]:
    def _make(c, _tpl=_tpl, _ex=_ex):
        a = c.pick(exact=_ex)
        return None if a is None else _tpl.format(a=a, d=c.dim(a) or 0)
    OPS.append(OpSpec(_name, "scan", _make, _keep))
for _name, _tpl, _ex in [("sort_values", "torch.sort({a}, dim={d}, descending={b}, stable=True).values", False),
                         ("sort_indices", "torch.sort({a}, dim={d}, descending={b}, stable=True).indices", True),
                         ("argsort", "torch.argsort({a}, dim={d}, stable=True)", True),
                         ("topk_values", "torch.topk({a}, {k}, dim={d}, largest={b}).values", False)]:
    def _make(c, _tpl=_tpl, _ex=_ex):
        a = c.pick(exact=_ex)
        if a is None:
            return None
        d = c.dim(a) or 0
        n = c.t(a).shape[d] if c.t(a).dim() else 1
        b, k = c.rng.random() < 0.5, c.rng.randint(0, n)
        # topk(k=0) of a 0-d tensor returns a 0-d tensor of uninitialized memory on CUDA (seen on the H100)
        return _tpl.format(a=a, d=d, b=b, k=k if c.t(a).dim() else 1)
    OPS.append(OpSpec(_name, "sort", _make, True))


# --- matmuls ------------------------------------------------------------------------------
def _matrix(c, shape, like: str) -> str:
    """An existing float value of this shape and dtype, or a new input."""
    dt = str(c.t(like).dtype)
    found = c.pick(lambda v: tuple(v.shape) == tuple(shape) and str(v.dtype) == dt)
    return found if found is not None and c.rng.random() < 0.5 else \
        c.new_input(tuple(shape), dt.split(".")[-1], low=-1, high=1)


@row("mm", "matmul")
def _mm(c):
    a = c.pick(lambda v: v.dim() == 2, float_only=True)
    if a is None:
        return None
    b = _matrix(c, (c.t(a).shape[1], c.size()), a)
    return c.rng.choice([f"torch.mm({a}, {b})", f"{a} @ {b}"])


@row("bmm", "matmul")
def _bmm(c):
    a = c.pick(lambda v: v.dim() == 3, float_only=True)
    if a is None:
        return None
    b = _matrix(c, (c.t(a).shape[0], c.t(a).shape[2], c.size()), a)
    return f"torch.bmm({a}, {b})"


@row("matmul", "matmul")
def _matmul(c):
    a = c.pick(lambda v: v.dim() >= 1, float_only=True)
    if a is None:
        return None
    t = c.t(a)
    k = t.shape[-1]
    rank = c.rng.randint(1, 3)
    shape = (k,) if rank == 1 else tuple(t.shape[-3:-2][:rank - 2]) + (k, c.size())
    return f"torch.matmul({a}, {_matrix(c, shape, a)})"


@row("linear", "matmul")
def _linear(c):
    a = c.pick(lambda v: v.dim() >= 1, float_only=True)
    if a is None:
        return None
    n = c.size()
    w = _matrix(c, (n, c.t(a).shape[-1]), a)
    b = _matrix(c, (n,), a) if c.rng.random() < 0.6 else None
    return f"F.linear({a}, {w}, {b})"


@row("addmm", "matmul")
def _addmm(c):
    a = c.pick(lambda v: v.dim() == 2, float_only=True)
    if a is None:
        return None
    n = c.size()
    b = _matrix(c, (c.t(a).shape[1], n), a)
    bias = _matrix(c, (n,), a)
    return f"torch.addmm({bias}, {a}, {b}, beta=0.5)"


# --- in-place ops on inputs and intermediates ---------------------------------------------
def _target(c):
    """An input half the time (input mutation), else any value (maybe a view of an input)."""
    ins = [n for n in c.env if n.startswith("x")]
    if ins and c.rng.random() < 0.5:
        a = c.rng.choice(ins)
    else:
        a = c.pick()
    if a is not None and c.rng.random() < 0.2 and c.t(a).dim() >= 1:
        return f"{a}[{_slice(c, c.t(a).shape[0])}]"
    return a


def _inplace(name, template, keeps_exact=False, partner=False):
    def make(c):
        a = _target(c)
        if a is None:
            return None
        b = c.partner(a.split("[")[0], to_shape_of=True) if partner else None
        if b is not None and "[" in a:
            return None
        return template.format(a=a, b=b)
    OPS.append(OpSpec(name, "inplace", make, keeps_exact, inplace=True))


for _name, _tpl, _keep, _partner in [("add_", "{a}.add_({b})", False, True),
                                     ("mul_", "{a}.mul_({b})", False, True),
                                     ("mul_scalar_", "{a}.mul_(2)", True, False),
                                     ("clamp_", "{a}.clamp_(-1, 1)", True, False),
                                     ("copy_", "{a}.copy_({b})", True, True),
                                     ("fill_", "{a}.fill_(0.5)", True, False),
                                     ("zero_", "{a}.zero_()", True, False),
                                     ("relu_", "{a}.relu_()", True, False),
                                     ("sigmoid_", "{a}.sigmoid_()", False, False)]:
    _inplace(_name, _tpl, _keep, _partner)


@row("index_put_", "inplace", keeps_exact=True, inplace=True)
def _index_put_(c):
    a = _target(c)
    if a is None or "[" in a or c.t(a).dim() == 0 or c.t(a).shape[0] == 0:
        return None
    k = c.rng.randint(1, c.t(a).shape[0])
    idx = c.index_input(c.t(a).shape[0], (k,), unique_along=0)
    v = c.new_input((k,) + tuple(c.t(a).shape[1:]), str(c.t(a).dtype).split(".")[-1], layout="contiguous")
    return f"{a}.index_put_(({idx},), {v})"

"""The op table: every op the fuzzer draws, as (name, family, make) rows.

    OPS: list[OpSpec]; FAMILY_WEIGHTS: how often each family is drawn; pick_op(rng) -> OpSpec

`make(ctx)` returns a Python expression over live values (by name), or None when no operand fits.
It may add inputs (index tensors, broadcast partners). An expression eager cannot run is dropped by
the generator, so a row need not rule out every bad combination itself. To add an op: add a row.

keeps_exact: the result has no rounding of its own (views, data movement, min/max, neg), so it is
exact when its operands are. Rows that take `exact=True` operands are discontinuous in them.
"""
from __future__ import annotations

import dataclasses
import random
from typing import Callable

FAMILY_WEIGHTS = {"pointwise": 3, "binary": 3, "convert": 1, "reduction": 2, "norm": 1.5, "view": 3,
                  "indexing": 2.5, "scan": 1, "sort": 1, "matmul": 1.5, "inplace": 2}


@dataclasses.dataclass(frozen=True)
class OpSpec:
    name: str
    family: str
    make: Callable
    keeps_exact: bool = False
    inplace: bool = False


OPS: list[OpSpec] = []


def row(name: str, family: str, keeps_exact: bool = False, inplace: bool = False):
    def register(make):
        OPS.append(OpSpec(name, family, make, keeps_exact, inplace))
        return make
    return register


def unary(name, template, family="pointwise", keeps_exact=False, exact=False, float_only=False,
          pred=None):
    """A row applying `template` ("torch.sin({a})") to one random value."""
    def make(c):
        a = c.pick(pred, exact=exact, float_only=float_only)
        return None if a is None else template.format(a=a)
    OPS.append(OpSpec(name, family, make, keeps_exact))


def binary(name, template, keeps_exact=False, exact=False, family="binary"):
    """A row applying `template` ("{a} + {b}") to a value and a broadcastable partner."""
    def make(c):
        a = c.pick(exact=exact)
        if a is None:
            return None
        b = c.partner(a)
        if exact and not c.exact[b]:
            return None
        if c.rng.random() < 0.5:
            a, b = b, a
        return template.format(a=a, b=b)
    OPS.append(OpSpec(name, family, make, keeps_exact))


def _dims(c, a) -> str:
    """A reduction's dims: a dim, a tuple of dims, or the whole tensor."""
    n = c.t(a).dim()
    r = c.rng.random()
    if n == 0 or r < 0.2:
        return "None" if r < 0.1 or n == 0 else "()"
    dims = c.rng.sample(range(n), c.rng.randint(1, min(2, n)))
    if len(dims) == 1 and c.rng.random() < 0.5:
        return str(dims[0] - (n if c.rng.random() < 0.3 else 0))
    return str(tuple(dims))


def _kd(c) -> str:
    return str(c.rng.random() < 0.4)


# --- pointwise math, one operand ----------------------------------------------------------
for _name, _tpl in [("sin", "torch.sin({a})"), ("cos", "torch.cos({a})"), ("tanh", "torch.tanh({a})"),
                    ("sigmoid", "torch.sigmoid({a})"), ("exp", "torch.exp({a}.clamp(-4, 4))"),
                    ("log", "torch.log({a}.abs() + 0.5)"), ("sqrt", "torch.sqrt({a}.abs() + 0.1)"),
                    ("rsqrt", "torch.rsqrt({a}.abs() + 0.5)"), ("erf", "torch.erf({a})"),
                    ("reciprocal", "torch.reciprocal({a}.abs() + 0.5)"), ("gelu", "F.gelu({a})"),
                    ("gelu_tanh", "F.gelu({a}, approximate='tanh')"), ("silu", "F.silu({a})"),
                    ("softplus", "F.softplus({a})"), ("elu", "F.elu({a})"), ("atan", "torch.atan({a})"),
                    ("log1p", "torch.log1p({a}.abs())"), ("expm1", "torch.expm1({a}.clamp(-3, 3))"),
                    ("square", "torch.square({a})"), ("pow_scalar", "{a}.abs().pow(1.5)"),
                    ("mul_scalar", "{a} * 1.5"), ("add_int_scalar", "{a} + 2"),
                    ("rsub_scalar", "1 - {a}"), ("div_scalar", "{a} / 4")]:
    unary(_name, _tpl)
for _name, _tpl in [("neg", "torch.neg({a})"), ("abs", "torch.abs({a})"), ("relu", "torch.relu({a})"),
                    ("clamp", "{a}.clamp(-0.5, 1)"), ("clamp_min", "torch.clamp_min({a}, 0)"),
                    ("leaky_relu", "F.leaky_relu({a}, 0.25)"), ("hardtanh", "F.hardtanh({a})")]:
    unary(_name, _tpl, keeps_exact=True)
# discontinuous: only on exact operands
for _name, _tpl in [("floor", "torch.floor({a})"), ("ceil", "torch.ceil({a})"), ("round", "torch.round({a})"),
                    ("trunc", "torch.trunc({a})"), ("sign", "torch.sign({a})"),
                    ("logical_not", "torch.logical_not({a})"), ("bitwise_not", "torch.bitwise_not({a})"),
                    ("isnan_or_pos", "torch.isnan({a}) | ({a} > 0)")]:
    unary(_name, _tpl, keeps_exact=True, exact=True)

# --- dtype conversions --------------------------------------------------------------------
for _dt in ("float32", "float16", "bfloat16", "float64"):
    unary(f"to_{_dt}", f"{{a}}.to(torch.{_dt})", family="convert", keeps_exact=False)
for _dt in ("int32", "int64", "bool", "uint8"):
    unary(f"to_{_dt}", f"{{a}}.to(torch.{_dt})", family="convert", keeps_exact=True, exact=True,
          pred=(lambda v: not v.is_floating_point() or v.abs().max() < 100 if v.numel() else True)
          if _dt == "uint8" else None)

# --- pointwise math, two operands with broadcasting and type promotion ----------------------
for _name, _tpl in [("add", "{a} + {b}"), ("sub", "{a} - {b}"), ("mul", "{a} * {b}"),
                    ("add_alpha", "torch.add({a}, {b}, alpha=2)"), ("div", "{a} / ({b}.abs() + 1)"),
                    ("atan2", "torch.atan2({a}, {b})"), ("hypot", "torch.hypot({a}.float(), {b}.float())"),
                    ("lerp", "torch.lerp({a}, {b}, 0.25)")]:
    binary(_name, _tpl)
for _name, _tpl in [("maximum", "torch.maximum({a}, {b})"), ("minimum", "torch.minimum({a}, {b})")]:
    binary(_name, _tpl, keeps_exact=True)
for _name, _tpl in [("eq", "{a} == {b}"), ("lt", "{a} < {b}"), ("ge", "{a} >= {b}"), ("ne", "{a} != {b}"),
                    ("logical_and", "torch.logical_and({a}, {b})"), ("logical_xor", "torch.logical_xor({a}, {b})"),
                    ("bitwise_and", "{a} & {b}"), ("bitwise_or", "{a} | {b}"), ("bitwise_xor", "{a} ^ {b}"),
                    ("remainder", "torch.remainder({a}, {b}.abs() + 1)"),
                    ("floor_divide", "torch.floor_divide({a}, {b}.abs() + 1)"),
                    ("where_cmp", "torch.where({a} > 0, {a}, {b})")]:
    binary(_name, _tpl, keeps_exact=True, exact=True)


@row("where", "indexing", keeps_exact=True)
def _where(c):
    cond = c.pick(lambda v: v.dtype.is_floating_point is False and str(v.dtype) == "torch.bool")
    if cond is None:
        return None
    a = c.partner(cond)
    return f"torch.where({cond}, {a}, {c.partner(a)})"


@row("masked_fill", "indexing", keeps_exact=True)
def _masked_fill(c):
    a = c.pick()
    cond = c.pick(lambda v: str(v.dtype) == "torch.bool")
    return None if cond is None else f"{a}.masked_fill({cond}, {c.rng.choice(['0', '-1.5', 'True'])})"


# --- reductions ---------------------------------------------------------------------------
for _name, _tpl, _ex, _keep in [
        ("sum", "torch.sum({a}, {d}, keepdim={k})", False, False),
        ("sum_dtype", "torch.sum({a}, {d}, keepdim={k}, dtype=torch.float32)", False, False),
        ("mean", "torch.mean({a}, {d}, keepdim={k})", False, False),
        ("amax", "torch.amax({a}, {d}, keepdim={k})", False, True),
        ("amin", "torch.amin({a}, {d}, keepdim={k})", False, True),
        ("prod", "torch.prod({a}.clamp(-1.5, 1.5), {d1}, keepdim={k})", False, False),
        ("var", "torch.var({a}, {d}, correction=0, keepdim={k})", False, False),
        ("std", "torch.std({a}, {d}, keepdim={k})", False, False),
        ("logsumexp", "torch.logsumexp({a}, {d}, keepdim={k})", False, False),
        ("vector_norm", "torch.linalg.vector_norm({a}, dim={d}, keepdim={k})", False, False),
        ("max_dim", "torch.max({a}, {d1}, keepdim={k}).values", False, True),
        ("argmax", "torch.argmax({a}, {d1}, keepdim={k})", True, True),
        ("argmin", "torch.argmin({a}, {d1}, keepdim={k})", True, True),
        ("any", "torch.any({a}, {d1}, keepdim={k})", True, True),
        ("all", "torch.all({a})", True, True),
        ("count_nonzero", "torch.count_nonzero({a}, {d1})", True, True)]:
    def _make(c, _tpl=_tpl, _ex=_ex):
        a = c.pick(exact=_ex)
        if a is None:
            return None
        n = c.t(a).dim()
        d1 = 0 if n == 0 else c.dim(a)
        return _tpl.format(a=a, d=_dims(c, a), d1=d1, k=_kd(c))
    OPS.append(OpSpec(_name, "reduction", _make, _keep))


# --- normalizations -----------------------------------------------------------------------
@row("softmax", "norm")
def _softmax(c):
    a = c.pick(float_only=True)
    if a is None or c.t(a).dim() == 0:
        return None
    fn = c.rng.choice(["torch.softmax", "F.log_softmax", "torch.log_softmax"])
    dt = ", dtype=torch.float32" if c.rng.random() < 0.2 else ""
    return f"{fn}({a}, {c.dim(a)}{dt})"


def _affine(c, a, shape, bias=True) -> tuple:
    dt = str(c.t(a).dtype).split(".")[-1]
    w = c.new_input(shape, dt, layout="contiguous", low=0.5, high=1.5) if c.rng.random() < 0.7 else "None"
    b = c.new_input(shape, dt, layout="contiguous") if bias and c.rng.random() < 0.7 else "None"
    return w, b


@row("layer_norm", "norm")
def _layer_norm(c):
    a = c.pick(lambda v: v.dim() >= 1, float_only=True)
    if a is None:
        return None
    shape = tuple(c.t(a).shape[-c.rng.randint(1, min(2, c.t(a).dim())):])
    w, b = _affine(c, a, shape)
    return f"F.layer_norm({a}, {shape}, {w}, {b})"


@row("rms_norm", "norm")
def _rms_norm(c):
    a = c.pick(lambda v: v.dim() >= 1, float_only=True)
    if a is None:
        return None
    shape = tuple(c.t(a).shape[-1:])
    w, _ = _affine(c, a, shape, bias=False)
    return f"F.rms_norm({a}, {shape}, {w}, eps=1e-5)"


@row("batch_norm", "norm")
def _batch_norm(c):
    a = c.pick(lambda v: v.dim() >= 2, float_only=True)
    if a is None:
        return None
    ch = (c.t(a).shape[1],)
    w, b = _affine(c, a, ch)
    training = c.rng.random() < 0.7
    if c.rng.random() < 0.6 or not training:
        rm = c.new_input(ch, "float32", layout="contiguous")
        rv = c.new_input(ch, "float32", layout="contiguous", low=0.5, high=1.5)
    else:
        rm = rv = "None"
    return f"F.batch_norm({a}, {rm}, {rv}, {w}, {b}, training={training}, momentum=0.1)"


@row("group_norm", "norm")
def _group_norm(c):
    a = c.pick(lambda v: v.dim() >= 2 and v.shape[1] > 0, float_only=True)
    if a is None:
        return None
    ch = c.t(a).shape[1]
    groups = c.rng.choice([g for g in range(1, ch + 1) if ch % g == 0])
    w, b = _affine(c, a, (ch,))
    return f"F.group_norm({a}, {groups}, {w}, {b})"


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
    return f"{a}.{fn}{_factor(c.rng, c.t(a).numel())}".replace(",)", ")")


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
    shape = [c.rng.randint(1, 4) if n == 1 else n for n in c.t(a).shape]
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
    a = c.pick(lambda v: v.dim() >= 1 and min(v.shape) > 0)
    if a is None:
        return None
    d = c.dim(a)
    shape = list(c.t(a).shape)
    shape[d] = c.rng.randint(1, shape[d])
    idx = c.index_input(c.t(a).shape[d], shape, unique_along=d)
    src = c.new_input(tuple(shape), str(c.t(a).dtype).split(".")[-1], layout="contiguous")
    kind = c.rng.choice(["scatter", "scatter_add", "scatter_reduce_amax"])
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
        return _tpl.format(a=a, d=d, b=c.rng.random() < 0.5, k=c.rng.randint(0, n))
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


_BY_FAMILY: dict[str, list[OpSpec]] = {}
for _spec in OPS:
    _BY_FAMILY.setdefault(_spec.family, []).append(_spec)


def pick_op(rng: random.Random) -> OpSpec:
    fams = [f for f in FAMILY_WEIGHTS if f in _BY_FAMILY]
    family = rng.choices(fams, weights=[FAMILY_WEIGHTS[f] for f in fams])[0]
    return rng.choice(_BY_FAMILY[family])

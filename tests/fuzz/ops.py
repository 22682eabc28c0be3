"""The op table: every op the fuzzer draws, as (name, family, make) rows.

    OPS: list[OpSpec]; FAMILY_WEIGHTS: how often each family is drawn; pick_op(rng) -> OpSpec

`make(ctx)` returns a Python expression over live values (by name), or None when no operand fits.
It may add inputs (index tensors, broadcast partners). An expression eager cannot run is dropped by
the generator, so a row need not rule out every bad combination itself. To add an op: add a row.

keeps_exact: the result has no rounding of its own (views, data movement, min/max, neg), so it is
exact when its operands are. Rows that take `exact=True` operands are discontinuous in them.
domain: a condition on the operand's values that the draw checked (a float cast to uint8 stays in
range); sizes.py checks it again at the other sizes --dynamic calls a program at.

A size an op's arguments take from an operand is written as the operand's size (`{a}.shape[-2:]`, -1)
where that is how the op reads, not as the number it is now: under --dynamic the program is also
called at other input sizes (sizes.py), where a literal would tie the dim to its traced size.
"""
from __future__ import annotations

import dataclasses
import os
import random
from typing import Callable

FAMILY_WEIGHTS = {"pointwise": 3, "binary": 3, "convert": 1, "reduction": 2, "norm": 1.5, "view": 3,
                  "indexing": 2.5, "scan": 1, "sort": 1, "matmul": 1.5, "inplace": 2, "attention": 0.6,
                  # max, average, adaptive and Lp pools, unpooling (ops_pool.py); added in session 42, which
                  # moved every seed's draws (a new nonzero weight changes what each random draw picks)
                  "pooling": 0.8,
                  # Python int and float arguments (ops_scalar.py): off unless asked for (`--weight scalar=3`);
                  # last and 0, so that the other families' draws, and every seed's programs, stay as they were
                  "scalar": 0,
                  # flex_attention calls with score_mod / mask_mod lambdas (ops_flex.py): off unless asked for
                  # (`--weight flex=40`); last and 0, as scalar, so every seed's programs stay as they were
                  "flex": 0}
# `--weight FAMILY=W` (cli.py) passes its changes to the workers in the environment
for _item in filter(None, os.environ.get("MINI_FUZZ_WEIGHTS", "").split(",")):
    _family, _, _weight = _item.partition("=")
    if _family not in FAMILY_WEIGHTS:
        raise ValueError(f"--weight {_item}: no op family {_family!r} ({', '.join(FAMILY_WEIGHTS)})")
    FAMILY_WEIGHTS[_family] = float(_weight)


@dataclasses.dataclass(frozen=True)
class OpSpec:
    name: str
    family: str
    make: Callable
    keeps_exact: bool = False
    inplace: bool = False
    domain: Callable | None = None


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
    OPS.append(OpSpec(name, family, make, keeps_exact, domain=pred))


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
                    ("square", "torch.square({a})"), ("pow_scalar", "{a}.abs().pow(1.5)"), ("pow_cube", "{a}.pow(3)"),
                    ("pow_minus_two", "({a}.abs() + 0.5).pow(-2.0)"),
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
    k = c.rng.randint(1, min(2, c.t(a).dim()))
    w, b = _affine(c, a, tuple(c.t(a).shape[-k:]))
    return f"F.layer_norm({a}, {a}.shape[-{k}:], {w}, {b})"


@row("rms_norm", "norm")
def _rms_norm(c):
    a = c.pick(lambda v: v.dim() >= 1, float_only=True)
    if a is None:
        return None
    w, _ = _affine(c, a, tuple(c.t(a).shape[-1:]), bias=False)
    return f"F.rms_norm({a}, {a}.shape[-1:], {w}, eps=1e-5)"


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


# --- attention written out (what attention/match.py finds and replaces) -----------------------
@row("attention", "attention")
def _attention(c):
    """softmax(modification(q @ kᵀ)) @ v over fresh q, k, v, in one of the spellings and with one of
    the modifications the matcher knows (and some it must refuse)."""
    rng = c.rng
    if c.tensor_inputs() > 2:   # q, k, v and a mask or a bias: at most MAX_INPUTS (6) in all
        return None
    dt = rng.choice(["float32", "float32", "float16", "bfloat16"])
    b, h, length, e = rng.randint(1, 2), rng.randint(1, 3), rng.randint(1, c.max_size), rng.randint(1, 5)
    keys = length if rng.random() < 0.7 else rng.randint(1, c.max_size)
    q = c.new_input((b, h, length, e), dt, layout="contiguous")
    k = c.new_input((b, h, keys, e), dt, layout=rng.choice(["contiguous", "transposed"]))
    v = c.new_input((b, h, keys, rng.randint(1, 5)), dt, layout="contiguous")
    scale = rng.choice(["", " * 0.5", " / 2.0", f" * {e ** -0.5!r}"])
    s = rng.choice([f"({q} @ {k}.transpose(-2, -1){scale})", f"(torch.matmul({q}, {k}.transpose(-1, -2)){scale})",
                    f"(torch.einsum('bhld,bhsd->bhls', {q}, {k}){scale})"])
    n_rows, n_cols = f"{q}.shape[-2]", f"{k}.shape[-2]"    # L and S, as read from q and k
    rows, cols = f"torch.arange({n_rows}, device={q}.device)", f"torch.arange({n_cols}, device={q}.device)"
    causal = rng.choice([f"torch.ones({n_rows}, {n_cols}, dtype=torch.bool, device={q}.device).tril()",
                         f"({cols}[None, :] <= {rows}[:, None])"])
    fill = rng.choice(['float("-inf")', f"torch.finfo({q}.dtype).min", "-1000.0", "-30.0"])
    kind = rng.choice(["plain", "causal", "causal", "causal_data", "window", "padding", "bias", "softcap", "gate"])
    if kind == "causal_data":
        # a mask held as data, GPT-2's `bias` buffer: a lower triangle of ones, larger than the scores and
        # sliced (read as `j <= i` under a guard), or with one entry above the diagonal set (data, t0)
        rows_n, cols_n = length + rng.randint(0, 2), keys + rng.randint(0, 2)
        tril = [r >= col for r in range(rows_n) for col in range(cols_n)]
        if rng.random() < 0.3 and cols_n > 1:
            tril[cols_n - 1] = True          # row 0 sees the last key
        mask = c.new_input((1, 1, rows_n, cols_n), "bool", values=tril)
        sliced = f"{mask}[:, :, :{n_rows}, :{n_cols}]"
        s = f"{s}.masked_fill(~{sliced}, {fill})" if rng.random() < 0.5 else f"torch.where({sliced}, {s}, {fill})"
    elif kind == "causal":
        s = f"{s}.masked_fill(~{causal}, {fill})" if rng.random() < 0.5 else f"torch.where({causal}, {s}, {fill})"
    elif kind == "window":
        s = f"{s}.masked_fill(({rows}[:, None] - {cols}[None, :]).abs() > 1, {fill})"
    elif kind == "padding":
        keep = c.new_input((b, 1, 1, keys), "bool")
        s = f"{s}.masked_fill(~{keep}, {fill})"
    elif kind == "bias":
        bias = c.new_input(rng.choice([(b, 1, 1, keys), (1, h, length, keys)]), dt)
        s = f"({s} + {bias})"
    elif kind == "softcap":
        s = f"(torch.tanh({s} / 4.0) * 4.0)"
    elif kind == "gate":
        # a float tensor read only through a comparison: under --autograd it requires grad and, as in
        # eager, gets none (the flash op gave it zeros: session 43's review)
        gate = c.new_input(rng.choice([(1, h, length, keys), (b, 1, 1, keys)]), dt)
        s = f"{s}.masked_fill({gate} < -0.5, {fill})"
    return f"torch.softmax({s}, dim=-1) @ {v}" if rng.random() < 0.6 else f"{s}.softmax(-1).matmul({v})"


# the shape, indexing, scan, sort, matmul and in-place rows (registered after these, in this order),
# then the pooling family's, the scalar family's and the flex family's
from . import ops_shape  # noqa: E402,F401
from . import ops_pool  # noqa: E402,F401
from . import ops_scalar  # noqa: E402,F401
from . import ops_flex  # noqa: E402,F401

_BY_FAMILY: dict[str, list[OpSpec]] = {}
for _spec in OPS:
    _BY_FAMILY.setdefault(_spec.family, []).append(_spec)


def pick_op(rng: random.Random) -> OpSpec:
    fams = [f for f in FAMILY_WEIGHTS if f in _BY_FAMILY]
    family = rng.choices(fams, weights=[FAMILY_WEIGHTS[f] for f in fams])[0]
    return rng.choice(_BY_FAMILY[family])

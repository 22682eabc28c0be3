"""The scalar family: Python int and float arguments used as user code uses them (see ops.py).

A program drawn with this family takes numbers beside its tensors (`def f(x0, x1, x2)` with `x2 = 4`):
a scale or an offset in tensor arithmetic (`x0 * x2`, `x0.clamp(max=x3)`), a slice bound or a narrow
length (`x0[:, :x2]`), integer arithmetic on an int (`x2 // 3`, `-x2`, `7 // x2`) fed into tensors,
a comparison (`x0 if x2 > 3 else x1`, `x0 * (x2 > 3)`), a roll amount, a size (`torch.arange(x2)`).
Dynamo makes an int a SymInt under dynamic shapes and a float a 0-d tensor input (or a constant with a
guard), which is where compiled code can go wrong where a literal does not. Under --dynamic the numbers
take other values at the other size sets (sizes.py), negative and 0 where the program allows; a
divisor (`nonzero`) is 0 only in a set of its own where eager raises, and the compiled call must raise
too (execute.py).

Weight 0 by default (the programs of a seed stay what they were): `--weight scalar=3`.
"""
from __future__ import annotations

from .ops import OPS, OpSpec


def _int_for(c, n: int, negative: bool = True) -> str | None:
    """An int argument to cut a dim of size n with: an existing one now and then, else a new one inside
    the dim (2..n-1, or negative: counted from the end), never 0 or 1 (Dynamo specializes them)."""
    inside = [k for k in range(2, n)] + ([-k for k in range(2, n)] if negative else [])
    return c.scalar("int", value=c.rng.choice(inside) if inside else c.rng.choice([2, 3]))


def _row(name: str, keeps_exact: bool = False, inplace: bool = False):
    def register(make):
        OPS.append(OpSpec(name, "scalar", make, keeps_exact, inplace))
        return make
    return register


@_row("scalar_arith")
def _arith(c):
    """A number as the other operand of tensor arithmetic (any value: negative and 0 too)."""
    a = c.pick()
    k = c.scalar(c.rng.choice(["int", "float"]))
    if a is None or k is None:
        return None
    return c.rng.choice([f"{a} * {k}", f"{a} + {k}", f"{k} - {a}", f"{a} - {k}", f"torch.mul({a}, {k})",
                         f"torch.add({a}, {a}, alpha={k})" if k in c.scalars and isinstance(c.scalars[k], int)
                         else f"{a} * {k} + 1"])


@_row("scalar_div")
def _div(c):
    """A number as a divisor: true division of any value; floor division and remainder of exact ones."""
    kind = c.rng.choice(["int", "float"])
    if c.rng.random() < 0.5:
        a = c.pick()
        k = c.scalar(kind, nonzero=True)
        return None if a is None or k is None else f"{a} / {k}"
    a = c.pick(exact=True)
    k = c.scalar(kind, nonzero=True)
    if a is None or k is None:
        return None
    return c.rng.choice([f"{a} // {k}", f"{a} % {k}", f"torch.remainder({a}, {k})",
                         f"torch.div({a}, {k}, rounding_mode='floor')", f"torch.div({a}, {k}, rounding_mode='trunc')"])


@_row("scalar_clamp", keeps_exact=True)
def _clamp(c):
    a = c.pick()
    f = c.scalar(c.rng.choice(["float", "float", "int"]))
    if a is None or f is None:
        return None
    choice = c.rng.randrange(5)
    if choice == 0:
        return f"{a}.clamp(max={f})"
    if choice == 1:
        return f"{a}.clamp(min={f})"
    if choice == 2:
        return f"torch.clamp({a}, -{f}, {f})"
    if choice == 3:
        return f"torch.maximum({a}, torch.full_like({a}, {f}))"
    return f"{a}.masked_fill({a} > {f}, {f})" if c.exact[a] or not c.t(a).is_floating_point() else f"{a}.clamp(max={f})"


@_row("scalar_float")
def _float_uses(c):
    """A float in the ways a model reads one: a slope, an exponent, a blend, a fill."""
    a = c.pick(float_only=True)
    f = c.scalar("float")
    if a is None or f is None:
        return None
    return c.rng.choice([f"F.leaky_relu({a}, {f})", f"({a}.abs() + 0.5) ** {f}", f"torch.lerp({a}, {c.partner(a)}, {f})",
                         f"torch.full_like({a}, {f}) * {a}", f"{a} * {f} + {a} * (1 - {f})", f"torch.exp({a}.clamp(-3, 3) * {f})",
                         f"F.elu({a}, alpha={f})", f"torch.where({a} > 0, {a}, {f})", f"{a}.add({c.partner(a)}, alpha={f})",
                         f"torch.addcmul({a}, {a}, {c.partner(a)}, value={f})", f"F.threshold({a}, {f}, -1.0)",
                         f"torch.full(({a}.shape[0] if {a}.dim() else 1,), {f}) + {a}.sum()"])


@_row("scalar_slice", keeps_exact=True)
def _slice(c):
    """An int as a slice bound, a narrow's start or length, kept inside the dim it cuts."""
    a = c.pick(lambda v: v.dim() >= 1)
    if a is None:
        return None
    t = c.t(a)
    d = c.rng.randrange(t.dim())
    n = t.shape[d]
    choice = c.rng.randrange(7)
    k = _int_for(c, n, negative=choice not in (4, 5))   # (a narrow's start and length: >= 0)
    if k is None:
        return None
    lead = ":, " * d
    if choice == 0:
        return f"{a}[{lead}{k}:]"
    if choice == 1:
        return f"{a}[{lead}:{k}]"
    if choice == 2:
        return f"{a}[{lead}{k} // 2:]"
    if choice == 3:
        return f"{a}[{lead}:{k} - 1]"
    if choice == 4:
        return f"{a}.narrow({d}, 0, {k})"
    if choice == 5:
        return f"{a}.narrow({d}, {k} // 2, {k} - {k} // 2)"
    return f"{a}[{lead}-{k}:]"


@_row("scalar_int_math")
def _int_math(c):
    """Integer arithmetic on an int argument (SymInt arithmetic under dynamic shapes) fed into a tensor."""
    a = c.pick()
    k = c.scalar("int")
    if a is None or k is None:
        return None
    if c.rng.random() < 0.25:
        j = c.scalar("int", nonzero=True)
        if j is None:
            return None
        # (not k by itself: torch's ShapeEnv simplifies -k // k to -1 and k // k to 1, no division left to
        # raise at k = 0 (seed 1000 prog 158, seed 1001 prog 97; aot_eager alike))
        expr = c.rng.choice([f"(7 // {j})", f"(10 % {j})"] +
                            ([f"({k} // {j})", f"({k} % {j})", f"(-{k} // {j})"] if j != k else []))
    else:
        expr = c.rng.choice([f"({k} // 3)", f"({k} % 4)", f"(-{k})", f"({k} * 2 + 1)", f"({k} // -2)",
                             f"(-{k} % 3)", f"max({k}, 2)", f"min({k}, 3)", f"abs({k})", f"({k} ** 2)"])
    return c.rng.choice([f"{a} * {expr}", f"{a} + {expr}", f"{expr} - {a}"])


@_row("scalar_compare", keeps_exact=True)
def _compare(c):
    """A comparison of an int argument: control flow on it (a guard), or a bool in tensor arithmetic."""
    a = c.pick()
    k = c.scalar("int")
    if a is None or k is None:
        return None
    cond = c.rng.choice([f"{k} > 3", f"{k} >= 0", f"{k} % 2 == 0", f"{k} < -2"])
    choice = c.rng.randrange(3)
    if choice == 0:
        return f"({a} if {cond} else -{a})"
    if choice == 1:
        return f"{a} * ({cond})"
    return f"torch.where(torch.tensor({cond}), {a}, {c.partner(a)})"


@_row("scalar_roll", keeps_exact=True)
def _roll(c):
    """An int as a shift: roll by any amount, negative too."""
    a = c.pick(lambda v: v.dim() >= 1)
    k = c.scalar("int")
    if a is None or k is None:
        return None
    d = c.dim(a)
    return c.rng.choice([f"torch.roll({a}, {k}, {d})", f"torch.roll({a}, -{k}, {d})", f"{a}.roll({k} // 2)",
                         f"torch.roll({a}, ({k}, 1), ({d}, {d}))"])


@_row("scalar_size")
def _size(c):
    """An int as a size: a new tensor as long as the number (a size symbol that comes from an argument)."""
    a = c.pick(lambda v: v.dim() >= 1, float_only=True)
    k = c.scalar("int", value=c.rng.choice([2, 3, 4, 5]))
    if a is None or k is None:
        return None
    # (a negative size raises in eager: sizes.py keeps the number >= 0 there; abs(k), a sympy Abs, would
    # send every such graph to per-size compiles)
    return c.rng.choice([f"torch.arange({k}, device={a}.device) * {a}.sum()",
                         f"{a}.new_ones({k}).cumsum(0) * {a}.mean()",
                         f"torch.cat([{a}.flatten(), torch.zeros({k}, dtype={a}.dtype, device={a}.device)])"])


@_row("scalar_shape", keeps_exact=True)
def _shape_uses(c):
    """An int in a shape op's arguments, mixed with the operand's own sizes: a view's dim, a pad, a
    topk's k, an expand, a slice that reads the size."""
    a = c.pick(lambda v: v.dim() >= 1)
    if a is None:
        return None
    t = c.t(a)
    d = c.rng.randrange(t.dim())
    n = t.shape[d]
    choice = c.rng.randrange(7)
    if choice == 0 and t.numel():
        divisors = [q for q in range(2, t.numel()) if t.numel() % q == 0]
        k = c.scalar("int", value=c.rng.choice(divisors) if divisors else 2)
        return None if k is None else f"{a}.reshape({k}, -1)"
    k = _int_for(c, n, negative=choice not in (1, 2, 3))
    if k is None:
        return None
    lead = ":, " * d
    if choice == 1:
        return f"F.pad({a}, ({k}, {k} // 2))" if c.rng.random() < 0.6 else f"F.pad({a}, (-{k}, 1))"
    if choice == 2:
        return f"torch.topk({a}, {k}, dim={d}, largest={c.rng.random() < 0.5}).values"
    if choice == 3:
        return f"{a}.unsqueeze(0).expand({k}, *{a}.shape)"
    if choice == 4:
        return f"{a}[{lead}:{a}.shape[{d}] - {k}]"
    if choice == 5:
        return f"{a}.flatten()[{k}:{k} * 2 + 1]"
    return f"{a}.repeat({', '.join(['1'] * (t.dim() - 1))}{', ' if t.dim() > 1 else ''}{k} % 3 + 1)"


@_row("scalar_index", keeps_exact=True)
def _index(c):
    """An int as an index or an offset: select (negative counts from the end), a triangle's diagonal,
    a diagonal's offset, an unflatten's factor."""
    a = c.pick(lambda v: v.dim() >= 1 and min(v.shape) > 0)
    if a is None:
        return None
    t = c.t(a)
    d = c.rng.randrange(t.dim())
    n = t.shape[d]
    choice = c.rng.randrange(4)
    if choice == 0:
        k = c.scalar("int", value=c.rng.choice([i for i in range(-n, n) if i not in (0, 1)] or [-1]))
        return None if k is None else c.rng.choice([f"{a}[{':, ' * d}{k}]", f"{a}.select({d}, {k})"])
    if choice == 1 and t.dim() >= 2:
        k = c.scalar("int")
        return None if k is None else c.rng.choice([f"torch.tril({a}, {k})", f"torch.triu({a}, {k})",
                                                    f"torch.triu({a}, -{k} // 2)"])
    if choice == 2 and t.dim() >= 2:
        k = c.scalar("int", value=c.rng.choice([-2, 2, 3]))
        return None if k is None else f"torch.diagonal({a}, {k}, -2, -1)"
    divisors = [q for q in range(2, n) if n % q == 0]
    if not divisors:
        return None
    k = c.scalar("int", value=c.rng.choice(divisors))
    return None if k is None else f"{a}.unflatten({d}, ({k}, -1))"


@_row("scalar_left")
def _left(c):
    """A number on the left of a tensor op, and an int power."""
    a = c.pick()
    k = c.scalar(c.rng.choice(["int", "float"]))
    if a is None or k is None:
        return None
    # (a power by an int argument only as a float: pow's backward by a SymInt exponent raises in AOT
    # autograd, "NYI SymInt equality" (torch's, aot_eager alike: seed 1003 programs 28, 63, 102, 139, 181))
    power = f"({a}.abs() + 0.5) ** {k}" if isinstance(c.scalars[k], float) else f"({a}.abs() + 0.5) ** float({k})"
    return c.rng.choice([f"{k} / ({a}.abs() + 1)", f"{k} * {a} - {k}", power,
                         f"{a} ** 2 * {k}", f"torch.full_like({a}, {k})", f"{a}.new_full({a}.shape, {k}) - {a}"])


@_row("scalar_inplace", inplace=True)
def _inplace(c):
    from .ops_shape import _target

    a = _target(c)
    k = c.scalar(c.rng.choice(["int", "float"]))
    if a is None or k is None:
        return None
    return c.rng.choice([f"{a}.mul_({k})", f"{a}.add_({k})", f"{a}.clamp_(max={k})", f"{a}.fill_({k})"])

"""Sympy helpers for sizes, strides and index expressions, and the index math that the scheduler
and codegen share: an index's canonical form over its loop ranges (`simplify`), merging the loops
every access walks contiguously (`merge_loops`), the canonical loop variables (`canonical_vars`).

Sizes and indices are sympy expressions from the start. Integer division and modulo used in
indexing are their own functions, so that they print as integer ops and simplify:

    FloorDiv(x, 1) -> x             FloorDiv(FloorDiv(x, a), b) -> FloorDiv(x, a*b)
    ModularIndexing(x, d, m) == (x // d) % m, with x, d, m non-negative

Those two print as generated code's // and %, which truncate toward zero in a kernel: right only
where no operand is negative. torch's // and % of sizes whose sign is unknown (an int input k:
`k // 3`, `(8 - k % 8) % 8`) floor, as Python does; they are SignedFloorDiv and SignedMod, which a
kernel computes through helpers that floor (runtime/triton_helpers.py) and which are never taken
for non-negative unless their operands make them so (a SignedMod by a positive divisor is):

    SignedFloorDiv(a, -c) -> SignedFloorDiv(-a, c)      SignedMod(a, -c) -> -SignedMod(-a, c)
    SignedFloorDiv(a, b), a >= 0 and b > 0 -> FloorDiv(a, b)   (SignedMod likewise -> ModularIndexing)
"""
from __future__ import annotations

import functools
from typing import Iterable, Sequence

import sympy

Expr = sympy.Expr


class FloorDiv(sympy.Function):
    """Integer division of non-negative integers (what indexing needs)."""

    nargs = (2,)
    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, base, divisor):
        if divisor == 1:
            return base
        if base == 0 or divisor == 0:   # (0: the index of a loop nest with an empty dim, never run)
            return sympy.Integer(0)
        if base.is_Integer and divisor.is_Integer:
            return sympy.Integer(int(base) // int(divisor))
        if isinstance(base, FloorDiv):
            return FloorDiv(base.args[0], base.args[1] * divisor)
        if isinstance(base, ModularIndexing) and base.args[2] != 0:
            # (x // d % m) // q with m divisible by q
            x, d, m = base.args
            if m.is_Integer and divisor.is_Integer and int(m) % int(divisor) == 0:
                return ModularIndexing(x, d * divisor, sympy.Integer(int(m) // int(divisor)))
        if divisor.is_Integer:
            # pull out terms divisible by the divisor: (a*q + b) // q = a + b // q when 0 <= b < q
            terms = sympy.Add.make_args(base)
            keep, out = [], []
            for t in terms:
                coeff, rest = t.as_coeff_Mul()
                if coeff.is_Integer and int(coeff) % int(divisor) == 0:
                    out.append(sympy.Integer(int(coeff) // int(divisor)) * rest)
                else:
                    keep.append(t)
            if out and never_negative_sum(keep):
                return sympy.Add(*out) + FloorDiv(sympy.Add(*keep), divisor)
        elif divisor.is_positive:
            # a symbolic divisor (a dynamic size): (a*s + b) // s = a + b // s the same way
            out, keep = _multiples_of(base, divisor)
            if out:
                return sympy.Add(*out) + FloorDiv(sympy.Add(*keep), divisor)
        return None


def _multiples_of(base: Expr, period: Expr) -> tuple[list[Expr], list[Expr]]:
    """The terms of `base` that are `period` (a product of size symbols) times something, as those
    quotients, and the other terms; no quotients where the other terms may be negative (the
    generated // and % truncate toward zero, so only a non-negative rest keeps them exact)."""
    out, keep = _split_multiples(base, period)
    if not never_negative_sum(keep):
        return [], list(sympy.Add.make_args(base))
    return out, keep


def _split_multiples(base: Expr, period: Expr) -> tuple[list[Expr], list[Expr]]:
    """The terms of `base` that are `period` times an integer expression, as those quotients, and the
    other terms (what a floor division or Python modulo may drop whatever the rest's sign)."""
    out, keep = [], []
    for term in sympy.Add.make_args(sympy.expand(base)):
        if period.is_Integer:
            coeff, rest = term.as_coeff_Mul()
            if coeff.is_Integer and int(coeff) % int(period) == 0:
                out.append(sympy.Integer(int(coeff) // int(period)) * rest)
            else:
                keep.append(term)
            continue
        quotient = term / period            # sympy cancels common factors: s*t*x / s = t*x
        if quotient.as_numer_denom()[1] == 1 and quotient.is_integer:
            out.append(quotient)
        else:
            keep.append(term)
    return out, keep


class ModularIndexing(sympy.Function):
    """(base // divisor) % modulus for non-negative integers."""

    nargs = (3,)
    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, base, divisor, modulus):
        # modulus or divisor 0: a loop of size 0 split out of a flat index, an index that is never
        # computed; 0 stands for it rather than a division by zero (fuzz seed 228, program 31)
        if base == 0 or modulus == 1 or modulus == 0 or divisor == 0:
            return sympy.Integer(0)
        if base.is_Integer and divisor.is_Integer and modulus.is_Integer:
            return sympy.Integer((int(base) // int(divisor)) % int(modulus))
        if divisor != 1 and divisor.is_Integer:
            # terms of the base that are multiples of divisor*modulus vanish
            if modulus.is_Integer:
                period = int(divisor) * int(modulus)
                terms = sympy.Add.make_args(base)
                kept = [t for t in terms if not _is_multiple(t, period)]
                if len(kept) != len(terms) and never_negative_sum(kept):
                    return ModularIndexing(sympy.Add(*kept), divisor, modulus)
        if divisor == 1 and modulus.is_Integer:
            terms = sympy.Add.make_args(base)
            kept = [t for t in terms if not _is_multiple(t, int(modulus))]
            if len(kept) != len(terms) and never_negative_sum(kept):
                return ModularIndexing(sympy.Add(*kept), divisor, modulus)
        if not (divisor.is_Integer and modulus.is_Integer) and (divisor * modulus).is_positive:
            # symbolic sizes: the terms that are multiples of divisor*modulus vanish
            dropped, kept = _multiples_of(base, divisor * modulus)
            if dropped:
                return ModularIndexing(sympy.Add(*kept), divisor, modulus)
        if isinstance(base, FloorDiv):
            return ModularIndexing(base.args[0], base.args[1] * divisor, modulus)
        if isinstance(base, ModularIndexing) and divisor.is_Integer and modulus.is_Integer and base.args[2].is_Integer:
            x, d, m = base.args
            if int(m) % (int(divisor) * int(modulus)) == 0:
                # ((x // d) % m) // q % n with q*n dividing m: the inner modulo changes nothing
                return ModularIndexing(x, d * divisor, modulus)
            if divisor == 1 and int(m) <= int(modulus):
                return base  # already below the modulus
        return None


class SignedFloorDiv(sympy.Function):
    """torch's (and Python's) floor division of integers of any sign, rounding toward -inf: an int
    input's `k // 3`, `k // -3`. Its divisor is never 0 (symbolic.py takes none that may be). Not
    non-negative unless its operands say so, and a FloorDiv (truncating //) where they are both
    never negative."""

    nargs = (2,)
    is_integer = True

    @classmethod
    def eval(cls, base, divisor):
        if divisor == 0:
            return None   # (eager raises; left as it is)
        if divisor == 1:
            return base
        if divisor == -1:
            return -base
        if base == 0:
            return sympy.Integer(0)
        if base.is_Integer and divisor.is_Integer:
            return sympy.Integer(int(base) // int(divisor))
        if divisor.is_negative:   # a // -c == (-a) // c: one sign of divisor to print and simplify
            return cls(-base, -divisor)
        if not divisor.is_positive:
            return None
        if base.is_nonnegative:
            return FloorDiv(base, divisor)
        # (a*q + b) // q == a + b // q at any sign of b: floor division is exact over multiples
        out, keep = _split_multiples(base, divisor)
        if out:
            return sympy.Add(*out) + cls(sympy.Add(*keep), divisor)
        if isinstance(base, SignedFloorDiv) and base.args[1].is_positive:
            return cls(base.args[0], base.args[1] * divisor)   # floor(floor(a / p) / q) == floor(a / (p*q))
        return None

    def _eval_is_nonnegative(self):
        base, divisor = self.args
        if (base.is_nonnegative and divisor.is_positive) or (base.is_nonpositive and divisor.is_negative):
            return True
        return None


class SignedMod(sympy.Function):
    """torch's (and Python's) a % b of integers of any sign: the result has the divisor's sign, so
    it lies in [0, b) for b > 0 (`k % 8` at k = -3 is 5, where a truncating % gives -3). Its
    divisor is never 0; a ModularIndexing where both operands are never negative."""

    nargs = (2,)
    is_integer = True

    @classmethod
    def eval(cls, base, divisor):
        if divisor == 0:
            return None
        if divisor in (1, -1) or base == 0:
            return sympy.Integer(0)
        if base.is_Integer and divisor.is_Integer:
            return sympy.Integer(int(base) % int(divisor))
        if divisor.is_negative:   # a % -c == -((-a) % c)
            return -cls(-base, -divisor)
        if not divisor.is_positive:
            return None
        if base.is_nonnegative:
            return ModularIndexing(base, sympy.Integer(1), divisor)
        out, keep = _split_multiples(base, divisor)   # (a*q + b) % q == b % q at any sign of b
        if out:
            return cls(sympy.Add(*keep), divisor)
        if isinstance(base, SignedMod) and divisor.is_Integer and base.args[1].is_Integer \
                and int(base.args[1]) % int(divisor) == 0:
            return cls(base.args[0], divisor)   # (a % (n*q)) % q == a % q
        return None

    def _eval_is_nonnegative(self):
        return True if self.args[1].is_positive else None

    def _eval_is_nonpositive(self):
        return True if self.args[1].is_negative else None


def never_negative_sum(terms: list[Expr]) -> bool:
    """The sum of `terms` is never negative: what dropping a multiple of the period from a base needs,
    since generated code's // and % truncate toward zero (8 - s % 8 lost its 8 and was printed as
    (-(s % 8)) % 8, -3 where Python's is 5; review, session 33)."""
    return bool(sympy.Add(*terms).is_nonnegative) or all(t.is_nonnegative for t in terms)


def _is_multiple(term: Expr, n: int) -> bool:
    coeff, _ = term.as_coeff_Mul()
    return coeff.is_Integer and int(coeff) % n == 0 and term.free_symbols != set() or (
        term.is_Integer and int(term) % n == 0)


def is_relation(x) -> bool:
    """A bool made of sizes (a SymBool's expression: k < 3, And, Not, true) — not a bare symbol,
    which sympy also counts as a Boolean."""
    return isinstance(x, (sympy.core.relational.Relational, sympy.logic.boolalg.BooleanFunction,
                          sympy.logic.boolalg.BooleanAtom))


def sympify_seq(xs: Iterable) -> list[Expr]:
    """Sizes as sympy: ints, sympy expressions, and a dynamic graph's SymInts as expressions of its
    symbols (never their traced values: that would bake one size into code that serves every size)."""
    out = []
    for x in xs:
        if isinstance(x, int):
            out.append(sympy.Integer(x))
        elif isinstance(x, sympy.Basic):
            out.append(x)
        else:
            from .symbolic import to_expr   # (symbolic.py builds on this module)
            out.append(to_expr(x))
    return out


def product(xs: Iterable[Expr]) -> Expr:
    return functools.reduce(lambda a, b: a * b, xs, sympy.Integer(1))


def contiguous_strides(size: Sequence[Expr]) -> list[Expr]:
    strides: list[Expr] = []
    acc: Expr = sympy.Integer(1)
    for s in reversed(list(size)):
        strides.append(acc)
        acc = acc * s
    return list(reversed(strides))


def index_vars(prefix: str, n: int) -> list[sympy.Symbol]:
    return list(_index_vars(prefix, n))


@functools.lru_cache(maxsize=256)   # every body evaluation asks for a few of these
def _index_vars(prefix: str, n: int) -> tuple[sympy.Symbol, ...]:
    return tuple(sympy.Symbol(f"{prefix}{i}", integer=True, nonnegative=True) for i in range(n))


def canonical_vars(n: int, prefix: str = "c") -> list[sympy.Symbol]:
    return index_vars(prefix, n)


def strided_index(index: Sequence[Expr], stride: Sequence[Expr], offset: Expr = sympy.Integer(0)) -> Expr:
    return offset + sympy.Add(*[i * s for i, s in zip(index, stride)])


def static_int(x: Expr) -> int:
    """The int value of a static size (NotImplementedError for a symbolic one)."""
    if isinstance(x, int):
        return x
    if getattr(x, "is_Integer", False):
        return int(x)
    raise NotImplementedError(f"symbolic size {x}: this step needs a static size")


# The index helpers below are pure functions of sympy values (immutable, compared structurally), and
# every stage asks them about the same few index expressions over and over: their results are kept,
# keyed by value, so no result can belong to another graph. Bounded, so a long process stays small.
INDEX_CACHE_SIZE = 8192


def simplify_index(expr: Expr, ranges: dict[sympy.Symbol, Expr] | None = None) -> Expr:
    """Expand and drop div/mod that the ranges make redundant."""
    return _simplify_index(expr, tuple(ranges.items()) if ranges else ())


@functools.lru_cache(maxsize=INDEX_CACHE_SIZE)
def _simplify_index(expr: Expr, range_items: tuple) -> Expr:
    ranges = dict(range_items)
    expr = sympy.expand(expr)
    if ranges:
        repl = {}
        for node in expr.atoms(FloorDiv, ModularIndexing):
            repl_node = _simplify_divmod(node, ranges)
            if repl_node is not None:
                repl[node] = repl_node
        if repl:
            expr = sympy.expand(expr.xreplace(repl))
    return expr


def clear_caches() -> None:
    """Forget the kept index results (they stay correct; this only frees memory)."""
    _simplify_index.cache_clear()
    _merge_divmod.cache_clear()
    _simplify.cache_clear()
    _loop_groups.cache_clear()


def upper_bound(expr: Expr, ranges: dict[sympy.Symbol, Expr]) -> int | None:
    """An exclusive upper bound of a non-negative linear expression over the ranges."""
    total = 0
    for term in sympy.Add.make_args(sympy.expand(expr)):
        coeff, rest = term.as_coeff_Mul()
        if not coeff.is_Integer or int(coeff) < 0:
            return None
        if rest == 1:
            total += int(coeff)
        elif isinstance(rest, sympy.Symbol) and rest in ranges and ranges[rest].is_Integer:
            total += int(coeff) * (int(ranges[rest]) - 1)
        elif isinstance(rest, (FloorDiv, ModularIndexing)) and rest.args[1].is_Integer:
            inner = upper_bound(rest.args[0], ranges)
            if inner is None:
                return None
            bound = (inner - 1) // int(rest.args[1]) + 1
            if isinstance(rest, ModularIndexing):
                if not rest.args[2].is_Integer:
                    return None
                bound = min(bound, int(rest.args[2]))
            total += int(coeff) * (bound - 1)
        else:
            return None
    return total + 1


def index_range(expr: Expr, ranges: dict[sympy.Symbol, Expr]) -> tuple[int, int] | None:
    """The least and the greatest value (both inclusive) `expr` takes while each symbol s of it walks
    0 … ranges[s] - 1; None when a symbol has no integer range or a function is not one of
    +, *, FloorDiv, ModularIndexing and their signed forms. Unlike `upper_bound`, negative terms are
    allowed (a flip)."""
    if expr.is_Integer:
        return int(expr), int(expr)
    if isinstance(expr, sympy.Symbol):
        size = ranges.get(expr)
        if size is None or not getattr(size, "is_Integer", False):
            return None
        return 0, max(int(size) - 1, 0)
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        parts = [index_range(a, ranges) for a in expr.args]
        if any(p is None for p in parts):
            return None
        lo, hi = parts[0]
        for plo, phi in parts[1:]:
            if isinstance(expr, sympy.Add):
                lo, hi = lo + plo, hi + phi
            else:
                corners = (lo * plo, lo * phi, hi * plo, hi * phi)
                lo, hi = min(corners), max(corners)
        return lo, hi
    if isinstance(expr, (FloorDiv, ModularIndexing)) and expr.args[1].is_Integer and int(expr.args[1]) > 0:
        inner = index_range(expr.args[0], ranges)
        if inner is None:
            return None
        div = int(expr.args[1])
        # floor below, truncation above: the generated code's // truncates negative values toward 0
        lo, hi = inner[0] // div, (inner[1] // div if inner[1] >= 0 else -(-inner[1] // div))
        if isinstance(expr, FloorDiv):
            return lo, hi
        mod = expr.args[2]
        if not mod.is_Integer or int(mod) <= 0:
            return None
        if lo >= 0 and hi < int(mod):
            return lo, hi
        return (0 if lo >= 0 else 1 - int(mod)), int(mod) - 1
    if isinstance(expr, (SignedFloorDiv, SignedMod)) and expr.args[1].is_Integer and int(expr.args[1]) > 0:
        inner = index_range(expr.args[0], ranges)
        div = int(expr.args[1])
        if isinstance(expr, SignedFloorDiv):   # floors at both ends
            return None if inner is None else (inner[0] // div, inner[1] // div)
        if inner is not None and inner[0] >= 0 and inner[1] < div:
            return inner
        return 0, div - 1   # whatever the dividend (k % 7 of an int input k of any size)
    return None


def symbolic_upper_bound(expr: Expr, ranges: dict[sympy.Symbol, Expr]) -> Expr | None:
    """`upper_bound` where the ranges may be size symbols: an exclusive bound as an expression, for a
    sum of loop variables times non-negative numbers or sizes; None for anything else."""
    total = sympy.Integer(0)
    for term in sympy.Add.make_args(sympy.expand(expr)):
        coeff, rest = _split_coeff(term)
        if not (coeff.is_positive or coeff == 0):
            return None
        if rest == 1:
            total += coeff
        elif isinstance(rest, sympy.Symbol) and rest in ranges:
            total += coeff * (ranges[rest] - 1)
        else:
            return None
    return total + 1


def _at_most(a: Expr, b: Expr) -> bool:
    """a <= b for every value of the (positive) size symbols, as sympy can tell."""
    if a.is_Integer and b.is_Integer:
        return int(a) <= int(b)
    return bool(sympy.expand(b - a).is_nonnegative)


def _simplify_divmod(node: Expr, ranges: dict[sympy.Symbol, Expr]) -> Expr | None:
    if isinstance(node, FloorDiv):
        base, div = node.args
        ub = upper_bound(base, ranges)
        if ub is not None and div.is_Integer and ub <= int(div):
            return sympy.Integer(0)
        if not div.is_Integer:
            ub = symbolic_upper_bound(base, ranges)
            if ub is not None and _at_most(ub, div):
                return sympy.Integer(0)
    if isinstance(node, ModularIndexing):
        base, div, mod = node.args
        ub = upper_bound(base, ranges)
        if ub is not None and div.is_Integer and mod.is_Integer and ub <= int(div) * int(mod):
            return FloorDiv(base, div)
        if not (div.is_Integer and mod.is_Integer):
            ub = symbolic_upper_bound(base, ranges)
            if ub is not None and _at_most(ub, div * mod):
                return FloorDiv(base, div)
    return None


def merge_divmod(expr: Expr) -> Expr:
    """Recombine the split that views make of one index: c*m*(x // (d*m)) + c*((x // d) % m) -> c*(x // d).

    Flattening and unflattening an index (reshape to fewer dims, then back) leaves these pairs;
    merging them gives back the plain linear index, which is what makes a producer's store and its
    consumer's load compare equal. A pair's coefficients are the sums of its terms' (sympy's `coeff`):
    where m is a sum (1 + k % 3, a dynamic repeat's length), expanding splits c*m*(x // (d*m)) into
    one term per summand (fuzz seed 2307 prog 18: the flatten of such a repeat was no strided view of
    it, so it was copied where eager returns a view).
    """
    return _merge_divmod(expr)


def _split_coeff(term: Expr) -> tuple[Expr, Expr]:
    """term = coefficient * rest, the coefficient its numbers and size symbols (positive: a dynamic
    graph's), the rest its index part (loop variables, divisions and moduli of them)."""
    coeff, rest = [], []
    for f in sympy.Mul.make_args(term):
        # a size symbol, or a power of one (s**2 of a square's stride): positive, no index in it
        size = f.is_Number or (f.is_positive and (f.is_Symbol or (f.is_Pow and f.base.is_Symbol)))
        (coeff if size else rest).append(f)
    return sympy.Mul(*coeff), sympy.Mul(*rest)


def _same(a: Expr, b: Expr) -> bool:
    return a == b or sympy.expand(a - b) == 0


@functools.lru_cache(maxsize=INDEX_CACHE_SIZE)
def _merge_divmod(expr: Expr) -> Expr:
    expr = sympy.expand(expr)
    merged = True
    while merged:
        merged = _merge_one_pair(expr)
        if merged is not None:
            expr = merged
    return expr


def _merge_one_pair(expr: Expr) -> Expr | None:
    """`expr` (expanded) with one pair merged, or None where none merges. The identity holds whatever
    the coefficient c; a partner's terms are all those linear in it, none of them also the other's."""
    mods = sorted(expr.atoms(ModularIndexing), key=sympy.default_sort_key)
    for rest in mods:
        coeff = expr.coeff(rest)
        if coeff == 0:
            continue
        x, d, m = rest.args
        # partner 1: floor division at the next level; partner 2: a modular index at the next level
        partners = [(FloorDiv(x, d * m), FloorDiv(x, d))]
        partners += [(other, ModularIndexing(x, d, m * other.args[2])) for other in mods
                     if other is not rest and other.args[0] == x and _same(other.args[1], d * m)]
        for other, merged in partners:
            oc = expr.coeff(other)
            if oc != 0 and not coeff.has(other) and not oc.has(rest) and _same(oc, coeff * m):
                return sympy.expand(expr - coeff * rest - oc * other + coeff * merged)
    return None


def simplify(expr: Expr, ranges: dict) -> Expr:
    """The canonical form of an index over `ranges` (var -> size); kept by value (INDEX_CACHE_SIZE says why)."""
    return _simplify(expr, tuple(ranges.items()))


@functools.lru_cache(maxsize=INDEX_CACHE_SIZE)
def _simplify(expr: Expr, range_items: tuple) -> Expr:
    return merge_divmod(simplify_index(merge_divmod(sympy.expand(expr)), dict(range_items)))


def merge_loops(sizes: list[Expr], exprs: Sequence[Expr], vars_: Sequence[sympy.Symbol]):
    """Drop size-1 loops and merge neighbours every expression walks contiguously.

    Returns the new sizes and `reindex(new_vars) -> old var values` (expressions in the new vars).
    """
    groups = _loop_groups(tuple(sizes), tuple(exprs), tuple(vars_))
    new_sizes = [product(sizes[i] for i in g) for g in groups]

    def reindex(new_vars):
        out: list[Expr] = [sympy.Integer(0)] * len(sizes)
        for v, g in zip(new_vars, groups):
            inner = sympy.Integer(1)
            for k in reversed(g):
                out[k] = FloorDiv(v, inner) if k == g[0] else ModularIndexing(v, inner, sizes[k])
                inner = inner * sizes[k]
        return out
    return new_sizes, reindex


@functools.lru_cache(maxsize=INDEX_CACHE_SIZE)
def _loop_groups(sizes: tuple[Expr, ...], exprs: tuple[Expr, ...],
                 vars_: tuple[sympy.Symbol, ...]) -> tuple[tuple[int, ...], ...]:
    """Loop positions in merged groups, outermost first (kept by value: INDEX_CACHE_SIZE says why)."""
    groups = [[i] for i in range(len(sizes)) if sizes[i] != 1]
    exprs = [sympy.expand(e) for e in exprs]
    merged = True
    while merged:
        merged = False
        for g in range(len(groups) - 1):
            a, b = groups[g][-1], groups[g + 1][0]
            if all(_contiguous(e, vars_[a], vars_[b], sizes, groups[g + 1]) for e in exprs):
                groups[g] = groups[g] + groups[g + 1]
                del groups[g + 1]
                merged = True
                break
    return tuple(tuple(g) for g in groups)


def _contiguous(expr: Expr, outer: sympy.Symbol, inner: sympy.Symbol, sizes, inner_group) -> bool:
    """`outer` steps exactly over the whole inner group: coeff(outer) == coeff(inner) * size(inner group)."""
    for node in expr.atoms(FloorDiv, ModularIndexing):
        if node.free_symbols & {outer, inner}:
            return False
    co, ci = expr.coeff(outer), expr.coeff(inner)
    # coefficients may hold a dynamic graph's size symbols (positive), never loop variables (nonnegative)
    if not all(s.is_positive for s in co.free_symbols | ci.free_symbols):
        return False
    return sympy.expand(co - ci * product(sizes[k] for k in inner_group)) == 0

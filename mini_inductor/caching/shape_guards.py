"""The guards a dynamic graph's compile added to Dynamo's ShapeEnv after a cache's key, kept in the
cache's entry and added again by a hit.

AOT autograd's trace can decide on a symbolic size that Dynamo's trace left open: `x.view(n // 2, 2,
-1)` adds `Ne(n // (n // 2), 0)` and the contiguity checks of matmul's folding (after the front cache's
key); our own compile can too (eager's layouts of lp_pool2d over a channels-last input, after the
ATen graph's key). Dynamo checks those guards before it reuses the compiled frame. A hit skips the
compile, so it must add them itself: `pack` writes them down after a compile (as JSON trees, below),
`check` reads them back at a hit and checks that each holds at this call's sizes, and once the hit is
sure `install` adds them all through the ShapeEnv's own `evaluate_expr`, so that Dynamo's guards
include them as after a compile. A guard that does not hold, or cannot be read, is a miss: the graph
is compiled, which decides again.

A guard is a tree of plain JSON values, never pickled (an unpickler would build whatever a damaged file
names, and sympy's constructors may parse strings): an int is itself, ["Symbol", name, assumptions] one of
the ShapeEnv's backed symbols, ["Rational", p, q], ["Float", float.hex()] a finite Python float (the
value a float argument was specialized to), ["true"], ["false"], and [name, arg, ...] an operation from
`_OPERATIONS` (sympy's arithmetic, relations and logic; torch's integer functions of sizes and their
conversions to float), built from its decoded arguments only. Anything else is not written, and the
graph gets no entry, as before guards were kept. AOT autograd's metadata keeps its sympy expressions in the same form
(`encode`, `decode`: front_autograd.py's pickles), where a symbol is made from its name and assumptions.
"""
from __future__ import annotations

import math
from typing import Any

import sympy
from torch.utils._sympy import functions as size_functions

_OPERATIONS = {cls.__name__: cls for cls in (
    sympy.Add, sympy.Mul, sympy.Pow, sympy.Eq, sympy.Ne, sympy.Lt, sympy.Le, sympy.Gt, sympy.Ge,
    sympy.And, sympy.Or, sympy.Not,
    size_functions.FloorDiv, size_functions.ModularIndexing, size_functions.PythonMod, size_functions.Mod,
    size_functions.CleanDiv, size_functions.CeilDiv, size_functions.CeilToInt, size_functions.FloorToInt,
    size_functions.Max, size_functions.Min, size_functions.PowByNatural, size_functions.Where,
    size_functions.TruncToInt, size_functions.IsNonOverlappingAndDenseIndicator)}
# a Python float Dynamo passes as a 0-d tensor is a float symbol (zf0) of the ShapeEnv, which AOT
# autograd's trace may specialize on (clamp's bound: Eq(zf0, 0.75)); an int's value compared with a float
# is ToFloat of its symbol
_OPERATIONS.update({name: getattr(size_functions, name) for name in ("ToFloat", "FloatTrueDiv", "IntTrueDiv",
                                                                     "TruncToFloat") if hasattr(size_functions, name)})
_FLOAT_TEXT = 32   # the longest float.hex() text read back ("-0x1.fffffffffffffp+1023" is 23)
# a symbol's assumptions kept (the ShapeEnv's sizes are integer and positive or nonnegative; sympy
# derives the rest, which a symbol made again from these has too)
_ASSUMPTIONS = frozenset({"integer", "positive", "nonnegative", "negative", "nonpositive", "real", "finite",
                          "zero", "nonzero", "even", "odd", "rational", "commutative"})
_DEPTH = 64   # deeper than any guard over sizes; a damaged file cannot recurse without end
_LARGEST = 2 ** 64     # nor compute without end: numbers past it (and exponents past _EXPONENT) are refused
_EXPONENT = 64


def added(env, since: int) -> list:
    """The guards' expressions `env` got after it held `since` of them."""
    return [getattr(g, "expr", g) for g in list(getattr(env, "guards", ()))[since:]]


def pack(env, since: int) -> tuple[list, str | None]:
    """(the guards added since `since`, as JSON trees; why they cannot be kept, or None). Each must read
    back as the same expression. A static graph (no ShapeEnv) has none."""
    if env is None:
        return [], None
    symbols = _symbols(env)
    trees = []
    for expr in added(env, since):
        try:
            tree = encode(expr)
            if _decode(tree, symbols, 0) != expr:
                return [], f"the compile added guard {expr}, which does not read back as itself"
        except ValueError as e:
            return [], f"the compile added guard {expr}, which cannot be kept ({e})"
        trees.append(tree)
    return trees, None


def of_entry(data: dict) -> tuple:
    """The guards of an entry's JSON (`check` reads each)."""
    guards = data.get("guards", [])
    if not isinstance(guards, list):
        raise ValueError("the entry's guards are not a list")
    return tuple(guards)


def check(env, trees: list) -> tuple[list, str | None]:
    """(the guards `trees` hold, read back; why they cannot be added to `env`, or None): each must read
    back over `env`'s symbols and hold at its sizes. Nothing is added (`install` does)."""
    if not trees:
        return [], None
    if env is None:
        return [], "the entry holds guards and the graph has no ShapeEnv"
    symbols = _symbols(env)
    exprs = []
    for tree in trees:
        try:
            expr = _decode(tree, symbols, 0)
        except Exception as e:  # noqa: BLE001  (a damaged tree, a division by 0 in it: a miss)
            return [], f"a guard cannot be read ({e})"
        value = expr.xreplace(_values(env))
        if value is not sympy.true:
            return [], (f"its guard {expr} does not hold at these sizes" if value is sympy.false else
                        f"its guard {expr} has no value at these sizes")
        exprs.append(expr)
    return exprs, None


def install(env, exprs: list) -> None:
    """Add `exprs` (from `check`) to `env`'s guards, as a compile that decided them would have. One the
    guards before it already imply is recorded all the same, as that compile recorded it: the list is
    then the compile's, and so are the keys later graphs of the frame take from it (a backward's)."""
    for expr in exprs:
        count = len(env.guards)
        env.evaluate_expr(expr)
        if len(env.guards) == count and count:
            env.guards.append(env.guards[-1]._replace(expr=expr))


def _symbols(env) -> dict[str, sympy.Symbol]:
    """The ShapeEnv's symbols that have a value (backed ones), by name."""
    return {s.name: s for s in _values(env)}


def _values(env) -> dict:
    """The ShapeEnv's backed symbols and their values at this call (`backed_var_to_val` from torch 2.13)."""
    values = getattr(env, "backed_var_to_val", None)
    return values if values is not None else env.var_to_val


def encode(expr) -> Any:
    """A sympy expression of sizes as a JSON tree; ValueError for anything else."""
    return _encode(expr, 0)


def decode(tree) -> Any:
    """An expression `encode` wrote, its symbols made from their names and assumptions."""
    return _decode(tree, None, 0)


def _encode(expr, depth: int) -> Any:
    if depth > _DEPTH:
        raise ValueError("nested too deep")
    if expr is sympy.true or expr is sympy.false:
        return [str(bool(expr)).lower()]
    if isinstance(expr, sympy.Integer):
        return int(expr)
    if isinstance(expr, sympy.Rational):
        return ["Rational", int(expr.p), int(expr.q)]
    if isinstance(expr, sympy.Float):
        value = float(expr)
        if not math.isfinite(value) or sympy.Float(value)._mpf_ != expr._mpf_:   # (== rounds to the lesser precision)
            raise ValueError(f"{expr} is not a finite Python float")
        return ["Float", value.hex()]
    if isinstance(expr, sympy.Symbol):
        return ["Symbol", expr.name, {k: v for k, v in sorted(expr.assumptions0.items())
                                      if k in _ASSUMPTIONS and isinstance(v, bool)}]
    name = type(expr).__name__
    if _OPERATIONS.get(name) is not type(expr):
        raise ValueError(f"{name} is not an operation on sizes")
    return [name, *(_encode(a, depth + 1) for a in expr.args)]


def _decode(tree, symbols: dict[str, sympy.Symbol] | None, depth: int):
    if depth > _DEPTH:
        raise ValueError("nested too deep")
    if isinstance(tree, bool) or not isinstance(tree, (int, list)) or tree == []:
        raise ValueError(f"{tree!r} is not a guard's part")
    if isinstance(tree, int):
        if abs(tree) > _LARGEST:
            raise ValueError("a number too large for a size")
        return sympy.Integer(tree)
    head, args = tree[0], tree[1:]
    if head in ("true", "false") and not args:
        return sympy.true if head == "true" else sympy.false
    if head == "Symbol" and 1 <= len(args) <= 2 and isinstance(args[0], str):
        if symbols is not None:
            if args[0] not in symbols:
                raise ValueError(f"symbol {args[0]} is not one of the graph's sizes")
            return symbols[args[0]]
        assumptions = args[1] if len(args) == 2 else {}
        if not isinstance(assumptions, dict) or any(k not in _ASSUMPTIONS or not isinstance(v, bool)
                                                    for k, v in assumptions.items()):
            raise ValueError(f"symbol {args[0]}'s assumptions {assumptions!r} are not a size's")
        return sympy.Symbol(args[0], **assumptions)
    if head == "Rational" and len(args) == 2 and all(type(a) is int and abs(a) <= _LARGEST for a in args) \
            and args[1] != 0:
        return sympy.Rational(args[0], args[1])
    if head == "Float" and len(args) == 1 and isinstance(args[0], str) and len(args[0]) <= _FLOAT_TEXT:
        value = float.fromhex(args[0])
        if not math.isfinite(value):
            raise ValueError(f"{args[0]} is not a finite float")
        return sympy.Float(value)
    if not isinstance(head, str) or head not in _OPERATIONS:
        raise ValueError(f"{head!r} is not an operation on sizes")
    parts = [_decode(a, symbols, depth + 1) for a in args]
    if head in ("Pow", "PowByNatural") and (len(parts) != 2 or not parts[1].is_number
                                             or abs(parts[1]) > _EXPONENT):
        raise ValueError("a power that is not of a small number")
    return _OPERATIONS[head](*parts)

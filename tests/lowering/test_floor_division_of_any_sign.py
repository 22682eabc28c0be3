"""torch's // and % of sizes whose sign is unknown (an int input k) floor as Python does: they become
SignedFloorDiv and SignedMod, which evaluate as Python at every sign, are never taken for
non-negative where they may be negative, and are refused where the divisor may be 0."""
import pytest
import sympy
import torch
from torch._dynamo.source import ConstantSource
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv

from mini_inductor.lowering import symbolic
from mini_inductor.lowering.sizevars import (FloorDiv, ModularIndexing, SignedFloorDiv, SignedMod, index_range,
                                             never_negative_sum, simplify_index)

K = sympy.Symbol("k", integer=True)                      # an int input: no sign
S = sympy.Symbol("s", integer=True, positive=True)       # a tensor's size
X = sympy.Symbol("xindex", integer=True, nonnegative=True)
VALUES = range(-20, 21)
DIVISORS = (-7, -3, -1, 1, 2, 5, 8)


@pytest.mark.parametrize("b", DIVISORS)
def test_signed_forms_evaluate_as_pythons_floor_division_and_modulo_at_every_sign(b):
    for a in VALUES:
        assert SignedFloorDiv(K, b).subs(K, a) == a // b, (a, b)
        assert SignedMod(K, b).subs(K, a) == a % b, (a, b)
        # a multiple of the divisor taken out, a constant kept, whatever the sign of the rest
        assert SignedFloorDiv(3 * b * K + 7, b).subs(K, a) == (3 * b * a + 7) // b, (a, b)
        assert SignedMod(2 * b * K - 5, b).subs(K, a) == (2 * b * a - 5) % b, (a, b)
        assert SignedFloorDiv(SignedFloorDiv(K, 3), abs(b)).subs(K, a) == a // 3 // abs(b), (a, b)


def test_a_negative_divisor_is_written_as_a_positive_one():
    assert SignedFloorDiv(K, -3) == SignedFloorDiv(-K, 3)
    assert SignedMod(K, -5) == -SignedMod(-K, 5)
    assert SignedFloorDiv(K, -S) == SignedFloorDiv(-K, S)


def test_operands_that_are_never_negative_give_the_truncating_forms():
    assert SignedFloorDiv(S + 3, 2) == FloorDiv(S + 3, 2)
    assert SignedMod(S, 4) == ModularIndexing(S, 1, 4)
    assert SignedFloorDiv(-S, -2) == FloorDiv(S, 2)


def test_a_division_that_may_be_negative_is_never_taken_for_non_negative():
    assert SignedFloorDiv(K, 3).is_nonnegative is not True
    assert SignedFloorDiv(S - 5, 2).is_nonnegative is not True
    assert not never_negative_sum([SignedFloorDiv(K, 3)])
    assert not never_negative_sum([sympy.Integer(8), -SignedMod(K, 8)])
    # Python's modulo by a positive divisor lies in [0, divisor): that much is known
    assert SignedMod(K, 8).is_nonnegative is True
    assert never_negative_sum([SignedMod(K, 8), S])


def test_the_index_simplifier_keeps_a_multiple_whose_rest_may_be_negative():
    # (8 - k % 8) % 8 printed with a truncating %: dropping the 8 leaves (-(k % 8)) % 8, -3 at k = 5
    assert ModularIndexing(8 - SignedMod(K, 8), 1, 8).args[0] == 8 - SignedMod(K, 8)
    assert FloorDiv(6 + SignedFloorDiv(K, 3), 3).args[0] == 6 + SignedFloorDiv(K, 3)
    base = X + 6 + SignedFloorDiv(K, 3)
    assert simplify_index(FloorDiv(base, 3), {X: sympy.Integer(4)}).has(base)


def test_index_range_floors_a_signed_division():
    ranges = {X: sympy.Integer(8)}   # X - 10 walks -10 … -3
    assert index_range(SignedFloorDiv(X - 10, 3), ranges) == (-4, -1)   # a truncating // would say -3 … -1
    assert index_range(SignedMod(X - 10, 3), ranges) == (0, 2)
    assert index_range(SignedMod(X, 16), ranges) == (0, 7)
    assert index_range(SignedFloorDiv(K, 3), ranges) is None            # k has no range
    assert index_range(SignedMod(K, 7) + 1, ranges) == (1, 7)           # whatever k is


def _int_inputs(*hints):
    """A ShapeEnv with an int input symbol of any sign per hint (as Dynamo makes them), and the
    GraphShapes that symbolic.py reads while a graph compiles."""
    env = ShapeEnv()
    ints = [env.create_unspecified_symint_and_symbol(h, ConstantSource(f"k{i}"), DimDynamic.DYNAMIC)
            for i, h in enumerate(hints)]
    shapes = symbolic.GraphShapes(shape_env=env, signs=symbolic._signs(env))
    with symbolic.using(shapes):
        shapes.hints = {symbolic.to_expr(k): sympy.Integer(h) for k, h in zip(ints, hints)}
    return ints, shapes


def test_torchs_floor_division_and_modulo_of_an_int_input_become_the_signed_forms():
    (k,), shapes = _int_inputs(5)
    with symbolic.using(shapes):
        s = symbolic.to_expr(k)
        assert s.is_nonnegative is None   # (the int input's own sign is unknown)
        assert symbolic.to_expr(k // 3) == SignedFloorDiv(s, 3)
        assert symbolic.to_expr(k // -3) == SignedFloorDiv(-s, 3)
        assert symbolic.to_expr(k % 8) == SignedMod(s, 8)
        assert symbolic.to_expr(-(-k // 4)) == -SignedFloorDiv(-s, 4)
        # 8 - k % 8 lies in [1, 8]: the ShapeEnv's ranges prove it, so the outer % is the fast one
        assert symbolic.to_expr((8 - k % 8) % 8) == ModularIndexing(8 - SignedMod(s, 8), 1, 8)
        assert symbolic.decide(SignedMod(s, 8) < 8) is True
        assert symbolic.decide(SignedFloorDiv(s, 3) >= 0) is None
        assert symbolic.hint(SignedFloorDiv(-s, 3)) == -2 and symbolic.hint(SignedMod(-s, 8)) == 3


def test_a_division_by_an_int_input_that_may_be_zero_is_refused():
    # eager raises ZeroDivisionError there; a kernel would divide by 0 without a word
    (k, m), shapes = _int_inputs(5, 3)
    with symbolic.using(shapes), pytest.raises(symbolic.SymbolicUnsupported, match="may be 0"):
        symbolic.to_expr(k // m)
    with symbolic.using(shapes), pytest.raises(symbolic.SymbolicUnsupported, match="may be 0"):
        symbolic.to_expr(k % m)


def _int_input_graph(hint, check):
    """A graph that takes one int input symbol whose ShapeEnv range `check` narrows (torch._check)."""
    env = ShapeEnv()
    k = env.create_unspecified_symint_and_symbol(hint, ConstantSource("k"), DimDynamic.DYNAMIC)
    torch._check(check(k))
    graph = torch.fx.Graph()
    node = graph.placeholder("k")
    node.meta["val"] = k
    graph.output(node)
    return torch.fx.GraphModule({}, graph)


def test_an_int_input_bounded_above_but_not_below_gives_no_bound_to_index_width():
    # a kernel takes a bounded symbol to walk 0 … its bound (32-bit indices, persistent rows): k <= 5
    # alone leaves k free to be -2**40
    assert symbolic.graph_symbols(_int_input_graph(2, lambda k: k <= 5)).bounds == {}
    (bound,) = symbolic.graph_symbols(_int_input_graph(2, lambda k: (k <= 5) & (k >= 0))).bounds.values()
    assert bound == 5

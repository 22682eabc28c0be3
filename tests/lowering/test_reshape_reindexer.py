"""reshape_reindexer: an index of the new shape → the index of the old one that holds the same
element (row-major), also where a dynamic graph's sizes match only as a whole."""
import itertools

import sympy

from mini_inductor.lowering.sizevars import ModularIndexing, SignedMod, index_vars, merge_divmod
from mini_inductor.lowering.view_lowerings import reshape_reindexer


def _old_index(old, new, idx, values):
    out = reshape_reindexer(old, new)([sympy.Integer(i) for i in idx])
    return [int(sympy.sympify(e).xreplace(values)) for e in out]


def _row_major(shape, idx):
    flat = 0
    for n, i in zip(shape, idx):
        flat = flat * n + i
    return flat


def test_symbolic_sizes_that_match_only_as_a_whole_reindex_through_the_flat_index():
    # [16, 32] seen as [s, t, 32] where s * t is 16 by Dynamo's guards: no dim-by-dim grouping exists
    s, t = sympy.symbols("s t", integer=True, positive=True)
    old, new = [sympy.Integer(16), sympy.Integer(32)], [s, t, sympy.Integer(32)]
    values = {s: 4, t: 4}
    for idx in itertools.product(range(4), range(4), range(0, 32, 7)):
        got = _old_index(old, new, idx, values)
        assert _row_major([16, 32], got) == _row_major([4, 4, 32], idx), (idx, got)


def test_static_groups_still_pass_dims_through():
    old, new = [sympy.Integer(6), sympy.Integer(4)], [sympy.Integer(2), sympy.Integer(3), sympy.Integer(4)]
    out = reshape_reindexer(old, new)([sympy.Symbol("a"), sympy.Symbol("b"), sympy.Symbol("c")])
    assert out[1] == sympy.Symbol("c")   # the last dim is its own group: passed through


def test_dims_flattened_whose_length_is_a_sum_merge_back_to_the_flat_index():
    # rows 1 + k % 3 long (a dynamic repeat by an int argument k): expanded, (i // r) * r is one term
    # per summand, which merge_divmod matched term by term and kept, so the flatten of such a buffer
    # was no strided view of it but a copy (fuzz seed 2307 prog 18)
    s = sympy.Symbol("s", integer=True, positive=True)
    k = sympy.Symbol("k", integer=True)
    r = 1 + SignedMod(k, 3)
    (i,) = index_vars("v", 1)
    rows, cols = reshape_reindexer([s, r], [s * r])([i])
    assert merge_divmod(rows * r + cols) == i
    # a modular index at the next level: [4, r] within a flat dim
    assert merge_divmod(r * ModularIndexing(i, r, 4) + ModularIndexing(i, 1, r)) == ModularIndexing(i, 1, 4 * r)

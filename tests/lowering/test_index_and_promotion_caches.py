"""The compile stages keep index-simplification and dtype-promotion results by value, for the whole
process (sizevars.py, dependencies.py, lowerings.promote): a result must never be served to a
question that differs in anything the answer depends on, from another graph or another test."""
from __future__ import annotations

import sympy
import torch

from common import check
from mini_inductor.lowering.sizevars import (FloorDiv, ModularIndexing, canonical_vars, clear_caches, merge_divmod,
                                            merge_loops, simplify)
from mini_inductor.scheduler.dependencies import MemoryDep


def test_simplify_answers_each_range_separately():
    (x,) = canonical_vars(1)
    expr = FloorDiv(x, sympy.Integer(8))
    assert simplify(expr, {x: sympy.Integer(8)}) == 0          # x < 8: x // 8 is always 0
    assert simplify(expr, {x: sympy.Integer(16)}) == expr      # x < 16: it is not
    assert simplify(expr, {x: sympy.Integer(8)}) == 0
    clear_caches()
    assert simplify(expr, {x: sympy.Integer(16)}) == expr


def test_merge_divmod_still_merges_after_clearing():
    (x,) = canonical_vars(1)
    split = 8 * FloorDiv(x, sympy.Integer(8)) + ModularIndexing(x, sympy.Integer(1), sympy.Integer(8))
    assert merge_divmod(split) == x
    clear_caches()
    assert merge_divmod(split) == x


def test_loop_merging_depends_on_the_accesses_not_only_the_sizes():
    x0, x1 = canonical_vars(2, "x")
    sizes = [sympy.Integer(4), sympy.Integer(8)]
    contiguous, _ = merge_loops(sizes, [8 * x0 + x1], [x0, x1])
    transposed, _ = merge_loops(sizes, [x0 + 4 * x1], [x0, x1])
    again, _ = merge_loops(sizes, [8 * x0 + x1], [x0, x1])
    assert contiguous == again == [32]
    assert transposed == [4, 8]


def test_normalized_accesses_keep_their_own_buffer_names():
    c0, c1 = canonical_vars(2)
    sizes = (sympy.Integer(4), sympy.Integer(8))
    a = MemoryDep("buf0", 8 * c0 + c1, sizes).normalized()
    b = MemoryDep("buf1", 8 * c0 + c1, sizes).normalized()
    assert (a.name, b.name) == ("buf0", "buf1")
    assert a.index == b.index == c0 and a.sizes == b.sizes == (32,)


def test_same_code_over_other_layouts_in_one_process_matches_eager():
    # the same ops on a contiguous and on a transposed operand: the loop merging and index
    # simplification kept from the first graph must not be reused for the second
    check(lambda a, b: torch.relu(a + b) * 2, torch.randn(4, 8), torch.randn(4, 8), kernels=1)
    check(lambda a, b: torch.relu(a + b) * 2, torch.randn(4, 8), torch.randn(8, 4).t(), kernels=1)
    check(lambda a, b: torch.relu(a + b) * 2, torch.randn(8, 4), torch.randn(8, 4), kernels=1)
    check(lambda a: a.view(4, 2, 4).transpose(1, 2).sum(-1), torch.randn(32), kernels=1)
    check(lambda a: a.view(2, 4, 4).transpose(1, 2).sum(-1), torch.randn(32), kernels=1)


def test_promotion_is_kept_per_dtype_rank_and_scalar_type():
    # check() compares dtypes: a kept promotion served to the wrong operands would fail it
    half, single = torch.randn(8).half(), torch.randn(8)
    check(lambda a, b: a * b + 1, half, torch.tensor(2.0), kernels=1)      # float16 (0-d fp32 does not promote)
    check(lambda a, b: a * b + 2, half, single, kernels=1)                 # float32
    check(lambda a, b: a * b + 3, torch.tensor(2.0).half(), torch.tensor(3.0), kernels=1)  # float32, both 0-d
    longs = torch.arange(8)
    check(lambda a: a * 3 + 1, longs, kernels=1)                           # int64
    check(lambda a: a * 0.5 + 1, longs, kernels=1)                         # float32
    check(lambda a: a * True, longs, kernels=1)                            # int64

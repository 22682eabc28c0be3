"""torch's // and % of sizes of either sign as generated code writes them: a kernel calls helpers
that floor (Triton's // and % truncate toward 0), the wrapper (Python) writes // and %."""
import sympy

from mini_inductor.codegen.triton_ops import texpr
from mini_inductor.codegen.wrapper_ir import size_source
from mini_inductor.lowering.sizevars import FloorDiv, SignedFloorDiv, SignedMod

K = sympy.Symbol("s3", integer=True)
S = sympy.Symbol("s0", integer=True, positive=True)


def test_a_kernel_floors_through_helpers_and_the_wrapper_through_pythons_operators():
    expr = 2 + SignedFloorDiv(K, 3) + S * SignedMod(-K, 8)
    kernel, wrapper = texpr(expr), size_source(expr)
    assert "triton_helpers.div_floor_integer(s3, 3)" in kernel
    assert "triton_helpers.remainder_integer(-1*s3, 8)" in kernel
    assert "//" not in kernel and "%" not in kernel
    assert "triton_helpers" not in wrapper
    for k in (-9, -4, -1, 0, 5):
        assert eval(wrapper, {"s3": k, "s0": 6}) == 2 + k // 3 + 6 * (-k % 8)
    # never-negative operands keep the plain (truncating) operators in both
    assert texpr(FloorDiv(S + 1, 2)) == size_source(FloorDiv(S + 1, 2)) == "((1 + s0) // 2)"


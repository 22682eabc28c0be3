"""torch's // and % of sizes of either sign as generated code writes them: a kernel calls helpers
that floor (Triton's // and % truncate toward 0), the wrapper (Python) writes // and %; a kernel that
reads an int input's symbol is one binary for every value of it."""
import re

import sympy
import torch

import mini_inductor  # noqa: F401  (the backend)
from mini_inductor import metrics
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


def test_a_kernel_of_static_sizes_that_reads_an_int_inputs_symbol_is_not_specialized_on_it():
    # Triton takes an int argument equal to 1 for the constant 1, and a launch site keeps the binary of
    # its first launch: a first call at k = 1 (or 3, here) would have served every later k
    def f(x, k):
        return x * (k // 3)
    compiled = torch.compile(f, backend="mini_inductor", options={"dynamic_shapes": "symbolic"})
    x = torch.randn(4, 5)
    for k in (3, 4, -4):
        torch.testing.assert_close(compiled(x, k), f(x, k))
    (record,) = [r for r in metrics.compiled_graphs if r.dynamic_symbols]
    source = open(record.source_path).read()
    (symbol,) = record.dynamic_symbols
    assert "xnumel: tl.constexpr" in source   # the kernel's own size is static
    (jit,) = re.findall(r"@triton\.jit\(do_not_specialize=\[(.*)\]\)", source)
    assert f"'{symbol}'" in jit

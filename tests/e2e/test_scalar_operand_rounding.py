"""A number beside a float16 or bfloat16 tensor is rounded to that dtype first where eager's kernel
takes it through TensorIterator's cast (fmod, remainder, pow, xlogy), and kept in float32 where the
kernel reads it as its compute type (add, mul, div): float16's 1e6 is inf, 3.3 is 3.30078, 1e-8 is 0.
Compiled, fmod(x16, 3.3) and 1e6 ** x16 computed with the float32 number and gave other values."""
import pytest
import torch

from common import check
from mini_inductor.conversions import converts

NUMBERS = [1e6, 70000, 3.3, 0.1, 1e-8]
OPS = {
    "fmod": lambda x, s: torch.fmod(x, s),
    "remainder": lambda x, s: torch.remainder(x, s),
    "remainder of a number": lambda x, s: torch.remainder(s, x.abs() + 0.25),
    "pow": lambda x, s: (x.abs() + 0.25) ** s,
    "pow of a number": lambda x, s: s ** x,
    "xlogy": lambda x, s: torch.xlogy(x, s),
    "xlogy of a number": lambda x, s: torch.xlogy(s, x.abs() + 0.25),
    "xlog1py": lambda x, s: torch.special.xlog1py(x, s),
    "xlog1py of a number": lambda x, s: torch.special.xlog1py(s, x.abs() + 0.25),
    "mul": lambda x, s: x * s,
    "div": lambda x, s: x / s,
}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("number", NUMBERS)
@pytest.mark.parametrize("op", OPS)
def test_number_operand_is_rounded_as_eager_rounds_it(op, number, dtype):
    if op == "pow" and not converts(number, dtype):
        pytest.skip("eager's checked conversion of the exponent raises: test_scalar_conversion_overflow.py")
    x = torch.tensor([-3.0, -1.0, 0.0, 0.5, 2.0, 7.0, 100.0, 1000.0], dtype=dtype)
    check(lambda x: OPS[op](x, number), x)


def test_xlogy_with_a_number_in_float32_and_an_integer_tensor_is_unchanged():
    check(lambda x: torch.xlogy(x, 3.3) + torch.xlogy(x.float(), 1e-8), torch.arange(-2, 6))


def test_a_number_made_of_an_int_argument_is_rounded_in_the_kernel():
    # fmod(x16, k / 3) under dynamic=True: the number is a symbolic float, rounded to float16 by the kernel
    def fmod(x, k):
        return torch.fmod(x, k / 3)
    compiled = torch.compile(fmod, backend="mini_inductor", dynamic=True)
    x = torch.tensor([-3.0, -1.0, 0.5, 2.0, 7.0, 100.0, 1000.0], dtype=torch.float16)
    for k in (10, 7, 11):
        torch.testing.assert_close(compiled(x, k), fmod(x, k), atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_comparison_with_a_number_compares_with_the_rounded_number(dtype):
    # eager's CPU kernels and CUDA's compare_scalar_kernel take the number as the tensor's type:
    # bf16 == 1.001 compares 1.0 with 1.0 (review, session 37: compiled compared with float32 1.001)
    def f(x):
        return x == 1.001, x < 1e-8, x > 1000.3, x != 0.1, x <= -1e-8, x >= 65519.0
    x = torch.tensor([1.0, 0.0, 1e-8, 1000.0, 1001.0, 0.1, 65504, -1e-8]).to(dtype)
    check(f, x)


def test_a_comparison_with_a_number_made_of_an_int_argument_is_rounded_in_the_kernel():
    compiled = torch.compile(lambda x, k: x == k / 3, backend="mini_inductor", dynamic=True)
    x = torch.tensor([1.0, 1.3333, 1.6667, 4 / 3, 5 / 3]).to(torch.bfloat16)
    for k in (3, 4, 5):
        assert torch.equal(compiled(x, k), x == k / 3), k

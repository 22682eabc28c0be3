"""eager's sign of zero in generated kernels: a -0.0 constant, a -0.0 fill of masked elements, and a float's
negation. Triton makes any float constant equal to 0 its null value, +0.0, and computes -x as 0 - x
(+0.0 for x = +0.0), so codegen writes -0.0 as its bits and -x as x * -1 (codegen/triton_ops.py)."""
import pytest
import torch
import torch.nn.functional as F

import mini_inductor  # noqa: F401  (the backend)
from sm90 import compile_all, launches, ptx_of


def _signed_zeros(x):
    return (-x,                                     # neg
            torch.neg(x) * 1,
            x * -0.0,                               # a -0.0 constant
            torch.where(x > 5, x, -0.0),
            F.pad(x, (1, 1), value=-0.0),           # masked elements filled with -0.0
            1 / (x * -0.0),                         # -inf only if the zero kept its sign
            torch.atan2(-x, torch.full_like(x, -1.0)))   # -pi for -0.0, pi for +0.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_negative_zero_keeps_its_sign_as_in_eager(device, dtype):
    x = torch.tensor([0.0, -0.0, 2.0, -3.0], device=device, dtype=dtype)
    expected = _signed_zeros(x)
    with launches() as seen:
        got = torch.compile(_signed_zeros, backend="mini_inductor")(x)
    for i, (e, g) in enumerate(zip(expected, got)):
        assert torch.equal(e, g), (i, e, g)
        assert torch.equal(e.signbit(), g.signbit()), (i, e, g)
    if device == "cpu":   # compiled for sm_90 too: -0.0's bits survive constant folding into the PTX
        if dtype == torch.float32:
            assert any("0f80000000" in ptx for ptx in ptx_of(seen))
        else:
            assert compile_all(seen)

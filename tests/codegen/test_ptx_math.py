"""triton_helpers' float32 math as PTX instructions (exp2, rsqrt, sqrt, floor, ceil, trunc, round,
isinf), against eager on the GPU, over values that tell the instructions apart: denormals (which
libdevice's floor and ceil flushed to zero), signed zeros, halves, integers past 2**23, infinities and
NaN. The CPU side (no libdevice linked into such kernels) is tests/codegen/test_sm90_compile.py.
"""
import pytest
import torch

pytestmark = pytest.mark.gpu


def _values():
    special = [0.0, -0.0, 0.5, -0.5, 1.5, -1.5, 2.5, -2.5, 1e-40, -1e-40, 1e-45, -1e-45, 3e-39, -3e-39,
               8388609.0, -8388609.0, 1e30, -1e30, float("inf"), float("-inf"), float("nan")]
    gen = torch.Generator().manual_seed(0)    # (the GPU machine's tests run with CUDA as the default device)
    spread = torch.randn(4096, generator=gen, device="cpu") * torch.logspace(-38, 38, 4096, device="cpu")
    return torch.cat([torch.tensor(special, device="cpu"), spread]).cuda()


@pytest.mark.parametrize("op", ["floor", "ceil", "trunc", "round", "sqrt", "isinf"])
def test_rounding_sqrt_and_isinf_are_eagers_bit_for_bit(op):
    x = _values()
    x = x.abs() if op == "sqrt" else x
    fn = getattr(torch, op)
    got = torch.compile(lambda t: fn(t), backend="mini_inductor")(x)
    want = fn(x)
    assert got.dtype == want.dtype
    if want.dtype == torch.bool:
        assert torch.equal(got, want)
    else:
        same = (got.view(torch.int32) == want.view(torch.int32)) | (got.isnan() & want.isnan())
        assert bool(same.all()), (x[~same][:8], got[~same][:8], want[~same][:8])


@pytest.mark.parametrize("op", ["rsqrt", "exp2"])
def test_rsqrt_and_exp2_are_within_two_ulp_of_eager(op):
    x = _values()
    # normal inputs and results: both flush denormals to zero, as libdevice's did (ftz)
    x = x.abs().clamp_min(1e-37) if op == "rsqrt" else x.clamp(-125, 120)
    fn = getattr(torch, op)
    got = torch.compile(lambda t: fn(t), backend="mini_inductor")(x)
    want = fn(x.double()).float()
    torch.testing.assert_close(got, want, atol=0, rtol=2.5e-7, equal_nan=True)

"""Variance kernels (var, std, var_mean, layer and batch norm's statistics) of a constant row: m2 is
exactly 0, as eager's Welford gives, in a persistent kernel (the corrected two-pass algorithm) and in a
looped one (Welford); std's gradient there is eager's 0, not the ratio of two roundings. NaN stays NaN."""
import pytest
import torch

from common import check
from mini_inductor import config


def _constant_rows(device, n):
    # each row one value (not exactly representable in binary: its mean of n copies rounds) repeated
    base = torch.tensor([-1.8482, 0.1, 3.3, -7.7], device=device)[:, None]
    return base.expand(4, n)


@pytest.mark.parametrize("looped", [False, True], ids=["persistent", "looped"])
@pytest.mark.parametrize("n", [6, 10, 100])
def test_std_of_a_constant_row_is_exactly_zero_and_its_gradient_is_eagers(device, looped, n):
    x = _constant_rows(device, n)
    with config.patch(persistent_reduction_limit=4 if looped else 32768):
        out = check(lambda x: torch.std(x, 1), x, grad=True)
        assert torch.equal(out, torch.zeros_like(out))
        var, mean = check(lambda x: torch.var_mean(x, 1, correction=0), x)
        assert torch.equal(var, torch.zeros_like(var))
        assert torch.equal(mean, x[:, 0])


def test_layer_norm_of_a_constant_row_is_its_bias(device):
    x = _constant_rows(device, 6).contiguous()
    w, b = torch.randn(6, device=device), torch.randn(6, device=device)
    out = check(lambda x, w, b: torch.nn.functional.layer_norm(x, (6,), w, b), x, w, b)
    torch.testing.assert_close(out, b.expand(4, 6), rtol=0, atol=0)


def test_a_nan_in_a_row_makes_its_variance_nan(device):
    x = torch.randn(4, 6, device=device)
    x[1, 2] = float("nan")
    out = check(lambda x: torch.var(x, 1), x)
    assert out[1].isnan() and not out[[0, 2, 3]].isnan().any()

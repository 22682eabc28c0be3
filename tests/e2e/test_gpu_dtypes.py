"""Large shapes in half precision on the GPU: the sizes where block-size heuristics and looped reductions matter."""
import pytest
import torch
import torch.nn.functional as F

from common import check

pytestmark = pytest.mark.gpu

LOW_PRECISION = [torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_softmax_4096_by_4096_is_one_kernel(device, dtype):
    x = torch.randn(4096, 4096, device=device, dtype=dtype)
    out = check(lambda x: torch.softmax(x, -1), x, kernels=1)
    assert out.dtype == dtype


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_layer_norm_4096_by_4096_is_one_kernel(device, dtype):
    x = torch.randn(4096, 4096, device=device, dtype=dtype)
    w, b = torch.randn(4096, device=device, dtype=dtype), torch.randn(4096, device=device, dtype=dtype)
    out = check(lambda x, w, b: F.layer_norm(x, (4096,), w, b), x, w, b, kernels=1)
    assert out.dtype == dtype


@pytest.mark.parametrize("dtype", [torch.float32] + LOW_PRECISION)
def test_sum_over_100k_columns(device, dtype):
    x = torch.randn(8, 100_000, device=device, dtype=dtype)
    check(lambda x: x.sum(-1), x, atol=0.5, rtol=1e-2)


def test_var_mean_over_100k_columns(device):
    x = torch.randn(4, 100_000, device=device) * 3 + 7
    check(lambda x: torch.var_mean(x, -1), x, atol=1e-3, rtol=1e-4)


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_amax_and_argmax_over_100k_columns(device, dtype):
    x = torch.randn(4, 100_000, device=device, dtype=dtype)
    check(lambda x: (x.amax(-1), x.argmax(-1)), x, atol=0, rtol=0)


def test_full_reduction_of_16m_elements(device):
    x = torch.randn(4096, 4096, device=device)
    check(lambda x: x.mean(), x, atol=1e-5, rtol=1e-3)


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_large_pointwise_chain_is_one_kernel(device, dtype):
    x = torch.randn(4096, 4096, device=device, dtype=dtype)
    check(lambda x: F.gelu(x * 2 + 1) - torch.sigmoid(x), x, kernels=1)


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_large_transposed_add_in_half_precision(device, dtype):
    x = torch.randn(2048, 4096, device=device, dtype=dtype)
    y = torch.randn(4096, 2048, device=device, dtype=dtype)
    check(lambda x, y: x.t() + y, x, y, kernels=1)


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_half_precision_matmul_with_bias_gelu_epilogue(device, dtype):
    x = torch.randn(1024, 1024, device=device, dtype=dtype)
    w = torch.randn(1024, 1024, device=device, dtype=dtype) / 32
    b = torch.randn(1024, device=device, dtype=dtype)
    check(lambda x, w, b: F.gelu(x @ w + b), x, w, b, atol=5e-2, rtol=5e-2)

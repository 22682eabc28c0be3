"""Library calls (matmul, conv, attention) as extern kernels with fused epilogues; unsupported ops fall back."""
import torch
import torch.nn.functional as F

from common import assert_fallback, check


def test_matmul_plus_bias_then_relu(device):
    x, w, b = torch.randn(8, 16, device=device), torch.randn(16, 12, device=device), torch.randn(12, device=device)
    check(lambda x, w, b: torch.relu(x @ w + b), x, w, b, atol=1e-4, rtol=1e-4)


def test_matmul_epilogue_is_one_kernel(device):
    x, w, b = torch.randn(8, 16, device=device), torch.randn(16, 12, device=device), torch.randn(12, device=device)
    check(lambda x, w, b: torch.relu(x @ w + b), x, w, b, kernels=1, atol=1e-4, rtol=1e-4)


def test_addmm_with_alpha_and_beta(device):
    bias, x, w = torch.randn(8, 12, device=device), torch.randn(8, 16, device=device), torch.randn(16, 12, device=device)
    check(lambda b, x, w: torch.addmm(b, x, w, beta=0.5, alpha=2.0), bias, x, w, atol=1e-4, rtol=1e-4)


def test_matmul_of_transposed_input(device):
    x, w = torch.randn(16, 8, device=device), torch.randn(16, 12, device=device)
    check(lambda x, w: x.t() @ w, x, w, atol=1e-4, rtol=1e-4)


def test_bmm_then_scale(device):
    a, b = torch.randn(3, 8, 16, device=device), torch.randn(3, 16, 4, device=device)
    check(lambda a, b: torch.bmm(a, b) * 0.5, a, b, atol=1e-4, rtol=1e-4)


def test_batched_matmul_with_broadcast(device):
    a, b = torch.randn(2, 3, 8, 16, device=device), torch.randn(16, 4, device=device)
    check(lambda a, b: torch.matmul(a, b).sum(-1), a, b, atol=1e-4, rtol=1e-4)


def test_linear_with_bias(device):
    x, w, b = torch.randn(4, 6, 16, device=device), torch.randn(12, 16, device=device), torch.randn(12, device=device)
    check(lambda x, w, b: F.linear(x, w, b), x, w, b, atol=1e-4, rtol=1e-4)


def test_linear_without_bias_then_gelu(device):
    x, w = torch.randn(8, 16, device=device), torch.randn(12, 16, device=device)
    check(lambda x, w: F.gelu(F.linear(x, w)), x, w, atol=1e-4, rtol=1e-4)


def test_conv2d_then_relu(device):
    x, w, b = torch.randn(2, 3, 8, 8, device=device), torch.randn(4, 3, 3, 3, device=device), torch.randn(4, device=device)
    check(lambda x, w, b: torch.relu(F.conv2d(x, w, b, padding=1)), x, w, b, atol=1e-4, rtol=1e-4)


def test_strided_conv2d_without_bias(device):
    x, w = torch.randn(1, 2, 9, 9, device=device), torch.randn(3, 2, 3, 3, device=device)
    check(lambda x, w: F.conv2d(x, w, stride=2) * 2, x, w, atol=1e-4, rtol=1e-4)


def test_scaled_dot_product_attention(device):
    q, k, v = (torch.randn(2, 2, 8, 16, device=device) for _ in range(3))
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v), q, k, v, atol=1e-4, rtol=1e-4)


def test_causal_scaled_dot_product_attention(device):
    q, k, v = (torch.randn(1, 2, 8, 16, device=device) for _ in range(3))
    check(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True) + 1, q, k, v,
          atol=1e-4, rtol=1e-4)


def test_matmul_gradients_match_eager(device):
    x, w, b = torch.randn(8, 16, device=device), torch.randn(16, 12, device=device), torch.randn(12, device=device)
    check(lambda x, w, b: torch.tanh(x @ w + b), x, w, b, grad=True, atol=1e-4, rtol=1e-4)


# rows past sort_lowerings.MAX_SORT_LENGTH (1024) are sorted by ATen; shorter ones are sort kernels
# (tests/e2e/test_sort_kernels.py)

def test_sort_falls_back_and_is_counted(device):
    x = torch.randn(3, 1100, device=device)
    check(lambda x: torch.sort(x * 2, dim=-1), x)
    assert_fallback("sort")


def test_topk_falls_back_and_is_counted(device):
    x = torch.randn(3, 1100, device=device)
    check(lambda x: torch.topk(x + 1, 3, dim=-1), x)
    assert_fallback("topk")


def test_fallback_between_pointwise_ops(device):
    x = torch.randn(1100, 3, device=device)
    check(lambda x: torch.sort(torch.relu(x) * 3, dim=0).values.exp() + 1, x)
    assert_fallback("sort")

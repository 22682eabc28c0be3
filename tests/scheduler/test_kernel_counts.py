"""End-to-end kernel counts through torch.compile: what the fusion rounds must achieve."""
import torch
import torch.nn.functional as F

from common import check


def test_residual_layer_norm_gelu_chain_is_one_kernel(device):
    x, r = torch.randn(16, 64, device=device), torch.randn(16, 64, device=device)
    w, b = torch.randn(64, device=device), torch.randn(64, device=device)
    check(lambda x, r, w, b: F.gelu(F.layer_norm(x + r, (64,), w, b)), x, r, w, b, kernels=1)


def test_softmax_is_one_kernel(device):
    check(lambda x: torch.softmax(x, -1), torch.randn(16, 32, device=device), kernels=1)


def test_two_reductions_over_the_same_rows_are_one_kernel(device):
    check(lambda x: (x.sum(-1), x.amax(-1)), torch.randn(16, 32, device=device), kernels=1)


def test_reductions_and_their_epilogue_over_the_same_rows_are_one_kernel(device):
    check(lambda x: (x - x.mean(-1, keepdim=True)) / (x.amax(-1, keepdim=True) + 1),
          torch.randn(16, 32, device=device), kernels=1)


def test_reductions_over_different_dims_are_two_kernels(device):
    check(lambda x: (x.sum(0), x.sum(1)), torch.randn(16, 32, device=device), kernels=2)


def test_pointwise_chain_around_a_matmul_is_two_kernels(device):
    x, w = torch.randn(16, 32, device=device), torch.randn(32, 32, device=device)
    check(lambda x, w: torch.sigmoid(torch.relu(x * 2) @ w) + 1, x, w, kernels=2)

"""Normalizations: layer norm (functional and module), RMS norm, batch norm, group norm, and their gradients."""
import torch
import torch.nn.functional as F

from common import assert_no_fallbacks, check


def test_layer_norm_with_weight_and_bias_is_one_kernel(device):
    x = torch.randn(16, 32, device=device)
    w, b = torch.randn(32, device=device), torch.randn(32, device=device)
    check(lambda x, w, b: F.layer_norm(x, (32,), w, b, eps=1e-5), x, w, b, kernels=1)


def test_layer_norm_without_affine(device):
    x = torch.randn(16, 32, device=device) * 3 + 2
    check(lambda x: F.layer_norm(x, (32,)), x)


def test_layer_norm_over_last_two_dims(device):
    x = torch.randn(4, 6, 8, device=device)
    w, b = torch.randn(6, 8, device=device), torch.randn(6, 8, device=device)
    check(lambda x, w, b: F.layer_norm(x, (6, 8), w, b), x, w, b)


def test_layer_norm_module(device):
    norm = torch.nn.LayerNorm(24, device=device)
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    x = torch.randn(3, 5, 24, device=device)
    check(norm, x)


def test_layer_norm_over_rows_longer_than_the_persistent_limit(device):
    x = torch.randn(2, 5000, device=device) * 2 + 1
    w, b = torch.randn(5000, device=device), torch.randn(5000, device=device)
    check(lambda x, w, b: F.layer_norm(x, (5000,), w, b), x, w, b, atol=1e-4, rtol=1e-4)


def test_layer_norm_then_relu(device):
    x = torch.randn(16, 32, device=device)
    w, b = torch.randn(32, device=device), torch.randn(32, device=device)
    check(lambda x, w, b: torch.relu(F.layer_norm(x, (32,), w, b)), x, w, b)


def test_rms_norm_written_by_hand(device):
    x, w = torch.randn(8, 32, device=device), torch.randn(32, device=device)
    check(lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w, x, w)


def test_batch_norm_in_eval_mode(device):
    x = torch.randn(4, 3, 5, 5, device=device)
    mean, var = torch.randn(3, device=device), torch.rand(3, device=device) + 0.5
    w, b = torch.randn(3, device=device), torch.randn(3, device=device)
    check(lambda x, m, v, w, b: F.batch_norm(x, m, v, w, b, training=False), x, mean, var, w, b, kernels=1)
    assert_no_fallbacks()


def test_batch_norm_in_eval_mode_without_affine_on_2d_input(device):
    x = torch.randn(6, 4, device=device)
    mean, var = torch.randn(4, device=device), torch.rand(4, device=device) + 0.5
    check(lambda x, m, v: F.batch_norm(x, m, v, training=False, eps=1e-3), x, mean, var, kernels=1)
    assert_no_fallbacks()


def test_group_norm(device):
    x = torch.randn(2, 6, 4, 4, device=device)
    w, b = torch.randn(6, device=device), torch.randn(6, device=device)
    check(lambda x, w, b: F.group_norm(x, 3, w, b), x, w, b)


def test_layer_norm_gradients_for_input_weight_and_bias(device):
    x = torch.randn(8, 32, device=device)
    w, b = torch.randn(32, device=device), torch.randn(32, device=device)
    check(lambda x, w, b: F.layer_norm(x, (32,), w, b), x, w, b, grad=True, atol=1e-4, rtol=1e-4)

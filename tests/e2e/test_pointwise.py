"""Pointwise ops and broadcasting: compiled results equal eager's; pure pointwise chains fuse into one kernel."""
import torch
import torch.nn.functional as F

from common import check


def test_add_mul_sub_div_chain(device):
    x, y = torch.randn(8, 16, device=device), torch.randn(8, 16, device=device)
    check(lambda x, y: (x + y) * (x - y) / (y.abs() + 1), x, y)


def test_pointwise_chain_of_five_ops_is_one_kernel(device):
    x = torch.randn(32, 32, device=device)
    check(lambda x: torch.tanh(torch.sigmoid(torch.relu(x * 2 + 1))), x, kernels=1)


def test_relu_sigmoid_tanh_each_match_eager(device):
    x = torch.randn(64, 16, device=device)
    check(lambda x: (torch.relu(x), torch.sigmoid(x), torch.tanh(x)), x)


def test_exp_log_sqrt_rsqrt_on_positive_inputs(device):
    x = torch.rand(16, 16, device=device) + 0.1
    check(lambda x: (torch.exp(x), torch.log(x), torch.sqrt(x), torch.rsqrt(x)), x)


def test_log_of_negative_is_nan_and_of_zero_is_minus_inf(device):
    x = torch.tensor([-1.0, 0.0, 1.0, 2.0], device=device)
    check(lambda x: torch.log(x) + 1, x)


def test_abs_neg_sign(device):
    x = torch.randn(128, device=device)
    check(lambda x: (torch.abs(x), -x, torch.sign(x)), x)


def test_sin_cos_erf(device):
    x = torch.randn(256, device=device)
    check(lambda x: torch.sin(x) * torch.cos(x) + torch.erf(x), x)


def test_pow_with_scalar_exponents(device):
    x = torch.rand(16, 8, device=device) + 0.5
    check(lambda x: (x ** 2, x ** 3, x ** 0.5, torch.pow(x, -1.5), 2.0 ** x), x)


def test_pow_with_tensor_exponent(device):
    base = torch.rand(16, 8, device=device) + 0.5
    exponent = torch.randn(16, 8, device=device)
    check(lambda b, e: torch.pow(b, e), base, exponent)


def test_maximum_minimum(device):
    x, y = torch.randn(8, 32, device=device), torch.randn(8, 32, device=device)
    check(lambda x, y: (torch.maximum(x, y), torch.minimum(x, y)), x, y)


def test_maximum_and_relu_propagate_nan(device):
    x = torch.tensor([float("nan"), 1.0, -1.0, float("nan")], device=device)
    y = torch.tensor([0.0, float("nan"), 2.0, float("nan")], device=device)
    check(lambda x, y: (torch.maximum(x, y), torch.minimum(x, y), torch.relu(x)), x, y)


def test_where_with_comparison_condition(device):
    x, y = torch.randn(16, 16, device=device), torch.randn(16, 16, device=device)
    check(lambda x, y: torch.where(x > y, x * 2, y - 1), x, y)


def test_where_with_scalar_branches(device):
    x = torch.randn(16, 16, device=device)
    check(lambda x: torch.where(x > 0, 1.0, -2.0), x)


def test_clamp_min_max_and_both(device):
    x = torch.randn(32, 8, device=device) * 3
    check(lambda x: (x.clamp(min=-1), x.clamp(max=0.5), torch.clamp(x, -0.5, 2.0), torch.clamp_min(x, 0.25)), x)


def test_comparisons_produce_bool(device):
    x = torch.randn(8, 8, device=device)
    y = torch.where(torch.rand(8, 8, device=device) > 0.5, x, torch.randn(8, 8, device=device))
    check(lambda x, y: (x < y, x <= y, x > y, x >= y, x == y, x != y), x, y)


def test_logical_ops_on_bool(device):
    a = torch.rand(64, device=device) > 0.5
    b = torch.rand(64, device=device) > 0.3
    check(lambda a, b: (a & b, a | b, a ^ b, ~a, torch.logical_not(a) & b), a, b)


def test_integer_arithmetic(device):
    a = torch.randint(-100, 100, (8, 8), device=device)
    b = torch.randint(-9, 10, (8, 8), device=device)
    check(lambda a, b: (a + b, a * b - 3, a - 2 * b, a * a), a, b)


def test_floor_division_of_negative_ints_rounds_down(device):
    a = torch.tensor([-7, -7, 7, 7, -1, 0, -8, 9], device=device)
    b = torch.tensor([2, -2, 2, -2, 3, 5, 4, -4], device=device)
    check(lambda a, b: (a // b, torch.div(a, b, rounding_mode="floor"), a // 3), a, b)


def test_trunc_division_of_negative_ints_rounds_to_zero(device):
    a = torch.tensor([-7, -7, 7, 7, -1, 0, -8, 9], device=device)
    b = torch.tensor([2, -2, 2, -2, 3, 5, 4, -4], device=device)
    check(lambda a, b: torch.div(a, b, rounding_mode="trunc"), a, b)


def test_remainder_of_negative_ints_takes_sign_of_divisor(device):
    a = torch.tensor([-7, -7, 7, 7, -1, 0, -8, 9], device=device)
    b = torch.tensor([2, -2, 2, -2, 3, 5, 4, -4], device=device)
    check(lambda a, b: (a % b, torch.remainder(a, 3), torch.fmod(a, b)), a, b)


def test_true_division_of_ints_gives_float(device):
    a = torch.tensor([-7, 7, 1, 0], device=device)
    b = torch.tensor([2, -2, 3, 5], device=device)
    check(lambda a, b: a / b, a, b)


def test_float_floor_division_and_remainder(device):
    x = torch.randn(64, device=device) * 10
    sign = torch.where(torch.rand(64, device=device) > 0.5, 1.0, -1.0)
    y = sign * (torch.rand(64, device=device) + 0.5)  # |y| >= 0.5: no division by (near) zero
    check(lambda x, y: (torch.div(x, y, rounding_mode="floor"), torch.remainder(x, y)), x, y)


def test_casts_between_float_int_and_bool(device):
    x = torch.randn(32, device=device) * 5
    check(lambda x: (x.to(torch.int32), x.to(torch.int64) * 2, (x > 0).to(torch.float32),
                     x.to(torch.bool), x.to(torch.int32).to(torch.float32) + 0.5), x)


def test_floor_ceil_round_trunc(device):
    x = torch.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -1.7, 1.2], device=device)
    check(lambda x: (torch.floor(x), torch.ceil(x), torch.round(x), torch.trunc(x)), x)


def test_broadcast_row_vector(device):
    x, row = torch.randn(16, 8, device=device), torch.randn(8, device=device)
    check(lambda x, r: x * r + r, x, row)


def test_broadcast_column_vector(device):
    x, col = torch.randn(16, 8, device=device), torch.randn(16, 1, device=device)
    check(lambda x, c: x - c, x, col)


def test_broadcast_column_plus_row_is_outer_sum(device):
    col, row = torch.randn(16, 1, device=device), torch.randn(1, 12, device=device)
    check(lambda c, r: torch.relu(c + r), col, row)


def test_broadcast_python_scalar(device):
    x = torch.randn(8, 8, device=device)
    check(lambda x: 3.5 * x - 2, x)


def test_broadcast_zero_dim_tensor_input(device):
    x, s = torch.randn(8, 8, device=device), torch.tensor(1.75, device=device)
    check(lambda x, s: x * s + s, x, s)


def test_zero_dim_inputs_give_zero_dim_output(device):
    a, b = torch.tensor(2.0, device=device), torch.tensor(-3.0, device=device)
    check(lambda a, b: torch.relu(a * b + 7), a, b)


def test_gelu_exact(device):
    x = torch.randn(16, 32, device=device) * 2
    check(lambda x: F.gelu(x), x)


def test_gelu_tanh_approximation(device):
    x = torch.randn(16, 32, device=device) * 2
    check(lambda x: F.gelu(x, approximate="tanh"), x)


def test_silu(device):
    x = torch.randn(16, 32, device=device) * 2
    check(lambda x: F.silu(x), x)


def test_several_outputs_from_one_input(device):
    x = torch.randn(16, 16, device=device)
    check(lambda x: (x + 1, x * x, torch.exp(-x)), x)


def test_pointwise_chain_gradients_match_eager(device):
    x, y = torch.randn(8, 16, device=device), torch.randn(8, 16, device=device)
    check(lambda x, y: torch.tanh(x * y) + torch.sigmoid(x) * F.gelu(y), x, y, grad=True)

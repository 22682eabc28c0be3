"""Half precision, bfloat16, float64, small ints and type promotion: values and output dtypes match eager."""
import pytest
import torch
import torch.nn.functional as F

from common import check

LOW_PRECISION = [torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_low_precision_pointwise_chain_keeps_dtype(device, dtype):
    x = torch.randn(16, 32, device=device, dtype=dtype)
    y = torch.randn(16, 32, device=device, dtype=dtype)
    out = check(lambda x, y: torch.relu(x * y + 1) - torch.sigmoid(x), x, y)
    assert out.dtype == dtype


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_low_precision_gelu_and_exp(device, dtype):
    x = torch.randn(16, 32, device=device, dtype=dtype)
    check(lambda x: (F.gelu(x), torch.exp(x), F.silu(x)), x)


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_low_precision_sum_and_mean_keep_dtype(device, dtype):
    x = torch.randn(16, 48, device=device, dtype=dtype)
    out = check(lambda x: (x.sum(-1), x.mean(0)), x)
    assert out[0].dtype == dtype and out[1].dtype == dtype


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_low_precision_amax_is_exact(device, dtype):
    x = torch.randn(16, 48, device=device, dtype=dtype)
    check(lambda x: (x.amax(-1), x.argmax(-1)), x, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_low_precision_sum_over_rows_longer_than_the_persistent_limit(device, dtype):
    x = torch.randn(2, 5000, device=device, dtype=dtype)
    check(lambda x: x.sum(-1), x, atol=0.25, rtol=1e-2)


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_low_precision_softmax(device, dtype):
    x = torch.randn(8, 64, device=device, dtype=dtype)
    out = check(lambda x: torch.softmax(x, -1), x)
    assert out.dtype == dtype


@pytest.mark.parametrize("dtype", LOW_PRECISION)
def test_low_precision_layer_norm(device, dtype):
    x = torch.randn(8, 64, device=device, dtype=dtype)
    w = torch.randn(64, device=device, dtype=dtype)
    b = torch.randn(64, device=device, dtype=dtype)
    out = check(lambda x, w, b: F.layer_norm(x, (64,), w, b), x, w, b)
    assert out.dtype == dtype


def test_softmax_of_half_input_to_float_output(device):
    x = torch.randn(8, 64, device=device, dtype=torch.float16)
    out = check(lambda x: torch.softmax(x, -1, dtype=torch.float32), x, atol=1e-4, rtol=1e-3)
    assert out.dtype == torch.float32


def test_half_plus_float_promotes_to_float(device):
    x = torch.randn(8, 8, device=device, dtype=torch.float16)
    y = torch.randn(8, 8, device=device)
    out = check(lambda x, y: x + y, x, y, atol=1e-3, rtol=1e-3)
    assert out.dtype == torch.float32


def test_half_times_python_float_stays_half(device):
    x = torch.randn(8, 8, device=device, dtype=torch.bfloat16)
    out = check(lambda x: x * 1.5 + 0.25, x)
    assert out.dtype == torch.bfloat16


def test_half_plus_zero_dim_float_tensor_stays_half(device):
    x = torch.randn(8, 8, device=device, dtype=torch.float16)
    s = torch.tensor(0.5, device=device)
    out = check(lambda x, s: x + s, x, s)
    assert out.dtype == torch.float16


def test_int_plus_float_promotes_to_float(device):
    a = torch.randint(-5, 5, (16,), device=device)
    x = torch.randn(16, device=device)
    out = check(lambda a, x: a + x, a, x)
    assert out.dtype == torch.float32


def test_explicit_casts_to_half_and_back(device):
    x = torch.randn(32, device=device) * 1000
    check(lambda x: (x.to(torch.float16), x.to(torch.bfloat16), x.to(torch.float16).to(torch.float32)), x,
          atol=0, rtol=0)


def test_float64_arithmetic_stays_float64(device):
    x = torch.randn(16, 16, device=device, dtype=torch.float64)
    out = check(lambda x: torch.exp(x) * x.sum(-1, keepdim=True) - torch.sqrt(x.abs()), x)
    assert out.dtype == torch.float64


def test_uint8_addition_wraps_around(device):
    a = torch.randint(0, 256, (64,), device=device, dtype=torch.uint8)
    b = torch.randint(0, 256, (64,), device=device, dtype=torch.uint8)
    check(lambda a, b: (a + b, a * 3), a, b)


def test_int8_subtraction_wraps_around(device):
    a = torch.randint(-128, 128, (64,), device=device, dtype=torch.int8)
    b = torch.randint(-128, 128, (64,), device=device, dtype=torch.int8)
    check(lambda a, b: a - b, a, b)


def test_int32_and_int64_mix_promotes_to_int64(device):
    a = torch.randint(-100, 100, (16,), device=device, dtype=torch.int32)
    b = torch.randint(-100, 100, (16,), device=device, dtype=torch.int64)
    out = check(lambda a, b: a * b + a, a, b)
    assert out.dtype == torch.int64


def test_bool_times_float(device):
    m = torch.rand(16, 16, device=device) > 0.5
    x = torch.randn(16, 16, device=device)
    check(lambda m, x: m * x + m.float(), m, x)

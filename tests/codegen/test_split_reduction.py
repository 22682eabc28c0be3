"""Split reductions (lowering/split_reduction.py): few long rows become a first pass over chunks and
a second pass over the partials — two kernels, eager's values, low precision accumulated in fp32."""
import pytest
import torch

from common import check
from mini_inductor import config, metrics
from mini_inductor.lowering import split_reduction
from mini_inductor.lowering.split_reduction import SPLIT_MIN_RNUMEL, split_factor


@pytest.fixture
def small_split(monkeypatch):
    """Split rows from 256 elements on, into chunks of at least 32: the same code on tensors small
    enough for Triton's interpreter (whose tl.reduce with a combine function is slow on wide blocks)."""
    monkeypatch.setattr(split_reduction, "SPLIT_MIN_RNUMEL", 256)
    monkeypatch.setattr(split_reduction, "SPLIT_MIN_CHUNK", 32)
    monkeypatch.setattr(split_reduction, "SPLIT_TARGET_ROWS", 16)


def kernel_names() -> list[str]:
    return [n for g in metrics.compiled_graphs for n in g.kernel_names]


def test_split_factor_leaves_short_rows_many_rows_and_arg_reductions_alone():
    assert split_factor(1, SPLIT_MIN_RNUMEL - 1, "sum") == 1
    assert split_factor(4096, 1 << 20, "sum") == 1
    assert split_factor(1, 1 << 20, "argmax") == 1
    assert split_factor(1, 1 << 24, "sum") == 1024
    assert split_factor(8, 65536, "sum") == 64
    # Welford counts elements per chunk: chunks must be equal, so the split divides the row
    assert 20000 % split_factor(1, 20000, "welford_reduce") == 0
    assert split_factor(1, 10007, "welford_reduce") == 1  # a prime: not split


def test_full_sum_is_two_kernels():
    check(lambda x: x.sum(), torch.randn(20000), kernels=2, atol=1e-3)


def test_sum_over_dim_0_of_a_tall_narrow_tensor_is_two_kernels():
    check(lambda x: x.sum(0), torch.randn(16384, 8), kernels=2, atol=1e-3)


def test_sum_of_a_length_that_no_chunk_divides():
    x = torch.randn(3, 10007)
    check(lambda x: x.sum(-1), x, kernels=2, atol=1e-3)


def test_max_and_min_of_all_negative_and_all_positive_values_ignore_the_masked_tail(small_split):
    # a tail filled with 0 instead of -inf/+inf would win here
    neg, pos = -torch.rand(1009) - 1, torch.rand(1009) + 1
    check(lambda a, b: (a.amax(), b.amin(), a.max(), b.min()), neg, pos)
    assert len(kernel_names()) >= 4


def test_mean_goes_through_the_split_sum():
    check(lambda x: x.mean(), torch.randn(3, 7000) + 2, kernels=2, atol=1e-4)


def test_float16_sum_accumulates_in_float32():
    # 20000 * 0.1 in fp16 steps would stall far below 2000 (spacing 1 above 1024, 2 above 2048)
    x = torch.full((20000,), 0.1, dtype=torch.float16)
    out = check(lambda x: x.sum(), x, kernels=2)
    assert abs(float(out) - 2000.0) < 2.0


def test_float16_mean_over_a_long_row():
    check(lambda x: x.mean(-1), torch.randn(2, 16384, dtype=torch.float16), kernels=2)


def test_var_mean_is_split_through_welford_combine(small_split):
    x = torch.randn(3, 2048) * 2 + 5
    check(lambda x: torch.var_mean(x, -1), x, kernels=2, atol=1e-4)


def test_var_over_dim_0_and_std_of_everything(small_split):
    x = torch.randn(1024, 3) * 3 - 1
    check(lambda x: (x.var(0), x.std()), x, atol=1e-4)


def test_var_of_a_prime_length_is_not_split(small_split):
    check(lambda x: x.var(), torch.randn(1009), kernels=1, atol=1e-4)


def test_argmax_is_not_split(small_split):
    check(lambda x: x.argmax(), torch.randn(2000), kernels=1)


def test_integer_and_bool_reductions_split(small_split):
    x = torch.randint(-5, 5, (1009,))
    check(lambda x: (x.sum(), (x > 3).any(), (x < 10).all()), x)


def test_softmax_over_two_long_rows(small_split):
    check(lambda x: torch.softmax(x, -1), torch.randn(2, 1000), atol=1e-6)


def test_pointwise_producer_is_fused_into_the_first_pass():
    check(lambda x, y: (x * y + 1).sum(), torch.randn(20000), torch.randn(20000), kernels=2, atol=1e-3)


def test_split_reductions_can_be_switched_off():
    with config.patch(split_reductions=False):
        check(lambda x: x.sum(), torch.randn(20000), kernels=1, atol=1e-3)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_big_split_reductions_on_the_gpu(dtype):
    x = torch.randn(1 << 24, device="cuda", dtype=dtype)
    check(lambda x: (x.sum(), x.amax(), x.float().var()), x, atol=1e-2, rtol=1e-2)
    y = torch.randn(65536, 8, device="cuda", dtype=dtype)
    check(lambda y: y.sum(0), y, kernels=2, atol=1e-1, rtol=1e-2)

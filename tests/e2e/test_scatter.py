"""Scatters with a short span along `dim` and max-pool backward, generated as gathers (no atomics):
values match eager and nothing falls back. Long spans add with atomics (scatter_add) or store to the
positions (scatter: tests/e2e/test_scatter_store.py)."""
import pytest
import torch
import torch.nn.functional as F

from common import assert_no_fallbacks, check


def test_scatter_of_a_value_into_zeros_is_one_hot(device):
    index = torch.tensor([[2], [0], [6], [2]], device=device)
    check(lambda i: torch.zeros(4, 7, device=device).scatter(1, i, -1.0), index, kernels=1)
    assert_no_fallbacks()


def test_scatter_of_a_tensor_along_dim_0(device):
    index = torch.tensor([[1, 0, 2], [0, 2, 1]], device=device)
    check(lambda x, src, i: x.scatter(0, i, src), torch.randn(3, 3, device=device),
          torch.randn(2, 3, device=device), index, kernels=1)
    assert_no_fallbacks()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_scatter_add_with_repeated_targets_sums_them(device, dtype):
    index = torch.tensor([[0, 0, 3], [1, 6, 1], [2, 2, 2], [5, 4, 3]], device=device)
    check(lambda x, src, i: x.scatter_add(1, i, src), torch.randn(4, 7, device=device, dtype=dtype),
          torch.randn(4, 3, device=device, dtype=dtype), index, kernels=1)
    assert_no_fallbacks()


def test_an_accumulated_constant_is_added_once_per_index(device):
    # the atomic add of a constant: Triton's interpreter read a [1] value past its end for every lane
    # (garbage added on the CPU; a GPU broadcasts it). Found by the fuzzer (--dynamic --autograd seed
    # 85: the gradient of floor(index_select(x)), zeros added, had -inf in it)
    idx = torch.tensor([2, 5, 0, 6, 5, 2, 2], device=device)
    check(lambda x, i: x.index_put((i,), torch.full((7,), 1.5, device=x.device), accumulate=True),
          torch.zeros(9, device=device), idx, atol=0, rtol=0)


def test_scatter_add_along_a_long_span_adds_with_atomics(device):
    index = torch.randint(0, 64, (2, 32), device=device)   # duplicates: every one must count
    check(lambda x, src, i: x.scatter_add(1, i, src), torch.randn(2, 64, device=device),
          torch.randn(2, 32, device=device), index)
    assert_no_fallbacks()


def test_scatter_add_with_an_index_smaller_than_self_in_another_dim(device):
    index = torch.randint(0, 6, (3, 2), device=device)
    check(lambda x, src, i: x.scatter_add(0, i, src), torch.randn(6, 5, device=device),
          torch.randn(4, 4, device=device), index)
    assert_no_fallbacks()


def test_scatter_without_add_along_a_long_span_stores_to_the_positions(device):
    # (was an ATen call; tests/e2e/test_scatter_store.py tests these stores)
    index = torch.randperm(64, device=device)[:32].repeat(2, 1)   # no duplicates: eager's result is defined
    check(lambda x, src, i: x.scatter(1, i, src), torch.randn(2, 64, device=device),
          torch.randn(2, 32, device=device), index, kernels=2)
    assert_no_fallbacks()


def test_cross_entropy_backward_has_no_fallback(device):
    target = torch.tensor([3, 0, 6, 1], device=device)
    check(lambda x: F.cross_entropy(x, target), torch.randn(4, 7, device=device), grad=True)
    assert_no_fallbacks()


@pytest.mark.parametrize("kernel,stride,padding,ceil_mode", [(3, 2, 1, False), (2, 2, 0, False), (3, 1, 1, False),
                                                             (3, 3, 0, False), (3, 2, 1, True)])
def test_max_pool_backward_is_generated(device, kernel, stride, padding, ceil_mode):
    x = torch.randn(2, 3, 9, 8, device=device)
    check(lambda x: F.max_pool2d(x, kernel, stride, padding, ceil_mode=ceil_mode), x, grad=True)
    assert_no_fallbacks()


def test_max_pool_backward_with_tied_maxima_sends_the_gradient_to_the_saved_index(device):
    # repeated columns tie within a window: the gradient goes where the forward's index points, once
    x = torch.randn(2, 3, 6, 3, device=device).repeat_interleave(2, -1)
    check(lambda x: F.max_pool2d(x, 2, 1), x, grad=True)
    assert_no_fallbacks()

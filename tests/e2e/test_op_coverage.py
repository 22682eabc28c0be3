"""Ops added for OpInfo coverage, and the cases that must go to ATen rather than give a wrong answer."""
import pytest
import torch

from common import assert_fallback, assert_no_fallbacks, check, kernels_generated
from compile_ir import lower_fn


def test_fmax_fmin_ignore_nan_on_one_side():
    a = torch.tensor([1.0, float("nan"), 3.0, float("nan")])
    b = torch.tensor([2.0, 0.5, float("nan"), float("nan")])
    check(lambda a, b: (torch.fmax(a, b), torch.fmin(a, b)), a, b, kernels=1)
    assert_no_fallbacks()


def test_hypot_and_diagonal():
    check(lambda a, b: torch.hypot(a, b), torch.randn(3, 4), torch.randn(4))
    check(lambda x: torch.diagonal(x, 1, 0, 2) * 2, torch.randn(4, 3, 5))
    assert_no_fallbacks()


def test_copy_variants_of_views():
    x = torch.randn(2, 3, 4)
    check(lambda x: torch.permute_copy(x, (2, 0, 1)), x)
    check(lambda x: torch.narrow_copy(x, 2, 1, 2), x)
    check(lambda x: torch.unbind_copy(x, 1), x)
    assert_no_fallbacks()


def test_data_dependent_sizes_are_read_at_run_time_and_the_graph_compiles():
    # nonzero's output is column-major, with strides (1, Max(1, u0)): the add after it keeps them
    from mini_inductor import metrics
    check(lambda x: torch.nonzero(x > 0) + 1, torch.randn(4, 5))
    if kernels_generated() is not None:
        assert metrics.compiled_graphs and not any(g.ran_eagerly for g in metrics.compiled_graphs)
        assert kernels_generated() >= 1 and any("u0" in g.dynamic_symbols for g in metrics.compiled_graphs)


def test_complex_and_empty_tensors_go_to_aten():
    check(lambda x: (x.to(torch.complex64) * 2).real, torch.randn(4))
    assert_fallback("_to_copy")
    check(lambda x: torch.flip(x, [0]) + 1, torch.randn(0, 3))


@pytest.mark.parametrize("dtype", [torch.uint16, torch.uint32, torch.uint64])
def test_unsigned_types_wider_than_a_byte_run_in_aten_with_their_reason(dtype):
    # no generated kernel computes in them: before, the compile stopped with a CodegenError; eager
    # takes only a few ops of these types (mul, bitwise and, cat, sum, eq, conversions)
    def f(x):
        return ((x * x) & x).to(torch.int64) + torch.cat([x, x]).sum() + (x == x).int() * 3
    check(f, torch.arange(12, device="cpu").to(dtype).view(3, 4))
    assert_fallback("mul")
    lowered, _ = lower_fn(f, torch.arange(12).to(dtype).view(3, 4))
    name = str(dtype).removeprefix("torch.")
    assert f"{name} values" in lowered.fallback_reasons["aten.mul.Tensor"], lowered.fallback_reasons
    # what reads only int64 values after the conversion is still generated
    assert "aten.add.Tensor" not in lowered.fallback_ops, lowered.fallback_ops


def test_float8_conversions_run_in_aten_and_the_rest_is_generated():
    def f(x):
        return (x * 3).to(torch.float8_e4m3fn).float() + 1
    check(f, torch.randn(16))
    assert_fallback("_to_copy")
    lowered, _ = lower_fn(f, torch.randn(16))
    assert lowered.fallback_ops == {"aten._to_copy.default": 2}, lowered.fallback_ops
    assert "float8_e4m3fn values" in lowered.fallback_reasons["aten._to_copy.default"]


def test_an_empty_slice_through_kernels_and_a_matmul_trains():
    # fuzz seed 228, program 31: a [:0] slice through an eval batch norm into a matmul, with autograd;
    # splitting the empty loop out of a flat index took an index modulo 0 and failed the schedule
    import torch.nn.functional as F

    def f(x, mean, var, bias, w):
        return F.batch_norm(x.t()[:0], mean, var, None, bias, training=False) @ w

    x = torch.randn(3, 1, dtype=torch.bfloat16)
    stats = [torch.randn(1), torch.rand(1) + 0.5, torch.randn(1)]
    w = torch.randn(3, 1, dtype=torch.bfloat16, requires_grad=True)
    w_eager = w.detach().clone().requires_grad_()
    want = f(x, *stats, w_eager)
    got = torch.compile(f, backend="mini_inductor")(x, *stats, w)   # a training graph: w requires grad
    assert got.shape == want.shape == (0, 1) and got.dtype == want.dtype and got.stride() == want.stride()
    got.sum().backward()
    want.sum().backward()
    torch.testing.assert_close(w.grad, w_eager.grad)


@pytest.mark.parametrize("dim", [0, 1])
def test_cumsum_matches_along_each_dim(dim):
    check(lambda x: torch.cumsum(x, dim), torch.randn(6, 5))


def test_multilabel_margin_loss_stops_at_a_rows_minus_one_as_eager():
    # torch's decomposition read the targets after the -1 terminator (2.6 and 15.0 for eager's 0.8 and
    # 0.0, aot_eager alike): the op is kept whole, an ATen call
    import torch.nn.functional as F
    x = torch.tensor([[0.1, 0.2, 0.4, 0.8, -0.3], [0.5, -0.1, 0.0, 0.3, 0.2], [1., 2., 3., 4., 5.]])
    y = torch.tensor([[3, 0, -1, 1, 2], [0, 1, 2, 3, 4], [-1, 1, 2, 3, 4]])
    for reduction in ("none", "mean"):
        check(lambda x, y: F.multilabel_margin_loss(x * 2, y, reduction=reduction), x, y)
    check(lambda x, y: F.multilabel_margin_loss(x, y), x, y, grad=True)

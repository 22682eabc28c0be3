"""Dtypes that come from torch's type promotion, and outputs whose views and strides eager fixes, are
eager's: result dtypes under type promotion with Python scalars, an argmax index read by an argmin in
the same kernel, outputs that eager returns as views of each other, and the strides of size-1 dims.
Each test is a class of wrong answers that the differential fuzzer (tests/fuzz) found, compared with
eager."""
import pytest
import torch
import torch.nn.functional as F

from common import assert_no_fallbacks, check, clone_input, compile_fn


@pytest.mark.parametrize("dtype, low, high", [(torch.int32, -1.0, 1.0), (torch.int64, -1.0, 1.0),
                                              (torch.int32, -1.5, 2.5), (torch.uint8, 0.0, 1.5)])
def test_hardtanh_of_integers_keeps_their_dtype_and_truncates_the_bounds(dtype, low, high):
    # the bounds are not promoting operands: hardtanh(int32, -1.5, 2.5) is int32 within [-1, 2]
    x = torch.arange(-4, 5).to(dtype)
    check(lambda x: F.hardtanh(x, low, high), x)
    check(lambda x: F.relu6(x * 2), x)


def test_index_put_into_a_hardtanh_of_integers_has_matching_dtypes():
    x = torch.tensor([-3, 0, 2, 5], dtype=torch.int32)
    check(lambda x, i, v: torch.index_put(F.hardtanh(x), (i,), v),
          x, torch.tensor([1, 3]), torch.tensor([7, -7], dtype=torch.int32))


@pytest.mark.parametrize("fn", [lambda a, b: torch.add(a, b, alpha=2), lambda a, b: torch.add(a, True, alpha=2),
                                lambda a, b: torch.add(a.to(torch.int8), b, alpha=3),
                                lambda a, b: torch.sub(a.to(torch.int8), b.to(torch.int8), alpha=3)],
                         ids=["bool+bool", "bool+True", "int8+bool", "int8-int8"])
def test_alpha_of_add_and_sub_takes_no_part_in_type_promotion(fn, device):
    a = torch.tensor([[True, False, True, False]], device=device)
    b = torch.tensor([[True], [False]], device=device)
    check(fn, a, b)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_integers_and_wider_floats_are_rounded_to_a_half_result_type_first(dtype, device):
    # eager casts every operand to the result's dtype before computing in float32: int64 2049 is 2048
    # in float16, and 70000 is inf (found by the fuzzer, --dynamic seed 75: remainder(int64, float16))
    x = torch.rand(8, dtype=dtype, device=device) + 1
    i = torch.tensor([2049, 4097, 70000, 3, -5, 100000, 2047, 1], device=device)
    check(lambda x, i, t: (torch.remainder(i, x.abs() + 1), i * x, x * t + 1), x, i,
          torch.tensor(1.0001, device=device), atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_comparisons_round_the_operands_to_a_half_common_dtype_first(dtype, device):
    # a comparison's result is bool, but eager compares in the operands' common dtype: a 0-d float32
    # 1.001 next to bfloat16 is 1.0 (found by the fuzzer, seed 136: s == x was all False)
    x = torch.tensor([1.0, 1.0078125, 1.5, 2048.0, 0.0], dtype=dtype, device=device)
    s, i = torch.tensor(1.001, device=device), torch.tensor([1, 1, 2, 2049, 0], device=device)
    check(lambda x, s, i: (s == x, x < s, x == i, torch.logical_and(x, s * 1e-8), x.ne(s)), x, s, i)


def test_a_sum_and_a_product_of_bools_are_or_and_and(device):
    # in Triton's 1-bit arithmetic True + True wraps to False (seen on the H100: fuzz seed 20)
    a = torch.tensor([True, True, False, False], device=device)
    b = torch.tensor([True, False, True, False], device=device)
    check(lambda a, b: (a + b, a * b, torch.add(a, b, alpha=2), (a < b) + a), a, b)


@pytest.mark.parametrize("shape, dim", [((1, 1), 0), ((1, 1), -1), ((3, 1), -1), ((1, 3), 0)])
def test_argmin_of_an_argmax_index_over_a_short_dim_runs(shape, dim):
    # both reduce in one kernel; the argmax index feeds an int64 reduction whose identity is int64's max
    x = torch.randint(-5, 5, shape)
    check(lambda x: torch.argmin(torch.argmax(x, -1, keepdim=True), dim), x)
    check(lambda x: torch.argmax(x.expand(2, *shape[1:]), -2), x[:1])


def _storage(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def _sharing(tensors) -> list[list[int]]:
    return [[j for j, b in enumerate(tensors) if _storage(a) == _storage(b)] for a in tensors]


def _linear_then_index_put_(x, w, b, i, v):
    out = F.linear(x, w, b)
    return out, out.index_put_((i,), v)


def _one(*shape):
    return lambda: [torch.randn(*shape)]


# (function, a maker of its inputs: made in the test, so that on a GPU machine they are CUDA tensors)
@pytest.mark.parametrize("fn, make_args", [
    (lambda x: (torch.logical_not(x), torch.logical_not(x).transpose(0, 0)), _one(1, 1, 1, 1)),
    (lambda x: (lambda v: (v, v.transpose(0, 0)))(torch.logical_not(x)), _one(1, 1, 1, 1)),
    (lambda x: (lambda v: (v, v.t()))(torch.sin(x)), lambda: [torch.rand(1) < 0.5]),
    (lambda x: (lambda v: (v, v.t()))(torch.sin(x)), _one(3)),
    (lambda x: (lambda v: (v, v.detach()))(torch.sin(x)), _one(3)),
    (lambda x: (lambda v: (v, v.view(1, 3).view(1, 1, 3)))(torch.cos(x).view(1, 1, 3)), _one(3)),
    (_linear_then_index_put_, lambda: [torch.randn(1, 1, 3), torch.randn(3, 3), torch.randn(1), torch.tensor([0]),
                                       torch.randn(1, 1, 1)]),
], ids=["separate_logical_nots", "transpose_0_0", "t_of_1d_bool_sin", "t_of_1d", "detach", "views_through_size_1",
        "linear_then_index_put_"])
def test_outputs_share_storage_exactly_when_eagers_do(fn, make_args):
    args = make_args()
    expected = fn(*[clone_input(a) for a in args])
    compiled = compile_fn(fn)
    check(fn, *args)
    for _ in range(2):
        actual = compiled(*[clone_input(a) for a in args])
        assert _sharing(actual) == _sharing(expected), \
            f"outputs share storage as {_sharing(actual)}, eager's as {_sharing(expected)}"


@pytest.mark.parametrize("fn", [lambda x: x.sum(1, keepdim=True), lambda x: x.amax(0, keepdim=True),
                                lambda x: x.argmax(-1, keepdim=True), lambda x: torch.sin(x).unsqueeze(1),
                                lambda x: torch.cos(x)[None, :, None], lambda x: torch.cos(x).view(1, 6, 1)],
                         ids=["sum_keepdim", "amax_keepdim", "argmax_keepdim", "unsqueeze", "none_index", "view"])
def test_outputs_have_eagers_strides_on_size_one_dims(fn):
    x = torch.randn(2, 3)
    expected = fn(x)
    actual = compile_fn(fn)(x)
    check(fn, x)
    assert actual.stride() == expected.stride(), f"strides {actual.stride()} != eager's {expected.stride()}"


@pytest.mark.parametrize("fn", [lambda x: (lambda v: (v, v[2:].relu_()))(x.to(torch.float64)),
                                lambda x: (lambda v: (v[::2].relu_(), v))(x * 2),
                                lambda x: (lambda v: (v[:, 1:3].relu_(), v))(x * 2),
                                lambda x: torch.slice_scatter(x * 2, torch.ones(4, 2), 1, -3, None, 2)],
                         ids=["slice_relu_", "strided_slice", "slice_of_dim_1", "slice_scatter"])
def test_an_in_place_op_on_a_slice_of_a_transposed_intermediate_keeps_its_strides(fn):
    # slice_scatter's result has its input's strides in eager (torch's decomposition makes it contiguous)
    check(fn, torch.randn(5, 4).t())
    assert_no_fallbacks()


@pytest.mark.parametrize("fn", [lambda x: x.mean(1), lambda x: x.var(0), lambda x: torch.var_mean(x, 1),
                                lambda x: F.rms_norm(x, (8,)), lambda x: F.avg_pool2d(x.view(1, 1, 4, 8), 2)],
                         ids=["mean", "var", "var_mean", "rms_norm", "avg_pool2d"])
def test_float64_means_and_variances_divide_in_float64(fn):
    # float32 division leaves relative errors near 1e-7, far above float64's
    check(fn, torch.randn(4, 8, dtype=torch.float64) * 3 + 1, atol=1e-12, rtol=1e-12, grad=True)


@pytest.mark.parametrize("fn", [lambda x: torch.split(torch.where(x > 0, x, -x), 2, 2)[-1],
                                lambda x: torch.chunk(torch.reciprocal(x.abs() + 0.5), 3, 0)[0],
                                lambda x: torch.unbind(x * 2, 1)[1]],
                         ids=["split", "chunk", "unbind"])
def test_a_piece_of_a_split_intermediate_is_a_view_with_eagers_strides(fn, device):
    # eager returns a strided view into the whole intermediate, not a compact copy of the piece
    check(fn, torch.randn(2, 4, 3, device=device).transpose(-2, -1))


@pytest.mark.parametrize("fn", [lambda a, b: torch.atan2(a, b), lambda a, b: torch.sin(a) + 0 * b,
                                lambda a, b: a + b, lambda a, b: a.to(torch.int32) == b,
                                lambda a, b: torch.where(a, a.to(torch.int32), b), lambda a, b: a * 2.5],
                         ids=["atan2", "sin", "add", "eq", "where", "mul-float-scalar"])
def test_cpu_outputs_are_laid_out_by_inputs_promoted_to_the_common_dtype(fn):
    # eager's CPU kernels first copy an input of another dtype with .to(): an expanded input becomes
    # contiguous and then orders the output's dims (CPU fuzz seed 30 program 4201)
    a = (torch.rand(1, 3) < 0.5).expand(4, 3)
    b = torch.rand(3, 4).t()
    expected = fn(a, b)
    actual = compile_fn(fn)(a, b)
    assert actual.stride() == expected.stride()
    torch.testing.assert_close(actual, expected)


@pytest.mark.parametrize("make", [lambda: torch.randint(-4, 5, (2, 3, 2)).diagonal(0, -3, 2),
                                  lambda: torch.randint(-4, 5, (3, 4))[..., ::2].mT],
                         ids=["diagonal", "sliced-mT"])
def test_cpu_inputs_converted_to_the_common_dtype_keep_their_dim_order(make):
    # .to() of a strided, non-dense input keeps the order of its strides (CPU fuzz seed 30, 740 and 2753)
    a, b = make(), torch.rand(1, 1)
    for fn in (torch.maximum, torch.logical_and):
        expected = fn(a, b)
        actual = compile_fn(fn)(a, b)
        assert actual.stride() == expected.stride()
        torch.testing.assert_close(actual, expected)


def test_views_returned_beside_their_base_are_objects_of_their_own(device):
    # without autograd the graph returns y.view(y.shape) and y.detach() beside y itself: eager gives
    # three objects over one storage; ours gave y three times, and b.t_() transposed a as well
    def f(x):
        y = x * 2
        return y, y.view(y.shape), y.detach(), y
    x = torch.randn(4, 6, device=device)
    with torch.no_grad():
        a, b, c, d = torch.compile(f, backend="mini_inductor")(x)
    assert a is not b and a is not c and a is d
    assert b.data_ptr() == a.data_ptr() == c.data_ptr() and b._base is a
    torch.testing.assert_close(b, x * 2)
    b.t_()
    assert a.shape == (4, 6) and c.shape == (4, 6)

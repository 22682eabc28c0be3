"""logcumsumexp, cummax and cummin are scan kernels (lowering/scan_lowerings.py, ir.Scan with
tl.associative_scan over triton_helpers' combine functions), never ATen fallbacks: any length, a
symbolic one too, held whole or looped with a carry, forward and backward. Compared with eager in
Triton's interpreter on the CPU; tests/codegen/test_sm90_compile.py compiles the same kernels for sm_90.
"""
import pytest
import torch

from common import COUNTS_KERNELS, assert_no_fallbacks, assert_same_tensor, check, generated_sources

import mini_inductor  # noqa: F401  registers the backend
from mini_inductor import config, metrics

NAN, INF = float("nan"), float("inf")


@pytest.fixture(autouse=True)
def on_device(device):
    torch.set_default_device(device)
    yield
    torch.set_default_device(None)


def assert_scans(*helpers: str) -> None:
    """Every graph since the last reset ran no ATen fallback and generated the scans named
    (triton_helpers.logcumsumexp, .cummax, .cummin)."""
    assert_no_fallbacks()
    if COUNTS_KERNELS:
        source = generated_sources()
        for helper in helpers:
            assert f"triton_helpers.{helper}(" in source, f"no {helper} scan in the generated code"


def check_scans(fn, *args, helpers=("logcumsumexp",), **kwargs):
    out = check(fn, *args, **kwargs)
    assert_scans(*helpers)
    return out


def lse_tolerance(n: int) -> dict:
    # a tree of log-add-exps (the kernel) against eager's sequential one: each rounds about once per
    # combine, sqrt(n) ulps of a result of magnitude about log(n)
    return {"atol": 1e-5, "rtol": 2e-6 * max(n, 1) ** 0.5}


def both_extremes(x: torch.Tensor, dim: int = 1):
    return torch.cummax(x, dim), torch.cummin(x, dim)


# ─── logcumsumexp ────────────────────────────────────────────────────────────────────────────────

@pytest.mark.parametrize("n", [5, 300, 1000])
def test_logcumsumexp_is_one_scan_kernel(n):
    # short rows too: there is no masked-square form of a log-sum-exp, every length is a scan
    check_scans(lambda x: torch.logcumsumexp(x, -1), torch.randn(3, n) * 4, kernels=1, **lse_tolerance(n))
    check_scans(lambda x: torch.logcumsumexp(x, 1), torch.randn(2, n, dtype=torch.float64) * 4, kernels=1)


def test_logcumsumexp_of_float16_and_bfloat16_is_computed_in_float32():
    x = torch.randn(4, 700) * 3
    for dtype in (torch.float16, torch.bfloat16):
        out = check_scans(lambda x: torch.logcumsumexp(x, 1), x.to(dtype), kernels=1)
        assert out.dtype == dtype
        # rounded once from a float32 result: within an ulp of the float64 one, rounded
        want = torch.logcumsumexp(x.to(dtype).double(), 1)
        assert_same_tensor(out.double(), want, f"{dtype} against float64", atol=0, rtol=torch.finfo(dtype).eps)


def test_logcumsumexp_of_infinities_and_nan_is_eagers():
    # a row of -inf stays -inf (an empty sum), -inf before finite values adds nothing, +inf wins from
    # its column on, +inf after -inf is +inf, NaN from its column on; huge values do not overflow
    x = torch.randn(8, 200)
    x[0] = -INF
    x[1, :50] = -INF
    x[2, 30] = INF
    x[3, :10] = -INF
    x[3, 10] = INF
    x[4, 77] = NAN
    x[5, 5] = INF
    x[5, 6] = NAN
    x[6] = torch.linspace(-3e38, 3e38, 200)
    x[7, ::2] = -INF
    check_scans(lambda x: torch.logcumsumexp(x, 1), x, kernels=1)


def test_logcumsumexp_fuses_with_its_producer_and_consumer():
    x, w = torch.randn(3, 600), torch.randn(600)
    check_scans(lambda x, w: torch.logcumsumexp(x * w + 1, 1).exp() - 1, x, w, kernels=1, **lse_tolerance(600))


def test_logcumsumexp_over_any_dim_and_strided_inputs():
    x = torch.randn(500, 6)
    check_scans(lambda x: torch.logcumsumexp(x, 0), x, kernels=1, **lse_tolerance(500))
    check_scans(lambda x: torch.logcumsumexp(x, 1), torch.randn(2, 400, 3), kernels=1, **lse_tolerance(400))
    check_scans(lambda x: torch.logcumsumexp(x.t(), 1), x, kernels=1, **lse_tolerance(500))
    check_scans(lambda x: torch.logcumsumexp(x[:, ::2], -1), torch.randn(4, 900), kernels=1, **lse_tolerance(450))


def test_logcumsumexp_of_0d_size_1_and_empty_inputs():
    for shape, dim in (((), 0), ((), -1), ((3, 1), 1), ((1, 700), 0), ((0, 40), 1), ((3, 0), 1)):
        check(lambda x: torch.logcumsumexp(x, dim), torch.randn(shape))
    assert_no_fallbacks()


def test_a_row_longer_than_a_persistent_block_is_looped_with_a_log_add_exp_carry():
    x = torch.randn(3, 5000) * 3
    x[1, :2100] = -INF   # a carry of -inf into the second block
    x[2, 3000] = NAN
    with config.patch(persistent_reduction_limit=1024):
        check_scans(lambda x: torch.logcumsumexp(x, 1), x, kernels=1, **lse_tolerance(5000))
    assert not COUNTS_KERNELS or "for roffset in range(" in generated_sources()


def test_logcumsumexp_trains_its_backward_is_two_more_scans():
    # autograd's formula: logcumsumexp of the flipped log|grad| - result for the positive and the
    # negative parts of the gradient, flipped back; both scans generated in the backward
    w = torch.randn(400)
    check(lambda x, w: torch.logcumsumexp(x * w, -1).sin(), torch.randn(3, 400), w, grad=True, atol=1e-4, rtol=1e-4)
    assert_scans("logcumsumexp")
    if COUNTS_KERNELS:
        assert [r.name.split("_")[0] for r in metrics.compiled_graphs] == ["forward", "backward"]
        for record in metrics.compiled_graphs:
            assert "triton_helpers.logcumsumexp(" in open(record.source_path).read(), record.name


# ─── cummax, cummin ──────────────────────────────────────────────────────────────────────────────

def test_eagers_cummax_and_cummin_take_the_last_index_of_a_tie_and_keep_a_nan():
    # what the kernels must match, checked on the installed torch
    v, i = torch.cummax(torch.tensor([1.0, 3.0, 3.0, 2.0, 3.0, NAN, 5.0, NAN, 1.0]), 0)
    assert i.tolist() == [0, 1, 2, 2, 4, 5, 5, 7, 7]
    v, i = torch.cummin(torch.tensor([2, 1, 1, 2, 0, 0, 3]), 0)
    assert v.tolist() == [2, 1, 1, 1, 0, 0, 0] and i.tolist() == [0, 1, 2, 2, 4, 5, 5]
    v, i = torch.cummax(torch.tensor([-0.0, 0.0, -0.0]), 0)   # -0.0 ties with 0.0
    assert i.tolist() == [0, 1, 2] and str(v[2].item()) == "-0.0"


@pytest.mark.parametrize("n", [7, 300, 1000])
def test_cummax_and_cummin_are_one_scan_kernel_with_values_and_indices(n):
    x = torch.randn(4, n)
    check_scans(both_extremes, x, kernels=1, helpers=("cummax", "cummin"))


def test_ties_signed_zeros_and_nans_give_eagers_values_and_indices():
    x = torch.randint(-3, 4, (6, 300)).float()   # many ties
    x[0, 17] = x[0, 40] = x[0, 41] = NAN           # NaN sticks, its index moves to each later NaN
    x[1, 0] = NAN
    x[2] = 0.0
    x[2, ::3] = -0.0
    x[3, 100] = INF
    x[3, 5] = -INF
    x[4] = -INF
    x[5, 299] = NAN
    check_scans(both_extremes, x, kernels=1, helpers=("cummax", "cummin"))


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool])
def test_integer_and_bool_inputs_keep_their_dtype_and_exact_indices(dtype):
    if dtype == torch.bool:
        x = torch.rand(3, 400) > 0.7
    else:
        info = torch.iinfo(dtype)
        x = torch.randint(max(info.min, -50), min(info.max, 50), (3, 400), dtype=dtype)
        x[0, 3] = info.max   # the identity's neighbours
        x[1, 9] = info.min
    (v, i), (w, j) = check_scans(both_extremes, x, kernels=1, helpers=("cummax", "cummin"))
    assert v.dtype == dtype and w.dtype == dtype and i.dtype == j.dtype == torch.int64


def test_float16_and_bfloat16_are_compared_in_float32_and_stored_exactly():
    x = torch.randint(-20, 20, (3, 500)).float() / 4   # ties after rounding to 2 bytes
    x[1, 33] = NAN
    for dtype in (torch.float16, torch.bfloat16):
        check_scans(both_extremes, x.to(dtype), kernels=1, helpers=("cummax", "cummin"), atol=0, rtol=0)


def test_cummax_over_any_dim_and_strided_inputs():
    x = torch.randint(-5, 5, (400, 6)).float()
    check_scans(lambda x: torch.cummax(x, 0), x, kernels=1, helpers=("cummax",))
    check_scans(lambda x: torch.cummin(x, 1), torch.randint(-5, 5, (2, 300, 3)).float(), kernels=1,
                helpers=("cummin",))
    check_scans(lambda x: torch.cummax(x.t(), -1), x, kernels=1, helpers=("cummax",))
    check_scans(lambda x: torch.cummin(x[:, ::2], 1), torch.randn(4, 900), kernels=1, helpers=("cummin",))


def test_cummax_of_0d_size_1_and_empty_inputs():
    for shape, dim in (((), 0), ((), -1), ((3, 1), 1), ((1, 700), 0)):
        check(lambda x: both_extremes(x, dim), torch.randn(shape))
        check(lambda x: both_extremes(x, dim), torch.randint(0, 9, shape))
    assert_no_fallbacks()
    # empty: as eager's, in ATen (lowering/graph.py runs an op with empty outputs there, and only a
    # single output becomes a bare allocation)
    for shape in ((0, 40), (3, 0)):
        check(lambda x: both_extremes(x, 1), torch.randn(shape))


def test_values_or_indices_alone_and_both_feed_consumers_in_the_same_kernel():
    x = torch.randn(3, 500)
    check_scans(lambda x: torch.cummax(x, 1).values * 2, x, kernels=1, helpers=("cummax",))
    check_scans(lambda x: torch.cummin(x, 1).indices + 1, x, kernels=1, helpers=("cummin",))
    # one (value, index) scan serves both outputs
    check(lambda x: torch.cummax(x.abs(), 1).values - torch.cummax(x.abs(), 1).indices, x, kernels=1)
    assert not COUNTS_KERNELS or generated_sources().count("triton_helpers.cummax(") == 1


def test_a_looped_scan_carries_the_running_value_and_index_across_blocks():
    x = torch.randint(-30, 30, (4, 5000)).float()
    x[0, 2047] = x[0, 2048] = 99.0   # a tie across a block edge: the later index
    x[1, 1000] = NAN                  # a NaN carried through later blocks
    x[1, 4000] = NAN
    x[2, :] = 7.0                     # every element a tie
    x[3, 2048:] = -INF
    with config.patch(persistent_reduction_limit=1024):
        check_scans(both_extremes, x, kernels=1, helpers=("cummax", "cummin"))
        check_scans(lambda x: torch.cummax(x, 1), torch.randint(-9, 9, (2, 4100), dtype=torch.int32), kernels=1,
                    helpers=("cummax",))
    assert not COUNTS_KERNELS or "cummax_combine(" in generated_sources()


def test_cummax_trains_its_backward_scatters_the_gradient_to_the_indices():
    # autograd's formula: zeros.scatter_add(dim, indices, grad), generated (no fallback)
    x = torch.randint(-4, 4, (3, 300)).float()   # ties: the gradient goes to the later index
    check(lambda x: torch.cummax(x * 1.5, 1).values.tanh(), x, grad=True)
    assert_scans("cummax")
    check(lambda x: torch.cummin(x, 0)[0] * 2, torch.randn(200, 5), grad=True)
    assert_scans("cummin")
    if COUNTS_KERNELS:
        assert any(r.name.startswith("backward") for r in metrics.compiled_graphs)


# ─── one compile for every length ────────────────────────────────────────────────────────────────

def test_one_compile_serves_every_length_of_a_dynamic_graph():
    # dynamic=True: the scanned length is a symbol, so looped scans of blocks of 2048 with the sizes as
    # arguments; lengths past a block carry across blocks
    def f(x, k):
        v, i = torch.cummax(x, 1)
        w, j = torch.cummin(k, 1)
        return torch.logcumsumexp(x * 2, 1), v, i, w, j
    compiled = torch.compile(f, backend="mini_inductor", dynamic=True, fullgraph=True)
    for n in (5, 300, 2049, 5000, 33):
        x = torch.randint(-9, 9, (3, n)).float()
        x[0, n // 2] = NAN
        k = torch.randint(-9, 9, (3, n), dtype=torch.int32)
        for idx, (a, e) in enumerate(zip(compiled(x, k), f(x, k))):
            assert_same_tensor(a, e, f"length {n} output {idx}", **(lse_tolerance(n) if idx == 0 else {}))
    if COUNTS_KERNELS:
        (record,) = metrics.compiled_graphs   # one compile for every length
        assert record.dynamic_symbols and record.ran_eagerly is None and record.dynamic_fallback is None
        assert not record.fallback_ops, dict(record.fallback_ops)
    assert_scans("logcumsumexp", "cummax", "cummin")


def test_a_dynamic_training_step_generates_the_scans_of_both_graphs():
    def f(x):
        return torch.logcumsumexp(x, -1) + torch.cummax(x, -1).values
    compiled = torch.compile(f, backend="mini_inductor", dynamic=True, fullgraph=True)
    for n in (300, 3000, 7):
        ours = torch.randn(2, n, requires_grad=True)
        theirs = ours.detach().clone().requires_grad_()
        out, want = compiled(ours), f(theirs)
        assert_same_tensor(out, want, f"length {n}", **lse_tolerance(n))
        w = torch.randn(2, n)
        (out * w).sum().backward()
        (want * w).sum().backward()
        assert_same_tensor(ours.grad, theirs.grad, f"length {n} grad", atol=1e-4, rtol=1e-4)
    if COUNTS_KERNELS:
        assert len(metrics.compiled_graphs) == 2, [r.name for r in metrics.compiled_graphs]
        assert all(r.dynamic_symbols and not r.fallback_ops for r in metrics.compiled_graphs)

"""cumsum and cumprod past the masked square's length, or over a symbolic length, are scan kernels
(lowering/scan_lowerings.py, ir.Scan): tl.cumsum / tl.cumprod along a row held whole, or block by
block with a carry, never an ATen fallback. Compared with eager: in Triton's interpreter on the CPU, compiled on
a GPU (benchmarks/device_checks.sh scans)."""
import pytest
import torch

from common import COUNTS_KERNELS, assert_no_fallbacks, assert_same_tensor, check, generated_sources

import mini_inductor  # noqa: F401  registers the backend
from mini_inductor import metrics
from mini_inductor.lowering.early_decompositions import cumprod_backward
from mini_inductor.lowering.scan_lowerings import MAX_SQUARE_LENGTH


@pytest.fixture(autouse=True)
def on_device(device):
    """Every tensor of a test on the test's device (CUDA on the GPU machine, where the kernels compile)."""
    torch.set_default_device(device)
    yield
    torch.set_default_device(None)


def assert_scan_kernels(*fns: str) -> None:
    """The graphs of the last `check` (or compiled since the last reset) generated their scans (`fns`:
    tl.cumsum, tl.cumprod) and ran no ATen fallback."""
    assert_no_fallbacks()
    if COUNTS_KERNELS:
        source = generated_sources()
        for fn in fns:
            assert f"{fn}(" in source, f"no {fn} in the generated code"


def check_scan(fn, *args, scan: str = "tl.cumsum", **kwargs):
    """`check`, then assert that the graph's scan was generated (`scan`), not run in ATen."""
    out = check(fn, *args, **kwargs)
    assert_scan_kernels(scan)
    return out


def long_float32_tolerance(n: int) -> dict:
    # eager's CPU cumsum of float32 accumulates in double; a kernel (and CUDA's eager) in float32: the
    # rounding of n additions, about sqrt(n) ulps of the running sum
    return {"atol": 2e-6 * n ** 0.5, "rtol": 1e-5}


@pytest.mark.parametrize("n", [300, 1000])
def test_a_cumsum_longer_than_the_masked_square_is_one_scan_kernel(n):
    assert n > MAX_SQUARE_LENGTH
    check(lambda x: torch.cumsum(x, -1), torch.randn(3, n), kernels=1, **long_float32_tolerance(n))
    assert_scan_kernels("tl.cumsum")


def test_a_row_longer_than_a_persistent_block_is_scanned_block_by_block_with_a_carry():
    n = 40_000   # past persistent_reduction_limit (32768): a looped kernel, blocks of 2048
    check(lambda x: torch.cumsum(x, 1), torch.randn(2, n), kernels=1, **long_float32_tolerance(n))
    assert_scan_kernels("tl.cumsum")
    assert not COUNTS_KERNELS or "for roffset in range(" in generated_sources()


def half_scan_tolerance(x: torch.Tensor, dtype: torch.dtype) -> dict:
    """A 2-byte cumsum's tolerance, from the running sums' magnitude: eager's CUDA scan adds in another
    order than a kernel's (or the CPU's sequential one), so near-zero sums differ by ulps of the largest
    ones (H200, session 37: 0.014 in float16 where the default tolerance allowed 0.005)."""
    largest = x.double().cumsum(-1).abs().max().item()
    return {"atol": 4 * torch.finfo(dtype).eps * max(largest, 1.0), "rtol": 0.0}


@pytest.mark.parametrize("n", [300, 1000])
def test_float16_and_bfloat16_accumulate_in_float32_as_eager(n):
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.randn(4, n).to(dtype)
        tol = half_scan_tolerance(x, dtype)
        out = check(lambda x: torch.cumsum(x, 1), x, kernels=1, **tol)
        assert out.dtype == dtype
        # rounded once from a float32 sum: the float64 sum rounded to float16 within an ulp or two
        want = x.double().cumsum(1).to(dtype)
        assert_same_tensor(out, want, f"{dtype} against the float64 sum", **tol)
    assert_scan_kernels("tl.cumsum")


@pytest.mark.parametrize("n", [300, 1000])
def test_integer_and_bool_inputs_scan_to_int64(n):
    for x in (torch.randint(-100, 100, (3, n)), torch.randint(-100, 100, (3, n), dtype=torch.int32),
              torch.randint(0, 5, (3, n), dtype=torch.uint8), torch.rand(3, n) > 0.5):
        out = check(lambda x: torch.cumsum(x, 1), x, kernels=1)
        assert out.dtype == torch.int64
    assert_scan_kernels("tl.cumsum")


def test_the_dtype_argument_is_honoured():
    x = torch.randn(3, 500)
    check_scan(lambda x: torch.cumsum(x, 1, dtype=torch.float64), x, kernels=1)
    check_scan(lambda x: torch.cumsum(x, 1, dtype=torch.float16), x, kernels=1,
               **half_scan_tolerance(x, torch.float16))
    check_scan(lambda x: torch.cumsum(x, 1, dtype=torch.float32), torch.randint(-9, 9, (3, 500)), kernels=1)
    # an int32 result of values that overflow it wraps as eager's (scanned in int64, wrapped on the store)
    big = torch.randint(2**29, 2**30, (2, 400), dtype=torch.int32)
    check_scan(lambda x: torch.cumsum(x, 1, dtype=torch.int32), big, kernels=1)
    check_scan(lambda x: torch.cumprod(x, 1, dtype=torch.float64), torch.rand(3, 500) + 0.5, kernels=1,
               scan="tl.cumprod")


@pytest.mark.parametrize("n", [300, 1000])
def test_cumprod_is_a_scan_kernel(n):
    x = torch.rand(3, n) * 0.02 + 0.995   # products that stay in range
    x[1, 7] = 0.0                         # a zero: every later product is 0
    check(lambda x: torch.cumprod(x, 1), x, kernels=1, rtol=1e-4)
    check(lambda x: torch.cumprod(x, -1), torch.randint(-1, 2, (2, n)), kernels=1)   # int64, signs and zeros
    assert_scan_kernels("tl.cumprod")


def test_a_scan_over_a_leading_dim_and_over_non_contiguous_inputs():
    x = torch.randn(1000, 6)
    tol = long_float32_tolerance(1000)
    check_scan(lambda x: torch.cumsum(x, 0), x, kernels=1, **tol)                 # the rows are the columns
    check_scan(lambda x: torch.cumsum(x, 1), torch.randn(2, 700, 3), kernels=1, **tol)   # a middle dim
    check_scan(lambda x: torch.cumsum(x.t(), 1), x, kernels=1, **tol)             # a transposed input
    check_scan(lambda x: torch.cumsum(x[:, ::2], 1), torch.randn(4, 1200), kernels=1, **tol)   # a strided slice
    out = check_scan(lambda x: torch.cumsum(x, 0), torch.randn(6, 1000).t(), kernels=1, **tol)       # transposed, along its rows
    assert out.is_contiguous()


def test_a_pointwise_producer_and_consumer_fuse_with_the_scan_into_one_kernel():
    # the producer's body is computed where the scan loads it; the consumer reads the scan's value in
    # the same kernel, and the scan's own buffer is never written
    x, y = torch.randn(3, 600), torch.randn(600)
    check(lambda x, y: torch.relu(torch.cumsum(x * 2 + y, -1)) - 1, x, y, kernels=1, **long_float32_tolerance(600))
    assert_scan_kernels("tl.cumsum")
    if COUNTS_KERNELS:
        (record,) = metrics.compiled_graphs
        kernel = generated_sources().split("def partition_0")[0]
        assert kernel.count("tl.store(") == 1, kernel


def test_a_consumer_of_the_scan_at_another_index_reads_its_buffer():
    # the last column of the scan (the row's sum) and a flip of it: reads at other indices than the
    # scan stores, so not in its loop
    x = torch.randn(3, 700)
    check(lambda x: (torch.cumsum(x, 1)[:, -1:] * 2, torch.cumsum(x, 1).flip(1)), x, **long_float32_tolerance(700))
    assert_scan_kernels("tl.cumsum")


def test_empty_and_length_one_scans():
    check(lambda x: torch.cumsum(x, 1), torch.randn(3, 0))
    check(lambda x: torch.cumsum(x, 1), torch.randn(0, 500))
    check(lambda x: torch.cumsum(x, 1), torch.randn(3, 1))
    check(lambda x: torch.cumprod(x, 0), torch.randn(1, 700))
    check(lambda x: torch.cumsum(x, 0), torch.randn(()))
    check(lambda x: torch.cumsum(x, 0), torch.randn(1000), **long_float32_tolerance(1000))
    assert_no_fallbacks()


def test_short_static_scans_stay_masked_squares():
    check(lambda x: torch.cumsum(x, 1) + 1, torch.randn(3, MAX_SQUARE_LENGTH), kernels=1)
    assert_no_fallbacks()
    assert not COUNTS_KERNELS or "tl.cumsum(" not in generated_sources()


def test_cumsum_trains_its_backward_is_a_flipped_scan():
    # autograd's cumsum backward: grad.flip(d).cumsum(d).flip(d), a scan kernel of its own reading the
    # flipped gradient where it loads it
    w = torch.randn(1000)
    check(lambda x, w: (torch.cumsum(x * w, -1).tanh() * 2).sum(-1), torch.randn(3, 1000), w, grad=True,
          **long_float32_tolerance(1000))
    assert_scan_kernels("tl.cumsum")
    if COUNTS_KERNELS:
        assert len(metrics.compiled_graphs) == 2   # forward and backward, each with its scan
        for record in metrics.compiled_graphs:
            assert "tl.cumsum(" in open(record.source_path).read(), record.name


def test_cumprod_trains():
    x = torch.rand(2, 400) * 0.02 + 0.995
    check(lambda x: torch.cumprod(x, 1), x, grad=True, rtol=1e-4, atol=1e-4)
    assert_scan_kernels("tl.cumprod")


def test_cumprod_backward_is_linear_in_the_length_with_zeros_in_the_input():
    # torch 2.11 traced cumprod's backward with grad mode on, taking its twice-differentiable formula:
    # a prod, a cumprod and a cat per position, 4394 ATen nodes and 1196 kernels at length 400 (34 s
    # to compile on the H200, session 40), with a cat of more than 8 inputs run in ATen. Ours
    # (lowering/early_decompositions.py) is the same few nodes at any length, zeros included: first,
    # last, two in a row, one at the start
    x = torch.rand(4, 400) * 0.02 + 0.995
    x[0, 5] = x[1, 0] = x[1, 9] = x[2, 399] = x[3, 7] = x[3, 8] = 0
    check(lambda x: torch.cumprod(x, 1), x, grad=True, rtol=1e-4, atol=1e-4)
    # (with a dtype and zeros, eager's own backward raises on torch 2.11 CUDA: masked_scatter_ of a
    # Float by a Double, H200, session 40; 2.13 computes it)
    check(lambda x: torch.cumprod(x, 0, dtype=torch.float64), torch.rand(6, 4) + 0.5, grad=True)
    backward = [r for r in metrics.compiled_graphs if r.name.startswith("backward")]
    assert backward and all(r.num_fx_nodes < 40 for r in backward), [r.summary() for r in backward]


def test_cumprod_backward_matches_autograd_at_every_zero_pattern():
    torch.manual_seed(0)
    for dim in (0, 1, -1):
        for _ in range(30):
            x = torch.randn(5, 7, dtype=torch.float64)
            x[torch.rand(5, 7) < 0.25] = 0
            x.requires_grad_()
            y = torch.cumprod(x, dim)
            g = torch.randn_like(y)
            expected, = torch.autograd.grad(y, x, g)
            actual = cumprod_backward(g, x.detach(), y.detach(), dim)
            assert torch.allclose(actual, expected), (x, actual, expected)
            assert not actual.isnan().any()


def test_cumprod_backward_matches_eager_where_the_input_is_not_finite():
    # eager's formula sums only the terms before a line's first zero (past it y is 0, or NaN where an
    # inf or NaN follows the zero: 0 * inf) and gives a size-1 line the gradient itself (ours divided
    # g * x by x: NaN for an inf x, inf where g * x overflowed)
    inf, nan = float("inf"), float("nan")
    for x, dim in ((torch.tensor([1.5, 0.0, inf, 3.0]), 0), (torch.tensor([1.5, 0.0, nan, 3.0]), 0),
                   (torch.tensor([1.5, inf, 0.0, 3.0]), 0), (torch.tensor([[inf], [1e30], [0.0]]), 1)):
        x.requires_grad_()
        y = torch.cumprod(x, dim)
        g = torch.full_like(y, 1e10)
        expected, = torch.autograd.grad(y, x, g)
        actual = cumprod_backward(g, x.detach(), y.detach(), dim)
        torch.testing.assert_close(actual, expected, equal_nan=True)


def _compiled_and_eager(fn, *args):
    compiled = torch.compile(fn, backend="mini_inductor")
    return compiled(*args), fn(*args)


def test_cumprod_of_a_complex_input_keeps_its_gradient():
    # ours is for real floating inputs; a complex one takes torch's kernel at the autograd key (run
    # below autograd, the compiled output had no grad_fn and x no gradient)
    x = torch.randn(3, 5, dtype=torch.complex64)
    grads = []
    for fn in (torch.compile(lambda x: x.cumprod(1) * 2, backend="mini_inductor"), lambda x: x.cumprod(1) * 2):
        leaf = x.clone().requires_grad_()
        out = fn(leaf)
        assert out.requires_grad
        grads.append(torch.autograd.grad(out.abs().sum(), leaf)[0])
    torch.testing.assert_close(*grads)


def test_cumprod_under_functorch_transforms():
    # an autograd.Function without setup_context, vmap and jvp rules fails under torch.func's
    # transforms: there cumprod takes torch's kernel (it raised "must override the setup_context
    # staticmethod"; jvp lost the tangent)
    x = torch.tensor([[1.5, 0.0, 2.0, 3.0], [0.5, 2.0, 3.0, 4.0]])
    def grad_of_cumprod(x):
        return torch.func.grad(lambda y: y.cumprod(0).sum())(x)
    for fn, arg in ((grad_of_cumprod, x[0]), (torch.vmap(grad_of_cumprod), x),
                    (lambda x: torch.func.jvp(lambda y: y.cumprod(0), (x,), (torch.ones_like(x),))[1], x[0])):
        torch.testing.assert_close(*_compiled_and_eager(fn, arg))


def test_one_compile_serves_every_length_of_a_dynamic_graph():
    # dynamic=True: the scanned length is a symbol with no bound, so scan kernels, looped, with the
    # sizes as arguments; lengths past a block (2048) carry across blocks
    def f(x, y):
        return torch.cumsum(x * 2, 1) + y, torch.cumprod(x, 1), torch.cumsum(x > 1.0, 1)
    compiled = torch.compile(f, backend="mini_inductor", dynamic=True, fullgraph=True)
    for n in (5, 300, 1000, 5000, 33):
        x, y = torch.rand(3, n) * 0.02 + 0.995, torch.randn(n)
        for i, (a, e) in enumerate(zip(compiled(x, y), f(x, y))):
            assert_same_tensor(a, e, f"length {n} output {i}", **(long_float32_tolerance(n) if i == 0 else
                                                                  {"rtol": 1e-4} if i == 1 else {}))
    if COUNTS_KERNELS:
        (record,) = metrics.compiled_graphs   # one compile for every length
        assert record.dynamic_symbols and record.ran_eagerly is None and record.dynamic_fallback is None
        assert not record.fallback_ops, dict(record.fallback_ops)
        assert "tl.cumsum(" in generated_sources() and "tl.cumprod(" in generated_sources()


def test_a_dynamic_training_step_generates_the_scans_of_both_graphs():
    def f(x):
        return torch.cumsum(torch.sin(x), -1)
    compiled = torch.compile(f, backend="mini_inductor", dynamic=True, fullgraph=True)
    for n in (300, 3000, 7):
        ours, theirs = torch.randn(2, n, requires_grad=True), None
        theirs = ours.detach().clone().requires_grad_()
        out, want = compiled(ours), f(theirs)
        assert_same_tensor(out, want, f"length {n}", **long_float32_tolerance(n))
        w = torch.randn(2, n)
        (out * w).sum().backward()
        (want * w).sum().backward()
        assert_same_tensor(ours.grad, theirs.grad, f"length {n} grad", **long_float32_tolerance(n))
    if COUNTS_KERNELS:
        assert len(metrics.compiled_graphs) == 2, [r.name for r in metrics.compiled_graphs]
        assert all(r.dynamic_symbols and not r.fallback_ops for r in metrics.compiled_graphs)


def test_a_dynamic_scan_of_many_rows_carries_a_block_of_rows():
    # 1024 rows or more: looped programs of 4 rows (XBLOCK 4), each with its own carry
    compiled = torch.compile(lambda x: torch.cumsum(x, 1), backend="mini_inductor", dynamic=True, fullgraph=True)
    for rows, n in ((1030, 700), (1027, 1500), (5, 300)):
        x = torch.randn(rows, n)
        assert_same_tensor(compiled(x), torch.cumsum(x, 1), f"{rows}x{n}", **long_float32_tolerance(n))
    if COUNTS_KERNELS:
        (record,) = metrics.compiled_graphs
        assert not record.fallback_ops and "XBLOCK=4" in generated_sources()

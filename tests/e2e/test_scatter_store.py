"""scatter without reduce along a long or symbolic span, or with an index smaller than self in another
dim: a copy of self, then each src element (or the value) stored at its index position
(lowering/scatter_lowerings.py `_scatter_store`, a ScatterBuffer of mode "scatter"). Compared with
eager where eager's result is defined: unique positions, or duplicates that all write one value. The
backwards of sort and topk are such scatters, so they are generated at every row length the sort is.
"""
import inspect

import pytest
import torch

from common import (COUNTS_KERNELS, assert_fallback, assert_no_fallbacks, assert_same_tensor, check, compile_fn,
                    generated_sources, reset_metrics)
from compile_ir import lower_fn

from mini_inductor import metrics
from mini_inductor.lowering.scatter_lowerings import MAX_SCATTER_SPAN


@pytest.fixture(autouse=True)
def on_device(device):
    torch.set_default_device(device)
    yield
    torch.set_default_device(None)


def permutations(rows: int, n: int, k: int) -> torch.Tensor:
    """rows × k distinct positions of 0 .. n - 1 per row (eager's scatter is defined on them)."""
    return torch.stack([torch.randperm(n)[:k] for _ in range(rows)])


def assert_stored_in_a_kernel() -> None:
    assert_no_fallbacks()
    if COUNTS_KERNELS:
        assert "tl.device_assert" in generated_sources(), "the scatter's index is not checked"


DTYPES = [torch.bool, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64, torch.float16,
          torch.bfloat16, torch.float32, torch.float64]


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_permutation_along_a_long_span_is_a_copy_and_a_store_kernel(dtype):
    x = (torch.randn(3, 40) * 50).to(dtype)
    src = (torch.randn(3, 25) * 50).to(dtype)
    check(lambda x, i, s: x.scatter(1, i, s), x, permutations(3, 40, 25), src, kernels=2, atol=0, rtol=0)
    assert_stored_in_a_kernel()


def test_duplicate_positions_that_write_one_value_along_dim_0():
    # every duplicate of position p writes p * 0.5: whichever store lands, the result is eager's
    index = torch.randint(0, 30, (20, 6))
    check(lambda x, i: x.scatter(0, i, i * 0.5), torch.randn(30, 6), index, atol=0, rtol=0)
    check(lambda x, i: (x + 1).scatter(1, i, (i - 3).to(x.dtype)), torch.randn(6, 30), index.t().contiguous(),
          atol=0, rtol=0)
    assert_stored_in_a_kernel()


@pytest.mark.parametrize("value", [-1.5, 7, True])
def test_scatter_of_a_value_with_duplicates(value):
    index = torch.randint(0, 50, (4, 30))
    check(lambda x, i: x.scatter(1, i, value), torch.randn(4, 50), index, atol=0, rtol=0)
    check(lambda x, i: x.scatter(1, i, value), torch.randint(0, 9, (4, 50), dtype=torch.int16), index)
    assert_stored_in_a_kernel()


def test_an_index_smaller_than_self_and_src_in_other_dims():
    # index (3, 12) into self (5, 20) from src (4, 16): only index's shape is scattered
    check(lambda x, i, s: x.scatter(1, i, s), torch.randn(5, 20), permutations(3, 20, 12), torch.randn(4, 16),
          atol=0, rtol=0)
    # a short span, but smaller than self in dim 1: stores too
    check(lambda x, i, s: x.scatter(0, i, s), torch.randn(9, 6), permutations(4, 9, 3).t().contiguous(),
          torch.randn(3, 6), atol=0, rtol=0)
    assert_stored_in_a_kernel()


def test_non_contiguous_self_src_and_index_keep_eagers_strides():
    x, src = torch.randn(30, 4), torch.randn(6, 30)
    index = permutations(4, 30, 12)
    # along dim 0: a transposed index (12, 4), each column distinct, and a transposed src
    check(lambda x, i, s: x.scatter(0, i.t(), s.t()[:, :4] * 2), x, index, src, atol=0, rtol=0)
    # self transposed: eager's result has self's layout, which check compares; src with a step
    check(lambda x, i, s: x.t().scatter(1, i, s[:4, ::2]), x, index, src, kernels=2, atol=0, rtol=0)
    check(lambda x, i, s: (x.t() + 1).scatter(1, i, s[:4, ::2]), x, index, src, atol=0, rtol=0)
    assert_stored_in_a_kernel()


def test_a_symbolic_span_under_dynamic_shapes():
    # dynamic=True: the index's length along dim is a symbol, so the span is never short
    def f(x, i, s):
        return x.scatter(1, i, s) * 2
    compiled = torch.compile(f, backend="mini_inductor", dynamic=True, fullgraph=True)
    for n, k in ((20, 12), (33, 4), (64, 50)):
        x, s, i = torch.randn(3, n), torch.randn(3, k), permutations(3, n, k)
        assert_same_tensor(compiled(x, i, s), f(x, i, s), f"n={n} k={k}", atol=0, rtol=0)
    if COUNTS_KERNELS:
        records = metrics.compiled_graphs
        assert any(r.dynamic_symbols for r in records), [r.dynamic_symbols for r in records]
    assert_stored_in_a_kernel()


@pytest.mark.parametrize("op", ["scatter", "scatter_add"])
def test_an_index_out_of_range_raises_as_eager_does(op):
    fn = (lambda x, i, s: getattr(x, op)(1, i, s) * 2)   # noqa: E731
    if torch.get_default_device().type == "cuda":
        pytest.skip("on a GPU a device-side assert ends the process's CUDA context")
    x, s = torch.randn(3, 20), torch.randn(3, 12)
    good = permutations(3, 20, 12)
    compiled = compile_fn(fn)
    torch.testing.assert_close(compiled(x, good, s), fn(x, good, s))
    for bad_value in (20, -1):   # eager refuses a negative index too (a gather's wraps)
        bad = good.clone()
        bad[1, 5] = bad_value
        with pytest.raises(Exception):
            fn(x, bad, s)
        with pytest.raises(Exception, match="out of (bounds|range)"):
            compiled(x, bad, s)


def test_a_short_span_asserts_its_index_too():
    # the gather form (span <= MAX_SCATTER_SPAN) compared index values as plain numbers: an index out of
    # range wrote nothing where eager raises
    if torch.get_default_device().type == "cuda":
        pytest.skip("on a GPU a device-side assert ends the process's CUDA context")
    fn = lambda x, i: torch.zeros_like(x).scatter(1, i, -1.0)   # noqa: E731
    x = torch.randn(4, 7)
    compiled = compile_fn(fn)
    good = torch.tensor([[2], [0], [6], [2]])
    torch.testing.assert_close(compiled(x, good), fn(x, good))
    with pytest.raises(Exception, match="out of (bounds|range)"):
        compiled(x, torch.tensor([[2], [0], [-3], [2]]))


def test_deterministic_mode_runs_it_in_aten():
    # under torch.use_deterministic_algorithms eager's result of duplicate positions is defined; ours
    # (any one store) would not be
    args = torch.randn(3, 40), torch.randint(0, 40, (3, 25)), torch.randn(3, 25)
    saved = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        check(lambda x, i, s: x.scatter(1, i, s), *args)
        assert_fallback("scatter")
        lowered, _ = lower_fn(lambda x, i, s: x.scatter(1, i, s), *args)
    finally:
        torch.use_deterministic_algorithms(saved)
    assert lowered.fallback_ops == {"aten.scatter.src": 1}
    assert "use_deterministic_algorithms" in lowered.fallback_reasons["aten.scatter.src"]


def test_training_a_scatter_gives_eagers_gradients():
    # scatter's backward: src's gradient gathers at the index, self's is masked where it was written
    check(lambda x, i, s: (x.scatter(1, i, s) * torch.arange(40.0, device=x.device)).sum(), torch.randn(3, 40),
          permutations(3, 40, 25), torch.randn(3, 25), grad=True)
    assert_no_fallbacks()


# ─── sort and topk backwards ─────────────────────────────────────────────────────────────────────

@pytest.mark.parametrize("n", [16, 100, 1000])
def test_sort_and_topk_backwards_have_no_fallback(n):
    assert n > MAX_SCATTER_SPAN   # (a longer row than the gather form takes)

    def f(x, w):
        return (torch.sort(x, -1).values * w).sum(-1) + torch.topk(x * 2, 5, dim=-1).values.sum(-1)
    reset_metrics()
    check(f, torch.randn(3, n), torch.randn(n), grad=True)
    assert_no_fallbacks()
    if COUNTS_KERNELS:
        backward = [r for r in metrics.compiled_graphs if r.name.startswith("backward")]
        assert backward and not any(r.fallback_ops for r in backward)
        assert "triton_helpers.sort_with_index(" in generated_sources()


def test_sort_backward_along_dim_0_of_a_transposed_input():
    check(lambda x: torch.sort(x.t() * 3, dim=0, descending=True).values.cumsum(0), torch.randn(5, 40), grad=True)
    check(lambda x: torch.topk(x, 7, dim=0).values.exp(), torch.randn(30, 4), grad=True)
    assert_no_fallbacks()


@pytest.mark.skipif(torch.cuda.is_available(), reason="on the GPU the kernels compile where they run")
def test_the_store_kernels_compile_for_sm90():
    # the interpreter runs what Triton's compiler may refuse (tests/sm90.py): the stores of every
    # dtype width, a value, a symbolic span and the sort backward's scatter, compiled for an H100
    from sm90 import compile_all, launches

    def scatter(x, i, s):
        return x.scatter(1, i, s), x.scatter(1, i, 3)
    index = permutations(2, 40, 20)
    with launches() as seen:
        for dtype in (torch.bool, torch.int8, torch.float16, torch.bfloat16, torch.int64):
            x, s = (torch.randn(2, 40) * 9).to(dtype), (torch.randn(2, 20) * 9).to(dtype)
            torch.compile(scatter, backend="mini_inductor", dynamic=False)(x, index, s)
        torch.compile(scatter, backend="mini_inductor", dynamic=True)(torch.randn(2, 33), permutations(2, 33, 9),
                                                                      torch.randn(2, 9))
        x = torch.randn(3, 100, requires_grad=True)
        torch.compile(lambda x: torch.sort(x, -1).values * torch.arange(100.0), backend="mini_inductor",
                      dynamic=False)(x).sum().backward()
    assert any("tl.device_assert" in inspect.getsource(fn) for fn, _, _ in seen)
    names = compile_all(seen)
    assert sum("scatter" in n for n in names) >= 5, names

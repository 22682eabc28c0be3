"""sort, argsort and topk over rows of at most MAX_SORT_LENGTH are sort kernels (lowering/sort_lowerings.py,
ir.Sort: a bitonic network over (value, index) pairs, runtime/triton_helpers.py sort_with_index), never
ATen fallbacks; longer rows are counted fallbacks with their reason. Compared with eager in Triton's
interpreter on the CPU; tests/codegen/test_sm90_compile.py compiles the same kernels for sm_90.
"""
import pytest
import torch

from common import (COUNTS_KERNELS, assert_fallback, assert_no_fallbacks, assert_same_tensor, check, generated_sources,
                    reset_metrics)
from compile_ir import lower_fn

import mini_inductor  # noqa: F401  registers the backend
from mini_inductor import metrics
from mini_inductor.lowering.sort_lowerings import MAX_SORT_LENGTH

NAN, INF = float("nan"), float("inf")


@pytest.fixture(autouse=True)
def on_device(device):
    torch.set_default_device(device)
    yield
    torch.set_default_device(None)


def assert_sorted_in_a_kernel() -> None:
    """The graphs since the last reset ran no ATen fallback and generated a sort."""
    assert_no_fallbacks()
    if COUNTS_KERNELS:
        assert "triton_helpers.sort_with_index(" in generated_sources(), "no sort in the generated code"


def check_sort(fn, *args, **kwargs):
    out = check(fn, *args, **kwargs)
    assert_sorted_in_a_kernel()
    return out


def special_values(rows: int, n: int, dtype=torch.float32) -> torch.Tensor:
    """Small integers (many ties) with NaN, ±inf and ±0.0 scattered in."""
    gen = torch.Generator().manual_seed(rows * 1000 + n)
    x = torch.randint(-3, 4, (rows, n), generator=gen, device="cpu").to(dtype)
    x[0, ::3] = NAN
    x[1 % rows, ::2] = -0.0
    x[2 % rows, 1::4] = INF
    x[3 % rows, 2::5] = -INF
    return x.to(torch.get_default_device())


def sort_both(x, dim=-1, descending=False, stable=True):
    return torch.sort(x, dim=dim, descending=descending, stable=stable)


# ─── sort and argsort ────────────────────────────────────────────────────────────────────────────

@pytest.mark.parametrize("descending", [False, True])
@pytest.mark.parametrize("n", [2, 7, 64, 300])
def test_a_stable_sort_is_one_kernel_with_eagers_values_and_indices(n, descending):
    # NaN is the largest value, -0.0 ties with 0.0 and ties keep their input order, either way
    x = special_values(5, n)
    out = check_sort(lambda x: sort_both(x * 2, 1, descending), x, kernels=1, atol=0, rtol=0)
    if n > 2:   # the sign of a zero survives the sort
        want = sort_both(x * 2, 1, descending).values
        assert torch.equal(out.values.signbit(), want.signbit())


def test_sort_without_stable_gives_the_stable_order():
    # eager documents no order for equal values without stable=True: ours is the stable one
    x = special_values(4, 50, torch.float64)
    reset_metrics()
    got = torch.compile(lambda x: torch.sort(x, -1), backend="mini_inductor")(x)
    want = torch.sort(x, dim=-1, stable=True)
    assert_same_tensor(got.values, want.values, "values", atol=0, rtol=0)
    assert torch.equal(got.indices, want.indices)
    assert_sorted_in_a_kernel()
    check_sort(lambda x: torch.sort(x, 0, descending=True), torch.randn(30, 3), kernels=1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64, torch.int8, torch.uint8,
                                   torch.int16, torch.int32, torch.int64, torch.bool])
def test_every_dtype_is_sorted_as_eager(dtype):
    # 16-bit floats compared in float32, bools as int8: exact either way; ties stay in input order
    if dtype.is_floating_point:
        x = special_values(4, 33, dtype)
    elif dtype == torch.bool:
        x = torch.rand(4, 33) > 0.5
    else:
        info = torch.iinfo(dtype)
        x = torch.randint(-5, 6, (4, 33)).clamp(min=info.min).to(dtype)
        x[0, ::4] = info.max
        x[1, ::3] = info.min
    for descending in (False, True):
        out = check_sort(lambda x: sort_both(x, 1, descending), x, kernels=1, atol=0, rtol=0)
        assert out.values.dtype == dtype and out.indices.dtype == torch.int64


def test_any_dim_of_non_contiguous_inputs_with_eagers_strides():
    # the sorted dim is the kernel's row wherever it lies; outputs take the dense input's strides, as
    # eager's do (check compares strides)
    x = torch.randn(6, 5, 4)
    check_sort(lambda x: sort_both(x, 1), x, kernels=1)
    check_sort(lambda x: sort_both(x, 0, True), x, kernels=1)
    check_sort(lambda x: sort_both(x.transpose(0, 2), 2), x, kernels=1)
    check_sort(lambda x: sort_both(x.permute(1, 2, 0), -1, True), x)
    check_sort(lambda x: sort_both(x[:, ::2, 1:], 1), x)   # not dense: contiguous, as eager's
    check_sort(lambda x: sort_both(x.t(), 1), torch.randn(9, 7))


def test_zero_d_and_length_one_inputs_need_no_sort():
    x = torch.randn(4, 1)
    check(lambda x: sort_both(x, 1, True), x)
    check(lambda x: (torch.sort(x[0, 0]), torch.argsort(x[1, 0]), torch.topk(x[2, 0], 1)), x)
    assert_no_fallbacks()


def test_argsort_is_the_sorts_indices():
    x = special_values(4, 40)
    check_sort(lambda x: torch.argsort(x, dim=1, stable=True), x, kernels=1)
    check_sort(lambda x: torch.argsort(x, dim=0, descending=True, stable=True), x, kernels=1)
    check_sort(lambda x: torch.argsort(x + 1, dim=-1), torch.randn(8, 100), kernels=1)


def test_pointwise_producers_and_consumers_fuse_with_the_sort():
    # x * 2 read where the sort loads it; exp of the values stored where they are sorted
    check_sort(lambda x: torch.sort(x * 2, -1).values.exp() + 1, torch.randn(6, 40), kernels=1)
    # along dim 0 the sort stores its rows across memory, which the consumer's loop does not follow
    check_sort(lambda x: torch.sort(torch.relu(x) * 3, dim=0).values.exp() + 1, torch.randn(6, 10), kernels=2)


# ─── topk ────────────────────────────────────────────────────────────────────────────────────────

@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("n, k", [(8, 2), (64, 8), (300, 17)])
def test_topk_of_distinct_values_is_eagers(n, k, largest):
    # one kernel: the sort stores the first k columns of its sorted row (values and indices)
    x = torch.randn(5, n)
    check_sort(lambda x: torch.topk(x, k, dim=-1, largest=largest), x, kernels=1, atol=0, rtol=0)
    check_sort(lambda x: torch.topk(x, k, dim=0, largest=largest), x.t().contiguous(), kernels=1, atol=0, rtol=0)
    check_sort(lambda x: torch.topk(x.t() * 2, k, dim=1, largest=largest), x.t().contiguous(), kernels=1,
               atol=0, rtol=0)


def test_topk_on_ties_gives_distinct_indices_of_eagers_values():
    # eager documents no order for equal values: the values must be eager's, the indices distinct and
    # pointing at them
    x = special_values(6, 40)
    reset_metrics()
    for k in (1, 5, 39):
        for largest in (True, False):
            fn = torch.compile(lambda x: torch.topk(x, k, 1, largest), backend="mini_inductor", dynamic=False)
            got, want = fn(x), torch.topk(x, k, 1, largest)
            assert_same_tensor(got.values, want.values, f"k={k} values", atol=0, rtol=0)
            assert torch.equal(x.gather(1, got.indices), got.values) or torch.allclose(
                x.gather(1, got.indices), got.values, equal_nan=True, atol=0, rtol=0)
            assert all(len(set(row.tolist())) == k for row in got.indices), "repeated indices"
    assert_sorted_in_a_kernel()


def test_topk_of_nan_and_of_k_zero_and_the_whole_row():
    x = special_values(4, 12)
    x[3] = torch.arange(12.0)   # a row of distinct values, NaN first for largest
    x[3, 5] = NAN
    check_sort(lambda x: torch.topk(x[3:], 4), x, atol=0, rtol=0)
    # sorted=False: eager's order is its own; ours is sorted
    got = torch.compile(lambda x: torch.topk(x[3:], 4, largest=False, sorted=False), backend="mini_inductor")(x)
    assert torch.equal(got.values, torch.arange(4.0)[None]) and torch.equal(got.indices, torch.arange(4)[None])
    check_sort(lambda x: torch.topk(x[3:], 12), x, atol=0, rtol=0)
    check(lambda x: torch.topk(x, 0, dim=1), x)   # (empty: graph.py runs it in ATen, as every empty op)


def test_softmax_then_topk_is_a_router_without_fallbacks():
    # a mixture-of-experts router: softmax over 16 experts, the top 2 weights renormalized. The
    # softmax's reductions and the sort share one kernel, which stores the k columns of the weights and
    # of the indices (an output); a second renormalizes
    def router(logits):
        weights, experts = torch.topk(logits.softmax(-1), 2, dim=-1)
        return weights / weights.sum(-1, keepdim=True), experts
    check_sort(router, torch.randn(64, 16), kernels=2)


# ─── limits ──────────────────────────────────────────────────────────────────────────────────────

def test_a_row_past_the_limit_is_a_counted_fallback_with_its_reason():
    n = MAX_SORT_LENGTH + 1
    check(lambda x: torch.sort(x * 2, -1), torch.randn(2, n))
    assert_fallback("sort")
    check(lambda x: torch.topk(x + 1, 3), torch.randn(2, n))
    assert_fallback("topk")
    lowered, _ = lower_fn(lambda x: torch.sort(x, -1), torch.randn(2, n, device="cpu"))
    assert lowered.fallback_ops == {"aten.sort.default": 1}
    assert f"longer than {MAX_SORT_LENGTH}" in lowered.fallback_reasons["aten.sort.default"]


def test_a_bounded_dynamic_length_compiles_once():
    # mark_dynamic's max bounds the symbol within the limit: one kernel whose block holds the longest row
    def f(x):
        return torch.sort(x, dim=1, descending=True, stable=True), torch.topk(x, 2, dim=1)
    compiled = torch.compile(f, backend="mini_inductor", fullgraph=True)
    for n in (5, 40, 17):
        x = special_values(3, n)
        x[:, 0] = torch.arange(3.0)   # (no NaN row for topk: eager's order of tied NaNs is its own)
        x[0] = torch.randn(n)
        torch._dynamo.mark_dynamic(x, 1, min=2, max=64)
        got, want = compiled(x), f(x)
        for a, e in zip(got[0], want[0]):
            assert_same_tensor(a, e, f"length {n} sort", atol=0, rtol=0)
        assert_same_tensor(got[1].values, want[1].values, f"length {n} topk", atol=0, rtol=0)
    if COUNTS_KERNELS:
        (record,) = metrics.compiled_graphs
        assert record.dynamic_symbols and not record.fallback_ops, (record.dynamic_symbols, record.fallback_ops)
    assert_sorted_in_a_kernel()


def test_a_symbolic_k_of_a_static_row():
    # k made of a dynamic graph's size: the first k columns of the sorted row, one compile
    def f(x, y):
        return torch.topk(x, y.shape[0], dim=1)
    compiled = torch.compile(f, backend="mini_inductor", fullgraph=True)
    reset_metrics()
    x = torch.randn(4, 16)
    for k in (3, 5, 2):
        y = torch.zeros(k)
        torch._dynamo.mark_dynamic(y, 0)
        got, want = compiled(x, y), f(x, y)
        assert got.values.shape == (4, k) and got.values.stride() == want.values.stride()
        assert torch.equal(got.values, want.values) and torch.equal(got.indices, want.indices)
    if COUNTS_KERNELS:
        (record,) = metrics.compiled_graphs
        assert record.dynamic_symbols and record.num_kernels == 1, (record, record.kernel_names)
    assert_sorted_in_a_kernel()


def test_a_symbolic_k_of_a_bounded_dynamic_row_is_one_kernel():
    # k and the row length both symbols: the kernel's block holds the longest row, its store the first k
    def f(x, y):
        return torch.topk(x, y.shape[0], dim=1, largest=False)
    compiled = torch.compile(f, backend="mini_inductor", fullgraph=True)
    for n, k in ((6, 3), (40, 7), (17, 2)):
        x, y = special_values(3, n), torch.zeros(k)
        x[:, 0] = 0.5   # (no NaN in the first row: eager's order of tied NaNs is its own)
        x[0] = torch.randn(n)
        torch._dynamo.mark_dynamic(x, 1, min=2, max=64)
        torch._dynamo.mark_dynamic(y, 0)
        got, want = compiled(x, y), f(x, y)
        assert_same_tensor(got.values, want.values, f"n={n} k={k} values", atol=0, rtol=0)
        assert torch.equal(got.indices[0], want.indices[0])
    if COUNTS_KERNELS:
        (record,) = metrics.compiled_graphs
        assert len(record.dynamic_symbols) == 2 and record.num_kernels == 1, (record.dynamic_symbols,
                                                                               record.kernel_names)
    assert_sorted_in_a_kernel()


def test_a_length_that_is_an_expression_of_a_bounded_symbol():
    # x[:, 1:] is s - 1 long: bounded by s's ShapeEnv bound (was an ATen call: only bare symbols were
    # bounded), as codegen bounds the block of its row (sizevars.index_range)
    def f(x):
        return torch.sort(x[:, 1:], dim=1, descending=True, stable=True), torch.topk(x[:, 2:] * 2, 2, dim=1)
    compiled = torch.compile(f, backend="mini_inductor", fullgraph=True)
    for n in (6, 40, 17):
        x = torch.randn(3, n)
        torch._dynamo.mark_dynamic(x, 1, min=4, max=64)
        got, want = compiled(x), f(x)
        for a, e in zip((*got[0], *got[1]), (*want[0], *want[1])):
            assert_same_tensor(a, e, f"length {n}", atol=0, rtol=0)
    if COUNTS_KERNELS:
        (record,) = metrics.compiled_graphs
        assert record.dynamic_symbols and not record.fallback_ops, (record.dynamic_symbols, record.fallback_ops)
    assert_sorted_in_a_kernel()


def test_an_expression_bounded_past_the_limit_is_a_counted_fallback():
    # x.repeat(1, 2) is 2·s long, s up to 600: up to 1200 elements, past MAX_SORT_LENGTH
    compiled = torch.compile(lambda x: torch.sort(x.repeat(1, 2), 1), backend="mini_inductor", fullgraph=True)
    x = torch.randn(3, 9)
    torch._dynamo.mark_dynamic(x, 1, min=2, max=600)
    got, want = compiled(x), torch.sort(x.repeat(1, 2), 1)
    assert torch.equal(got.values, want.values)
    assert_fallback("sort")


def test_a_bounded_dynamic_training_step_generates_the_backward_scatter():
    # the backward scatters along a symbolic span: stores to the positions (scatter_lowerings.py)
    def f(x, w):
        return (torch.sort(x, -1).values * w).sum() + torch.topk(x, 3, dim=-1).values.sum()
    compiled = torch.compile(f, backend="mini_inductor", fullgraph=True)
    for n in (12, 30):
        x, w = torch.randn(4, n, requires_grad=True), torch.randn(n)
        torch._dynamo.mark_dynamic(x, 1, min=4, max=128)
        torch._dynamo.mark_dynamic(w, 0, min=4, max=128)
        compiled(x, w).backward()
        got, x.grad = x.grad, None
        f(x, w).backward()
        assert_same_tensor(got, x.grad, f"length {n} gradient", atol=1e-6, rtol=1e-6)
    if COUNTS_KERNELS:
        assert any(r.name.startswith("backward") for r in metrics.compiled_graphs)
        assert all(r.dynamic_symbols for r in metrics.compiled_graphs)
    assert_sorted_in_a_kernel()


def test_an_unbounded_dynamic_length_is_a_counted_fallback():
    compiled = torch.compile(lambda x: torch.sort(x, 1), backend="mini_inductor", dynamic=True, fullgraph=True)
    for n in (5, 9):
        x = torch.randn(3, n)
        got, want = compiled(x), torch.sort(x, 1)
        assert torch.equal(got.values, want.values) and torch.equal(got.indices, want.indices)
    assert_fallback("sort")


# ─── training ────────────────────────────────────────────────────────────────────────────────────

def test_training_through_sort_and_topk_generates_both_graphs():
    # the backwards scatter the gradient to the indices: generated too (at longer rows as well:
    # tests/e2e/test_scatter_store.py)
    def f(x, w):
        return (torch.sort(x, -1).values * w).sum(-1) + torch.topk(x * 2, 3, dim=-1).values.sum(-1)
    check_sort(f, torch.randn(4, 8), torch.randn(8), grad=True)
    if COUNTS_KERNELS:
        assert any(r.name.startswith("backward") for r in metrics.compiled_graphs)


def test_topk_of_bools_runs_in_aten_and_raises_where_eager_does():
    # eager's CPU topk refuses bools where its sort takes them (review, session 40: ours computed a
    # result); a bool topk runs in ATen, which raises or computes as eager does on the device
    x = torch.rand(3, 6) > 0.5
    compiled = torch.compile(lambda x: torch.topk(x, 2).values, backend="mini_inductor")
    try:
        expected = torch.topk(x, 2).values
    except RuntimeError as e:
        assert "bool" in str(e)
        with pytest.raises(Exception, match="bool"):
            compiled(x)
    else:
        assert torch.equal(compiled(x), expected)
    assert any(r.fallback_ops for r in metrics.compiled_graphs)

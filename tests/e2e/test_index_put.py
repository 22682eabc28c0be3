"""index_put with accumulate=True as generated kernels: a copy of the input, then tl.atomic_add of the
values at the indexed positions, so duplicate indices sum. Values match eager; boolean masks,
accumulate=False, int64 and deterministic mode run in ATen."""
import pytest
import torch
import torch.nn.functional as F

from common import COUNTS_KERNELS, assert_fallback, assert_no_fallbacks, check, compile_fn, reset_metrics


def _index_put(x, indices, values):
    return torch.ops.aten.index_put(x, list(indices), values, True)


def _sources() -> str:
    from mini_inductor import metrics
    text = ""
    for g in metrics.compiled_graphs:
        if g.source_path:
            with open(g.source_path) as f:
                text += f.read()
    return text


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_duplicate_and_negative_indices_add_up(device, dtype):
    x = torch.randn(6, 3, device=device, dtype=dtype)
    index = torch.tensor([0, 5, 5, -1, 2, 0, 5, -6], device=device)   # 5 four times, 0 three times
    values = torch.randn(8, 3, device=device, dtype=dtype)
    # copy, scatter; fp16/bf16 accumulate in an fp32 copy and a third kernel casts the output back
    check(lambda x, i, v: _index_put(x, (i,), v), x, index, values, kernels=2 if dtype == torch.float32 else 3)
    assert_no_fallbacks()
    if COUNTS_KERNELS:
        assert "tl.atomic_add(" in _sources()


def test_values_broadcast_over_the_indexed_shape(device):
    x = torch.randn(5, 4, device=device)
    index = torch.tensor([1, 3, 1, 1], device=device)
    check(lambda x, i, v: _index_put(x, (i,), v), x, index, torch.randn(4, device=device), kernels=2)
    check(lambda x, i, v: _index_put(x, (i,), v), x, index, torch.tensor(0.5, device=device), kernels=2)
    assert_no_fallbacks()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_the_result_keeps_a_transposed_inputs_layout_as_eager_does(device, dtype):
    # eager's index_put copies its input with its strides; ours wrote the copy contiguous, which showed
    # through a returned view (fuzz seed 6016 program 37: strides (0, 4, 2, 1), eager's (0, 4, 1, 2))
    x = torch.randn(3, 2, 2, device=device, dtype=dtype).transpose(-2, -1)
    index = torch.tensor([0, 0, 1], device=device)
    values = torch.randn(1, 1, 1, device=device, dtype=dtype)
    check(lambda x, i, v: _index_put(x, (i,), v).expand(3, -1, -1, -1), x, index, values)
    src = torch.randn(3, 2, 2, device=device, dtype=dtype)
    scatter_index = torch.tensor([[[0, 1], [1, 0]]] * 3, device=device)
    check(lambda x, i, s: x.scatter_add(1, i, s).expand(2, -1, -1, -1), x, scatter_index, src)


def test_an_index_on_an_inner_dim_and_two_broadcast_index_tensors(device):
    x = torch.randn(3, 5, 4, device=device)
    inner = torch.tensor([4, 0, 4], device=device)
    check(lambda x, i, v: _index_put(x, (None, i), v), x, inner, torch.randn(3, 3, 4, device=device), kernels=2)
    rows = torch.tensor([[0], [2], [0]], device=device)                  # (3, 1) against (2,): a (3, 2) grid
    cols = torch.tensor([1, 1], device=device)
    check(lambda x, r, c, v: _index_put(x, (r, c), v), x, rows, cols, torch.randn(3, 2, 4, device=device),
          kernels=2)
    assert_no_fallbacks()


def test_the_input_is_not_modified_and_readers_see_the_sums(device):
    """The scatter adds into a copy; a consumer of the result runs after every add."""
    def fn(x, i, v):
        out = _index_put(x, (i,), v)
        return out * 2 + x, x + 1
    x = torch.randn(4, 2, device=device)
    check(fn, x, torch.tensor([3, 3, 0, 3], device=device), torch.randn(4, 2, device=device))
    assert_no_fallbacks()


def test_the_scatter_runs_in_a_kernel_of_its_own(device):
    """sin fuses into the copy, cos is inlined into the scatter's values, exp reads the result after
    the scatter: three kernels, however much the pointwise ops would like to fuse."""
    def fn(x, i, v):
        return _index_put(x.sin(), (i,), v.cos()).exp()
    check(fn, torch.randn(4, 2, device=device), torch.tensor([1, 1, 2], device=device),
          torch.randn(3, 2, device=device), kernels=3)
    assert_no_fallbacks()


def test_embedding_backward_with_repeated_tokens_has_no_fallback(device):
    weight = torch.randn(10, 4, device=device)
    tokens = torch.tensor([[1, 7, 1, 1], [7, 0, 9, 1]], device=device)
    check(lambda w: F.embedding(tokens, w), weight, grad=True)
    check(lambda w: F.embedding(tokens, w, padding_idx=1), weight, grad=True)
    assert_no_fallbacks()


def test_integer_accumulation_in_int32_is_generated_and_int64_falls_back(device):
    index = torch.tensor([2, 2, 0], device=device)
    for dtype in (torch.int32, torch.int64):
        x = torch.randint(-5, 5, (3, 2), device=device, dtype=dtype)
        v = torch.randint(-5, 5, (3, 2), device=device, dtype=dtype)
        check(lambda x, i, v: _index_put(x, (i,), v), x, index, v)
        if dtype == torch.int32:
            assert_no_fallbacks()
        else:
            assert_fallback("index_put")


def test_boolean_mask_indices_fall_back(device):
    """ATen finds the mask's positions with nonzero, a device sync: on the GPU the fallback runs
    between CUDA graphs (an unsafe partition), never inside a capture."""
    x = torch.randn(4, 3, device=device)
    mask = torch.tensor([True, False, True, True], device=device)
    check(lambda x, m: _index_put(x.sin(), (m,), torch.tensor(1.5, device=device)).cos(), x, mask)
    assert_fallback("index_put")
    if COUNTS_KERNELS:
        (caller,) = [chunk for chunk in _sources().split("\ndef ") if "aten.index_put" in chunk]
        assert caller.startswith("call("), caller


def test_index_put_without_accumulate_falls_back(device):
    x = torch.randn(4, 3, device=device)
    check(lambda x, i, v: torch.index_put(x, (i,), v), x, torch.tensor([0, 2], device=device),
          torch.randn(2, 3, device=device))
    assert_fallback("index_put")


def test_deterministic_mode_falls_back(device):
    x = torch.randn(4, 3, device=device)
    saved = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        check(lambda x, i, v: _index_put(x, (i,), v), x, torch.tensor([0, 0], device=device),
              torch.randn(2, 3, device=device))
    finally:
        torch.use_deterministic_algorithms(saved)
    assert_fallback("index_put")


def test_deterministic_mode_is_part_of_the_graph_cache_key():
    from mini_inductor.config import config
    from mini_inductor.caching.graph_cache import graph_key
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    saved = torch.are_deterministic_algorithms_enabled()
    try:
        keys = []
        for on in (False, True):
            torch.use_deterministic_algorithms(on)
            keys.append(graph_key(gm, [torch.randn(2)], config))
    finally:
        torch.use_deterministic_algorithms(saved)
    assert keys[0] != keys[1]


# ─── GPU: real sizes, many duplicates, every float dtype ────────────────────────────────────────

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_gpu_index_put_accumulate_with_many_duplicates(dtype):
    x = torch.randn(50, 64, device="cuda", dtype=dtype)
    index = torch.randint(-50, 50, (4096,), device="cuda")
    values = torch.randn(4096, 64, device="cuda", dtype=dtype)
    def fn(x, i, v):
        return _index_put(x, (i,), v)
    reset_metrics()
    got = compile_fn(fn)(x, index, values)
    # ~80 adds per element. fp16/bf16 accumulate in an fp32 copy and round once at the end, so each
    # element is within half an ulp of the float64 sum (plus fp32 rounding, far smaller). Eager's
    # CUDA kernel sums the duplicates in another order, so it is not the reference here.
    ref = fn(x.double(), index, values.double())
    eps = torch.finfo(dtype).eps
    assert got.dtype == dtype and got.shape == ref.shape
    err = (got.double() - ref).abs()
    bound = eps * ref.abs() + 1e-4
    assert bool((err <= bound).all()), (f"{int((err > bound).sum())} elements off the float64 sum by more "
                                        f"than an ulp; worst {float(err.max()):.3g}")
    assert_no_fallbacks()
    assert "tl.atomic_add(" in _sources()


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_gpu_embedding_backward_is_generated(dtype):
    weight = torch.randn(1000, 128, device="cuda", dtype=dtype)
    tokens = torch.randint(0, 1000, (8, 256), device="cuda")
    tol = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 8e-2}[dtype]
    check(lambda w: F.embedding(tokens, w), weight, grad=True, atol=tol, rtol=tol)
    assert_no_fallbacks()

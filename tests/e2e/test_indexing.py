"""Pad, cat, flip, gather, index, embedding: masked and indirect loads, compiled against eager."""
import pytest
import torch
import torch.nn.functional as F

from common import COUNTS_KERNELS, assert_no_fallbacks, check, compile_fn, generated_sources, reset_metrics


def test_constant_pad_is_one_kernel_with_masked_loads():
    check(lambda x: F.pad(x, (1, 2, 0, 3), value=1.5) * 2, torch.randn(3, 4), kernels=1)
    assert_no_fallbacks()


def test_negative_pad_slices():
    check(lambda x: F.pad(x, (-1, 2, 1, -2)), torch.randn(5, 6), kernels=1)


def test_pad_of_integers_and_bools():
    check(lambda x: F.pad(x, (2, 1), value=7), torch.arange(6).view(2, 3))
    check(lambda x: F.pad(x > 2, (1, 1)), torch.arange(6).view(2, 3))


def test_cat_along_each_dim_is_one_kernel():
    a, b, c = torch.randn(2, 3), torch.randn(2, 5), torch.randn(2, 1)
    check(lambda a, b, c: torch.cat([a, b, c], 1) + 1, a, b, c, kernels=1)
    check(lambda a, b: torch.cat([a, b], 0), torch.randn(2, 3), torch.randn(4, 3), kernels=1)
    assert_no_fallbacks()


def test_cat_promotes_dtypes_and_skips_empty_inputs():
    check(lambda a, b, e: torch.cat([a, e, b], 0), torch.arange(4), torch.randn(3), torch.empty(0))


def test_stack_of_transposed_inputs():
    check(lambda a, b: torch.stack([a, b.t()], 1), torch.randn(3, 4), torch.randn(4, 3))


def test_cat_of_many_inputs_falls_back():
    xs = [torch.randn(2, 2) for _ in range(10)]
    check(lambda *xs: torch.cat(xs, 1) * 2, *xs)


def test_flip():
    check(lambda x: torch.flip(x, [0, 2]) + 1, torch.randn(2, 3, 4), kernels=1)


def test_gather_with_negative_free_indices():
    x = torch.randn(4, 5)
    idx = torch.tensor([[0, 4, 2], [1, 1, 3], [4, 0, 0], [2, 3, 1]])
    check(lambda x, i: torch.gather(x, 1, i) * 2, x, idx, kernels=1)
    check(lambda x, i: torch.gather(x, 0, i), x, idx[:, :2].clamp(max=3))


def test_index_with_negative_indices_wraps_around():
    x = torch.randn(6, 4)
    idx = torch.tensor([0, -1, 3, -6])
    check(lambda x, i: x[i] + 1, x, idx, kernels=1)


def test_advanced_index_adjacent_and_split_dims():
    x = torch.randn(3, 4, 5)
    i, j = torch.tensor([0, 2, 1]), torch.tensor([[1], [3]])
    check(lambda x, i, j: x[:, i, j], x, i, j)     # adjacent: dims replaced in place
    check(lambda x, i, j: x[i, :, j], x, i, j)     # split: broadcast dims go first


def test_index_select_and_embedding():
    w = torch.randn(10, 4)
    ids = torch.tensor([[1, 9], [0, 3]])
    check(lambda w, i: torch.index_select(w, 1, i[0].clamp(max=3)), w, ids)
    check(lambda w, i: F.embedding(i, w) * 2, w, ids, kernels=1)
    assert_no_fallbacks()


def test_embedding_backward_through_fallback():
    w = torch.randn(10, 4)
    ids = torch.tensor([[1, 9], [1, 3]])
    check(lambda w, i: F.embedding(i, w), w, ids, grad=True)


def test_scatter_add_through_fallback_and_index_put_with_accumulate():
    x, src = torch.randn(4, 5), torch.randn(2, 5)
    idx = torch.tensor([[0, 1, 2, 3, 0], [3, 3, 0, 1, 2]])
    check(lambda x, i, s: x.scatter_add(0, i, s) + 1, x, idx, src)
    check(lambda x, i, s: torch.index_put(x, (i[0, :2],), s[:, 0:1].expand(2, 5), accumulate=True), x, idx, src)


def test_indirect_loads_inside_a_reduction_are_masked_at_the_row_end():
    x = torch.randn(4, 7)
    idx = torch.randint(0, 7, (4, 5))
    check(lambda x, i: torch.gather(x, 1, i).sum(1), x, idx)
    check(lambda w, i: F.embedding(i, w).sum(-1), torch.randn(10, 5), torch.randint(0, 10, (3, 6)))


def test_chunk_cat_of_padded_flattened_inputs():
    # indices like (x - 28) % 9 must print with parentheses: `x - 28 % 9` read the wrong elements
    xs = [torch.randn(3, 3, 2, 1), torch.randn(1, 4, 2, 2), torch.randn(2, 1, 3, 3)]
    check(lambda a, b, c: torch.ops.aten._chunk_cat([a, b, c], 0, 2), *xs)


def test_take_with_negative_indices():
    check(lambda x, i: torch.take(x, i) * 2, torch.randn(3, 4), torch.tensor([[0, -1], [11, 5]]))


def test_an_index_into_a_length_1_dim_whose_position_feeds_arithmetic(device):
    # tril's mask compares the loaded index with a constant position: an expression of the indirect
    # index alone, which was wrapped like a size constant (Triton's interpreter: "only accepts size-1
    # tensor"; found by the fuzzer, seed 44)
    index = torch.tensor([0, 0, 0], device=device)
    check(lambda x, i: torch.tril(x)[:, i], torch.randn(1, 1, 1, device=device), index)
    assert_no_fallbacks()


# ── index_fill: a gather over the filled positions of dim ──────────────────────────────────────

def test_index_fill_with_duplicate_and_negative_indices_is_one_kernel():
    # a short index: each element compares its position along dim with every index value
    x = torch.randn(3, 5, 4)
    check(lambda x, i: x.index_fill(1, i, 2.5), x, torch.tensor([0, 4, 4, -1]), kernels=1)
    check(lambda x, i, v: x.index_fill(-1, i, v), x, torch.tensor([0, 3, -4]), torch.tensor(1.5), kernels=1)
    check(lambda x, i: torch.relu(x).index_fill(0, i, -1.0) * 2, x, torch.tensor(2), kernels=1)   # a 0-d index
    assert_no_fallbacks()


def test_index_fill_with_a_long_index_marks_positions_first():
    # more than MAX_SCATTER_SPAN indices: an int32 count per position (atomic adds), then the fill
    x = torch.randn(3, 12)
    index = torch.tensor([0, 11, 11, -1, 2, 2, 7, 1, 0, 3, -5])
    check(lambda x, i: x.index_fill(1, i, -1.0), x, index, kernels=3)
    check(lambda x, i, v: x.index_fill(1, i, v), x, index, torch.tensor(0.25))
    assert_no_fallbacks()


def test_index_fill_dtypes_layouts_and_0d_inputs():
    for dtype in (torch.float16, torch.bfloat16):
        check(lambda x, i: x.index_fill(1, i, 1e4), torch.randn(3, 5, dtype=dtype), torch.tensor([1, -1]))
    # a value of another dtype is cast to x's, as in eager (one whose every value converts: a float64 one,
    # whose `.item()` eager checks, runs in ATen: test_scalar_conversion_overflow.py)
    check(lambda x, i, v: x.index_fill(0, i, v), torch.randn(3, 5, dtype=torch.bfloat16), torch.tensor([2]),
          torch.tensor(2.7, dtype=torch.float16))
    check(lambda x, i: x.index_fill(0, i, 7.9), torch.arange(12).view(4, 3), torch.tensor([3, 0]))   # truncated
    check(lambda x, i: x.index_fill(1, i, True), torch.zeros(3, 5, dtype=torch.bool), torch.tensor([1]))
    check(lambda x, i: x.index_fill(0, i, 7.0), torch.tensor(3.0), torch.tensor([0]))   # 0-d x
    check(lambda x, i: x.t().index_fill(0, i, 7.0), torch.randn(3, 4), torch.tensor([0, 2]))   # x's strides
    assert_no_fallbacks()


def test_index_fill_in_place_on_an_input_and_its_gradient():
    def fill_(x, i):
        x.index_fill_(1, i, 0.5)
        return x * 2
    check(fill_, torch.randn(3, 4), torch.tensor([0, 2, 2]))
    check(lambda x, v, i: (x * 2).index_fill(1, i, v.sum()), torch.randn(3, 4), torch.randn(2), torch.tensor([0, 2]))
    check(lambda x, i: (x * 2).index_fill(1, i, 0.5), torch.randn(3, 4), torch.tensor([-1, 0, 0]), grad=True)
    assert_no_fallbacks()


def test_index_fill_asserts_its_index_in_range_as_a_gather_does():
    # eager raises on an index out of range; compared as a plain value (review, session 36), such an
    # index filled nothing without a word: each index is an indirect index, with its device-side assert
    reset_metrics()
    check(lambda x, i: x.index_fill(1, i, 2.0), torch.randn(4, 5), torch.tensor([0, -5, 3]), kernels=1)
    if COUNTS_KERNELS:
        assert "tl.device_assert" in generated_sources()


OUT_OF_RANGE = {
    "index": lambda x, i: x[:, i] * 2,
    "gather": lambda x, i: torch.gather(x, 1, i.expand(3, -1)) * 2,
    "index_fill short": lambda x, i: x.index_fill(1, i, -1.0),
    "index_fill long": lambda x, i: x.index_fill(1, torch.cat([i, i, i, i, i]), -1.0),
    "index_put": lambda x, i: x.index_put((torch.zeros_like(i), i), torch.ones(i.shape)),
    "embedding": lambda x, i: F.embedding(i, x.t()) * 2,
}


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU a device-side assert ends the process's CUDA context")
@pytest.mark.parametrize("op", list(OUT_OF_RANGE))
def test_an_index_out_of_range_raises_as_eager_does(op):
    # eager raises; the generated device-side assert compiled to nothing (Triton's debug off) and the
    # kernel read or wrote past the buffer: a long index_fill's count buffer took the process down
    # (review, session 36). Asserts are compiled in (triton_helpers.checked_jit) and checked here
    fn = OUT_OF_RANGE[op]
    x, bad = torch.randn(3, 5), torch.tensor([0, 7])
    with pytest.raises(Exception):
        fn(x, bad)
    compiled = compile_fn(fn)
    good = torch.tensor([0, 3])
    torch.testing.assert_close(compiled(x, good), fn(x, good))
    with pytest.raises(Exception, match="out of (bounds|range)"):
        compiled(x, bad)


NEGATIVE_REFUSED = {
    "gather": lambda x, i: torch.gather(x, 1, i.expand(3, -1)) * 2,
    "index_select": lambda x, i: torch.index_select(x, 1, i) * 2,
    "embedding": lambda x, i: F.embedding(i, x.t()) * 2,
    "index_add": lambda x, i: x.index_add(1, i, torch.ones(3, 2)) * 2,
    "index_copy_": lambda x, i: x.clone().index_copy_(1, i, torch.ones(3, 2)) * 2,
}


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU a device-side assert ends the process's CUDA context")
@pytest.mark.parametrize("op", list(NEGATIVE_REFUSED))
def test_a_negative_index_raises_where_eager_refuses_it(op):
    # x[i] counts a negative index from the end; gather, index_select, embedding, index_add and
    # index_copy refuse it (an embedding fed -100 labels by mistake): ours read the last row until session 41
    fn = NEGATIVE_REFUSED[op]
    x, negative = torch.randn(3, 5), torch.tensor([0, -1])
    with pytest.raises(Exception):
        fn(x, negative)
    compiled = compile_fn(fn)
    good = torch.tensor([0, 4])
    torch.testing.assert_close(compiled(x, good), fn(x, good))
    with pytest.raises(Exception, match="out of (bounds|range)"):
        compiled(x, negative)


def test_take_along_dim_and_indexing_still_count_negative_indices_from_the_end():
    x, i = torch.randn(3, 5), torch.tensor([[-1, 0, -5, 7, 2]])
    check(lambda x, i: torch.take_along_dim(x, i, 1) * 2, x, i)   # eager takes it modulo the size
    check(lambda x, i: x[:, i[0, :3]] * 2, x, i)


def test_a_kernel_with_asserts_is_compiled_with_them_and_without_int32_overflow_checks():
    # Triton drops tl.device_assert unless `debug` is on, which also checks every int32 + - * for
    # overflow: eager wraps int32 arithmetic, so that check is off (as Inductor has it)
    reset_metrics()
    x, i = torch.tensor([2**30, 2**30 + 5], dtype=torch.int32), torch.tensor([1, 0])
    check(lambda x, i: x[i] * 4 + x, x, i)
    if COUNTS_KERNELS:
        source = generated_sources()
        assert "@triton_helpers.checked_jit" in source and "tl.device_assert" in source, source


def test_index_fill_of_integers_wraps_and_checks_the_value_as_eager():
    # -1 into uint8 is 255 in eager; it reached the kernel as a uint8 constant -1 (the interpreter raised
    # OverflowError). 300 into int8 raises in eager: that case runs in ATen, which raises the same
    index = torch.tensor([1, 3])
    check(lambda x, i: x.index_fill(0, i, -1), torch.zeros(5, dtype=torch.uint8), index, kernels=1)
    check(lambda x, i: x.index_fill(0, i, 2**40), torch.zeros(5, dtype=torch.int64), index, kernels=1)
    check(lambda x, i: x.index_fill(0, i, 2.7), torch.zeros(5, dtype=torch.int32), index, kernels=1)
    assert_no_fallbacks()
    fill_300 = compile_fn(lambda x, i: x.index_fill(0, i, 300))
    with pytest.raises(Exception, match="without overflow"):
        fill_300(torch.zeros(5, dtype=torch.int8), index)

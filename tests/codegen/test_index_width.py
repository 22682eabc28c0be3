"""A kernel computes its offsets in int64 exactly where one of them may pass int32, whatever its size.

The kernels over huge tensors are generated from FakeTensors (sizes, strides and dtypes without
storage), so nothing of their size is allocated here; tests/e2e/test_large_tensors_gpu.py runs them.
"""
import re

import sympy
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from common import check
from compile_ir import generate_fn
from mini_inductor import metrics
from mini_inductor.lowering.sizevars import FloorDiv, ModularIndexing, index_range

X = sympy.Symbol("xindex", integer=True, nonnegative=True)
T = sympy.Symbol("tmp3", integer=True, nonnegative=True)
F16, I32, I64 = torch.float16, torch.int32, torch.int64
BIG = (40000, 70000)         # 2.8e9 elements: offsets past 2**31 - 1
SMALL = (1000, 70000)        # 7e7 elements: every offset fits in int32


def kernels_of(fn, *specs) -> list[str]:
    """The Triton kernels generated for `fn` over tensors of the given (size, dtype), never allocated."""
    with FakeTensorMode():
        args = [torch.empty(size, dtype=dtype) for size, dtype in specs]
    _, gen = generate_fn(fn, *args)
    assert gen.kernel_sources, "no Triton kernel was generated"
    return list(gen.kernel_sources.values())


def the_kernel(fn, *specs) -> str:
    (src,) = kernels_of(fn, *specs)
    return src


def indexes_in_int64(src: str) -> bool:
    return "tl.program_id(0).to(tl.int64)" in src


def widened_indirect_indices(src: str) -> list[str]:
    """The loaded indices the kernel casts to int64 before using them in an offset."""
    return re.findall(r"(tmp\d+) = tmp\d+\.to\(tl\.int64\)", src)


# ── the value range of an index ──────────────────────────────────────────────────────────────────

def test_index_range_covers_negative_strides_and_div_mod():
    ranges = {X: sympy.Integer(40000)}
    assert index_range(2799930000 - 70000 * X, ranges) == (0, 2799930000)
    assert index_range(-70000 * X, ranges) == (-2799930000, 0)
    assert index_range(3 * FloorDiv(X, 7) + ModularIndexing(X, 1, 7), ranges) == (0, 3 * 5714 + 6)
    assert index_range(70000 * T + X, {**ranges, T: sympy.Integer(5)}) == (0, 4 * 70000 + 39999)


def test_index_range_of_a_symbol_without_range_is_unknown():
    assert index_range(X + T, {X: sympy.Integer(8)}) is None


# ── small kernels over huge tensors ──────────────────────────────────────────────────────────────

def test_column_of_a_huge_tensor_indexes_in_int64_though_the_kernel_is_small():
    src = the_kernel(lambda x: x[:, 0] * 2, (BIG, F16))
    assert indexes_in_int64(src) and "70000*xindex" in src, src
    src = the_kernel(lambda x: x[:, 0] * 2, (SMALL, F16))
    assert "int64" not in src, src


def test_last_token_of_llm_logits_indexes_in_int64_only_past_int32():
    src = the_kernel(lambda x: x[:, -1, :].float() * 2, ((8, 4096, 128256), F16))
    assert indexes_in_int64(src) and "525336576*(xindex // 128256)" in src, src
    src = the_kernel(lambda x: x[:, -1, :].float() * 2, ((8, 16, 128256), F16))
    assert "int64" not in src, src


def test_strided_slice_with_a_big_step_indexes_in_int64():
    src = the_kernel(lambda x: x[::40000] * 2, ((BIG[0] * BIG[1],), F16))
    assert indexes_in_int64(src) and "40000*xindex" in src, src


# ── indirect indices ─────────────────────────────────────────────────────────────────────────────

def test_int32_indices_into_a_huge_table_are_widened_before_the_stride():
    src = the_kernel(lambda x, i: torch.index_select(x, 0, i) * 2, (BIG, F16), ((16,), I32))
    (wide,) = widened_indirect_indices(src)
    assert indexes_in_int64(src) and f"70000*{wide}" in src, src
    src = the_kernel(lambda x, i: torch.index_select(x, 0, i) * 2, (SMALL, F16), ((16,), I32))
    assert "int64" not in src, src   # into a small table they stay int32


def test_int32_embedding_lookup_into_a_huge_table_is_widened():
    src = the_kernel(lambda x, i: x[i] + 1, (BIG, F16), ((4, 4), I32))
    (wide,) = widened_indirect_indices(src)
    assert indexes_in_int64(src) and f"70000*{wide}" in src, src


def test_int64_gather_indices_need_no_cast_but_the_kernel_goes_int64():
    src = the_kernel(lambda x, i: torch.gather(x, 0, i), (BIG, F16), ((4, 70000), I64))
    assert indexes_in_int64(src) and not widened_indirect_indices(src), src


def test_accumulating_index_put_stores_at_widened_offsets():
    fn = lambda x, i, v: torch.index_put(x, (i,), v, accumulate=True)  # noqa: E731
    srcs = kernels_of(fn, (BIG, torch.float32), ((4,), I32), ((4, 70000), torch.float32))
    (src,) = [s for s in srcs if "tl.atomic_add" in s]
    (wide,) = widened_indirect_indices(src)
    assert indexes_in_int64(src) and f"tl.atomic_add(out_ptr0 + (70000*{wide}" in src, src


# ── reductions and 2-D tiles ─────────────────────────────────────────────────────────────────────

def test_row_sums_of_a_huge_tensor_index_rows_and_columns_in_int64():
    src = the_kernel(lambda x: x[:, :16].float().sum(1), (BIG, F16))
    assert indexes_in_int64(src) and "rbase = tl.arange(0, RBLOCK)[None, :].to(tl.int64)" in src, src
    src = the_kernel(lambda x: x[:, :16].float().sum(1), (SMALL, F16))
    assert "int64" not in src, src


def test_column_sums_of_a_huge_tensor_step_the_reduction_in_int64():
    srcs = kernels_of(lambda x: x[:, :16].float().sum(0), (BIG, F16))
    (src,) = [s for s in srcs if "70000*rindex" in s]
    assert indexes_in_int64(src) and "rbase = tl.arange(0, RBLOCK)[None, :].to(tl.int64)" in src, src


def test_tiled_transpose_of_a_huge_slice_indexes_both_axes_in_int64():
    src = the_kernel(lambda x: x[:, :16].t().contiguous(), (BIG, F16))
    assert "yoffset = tl.program_id(0).to(tl.int64) * YBLOCK" in src, src
    assert "xoffset = tl.program_id(1).to(tl.int64) * XBLOCK" in src, src


# ── index values (arange) past int32, run here ───────────────────────────────────────────────────

def test_arange_with_a_big_step_computes_its_values_in_int64():
    x = torch.ones(40000, dtype=I64)
    check(lambda x: torch.arange(0, 70000 * 40000, 70000, device=x.device) + x, x)
    (rec,) = metrics.compiled_graphs
    with open(rec.source_path) as f:
        assert "tl.program_id(0).to(tl.int64)" in f.read()


def test_arange_falling_below_minus_2_to_the_31_computes_in_int64():
    x = torch.ones(40000, dtype=I64)
    check(lambda x: torch.arange(0, -70000 * 40000, -70000, device=x.device) + x, x)


def test_an_index_whose_intermediate_values_pass_int32_is_not_narrow():
    from mini_inductor.codegen.triton import _fits_int32

    ranges = {X: sympy.Integer(40000)}
    # the result stays below 2**31, the product inside the division does not
    assert index_range(FloorDiv(70001 * X, 1000), ranges)[1] < 2**31
    assert not _fits_int32(FloorDiv(70001 * X, 1000), ranges)
    # a flip: each sum of the terms in some order leaves int32 though the result does not
    assert not _fits_int32(2799999999 - 70000 * X, ranges)
    assert _fits_int32(FloorDiv(7000 * X, 1000) + 5, ranges)

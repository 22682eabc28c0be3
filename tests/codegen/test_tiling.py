"""2-D tiles for pointwise kernels with a transposed access (codegen/tiling.py): numerics against eager
for transposes and permutes of sizes that are not multiples of the block, and which kernels are tiled."""
import re

import pytest
import torch

from common import check
from mini_inductor import metrics


def kernel_sources() -> list[str]:
    """The @triton.jit functions of every graph compiled since the last metrics reset."""
    out = []
    for rec in metrics.compiled_graphs:
        with open(rec.source_path) as f:
            src = f.read()
        out += re.findall(r"@triton\.jit\ndef (?:.|\n)*?(?=\n\n)", src)
    return out


def tiled(src: str) -> bool:
    return "yindex = yoffset + tl.arange(0, YBLOCK)[:, None]" in src and "tl.program_id(1)" in src


@pytest.mark.parametrize("shape", [(33, 65), (64, 32), (5, 3), (130, 7)])
def test_transpose_copy_matches_eager_and_is_one_2d_kernel(shape):
    check(lambda x: x.t().contiguous(), torch.randn(shape), kernels=1)
    (src,) = kernel_sources()
    assert tiled(src), src


def test_transposed_read_added_to_a_contiguous_one_is_tiled():
    check(lambda x, y: x + y.t(), torch.randn(17, 40), torch.randn(40, 17), kernels=1)
    (src,) = kernel_sources()
    assert tiled(src), src


def test_nchw_to_nhwc_permute_copy_is_tiled():
    x = torch.randn(2, 3, 5, 7)
    check(lambda x: x.permute(0, 2, 3, 1).contiguous() * 2, x, kernels=1)
    (src,) = kernel_sources()
    assert tiled(src), src


def test_channels_last_conversion_matches_eager():
    x = torch.randn(2, 6, 9, 5)
    check(lambda x: (x + 1).contiguous(memory_format=torch.channels_last), x)
    assert any(tiled(s) for s in kernel_sources())


def test_3d_permute_then_mul_matches_eager():
    x, y = torch.randn(6, 5, 9), torch.randn(9, 6, 5)
    check(lambda x, y: x.permute(2, 0, 1) * y, x, y, kernels=1)
    (src,) = kernel_sources()
    assert tiled(src), src


def test_transpose_with_broadcast_bias_and_a_fused_chain():
    x, y, b = torch.randn(24, 37), torch.randn(37, 24), torch.randn(37)
    check(lambda x, y, b: torch.sigmoid(torch.relu(x.t() * 2 + y) + b[:, None]) - 1, x, y, b, kernels=1)
    (src,) = kernel_sources()
    assert tiled(src), src


def test_transpose_feeding_two_outputs():
    x = torch.randn(20, 12)
    check(lambda x: (x.t().contiguous(), x.t() * 3 + 1), x)


def test_transposed_half_copy_matches_eager():
    check(lambda x: x.t().contiguous() * 2, torch.randn(19, 70, dtype=torch.float16), kernels=1)
    (src,) = kernel_sources()
    assert tiled(src), src


def test_contiguous_pointwise_stays_1d():
    check(lambda x, y: torch.relu(x + y) * 2, torch.randn(16, 24), torch.randn(16, 24), kernels=1)
    (src,) = kernel_sources()
    assert "yindex" not in src and "tl.program_id(1)" not in src, src


def test_broadcast_along_rows_stays_1d():
    # b[:, None] is constant along the write's contiguous dim: one address per row, nothing to coalesce
    check(lambda x, b: x + b[:, None], torch.randn(16, 24), torch.randn(16), kernels=1)
    (src,) = kernel_sources()
    assert "yindex" not in src, src


def test_reduction_of_a_transposed_input_stays_a_reduction():
    check(lambda x: (x.t() * 2).sum(-1), torch.randn(12, 20))
    assert not any(tiled(s) for s in kernel_sources())


@pytest.mark.gpu
@pytest.mark.parametrize("shape,perm", [((4099, 2051), (1, 0)), ((8, 64, 56, 56), (0, 2, 3, 1)),
                                        ((8, 56, 56, 64), (0, 3, 1, 2))])
def test_large_permute_copies_on_the_gpu(shape, perm):
    x = torch.randn(shape, device="cuda", dtype=torch.float16)
    check(lambda x: x.permute(perm).contiguous(), x, kernels=1)
    (src,) = kernel_sources()
    assert tiled(src), src


@pytest.mark.gpu
def test_transpose_of_more_than_2_to_the_31_elements_indexes_in_64_bits():
    x = torch.randint(-100, 100, (65536, 32769), device="cuda", dtype=torch.int8)  # 2**31 + 65536 elements
    check(lambda x: x.t().contiguous(), x, kernels=1, runs=1)
    (src,) = kernel_sources()
    assert tiled(src) and "tl.program_id(0).to(tl.int64)" in src, src

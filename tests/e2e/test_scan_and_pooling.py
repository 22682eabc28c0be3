"""cumsum/cumprod (masked-square reductions, scan kernels past them), pooling windows, upsampling and decomposed extras."""
import pytest
import torch
import torch.nn.functional as F

from common import COUNTS_KERNELS, assert_fallback, assert_no_fallbacks, check
from mini_inductor import metrics


def test_cumsum_and_cumprod_generate_kernels():
    check(lambda x: torch.cumsum(x, 1) + 1, torch.randn(3, 7))
    check(lambda x: torch.cumprod(x, 0), torch.randn(5, 2))
    assert_no_fallbacks()


def test_cumsum_of_integers_is_int64():
    check(lambda x: torch.cumsum(x, -1), torch.arange(12, dtype=torch.int32).view(3, 4))


def test_long_cumsum_is_a_scan_kernel_not_a_fallback():
    # past the masked square's length: a scan kernel (tests/e2e/test_scan_kernels.py has the rest)
    check(lambda x: torch.cumsum(x, 0), torch.randn(300), kernels=1, atol=1e-4)
    assert_no_fallbacks()


def test_avg_pool2d_padding_and_ceil_mode():
    x = torch.randn(1, 2, 8, 7)
    check(lambda x: F.avg_pool2d(x, 3, 2, 1), x, kernels=1)
    check(lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), x)
    check(lambda x: F.avg_pool2d(x, (2, 3), (1, 2), (1, 1), divisor_override=5), x)
    assert_no_fallbacks()


@pytest.mark.parametrize("args", [
    (3, 2, 1), (2, 2, 0), (3, 1, 1, False, False), (3, 2, 1, True, False), (3, 2, 1, True, True),
    ((2, 3), (1, 2), (1, 1), False, True, 5), ((4, 3), 3, (2, 1), True, False), (3, 3, 0, True),
], ids=["3s2p1", "2s2", "3s1p1-excl", "3s2p1-ceil-excl", "3s2p1-ceil", "2x3-override", "4x3s3-ceil-excl",
        "3s3-ceil"])
def test_avg_pool2d_backward_is_one_generated_kernel(args):
    # a gather: each input position sums grad / divisor over the windows (at most ceil(k / s) per dim)
    # that hold it; a ceil-mode window past the input and a divisor that excludes padding included
    check(lambda x: F.avg_pool2d(x, *args), torch.randn(2, 3, 9, 8), grad=True)
    assert not COUNTS_KERNELS or [r.num_kernels for r in metrics.compiled_graphs] == [1, 1]   # forward, backward
    assert_no_fallbacks()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_avg_pool2d_backward_dtypes_unbatched_and_channels_last(dtype):
    check(lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True), torch.randn(2, 3, 9, 8, dtype=dtype), grad=True)
    check(lambda x: F.avg_pool2d(x, 3, 2, 1), torch.randn(3, 7, 6, dtype=dtype), grad=True)
    x = torch.randn(2, 3, 9, 8, dtype=dtype).to(memory_format=torch.channels_last)
    check(lambda x: F.avg_pool2d(x, 2, count_include_pad=False), x, grad=True)
    assert_no_fallbacks()


def test_cnn_with_avg_pool_trains_without_aten_fallbacks():
    conv = torch.nn.Conv2d(3, 4, 3, padding=1)
    check(lambda x, w, b: F.avg_pool2d(torch.relu(F.conv2d(x, w, b, padding=1)), 2).sum(), torch.randn(2, 3, 8, 8),
          conv.weight.detach(), conv.bias.detach(), grad=True)
    assert not [dict(r.fallback_ops) for r in metrics.compiled_graphs if r.fallback_ops]


def test_max_pool2d_values_and_indices():
    check(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), torch.randn(2, 3, 7, 8))
    check(lambda x: F.max_pool2d(x, 2, 2, 0, dilation=2, ceil_mode=True, return_indices=True), torch.randn(3, 7, 8))
    assert_no_fallbacks()


def test_small_max_pool_windows_are_one_pointwise_kernel_with_atens_nan_and_tie_rule():
    # a 3x3 window is unrolled (pooling_lowerings.UNROLLED_WINDOW): values and indices in one kernel
    x = torch.randn(2, 3, 9, 8)
    x[0, 0, 1, 1] = x[0, 0, 1, 2] = float("nan")      # two NaNs in one window: the index is the last
    x[1, 1, 4, 4] = x[1, 1, 4, 5] = 9.0                # a tie: the index is the first
    x[1, 2, :3, :3] = float("-inf")                    # a window of -inf only, next to the padding
    values, indices = check(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), x, kernels=1)
    want_values, want_indices = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    assert torch.equal(indices, want_indices)
    assert torch.equal(values.isnan(), want_values.isnan()) and values.isnan().any()
    check(lambda x: F.max_pool2d(torch.relu(x) * 2, 3, 2, 1), x, kernels=1)   # the producer fuses in


def test_max_pool2d_backward():
    check(lambda x: F.max_pool2d(x, 3, 2, 1), torch.randn(1, 2, 7, 7), grad=True)


@pytest.mark.parametrize("output_size", [(4, 3), (3, 4), (9, 8), (2, 2), (1, 1), (5, 7), (12, 11), 3])
def test_adaptive_max_pool2d_and_its_backward_are_one_kernel_each(output_size):
    # windows of up to UNROLLED_WINDOW elements are unrolled, longer ones (2x2 and 1x1 of 9x8) reduced;
    # an output longer than the input has windows that overlap, and positions in several of them
    x = torch.randn(2, 3, 9, 8)
    values, indices = check(lambda x: F.adaptive_max_pool2d(x, output_size, return_indices=True), x, grad=True)
    assert torch.equal(indices, F.adaptive_max_pool2d(x, output_size, return_indices=True)[1])
    assert not COUNTS_KERNELS or [r.num_kernels for r in metrics.compiled_graphs] == [1, 1]   # forward, backward
    assert_no_fallbacks()


@pytest.mark.parametrize("output_size", [(4, 3), (2, 2), (1, 1)], ids=["unrolled", "reduced", "global"])
def test_adaptive_max_pool2d_indices_follow_atens_tie_and_nan_rule(output_size):
    # eager scans each window: a later element wins if greater or NaN, so a tie keeps the first and
    # two NaNs give the last
    x = torch.randn(2, 3, 9, 8)
    x[0, 0, 1, 1] = x[0, 0, 1, 2] = float("nan")
    x[1, 1, 4, 4] = x[1, 1, 4, 5] = 9.0
    x[1, 2, :5, :5] = float("-inf")
    values, indices = check(lambda x: F.adaptive_max_pool2d(x, output_size, return_indices=True), x)
    want_values, want_indices = F.adaptive_max_pool2d(x, output_size, return_indices=True)
    assert torch.equal(indices, want_indices)
    assert torch.equal(values.isnan(), want_values.isnan()) and values.isnan().any()
    assert_no_fallbacks()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_adaptive_max_pool2d_dtypes_unbatched_and_channels_last(dtype):
    for output_size in ((4, 3), (1, 2)):
        check(lambda x: F.adaptive_max_pool2d(x, output_size, return_indices=True),
              torch.randn(2, 3, 9, 8, dtype=dtype), grad=True)
    check(lambda x: F.adaptive_max_pool2d(x, (3, 2)), torch.randn(3, 7, 6, dtype=dtype), grad=True)
    x = torch.randn(2, 3, 9, 8, dtype=dtype).to(memory_format=torch.channels_last)
    check(lambda x: F.adaptive_max_pool2d(x, (4, 3), return_indices=True), x, grad=True)
    assert_no_fallbacks()


def test_upsampling_and_adaptive_pool_through_decompositions():
    x = torch.randn(1, 2, 3, 4)
    check(lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), x)
    check(lambda x: F.interpolate(x, size=(5, 7), mode="bilinear", align_corners=False), x)
    check(lambda x: F.adaptive_avg_pool2d(x, (2, 3)), torch.randn(1, 2, 5, 7))
    assert_no_fallbacks()


def test_clamp_with_tensor_bounds_and_float_arange():
    check(lambda x, lo, hi: torch.clamp(x, lo, hi), torch.randn(4, 5), torch.zeros(5) - 0.5, torch.ones(4, 1) * 0.5)
    # device given: Dynamo does not apply a default-device context to factories inside the graph
    check(lambda x: x + torch.arange(0.5, 3.0, 0.5, device=x.device), torch.randn(5))
    assert_no_fallbacks()


def _kernel_loads():
    from mini_inductor import metrics
    with open(metrics.compiled_graphs[-1].source_path) as f:
        return [ln.strip() for ln in f if "tl.load(" in ln]


def test_a_pooled_producers_per_channel_load_is_read_once_and_padded_loads_keep_their_masks():
    # the window's padding masks guard the image's loads; the per-channel scale is in range for every
    # element whatever the mask, so its nine loads are one (TritonOps._in_bounds)
    x, w = torch.randn(2, 3, 9, 8), torch.randn(3)
    x[0, 1, 0, :3] = float("nan")
    check(lambda x, w: F.max_pool2d(torch.relu(x * w[:, None, None]), 3, 2, 1), x, w, kernels=1)
    loads = _kernel_loads()
    assert len(loads) == 10, loads
    assert sum("xmask & tmp" in ln for ln in loads) >= 4, loads   # the loads a padding mask guards
    # a right pad reads past the last row's end where its mask is false: that mask stays
    check(lambda x: F.pad(x, (0, 2), value=1.5) * 2, torch.randn(3, 4), kernels=1)
    (load,) = _kernel_loads()
    assert "xmask & tmp" in load, load


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_a_small_max_pool_window_of_half_types_compares_values(dtype):
    # (fuzz helper, session 41) the unrolled max compared bfloat16 loads as the interpreter stores
    # them, bit patterns: [1, -1, -2, 0.5] pooled by 2 gave [-1, -2, -2]
    x = torch.tensor([[[[1.0, -1.0, -2.0, 0.5, -0.25, 3.0]]]], dtype=dtype)
    check(lambda x: F.max_pool2d(x, (1, 2), stride=1), x)
    check(lambda x: F.max_pool2d(x * 1, (1, 3), stride=1, return_indices=True), x, grad=True)


def test_a_dilated_window_wholly_in_the_padding_runs_in_aten():
    # (fuzz helper, session 41) such a window's index came out negative, and ATen's backward wrote at it
    x = torch.tensor([[[1.0], [2.0]]])
    check(lambda x: F.max_pool2d(x, (1, 2), stride=1, padding=(0, 1), dilation=(1, 2), return_indices=True),
          x, grad=True)
    assert_fallback("max_pool2d")
    check(lambda x: F.max_pool1d(x, 2, stride=1, padding=1, dilation=2), torch.randn(2, 3, 9), grad=True)

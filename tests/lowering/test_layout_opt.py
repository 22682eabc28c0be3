"""Channels-last convolutions (lowering/layout_opt.py, option conv_layout): the same values and output
strides as eager, NHWC buffers between convolutions, and graphs the pass must leave alone."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from mini_inductor import config, metrics


class _Block(nn.Module):
    """conv-bn-relu, conv-bn, a residual add, a stride-2 conv: a small ResNet stage."""

    def __init__(self, c):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.down = nn.Conv2d(c, 2 * c, 3, stride=2, padding=1)
        for bn in (self.bn1, self.bn2):
            bn.running_mean.uniform_(-0.5, 0.5)
            bn.running_var.uniform_(0.5, 2.0)

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)) + x)
        return F.adaptive_avg_pool2d(self.down(y), 1).flatten(1), y


def _compile(model, **options):
    torch._dynamo.reset()
    return torch.compile(model, backend="mini_inductor", options=dict(graph_cache=False, **options))


def _matches_eager(fn, x, tol=1e-5, **options):
    """Compile `fn`, run it on `x` under no_grad, and check every output's values and strides against eager."""
    with torch.no_grad():
        want = fn(x)
        compiled = _compile(fn, **options)
        got = compiled(x)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=tol, rtol=tol)
        assert g.stride() == w.stride()          # outputs keep eager's strides, NHWC inside or not
    return compiled


def _code():
    with open(metrics.compiled_graphs[-1].source_path) as f:
        return f.read()


def test_a_resnet_block_in_channels_last_matches_eager_with_eager_strides():
    torch.manual_seed(0)
    model = _Block(8).eval()
    _matches_eager(model, torch.randn(2, 8, 8, 8), conv_layout="channels_last")   # y is an output: NCHW
    code = _code()
    # the input is copied to NHWC once; the block's buffers are NHWC (2, 8, 8, 8): strides (512, 1, 64, 8)
    assert "(512, 1, 64, 8)" in code
    assert code.count("aten.convolution.default(") == 3
    # the kernel between the convolutions runs in memory order: it reads and writes NHWC coalesced
    assert "tl.load(in_ptr1 + xindex, xmask)" in code and "tl.store(out_ptr0 + xindex, " in code
    # the image and each of the three weights get a copy of ours, so no convolution copies its weight
    clones = [k for k in metrics.compiled_graphs[-1].kernel_names if "fused_clone_" in k]
    assert len(clones) == 4, clones     # (and the output y's copy back to NCHW: fused_permute_clone)
    # the graph's summary says what the pass did
    assert ("channels-last convolutions: 3 (inputs copied 1, weights copied 3, outputs copied back to "
            "eager's strides 1)") in metrics.compiled_graphs[-1].summary()


def test_a_weight_two_convolutions_share_is_copied_to_channels_last_once():
    torch.manual_seed(0)
    conv = nn.Conv2d(4, 4, 3, padding=1).eval()

    def f(x):
        return conv(torch.relu(conv(x)))
    _matches_eager(f, torch.randn(2, 4, 6, 6), conv_layout="channels_last")
    weights = [call.split(",")[1].strip() for call in _code().split("aten.convolution.default(")[1:]]
    assert len(weights) == 2 and weights[0] == weights[1], weights
    assert len([k for k in metrics.compiled_graphs[-1].kernel_names if "fused_clone_" in k]) == 2   # image, weight


def test_conv_layout_off_and_auto_on_the_cpu_leave_the_graph_as_it_is():
    assert config.Config().conv_layout == "auto"
    torch.manual_seed(0)
    model = _Block(4).eval()
    x = torch.randn(1, 4, 8, 8)
    with torch.no_grad():
        want = model(x)
        for mode in ("off", "auto"):      # auto: CUDA fp16/bf16 convolutions only
            got = _compile(model, conv_layout=mode)(x)
            torch.testing.assert_close(got[0], want[0], atol=1e-5, rtol=1e-5)
            assert "(256, 1, 32, 4)" not in _code() and "clone" not in " ".join(metrics.compiled_graphs[-1].kernel_names)
            assert "channels-last" not in metrics.compiled_graphs[-1].summary()


def test_an_output_that_is_a_strided_view_of_a_convolution_keeps_the_graph_in_nchw():
    conv = nn.Conv2d(3, 4, 3, padding=1).eval()

    def f(x):
        y = conv(x)
        return y[:, :, ::2], torch.relu(y)
    _matches_eager(f, torch.randn(2, 3, 6, 6), conv_layout="channels_last")
    assert "clone" not in " ".join(metrics.compiled_graphs[-1].kernel_names)


def test_training_graphs_keep_their_layouts_and_match_eager():
    torch.manual_seed(0)
    model, ref = _Block(4).train(), _Block(4).train()
    ref.load_state_dict(model.state_dict())
    x = torch.randn(2, 4, 8, 8)
    compiled = _compile(model, conv_layout="channels_last")
    compiled(x)[0].sum().backward()
    ref(x)[0].sum().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-4, rtol=1e-4)
    assert all(not r.name.startswith("inference") for r in metrics.compiled_graphs[-2:])


def test_an_unknown_conv_layout_is_a_clear_error():
    with pytest.raises(ValueError, match="conv_layout"):
        with config.patch(conv_layout="nhwc"):
            pass


@pytest.mark.gpu
def test_fp16_convolutions_run_without_cudnn_layout_conversions_and_match_eager():
    from torch.profiler import ProfilerActivity, profile
    torch.manual_seed(0)
    model = _Block(32).cuda().half().eval()
    x = torch.randn(8, 32, 28, 28, device="cuda", dtype=torch.half)
    compiled = _matches_eager(model, x, tol=2e-2, cudagraphs=False, conv_layout="auto")
    with torch.no_grad():
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            compiled(x)
            torch.cuda.synchronize()
    kernels = [e.key for e in prof.key_averages()]
    assert not [k for k in kernels if "nchwToNhwc" in k or "nhwcToNchw" in k], kernels
    assert not [k for k in kernels if "copy_kernel" in k], kernels     # no weight copied by ATen

"""Channels-last decided by measurement (lowering/layout_timing.py; conv_layout "auto" for CUDA fp32,
"measure" on any device): the decision follows the timings and the summary says them, timings are
measured once (then served from memory and disk), a damaged timing is measured again, and either
decision keeps eager's values and strides."""
import logging
import pathlib
import re

import pytest
import torch
import torch.nn as nn

import mini_inductor
from mini_inductor import config, metrics
from mini_inductor.caching import PROCESS, autotune
from mini_inductor.lowering import layout_timing


# conv-bn-relu, conv-bn plus the input, a stride-2 conv: two convolutions share one configuration
from test_layout_opt import _Block as _Stage  # noqa: E402


def _run(model, x, tol=1e-5, reset=True, **options):
    """Compile `model` afresh, check values and strides against eager; the graph's record. `reset`:
    torch._dynamo.reset() first (mini_inductor.reset() too, which empties caching.PROCESS)."""
    if reset:
        torch._dynamo.reset()
    with torch.no_grad():
        want = model(x)
        got = torch.compile(model, backend="mini_inductor", options=dict(graph_cache=False, **options))(x)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, atol=tol, rtol=tol)
        assert g.stride() == w.stride()
    return metrics.compiled_graphs[-1]


def _nhwc_inside(record) -> bool:
    """The (2, 8, 8, 8) activations of _Stage(8) are NHWC in the generated module."""
    return "(512, 1, 64, 8)" in pathlib.Path(record.source_path).read_text()


@pytest.fixture
def timings(monkeypatch):
    """Replaces the measuring core: each call is counted; a convolution takes `conv` ms (NCHW,
    channels-last), a layout copy `copy` ms."""
    class Fake:
        def __init__(self):
            self.conv, self.copy, self.calls = (1.0, 0.5), 0.01, []

        def __call__(self, item, device):
            self.calls.append(item)
            return self.conv if isinstance(item, layout_timing.ConvShape) else (0.0, self.copy)
    fake = Fake()
    monkeypatch.setattr(layout_timing, "time_layouts", fake)
    PROCESS.layout_timings.clear()
    yield fake
    PROCESS.layout_timings.clear()


def _input():
    """_Stage(8) and its input, on the default device (CUDA on the GPU machine: conftest.py)."""
    torch.manual_seed(0)
    return _Stage(8).eval(), torch.randn(2, 8, 8, 8)


# the setup the summary names: CPU tensors here, CUDA ones on the GPU machine (cuDNN's TF32 on by default)
SETUP = "float32, TF32 on" if torch.cuda.is_available() else "float32, cpu"


def test_channels_last_measured_faster_is_chosen_and_its_numbers_are_in_the_summary(timings):
    model, x = _input()
    record = _run(model, x, conv_layout="measure")
    assert _nhwc_inside(record)
    # 3 convolutions at 1.0 / 0.5 ms; copies: the image, 3 weights, the output y back, 0.01 ms each
    assert record.layout == ("channels-last convolutions: 3 (inputs copied 1, weights copied 3, outputs copied "
                             f"back to eager's strides 1); measured 1.550 ms vs 3.000 ms NCHW ({SETUP}; "
                             "channels-last's copies 0.050 ms included)")
    assert record.layout in record.summary()
    # each distinct item once: 2 convolution configurations, 4 copies (two weights share a shape)
    assert len(timings.calls) == 6
    assert sum(isinstance(c, layout_timing.ConvShape) for c in timings.calls) == 2


def test_nchw_is_kept_when_channels_last_does_not_save_3_percent(timings):
    timings.conv = (1.0, 0.99)          # 2.97 ms + 0.05 ms of copies against 3.0 ms
    model, x = _input()
    record = _run(model, x, conv_layout="measure")
    assert not _nhwc_inside(record)
    assert "clone" not in " ".join(record.kernel_names)
    assert record.layout == ("convolutions kept in NCHW: 3, measured 3.000 ms vs 3.020 ms channels-last with its "
                             f"copies (0.050 ms) ({SETUP}; channels-last must save 3%)")


def test_the_decision_follows_real_measurements():
    PROCESS.layout_timings.clear()
    model, x = _input()
    record = _run(model, x, conv_layout="measure")
    numbers = [float(n) for n in re.findall(r"measured ([0-9.]+) ms vs ([0-9.]+) ms", record.layout)[0]]
    if record.layout.startswith("channels-last convolutions: 3"):
        channels_last, nchw = numbers
        assert channels_last < 0.97 * nchw and _nhwc_inside(record)
    else:
        nchw, channels_last = numbers
        assert channels_last >= 0.97 * nchw * 0.999 and not _nhwc_inside(record)   # (the summary rounds)
    assert 0 < nchw and 0 < channels_last
    assert len(PROCESS.layout_timings) == 6


def test_a_second_compile_measures_nothing_and_a_new_process_reads_the_timings_from_disk(timings, caplog):
    model, x = _input()
    with caplog.at_level(logging.INFO, logger="mini_inductor.perf_hints"):
        first = _run(model, x, conv_layout="measure")
        assert len(timings.calls) == 6
        second = _run(lambda t: model(t), x, reset=False, conv_layout="measure")   # this process's memory
        torch._dynamo.reset()                                      # forgets them, as a new process would
        third = _run(model, x, conv_layout="measure")              # the disk
    assert len(timings.calls) == 6
    logged = [r.getMessage() for r in caplog.records if "timings:" in r.getMessage()]
    assert [m.split("[")[-1] for m in logged] == ["6 timings: 6 measured]", "6 timings: 6 memory]",
                                                  "6 timings: 6 disk]"], logged
    assert first.layout == second.layout == third.layout
    entries = list((pathlib.Path(config.current().cache_dir) / "autotune").rglob("*.json"))
    assert len(entries) == 6


def _damaged_entries(cache_dir: pathlib.Path):
    return sorted((cache_dir / "autotune").rglob("*.json"))


@pytest.mark.parametrize("damage", [lambda b: b[:-5], lambda b: b.replace(b'"nchw_ms": 1.0', b'"nchw_ms": 9.0')],
                         ids=["truncated", "time edited"])
def test_a_damaged_timing_is_reported_deleted_and_measured_again(timings, caplog, damage):
    model, x = _input()
    _run(model, x, conv_layout="measure")
    conv_entries = [p for p in _damaged_entries(pathlib.Path(config.current().cache_dir))
                    if b'"nchw_ms": 1.0' in p.read_bytes()]
    assert len(conv_entries) == 2
    victim = conv_entries[0]
    victim.write_bytes(damage(victim.read_bytes()))
    PROCESS.layout_timings.clear()
    with caplog.at_level(logging.WARNING, logger="mini_inductor"):
        record = _run(model, x, conv_layout="measure")
    assert len(timings.calls) == 7                     # that one item again, nothing else
    assert [r for r in caplog.records if "corrupt layout timing" in r.getMessage() and str(victim) in r.getMessage()]
    assert autotune.read_layout(str(victim), timings.calls[-1].describe() + " | "
                                + layout_timing.environment(x.device)) == (1.0, 0.5)   # written again
    assert _nhwc_inside(record)


def test_a_timing_entry_of_another_item_is_not_used(tmp_path, caplog):
    path = str(tmp_path / "ab" / "ab12.json")
    autotune.write_layout(path, "conv2d A | cpu", 1.0, 2.0)
    assert autotune.read_layout(path, "conv2d A | cpu") == (1.0, 2.0)
    with caplog.at_level(logging.WARNING, logger="mini_inductor"):
        assert autotune.read_layout(path, "conv2d B | cpu") is None
    assert not pathlib.Path(path).exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="auto measures CUDA fp32 convolutions")
def test_auto_on_the_cpu_measures_nothing_and_keeps_nchw(timings):
    model, x = _input()
    record = _run(model, x, conv_layout="auto")
    assert timings.calls == [] and record.layout == "" and not _nhwc_inside(record)


def test_measuring_uses_its_own_data_and_leaves_the_global_rng_alone():
    torch.manual_seed(0)
    state = torch.get_rng_state()
    conv = layout_timing.ConvShape((1, 4, 6, 6), (4, 4, 3, 3), True, (1, 1), (1, 1), (1, 1), 1, torch.float32)
    copy = layout_timing.LayoutCopy((1, 4, 6, 6), (144, 36, 6, 1), (144, 1, 24, 4), torch.float32)
    nchw, channels_last = layout_timing.time_layouts(conv, torch.device("cpu"))
    assert nchw > 0 and channels_last > 0
    nothing, copying = layout_timing.time_layouts(copy, torch.device("cpu"))
    assert nothing == 0.0 and copying > 0
    assert torch.equal(torch.get_rng_state(), state) and torch.is_grad_enabled()


def test_explain_shows_the_layout_decision(timings):
    model, x = _input()
    with config.patch(conv_layout="measure", graph_cache=False), torch.no_grad():
        report = mini_inductor.explain(model, x)
    assert "layout: channels-last convolutions: 3" in str(report) and "measured 1.550 ms vs 3.000 ms" in str(report)


# ── on the GPU: the lead runs these on the H100 ─────────────────────────────────────────────────────────
class _SmallResNet(nn.Module):
    """A stem, two residual stages and a classifier: the convolution mix of a ResNet at a small size."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 32, 7, stride=2, padding=3, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
                                  nn.MaxPool2d(3, stride=2, padding=1))
        self.stage1, self.stage2 = _Stage(32), _Stage(64)
        self.fc = nn.Linear(128, 10)

    def forward(self, x):
        x = self.stem(x)
        x = self.stage1.down(self.stage1(x)[1])
        return self.fc(self.stage2(x)[0])


@pytest.mark.gpu
@pytest.mark.parametrize("tf32", [True, False], ids=["tf32", "ieee"])
def test_cuda_fp32_convolutions_are_decided_by_measurement_and_match_eager(tf32, monkeypatch, request):
    # (the flags context: a module that imported torch.testing's common_utils forbids setting them)
    flags = torch.backends.cudnn.flags(enabled=True, benchmark=torch.backends.cudnn.benchmark,
                                       deterministic=torch.backends.cudnn.deterministic, allow_tf32=tf32)
    flags.__enter__()
    request.addfinalizer(lambda: flags.__exit__(None, None, None))
    calls = []
    real = layout_timing.time_layouts
    monkeypatch.setattr(layout_timing, "time_layouts",
                        lambda item, device: calls.append(item) or real(item, device))
    PROCESS.layout_timings.clear()
    torch.manual_seed(0)
    model = _SmallResNet().cuda().eval()
    x = torch.randn(16, 3, 64, 64, device="cuda")
    rng = torch.cuda.get_rng_state()
    tol = 2e-2 if tf32 else 1e-4          # TF32 keeps 10 bits of mantissa; eager runs TF32 too, differently
    with torch.no_grad():
        want = model(x)
        compiled = torch.compile(model, backend="mini_inductor")
        for _ in range(3):                                  # warm-up, recording, replay
            got = compiled(x)
    torch.testing.assert_close(got, want, atol=tol, rtol=tol)
    assert got.stride() == want.stride()
    assert torch.equal(torch.cuda.get_rng_state(), rng)
    layout = metrics.compiled_graphs[-1].layout
    assert "measured" in layout and f"float32, TF32 {'on' if tf32 else 'off'}" in layout, layout
    assert calls                                            # measured in this process
    print(layout)                                           # the numbers, for the lead's log
    measured = len(calls)
    torch._dynamo.reset()
    PROCESS.layout_timings.clear()
    with torch.no_grad():
        torch.compile(model, backend="mini_inductor", options=dict(graph_cache=False))(x)
    assert len(calls) == measured and metrics.compiled_graphs[-1].layout == layout   # read back from disk


@pytest.mark.gpu
def test_cuda_fp32_in_either_decision_keeps_eager_values_and_strides(monkeypatch, tmp_path):
    torch.manual_seed(0)
    model = _Stage(16).cuda().eval()
    x = torch.randn(4, 16, 16, 16, device="cuda")
    for conv, nhwc in (((1.0, 0.5), True), ((1.0, 1.0), False)):
        PROCESS.layout_timings.clear()
        def fake(item, device, conv=conv):
            return conv if isinstance(item, layout_timing.ConvShape) else (0.0, 0.0)
        monkeypatch.setattr(layout_timing, "time_layouts", fake)
        # (a cache of its own each time: the first decision's timings are on disk)
        record = _run(model, x, tol=1e-2, conv_layout="auto", cache_dir=str(tmp_path / str(nhwc)))
        assert record.layout.startswith("channels-last" if nhwc else "convolutions kept in NCHW"), record.layout

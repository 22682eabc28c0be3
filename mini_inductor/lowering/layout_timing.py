"""What a graph's convolutions cost in NCHW and in channels-last, measured: how conv_layout="auto"
decides fp32 graphs (layout_opt.py), whose gain from NHWC depends on the GPU, cuDNN and TF32.

    convs = [ConvShape.of(node), ...]                 # each 2-D convolution of the graph
    copies = [LayoutCopy(size, src_stride, dst_stride, dtype), ...]   # the copies channels-last adds
    verdict = compare(convs, copies, device, cache_dir)
    verdict.channels_last_wins, verdict.nchw_ms, verdict.channels_last_ms, verdict.describe()

Each distinct item is timed once per device and setup: `time_layouts` runs the convolution on random
data of its own in both layouts (a copy: in channels-last only; NCHW has no such copy), a few
warm-ups then the median of several samples (timing.bench: CUDA events on the current stream, the
calls queued ahead of the GPU, so that launch gaps do not count; on the CPU, perf_counter). A time
is looked up first in this process's memory (PROCESS.layout_timings), then on disk next to the
autotuning winners (caching/autotune.py `layout_key`), keyed by the item, the device's name, torch's
and cuDNN's versions and the flags that change what cuDNN runs (allow_tf32, benchmark): a warm start
measures nothing.

Channels-last wins when its convolutions plus its copies take at least MARGIN less than the NCHW
convolutions (whose time includes cuDNN's own layout conversions). The pointwise kernels between
convolutions are not timed: they move the same bytes in either layout.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import platform

import torch

from ..caching import PROCESS
from ..caching import autotune as autotune_cache
from ..timing import bench

log = logging.getLogger("mini_inductor.perf_hints")

MARGIN = 0.03          # channels-last must save this fraction of the NCHW time
WARMUP, SAMPLES = 3, 9
# back-to-back calls a CUDA sample, queued behind a sleep kernel (timing.bench's queue_ahead): the GPU
# runs them without waiting for cuDNN's host work, as a CUDA graph's replay would
CUDA_CALLS = 8


@dataclasses.dataclass(frozen=True)
class ConvShape:
    """One 2-D convolution as cuDNN sees it: sizes, hyperparameters and dtype (not its data)."""

    x: tuple[int, ...]
    w: tuple[int, ...]
    bias: bool
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int
    dtype: torch.dtype

    @classmethod
    def of(cls, node: torch.fx.Node) -> "ConvShape | None":
        """The convolution `node` (aten.convolution, its args' FakeTensors); None for symbolic sizes."""
        x, w = (a.meta.get("val") for a in node.args[:2])
        stride, padding, dilation, groups = node.args[3], node.args[4], node.args[5], node.args[8]
        sizes = (*x.shape, *w.shape, *stride, *padding, *dilation, groups)
        if not all(type(s) is int for s in sizes):
            return None
        return cls(tuple(x.shape), tuple(w.shape), node.args[2] is not None, tuple(stride), tuple(padding),
                   tuple(dilation), groups, x.dtype)

    def describe(self) -> str:
        return (f"conv2d x={self.x} w={self.w} bias={self.bias} stride={self.stride} padding={self.padding} "
                f"dilation={self.dilation} groups={self.groups} {self.dtype}")


@dataclasses.dataclass(frozen=True)
class LayoutCopy:
    """A copy only the channels-last graph makes: the image into NHWC, a weight, an output back."""

    size: tuple[int, ...]
    src_stride: tuple[int, ...]
    dst_stride: tuple[int, ...]
    dtype: torch.dtype

    @classmethod
    def of(cls, src: torch.Tensor, dst: torch.Tensor) -> "LayoutCopy | None":
        """The copy from `src`'s layout to `dst`'s (FakeTensors of one shape); None for symbolic sizes."""
        sizes = (*src.shape, *src.stride(), *dst.stride())
        if not all(type(s) is int for s in sizes):
            return None
        return cls(tuple(src.shape), tuple(src.stride()), tuple(dst.stride()), src.dtype)

    def describe(self) -> str:
        return f"copy size={self.size} {self.src_stride} -> {self.dst_stride} {self.dtype}"


@dataclasses.dataclass(frozen=True)
class Verdict:
    """The two layouts' measured totals (ms a call), the items counted, and the setup they ran on."""

    nchw_ms: float
    channels_last_ms: float
    copies_ms: float                  # of channels_last_ms: its layout copies
    convolutions: int
    setup: str                        # "float32, TF32 on", "float32, cpu"
    served: dict[str, int] = dataclasses.field(default_factory=dict)   # items by source: measured, disk, memory

    @property
    def channels_last_wins(self) -> bool:
        return self.channels_last_ms < self.nchw_ms * (1 - MARGIN)

    def describe(self) -> str:
        if self.channels_last_wins:
            return (f"measured {self.channels_last_ms:.3f} ms vs {self.nchw_ms:.3f} ms NCHW "
                    f"({self.setup}; channels-last's copies {self.copies_ms:.3f} ms included)")
        return (f"convolutions kept in NCHW: {self.convolutions}, measured {self.nchw_ms:.3f} ms vs "
                f"{self.channels_last_ms:.3f} ms channels-last with its copies ({self.copies_ms:.3f} ms) "
                f"({self.setup}; channels-last must save {MARGIN:.0%})")

    def sources(self) -> str:
        """Where the timings came from, for the log: "12 timings: 12 measured" (a warm start: "disk")."""
        counts = ", ".join(f"{n} {how}" for how, n in sorted(self.served.items()))
        return f"{sum(self.served.values())} timings: {counts}"


def compare(convs: list[ConvShape], copies: list[LayoutCopy], device: torch.device,
            cache_dir: str | None) -> Verdict:
    """Both layouts' totals for a graph with `convs` (one entry per convolution, repeats included) and
    the `copies` channels-last adds; each distinct item measured once (or read back from the caches)."""
    times, served = {}, collections.Counter()
    for item in dict.fromkeys([*convs, *copies]):
        times[item], how = layout_ms(item, device, cache_dir)
        served[how] += 1
    nchw = sum(times[c][0] for c in convs)
    copies_ms = sum(times[c][1] for c in copies)
    return Verdict(nchw, sum(times[c][1] for c in convs) + copies_ms, copies_ms, len(convs),
                   _setup(convs[0].dtype if convs else torch.float32, device), dict(served))


def layout_ms(item: ConvShape | LayoutCopy, device: torch.device,
              cache_dir: str | None) -> tuple[tuple[float, float], str]:
    """(NCHW ms, channels-last ms) of one item, and where it came from: "memory" (this process), "disk",
    else "measured" (`time_layouts`; then kept in both)."""
    measured = f"{item.describe()} | {environment(device)}"
    key = autotune_cache.layout_key(measured)
    if key in PROCESS.layout_timings:
        return PROCESS.layout_timings[key], "memory"
    path = autotune_cache.path(cache_dir, key) if cache_dir else None
    times = autotune_cache.read_layout(path, measured) if path else None
    how = "disk"
    if times is None:
        times, how = time_layouts(item, device), "measured"
        log.debug("layout timing: %s: NCHW %.4f ms, channels-last %.4f ms", measured, *times)
        if path:
            autotune_cache.write_layout(path, measured, *times)
    PROCESS.layout_timings[key] = times
    return times, how


def time_layouts(item: ConvShape | LayoutCopy, device: torch.device) -> tuple[float, float]:
    """Run `item` on random data of its own on `device` and time it in NCHW and in channels-last (ms).

    The data comes from a generator of its own (the global RNG is not advanced), under no_grad and
    outside any FakeTensorMode; never call it while a CUDA graph is being captured."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    device = torch.device(device)
    with torch.no_grad(), unset_fake_temporarily():
        gen = torch.Generator(device=device)
        gen.manual_seed(0)

        def data(size, stride=None):
            t = torch.randn(size, generator=gen, device=device, dtype=item.dtype)
            return t if stride is None else torch.empty_strided(size, stride, device=device, dtype=item.dtype).copy_(t)

        if isinstance(item, LayoutCopy):
            src, dst = data(item.size, item.src_stride), data(item.size, item.dst_stride)
            return 0.0, _median_ms(lambda: dst.copy_(src), device)
        x, w = data(item.x), data(item.w)
        b = data((item.w[0],)) if item.bias else None

        def conv(x, w):
            return torch.ops.aten.convolution.default(x, w, b, list(item.stride), list(item.padding),
                                                      list(item.dilation), False, [0, 0], item.groups)
        xl, wl = x.contiguous(memory_format=torch.channels_last), w.contiguous(memory_format=torch.channels_last)
        return _median_ms(lambda: conv(x, w), device), _median_ms(lambda: conv(xl, wl), device)


def _median_ms(fn, device: torch.device) -> float:
    if device.type != "cuda":
        return bench(fn, warmup=WARMUP, samples=SAMPLES, device=device).wall_ms
    with torch.cuda.device(device):
        return bench(fn, warmup=WARMUP, samples=SAMPLES, calls=CUDA_CALLS, device=device, queue_ahead=True).gpu_ms


def environment(device: torch.device) -> str:
    """What a layout timing depends on besides its item: the device, torch, cuDNN and its flags."""
    device = torch.device(device)
    if device.type == "cuda":
        cudnn = torch.backends.cudnn
        return (f"{autotune_cache.device_description(device)} "
                f"torch {torch.__version__} cudnn {cudnn.version()} allow_tf32={cudnn.allow_tf32} "
                f"benchmark={cudnn.benchmark} deterministic={cudnn.deterministic}")
    host = " ".join(filter(None, (platform.machine(), platform.processor())))
    return f"{device.type} {host} threads={torch.get_num_threads()} torch {torch.__version__}"


def _setup(dtype: torch.dtype, device: torch.device) -> str:
    name = str(dtype).removeprefix("torch.")
    if torch.device(device).type != "cuda":
        return f"{name}, {torch.device(device).type}"
    if dtype == torch.float32:
        return f"{name}, TF32 {'on' if torch.backends.cudnn.allow_tf32 else 'off'}"
    return name

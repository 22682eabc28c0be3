"""Steady-state timing of a callable, the `do_bench` way: warm-up calls, then the median of samples.

    from mini_inductor.timing import bench
    t = bench(lambda: model(x), warmup=10, samples=50, flush_l2=True)
    t.gpu_ms, t.wall_ms        # median per call: CUDA events, host perf_counter

A sample is `calls` back-to-back calls (1: one call per sample, as `triton.testing.do_bench` times;
more: per-call host overhead shows, as in a training loop). On CUDA each sample is bracketed by CUDA
events (device time) and perf_counter (host time up to the synchronize that ends it); on the CPU
only perf_counter runs and `gpu_ms` is None. With flush_l2, a 256 MB buffer is zeroed before each
sample (and waited for), so a sample does not find the previous one's data in L2. With queue_ahead, a
sleep kernel runs before each sample while the host queues the sample's calls, so the GPU runs them
back to back: `gpu_ms` is then device time without the host's launch gaps (what a CUDA graph
replays), and `wall_ms` includes the sleep. The sleep is sized to the host's time to queue a sample
(the median warm-up call's, with half again as margin); a sample whose queueing outlasted its
sleep, so that the GPU waited for the host, is taken again with a longer sleep, and counted in
`host_bound_samples` if it still does.

This module imports only torch: benchmarks load it from its file in processes that must not import
mini_inductor (its import starts setup threads), so it imports nothing from the package.
"""
from __future__ import annotations

import dataclasses
import statistics
import time
from typing import Callable

import torch

L2_FLUSH_BYTES = 256 * 2**20      # larger than any GPU's L2 today (H100: 50 MB)
QUEUE_AHEAD_CYCLES = 1_000_000    # queue_ahead's shortest sleep: about 0.5 ms at an H100's clock
MAX_SLEEP_MS = 2000.0            # queue_ahead's longest sleep
QUEUE_AHEAD_RETRIES = 3           # a sample whose queueing outlasted its sleep is taken again, up to this
_cycles_per_ms: dict[int, float] = {}   # device index -> the sleep kernel's cycles per millisecond


@dataclasses.dataclass(frozen=True)
class Timing:
    """Medians per call over the samples, in milliseconds; each sample's per-call figures are kept."""

    wall_ms: float
    gpu_ms: float | None                 # None on the CPU
    wall_samples_ms: tuple[float, ...]
    gpu_samples_ms: tuple[float, ...]
    host_bound_samples: int = 0          # queue_ahead: samples the GPU still waited on the host for


def bench(fn: Callable[[], object], *, warmup: int, samples: int, calls: int = 1,
          flush_l2: bool = False, device: str | torch.device | None = None, queue_ahead: bool = False) -> Timing:
    """Time `fn()`: `warmup` calls, then `samples` samples of `calls` back-to-back calls each.

    device: where fn runs ("cuda" or "cpu"); by default CUDA when it is available. queue_ahead (CUDA):
    each sample waits behind a sleep kernel, so that its calls reach the GPU already queued. The
    median of the samples' per-call times is returned in milliseconds.
    """
    on_cuda = (torch.device(device).type == "cuda") if device is not None else torch.cuda.is_available()
    sync = torch.cuda.synchronize if on_cuda else (lambda: None)
    flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device="cuda") if on_cuda and flush_l2 else None
    queue_ahead = queue_ahead and on_cuda
    sync()
    warm_ms = []
    for _ in range(warmup):
        start = time.perf_counter()
        fn()
        warm_ms.append((time.perf_counter() - start) * 1e3)
    # the host's time to queue a sample: the median warm-up call's (the first may compile or record)
    queue_ms = statistics.median(warm_ms) * calls if warm_ms else 0.0
    sync()
    walls, gpus = [], []
    host_bound = 0
    for _ in range(samples):
        for _ in range(QUEUE_AHEAD_RETRIES + 1 if queue_ahead else 1):
            if flush is not None:
                flush.zero_()
                sync()
            if on_cuda:
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                if queue_ahead:
                    rate = _sleep_cycles_per_ms()
                    cycles = max(QUEUE_AHEAD_CYCLES, int(min(1.5 * queue_ms, MAX_SLEEP_MS) * rate))
                    sleep_ms = cycles / rate
                    torch.cuda._sleep(cycles)
            start = time.perf_counter()
            if on_cuda:
                begin.record()
            for _ in range(calls):
                fn()
            if on_cuda:
                end.record()
            queued = (time.perf_counter() - start) * 1e3
            sync()
            if not queue_ahead or queued < sleep_ms:
                break
            queue_ms = queued   # the GPU caught up with the host: again, behind a sleep this long and a half
        else:
            host_bound += 1
        walls.append((time.perf_counter() - start) / calls * 1e3)
        if on_cuda:
            gpus.append(begin.elapsed_time(end) / calls)
    return Timing(wall_ms=statistics.median(walls), gpu_ms=statistics.median(gpus) if gpus else None,
                  wall_samples_ms=tuple(walls), gpu_samples_ms=tuple(gpus), host_bound_samples=host_bound)


def _sleep_cycles_per_ms() -> float:
    """The sleep kernel's cycles per millisecond on the current device, timed once."""
    index = torch.cuda.current_device()
    if index not in _cycles_per_ms:
        torch.cuda._sleep(QUEUE_AHEAD_CYCLES // 10)   # the kernel's first launch loads it
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        torch.cuda._sleep(QUEUE_AHEAD_CYCLES)
        end.record()
        end.synchronize()
        _cycles_per_ms[index] = QUEUE_AHEAD_CYCLES / max(begin.elapsed_time(end), 1e-3)
    return _cycles_per_ms[index]

"""mini_inductor.timing.bench: warm-up calls, then samples of back-to-back calls; on the CPU host time only."""
import statistics

import pytest

import benchmarks.package_files
from mini_inductor import timing


def test_bench_makes_the_warmup_calls_then_samples_of_calls():
    calls = []
    t = timing.bench(lambda: calls.append(1), warmup=3, samples=4, calls=5, device="cpu")
    assert len(calls) == 3 + 4 * 5
    assert len(t.wall_samples_ms) == 4
    assert t.wall_ms == statistics.median(t.wall_samples_ms)


def test_on_the_cpu_there_is_no_gpu_time():
    t = timing.bench(lambda: None, warmup=0, samples=3, device="cpu")
    assert t.gpu_ms is None and t.gpu_samples_ms == ()
    assert t.wall_ms >= 0


def test_the_benchmarks_load_the_same_file_without_importing_the_package():
    loaded = benchmarks.package_files.timing
    assert loaded.__file__ == timing.__file__
    assert loaded.bench.__code__.co_code == timing.bench.__code__.co_code


@pytest.mark.gpu
def test_on_cuda_each_sample_has_a_gpu_time_with_the_l2_flushed_before_it():
    import torch
    x = torch.randn(1 << 20, device="cuda")
    t = timing.bench(lambda: x.mul_(1.0), warmup=2, samples=5, calls=3, flush_l2=True, device="cuda")
    assert len(t.gpu_samples_ms) == 5 and t.gpu_ms == statistics.median(t.gpu_samples_ms)
    assert all(ms > 0 for ms in t.gpu_samples_ms)


@pytest.mark.gpu
def test_on_cuda_queue_ahead_runs_every_call_of_each_sample():
    # (how much launch gap it leaves out is the benchmarks' business: no timing is compared here)
    import torch
    x = torch.zeros(1024, device="cuda")
    queued = timing.bench(lambda: x.add_(1.0), warmup=2, samples=5, calls=50, device="cuda", queue_ahead=True)
    assert len(queued.gpu_samples_ms) == 5 and queued.gpu_ms > 0
    assert x[0].item() == 2 + 5 * 50


@pytest.mark.gpu
def test_on_cuda_queue_ahead_sleeps_as_long_as_the_host_takes_to_queue():
    # each call spends 2 ms on the host and microseconds on the GPU: behind a sleep as long as the
    # host's queueing, the GPU's time per call is its own, far below the host's
    import time

    import torch
    x = torch.zeros(1024, device="cuda")

    def call():
        time.sleep(0.002)
        x.add_(1.0)
    queued = timing.bench(call, warmup=2, samples=3, calls=10, device="cuda", queue_ahead=True)
    assert queued.host_bound_samples == 0
    assert queued.gpu_ms < 0.5 and queued.wall_ms > 2.0

"""Where a steady-state call's host time goes, without CUDA graphs: a cProfile of repeated calls of
one suite model, mini_inductor (cudagraphs=False) against Inductor's default mode. Not a test.

    PYTHONPATH=. python3 -m benchmarks.call_profile --model decoder [--calls 200] [--top 30] [--gpu]

`--gpu`: torch.profiler's table of the calls instead (host and GPU time per op and kernel).

A model whose calls are bound by the host shows here what each compiler's wrapper does per call
(the launches, the extern calls, the Python around them) that the GPU waits for.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats

import torch

from .models import MODELS
from .package_files import timing
from .worker import BACKENDS


def _profile(work, fn, calls: int, top: int, label: str, gpu: bool = False) -> None:
    # host µs per call: one sample of `calls` calls after 10 warm-up calls
    per_call = timing.bench(lambda: work.step(fn), warmup=10, samples=1, calls=calls, device="cuda").wall_ms * 1e3
    if gpu:
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as tp:
            for _ in range(calls):
                work.step(fn)
            torch.cuda.synchronize()
        print(f"\n=== {label}: {per_call:.1f} µs per call unprofiled; torch.profiler over {calls} calls ===")
        print(tp.key_averages().table(sort_by="cuda_time_total", row_limit=top))
        return
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        work.step(fn)
    torch.cuda.synchronize()
    prof.disable()
    print(f"\n=== {label}: {per_call:.1f} µs per call unprofiled; profile of {calls} calls ===")
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(top)
    print(s.getvalue())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="decoder")
    p.add_argument("--dtype", default="float16")
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--top", type=int, default=30)
    p.add_argument("--backends", default="mini_inductor_no_cudagraphs,inductor")
    p.add_argument("--gpu", action="store_true")
    a = p.parse_args()
    import mini_inductor  # noqa: F401  (its import starts Triton's setup, as in the suite's workers)
    work = MODELS[a.model]("cuda", getattr(torch, a.dtype))
    for backend in a.backends.split(","):
        torch._dynamo.reset()
        kwargs = BACKENDS[backend]
        fn = work.model if kwargs is None else torch.compile(work.model, **kwargs)
        _profile(work, fn, a.calls, a.top, f"{a.model}, {backend}", a.gpu)


if __name__ == "__main__":
    main()

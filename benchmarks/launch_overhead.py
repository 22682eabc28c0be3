"""Per-call wall time of a launch-bound model: eager vs mini_inductor with and without fast launches.

    PYTHONPATH=. python3 benchmarks/launch_overhead.py        (on a GPU)

The model is the one of issue 5: 12 × (Linear(256, 256) + SiLU), batch 8.
"""
from __future__ import annotations

import statistics
import time

import torch

import mini_inductor
import mini_inductor.runtime as runtime


def model_and_input():
    torch.manual_seed(0)
    layers = []
    for _ in range(12):
        layers += [torch.nn.Linear(256, 256), torch.nn.SiLU()]
    return torch.nn.Sequential(*layers).cuda(), torch.randn(8, 256, device="cuda")


def wall_ms(fn, x, repeats=200) -> float:
    for _ in range(20):
        fn(x)
    torch.cuda.synchronize()
    samples = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            fn(x)
        torch.cuda.synchronize()
        samples.append((time.perf_counter() - start) / repeats * 1e3)
    return statistics.median(samples)


def main() -> None:
    model, x = model_and_input()
    with torch.no_grad():
        results = {"eager": wall_ms(model, x)}
        torch._dynamo.reset()
        fast = torch.compile(model, backend="mini_inductor")
        torch.testing.assert_close(fast(x), model(x))
        results["mini_inductor"] = wall_ms(fast, x)
        torch._dynamo.reset()
        mini_inductor.reset()
        saved = runtime.accelerate
        runtime.accelerate = lambda module: None
        try:
            slow = torch.compile(model, backend="mini_inductor", options={"max_fusion_size": 63})
            torch.testing.assert_close(slow(x), model(x))
            results["mini_inductor, Triton's own launch path"] = wall_ms(slow, x)
        finally:
            runtime.accelerate = saved
        try:
            torch._dynamo.reset()
            ind = torch.compile(model)
            ind(x)
            results["inductor (default mode)"] = wall_ms(ind, x)
        except Exception as e:  # noqa: BLE001
            print(f"inductor unavailable: {e}")
    for name, ms in results.items():
        print(f"{name:45s} {ms * 1e3:8.1f} µs per call")


if __name__ == "__main__":
    main()

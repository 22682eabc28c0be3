"""Per-call wall time with and without CUDA graphs: mini_inductor against Inductor and torch's own
`backend="cudagraphs"`, all in one process on the same inputs.

    PYTHONPATH=. python3 -m benchmarks.launch_overhead [--json out.json]     (on a GPU)

1. Launch-bound: 12 × (Linear(256, 256) + SiLU), batch 8, fp32 (the model of issue 5).
2. Memory-bound: a norm + pointwise chain over a (4096, 4096) fp32 tensor, called with the same
   input tensor every time; mini_inductor reads an input that stays at one address in place, so
   the variant with `cudagraph_stable_inputs=False` shows the cost of the copy it saves.
3. Kernel chain: 16 × (x - row mean), transposed between steps, on a (128, 128) fp32 tensor: no
   library calls, about one Triton kernel per step in both compilers, so the rows without CUDA
   graphs show the per-kernel launch cost of each compiler's launch path (printed per kernel for
   mini_inductor, whose kernel count the compile record gives).
"""
from __future__ import annotations

import argparse
import json

import torch

import mini_inductor
from mini_inductor.examples import linear_silu_stack
from mini_inductor.timing import bench


def launch_bound():
    torch.manual_seed(0)
    return linear_silu_stack(256, 12).cuda(), torch.randn(8, 256, device="cuda")


def memory_bound():
    def fn(x):
        y = torch.nn.functional.layer_norm(x, x.shape[-1:])
        return torch.sigmoid(y) * y + 1.0
    return fn, torch.randn(4096, 4096, device="cuda")


def kernel_chain():
    def fn(x):
        for _ in range(16):
            x = (x - x.mean(-1, keepdim=True)).t()
        return x
    return fn, torch.randn(128, 128, device="cuda")


def wall_us(fn, x, repeats=200) -> float:
    """Host time per call: median of 5 samples of `repeats` back-to-back calls, after 10 warm-up calls."""
    return bench(lambda: fn(x), warmup=10, samples=5, calls=repeats, device="cuda").wall_ms * 1e3


def backends():
    yield "eager", lambda m: m
    yield "mini_inductor (CUDA-graph trees)", lambda m: torch.compile(m, backend="mini_inductor")
    yield "mini_inductor, input copied each replay", lambda m: torch.compile(
        m, backend="mini_inductor", options={"cudagraph_stable_inputs": False})
    yield "mini_inductor, no CUDA graphs", lambda m: torch.compile(
        m, backend="mini_inductor", options={"cudagraphs": False})
    yield "torch backend=cudagraphs", lambda m: torch.compile(m, backend="cudagraphs")
    yield "inductor mode=reduce-overhead", lambda m: torch.compile(m, mode="reduce-overhead")
    yield "inductor (default mode)", lambda m: torch.compile(m)


def run(model, x, label: str) -> dict[str, float]:
    results = {}
    with torch.no_grad():
        want = model(x)
        for name, make in backends():
            torch._dynamo.reset()
            mini_inductor.cudagraphs.reset_counters()
            fn = make(model)
            try:
                torch.testing.assert_close(fn(x), want, atol=1e-4, rtol=1e-4)
                results[name] = wall_us(fn, x)
            except Exception as e:  # noqa: BLE001 — a backend that fails is reported, not fatal
                print(f"{label}: {name} failed: {type(e).__name__}: {e}")
                continue
            if name == "mini_inductor, no CUDA graphs":
                kernels = sum(g.num_kernels for g in mini_inductor.metrics.compiled_graphs[-1:])
                if kernels:
                    print(f"  {name}: {kernels} Triton kernels per call, "
                          f"{results[name] / kernels:.1f} µs per call per kernel")
            if name.startswith("mini_inductor") and "no CUDA" not in name:
                s = mini_inductor.cudagraphs.stats()
                print(f"  {name}: {s.get('recordings')} recordings, {s.get('replays')} replays, "
                      f"{s['recorded_non_static_inputs']} inputs copied per replay")
    print(f"\n{label}")
    for name, us in results.items():
        print(f"  {name:42s} {us:9.1f} µs per call")
    return results


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    out = {"launch_bound": run(*launch_bound(), "launch-bound: 12 x (Linear 256 + SiLU), batch 8, fp32"),
           "memory_bound": run(*memory_bound(), "memory-bound: layer_norm + sigmoid chain, 4096 x 4096 fp32, "
                                                "same input tensor every call"),
           "kernel_chain": run(*kernel_chain(), "kernel chain: 16 x (x - row mean, transposed), 128 x 128 fp32")}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()

"""Single pointwise ops over one large tensor: eager, Inductor and mini_inductor, GPU time per call.
Not a test; needs a CUDA GPU.

    PYTHONPATH=. python -m benchmarks pointwise [--numel 50331648] [--dtype float16] [--ops mul,gelu,silu,add]

The matmul sweep found cuBLAS followed by our GELU kernel 10% slower than eager's addmm followed by
ATen's GELU (16384 x 3072, fp16): this times the epilogue kernels alone, a pure-bandwidth op (mul)
beside the transcendental ones, to tell a slow pointwise kernel from a slow erf. Each line: GPU ms
per call (queued behind a sleep, CUDA graphs on for the compiled ones), and the bandwidth that is.
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from mini_inductor.timing import bench

OPS = {"mul": lambda x, y: x * 2.0, "add": lambda x, y: x + y, "gelu": lambda x, y: F.gelu(x),
       "silu": lambda x, y: F.silu(x), "gelu_tanh": lambda x, y: F.gelu(x, approximate="tanh")}
BACKENDS = ("eager", "inductor", "mini_inductor")


def _run(backend: str, fn):
    if backend == "eager":
        return fn
    if backend == "inductor":
        return torch.compile(fn, mode="reduce-overhead")
    import mini_inductor  # noqa: F401  registers the backend
    return torch.compile(fn, backend="mini_inductor")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--numel", type=int, default=16384 * 3072)
    p.add_argument("--dtype", default="float16")
    p.add_argument("--ops", default="mul,add,gelu,silu")
    p.add_argument("--backends", default=",".join(BACKENDS))
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/pointwise.py needs a CUDA GPU")
    dtype = getattr(torch, a.dtype)
    x = torch.randn(a.numel, device="cuda", dtype=dtype)
    y = torch.randn(a.numel, device="cuda", dtype=dtype)
    for op in a.ops.split(","):
        line = [f"{op} {a.numel} {a.dtype}:"]
        for backend in a.backends.split(","):
            torch._dynamo.reset()
            run = _run(backend, OPS[op])

            def call():
                torch.compiler.cudagraph_mark_step_begin()
                return run(x, y)
            ms = bench(call, warmup=5, samples=5, calls=10, queue_ahead=True).gpu_ms
            moved = (3 if op == "add" else 2) * a.numel * x.element_size()
            line.append(f"{backend} {ms:.4f} ms ({moved / ms / 1e9:.0f} GB/s)")
        print(" ".join(line), flush=True)
    if "mini_inductor" in a.backends:
        from mini_inductor import metrics
        for g in metrics.compiled_graphs[-1:]:
            print("last mini_inductor graph's kernels:", ", ".join(g.kernel_names))


if __name__ == "__main__":
    main()

"""Single pointwise ops over one large tensor: eager, Inductor and mini_inductor, GPU time per call.
Not a test; needs a CUDA GPU.

    PYTHONPATH=. python -m benchmarks pointwise [--numel 50331648] [--dtype float16] [--ops mul,gelu,silu,add]
        [--configs 1024x8,2048x4]

The matmul sweep found cuBLAS followed by our GELU kernel 10% slower than eager's addmm followed by
ATen's GELU (16384 x 3072, fp16, session 27): this times the epilogue kernels alone, a pure-bandwidth op (mul)
beside the transcendental ones, to tell a slow pointwise kernel from a slow erf. Each line: GPU ms
per call (queued behind a sleep), and the bandwidth that is. Inductor runs in its default mode:
under reduce-overhead its CUDA graph copies each new input into its own buffer first (2.5x eager's
time for `mul` in session 28), which is not the kernel's speed.

Compiled for sm_90 on the CPU (tests/sm90.py), our fp16 GELU kernel at 8 warps (XBLOCK 1024: 4
elements a thread) loaded and stored 8 bytes a thread (ld.global.v2.b32), where ATen's vectorized
kernels move 16; since session 27 a kernel of 2-byte types launches 4 warps (16 bytes, Inductor's
default; codegen/heuristics.py pick_config). `--configs 2048x4,...` adds a mini_inductor column per
XBLOCKxWARPS, every 1-D pointwise kernel of the graph launched with that block and warps
(`1024x8`: the old choice). The `mini_inductor_libdevice` backend generates erf and tanh with libdevice's
erff and tanhf, as before session 30, instead of triton_helpers' branchless erf32 and tanh32.
"""
from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F

from mini_inductor.timing import bench

OPS = {"mul": lambda x, y: x * 2.0, "add": lambda x, y: x + y, "gelu": lambda x, y: F.gelu(x),
       "silu": lambda x, y: F.silu(x), "gelu_tanh": lambda x, y: F.gelu(x, approximate="tanh"),
       "tanh": lambda x, y: torch.tanh(x), "erf": lambda x, y: torch.erf(x),
       # HF GPT-2's gelu_new: the tanh formula written out
       "gelu_new": lambda x, y: 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * torch.pow(x, 3.0))))}
BACKENDS = ("eager", "inductor", "mini_inductor", "mini_inductor_libdevice")


def _with_config(xblock: int, warps: int):
    """mini_inductor's pointwise heuristic, its 1-D kernels launched with blocks of `xblock` and `warps` warps."""
    import dataclasses

    from mini_inductor.codegen import heuristics, triton as triton_codegen
    original = heuristics.pick_config

    def pick(numel, rnumel, *args, **kwargs):
        config = original(numel, rnumel, *args, **kwargs)
        if rnumel <= 1:
            config = dataclasses.replace(config, XBLOCK=xblock, num_warps=warps)
        return config
    triton_codegen.pick_config = pick
    return lambda: setattr(triton_codegen, "pick_config", original)


def _libdevice_math():
    """mini_inductor with libdevice's erff and tanhf (branching per element), not triton_helpers' erf32 and
    tanh32 (codegen/triton_ops.py BRANCHLESS_MATH)."""
    from mini_inductor.codegen import triton_ops
    triton_ops.BRANCHLESS_MATH = False
    return lambda: setattr(triton_ops, "BRANCHLESS_MATH", True)


def _run(backend: str, fn):
    if backend == "eager":
        return fn
    if backend == "inductor":
        return torch.compile(fn)
    import mini_inductor  # noqa: F401  registers the backend
    # no graph cache: a patched heuristic (--configs) must generate its own kernels, not load the others
    return torch.compile(fn, backend="mini_inductor", options={"graph_cache": False})


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--numel", type=int, default=16384 * 3072)
    p.add_argument("--dtype", default="float16")
    p.add_argument("--ops", default="mul,add,gelu,silu")
    p.add_argument("--backends", default=",".join(BACKENDS))
    p.add_argument("--configs", default="", help="also mini_inductor at these XBLOCKxWARPS, comma-separated (see above)")
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/pointwise.py needs a CUDA GPU")
    dtype = getattr(torch, a.dtype)
    x = torch.randn(a.numel, device="cuda", dtype=dtype)
    y = torch.randn(a.numel, device="cuda", dtype=dtype)
    configs = [tuple(map(int, c.split("x"))) for c in a.configs.split(",") if c]
    backends = a.backends.split(",") + [f"mini_inductor_{b}x{w}" for b, w in configs]
    for op in a.ops.split(","):
        line = [f"{op} {a.numel} {a.dtype}:"]
        for backend in backends:
            torch._dynamo.reset()
            tail = backend.removeprefix("mini_inductor_")
            if tail == "libdevice":
                restore = _libdevice_math()
            elif tail != backend:
                restore = _with_config(*map(int, tail.split("x")))
            else:
                restore = lambda: None  # noqa: E731
            try:
                run = _run(backend if tail == backend else "mini_inductor", OPS[op])

                def call():
                    torch.compiler.cudagraph_mark_step_begin()
                    return run(x, y)
                ms = bench(call, warmup=5, samples=5, calls=10, queue_ahead=True).gpu_ms
            finally:
                restore()
            moved = (3 if op == "add" else 2) * a.numel * x.element_size()
            line.append(f"{backend} {ms:.4f} ms ({moved / ms / 1e6:.0f} GB/s)")
        print(" ".join(line), flush=True)
    if "mini_inductor" in a.backends:
        from mini_inductor import metrics
        for g in metrics.compiled_graphs[-1:]:
            print("last mini_inductor graph's kernels:", ", ".join(g.kernel_names))


if __name__ == "__main__":
    main()

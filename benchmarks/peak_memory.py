"""Planned peak memory against what the CUDA caching allocator saw (needs a CUDA GPU).

    python -m benchmarks.peak_memory            # from the repo root on the GPU machine
    TRITON_INTERPRET=1 python -m benchmarks.peak_memory --cpu-check   # no GPU: compile and check the cases

For each graph: compile with mini_inductor under no_grad (one inference graph), run it once to
compile and warm up, then run it again between `reset_peak_memory_stats()` and
`max_memory_allocated()`. The measured peak is taken above the memory allocated before the call
(inputs, weights), so it holds what that call allocated: the generated wrapper's intermediates and
outputs, which `GraphRecord.planned_peak_bytes` plans, and, under CUDA graphs (on by default), the
cuBLAS workspace: the measured call is the recording, and a recorded partition that calls cuBLAS
allocates a fresh workspace in the pool (`GraphRecord.graphed_workspace_bytes`,
mini_inductor/runtime/cudagraphs/cublas_workspace.py). Each graph runs twice: with CUDA graphs (measured against
planned + workspace) and with options {"cudagraphs": False} (the workspace is made in the first
call and kept, so measured against the planned buffers alone). Sizes are large (MBs) so the
allocator's 512-byte rounding does not matter. Prints one row per run and exits non-zero when a run
is off by more than 10%.
"""
from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F

import mini_inductor  # noqa: F401  registers the backend
from mini_inductor import metrics

TOLERANCE = 0.10


def mlp_block(x, w1, b1, w2, b2, g, beta):
    h = F.gelu(x @ w1 + b1)
    return F.layer_norm(x + (h @ w2 + b2), (x.shape[-1],), g, beta)


def softmax_rows(x):
    return torch.softmax(x, -1)


def two_reductions_then_output(x):
    a = x * 2 + 1
    return x * a.sum(0)[None, :] + a.sum(1)[:, None]


def linear_gelu(x, w, b):
    return F.gelu(F.linear(x, w, b))      # addmm with a 1-d bias: through cuBLASLt


def residual_chain(x, y):
    for _ in range(4):
        x = torch.relu(x @ y) + x
    return x


def cases(device, small: bool = False):
    def r(*shape):
        return torch.randn(*shape, device=device)
    d, f, n = (8, 32, 16) if small else (1024, 4096, 4096)
    return [
        ("mlp_block", mlp_block, (r(n, d), r(d, f), r(f), r(f, d), r(d), r(d), r(d)), {}),
        ("softmax_rows", softmax_rows, (r(n, f),), {}),
        ("softmax_unfused (in-place)", softmax_rows, (r(n, f),), {"max_fusion_size": 1}),
        ("two_reductions_then_output (reuse)", two_reductions_then_output, (r(n, f),), {}),
        ("residual_chain (matmuls)", residual_chain, (r(n, d), r(d, d)), {}),
        ("linear_gelu (cuBLASLt addmm)", linear_gelu, (r(n, d), r(f, d), r(f)), {}),
    ]


def measure(fn, args, options) -> tuple[int, int, int]:
    """(planned buffers, cuBLAS workspace of a CUDA-graph recording, measured) in bytes, over the
    compiled graphs that did not run eagerly."""
    torch._dynamo.reset()
    metrics.reset()
    compiled = torch.compile(fn, backend="mini_inductor", options=options)
    with torch.no_grad():
        compiled(*args)                      # compile and warm up (under CUDA graphs the next call records)
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        out = compiled(*args)
        torch.cuda.synchronize()
        measured = torch.cuda.max_memory_allocated() - base
        del out
    graphs = [g for g in metrics.compiled_graphs if not g.ran_eagerly]
    return (sum(g.planned_peak_bytes for g in graphs), sum(g.graphed_workspace_bytes for g in graphs), measured)


def check_on_cpu() -> int:
    """What runs without a GPU: each case compiles (tiny sizes, Triton's interpreter), matches eager
    and plans a peak; nothing is measured."""
    if os.environ.get("TRITON_INTERPRET") != "1" and "triton" in sys.modules:
        # Setting it now would switch Triton to its interpreter half-way, for this whole process.
        print("peak_memory --cpu-check: Triton is already imported without its interpreter; "
              "run it as TRITON_INTERPRET=1 python -m benchmarks.peak_memory --cpu-check")
        return 2
    os.environ["TRITON_INTERPRET"] = "1"
    bad = 0
    for name, fn, args, options in cases(torch.device("cpu"), small=True):
        torch._dynamo.reset()
        metrics.reset()
        with torch.no_grad():
            got = torch.compile(fn, backend="mini_inductor", options=options)(*args)
            ok = torch.allclose(got, fn(*args), atol=1e-4, rtol=1e-4)
        planned = sum(g.planned_peak_bytes for g in metrics.compiled_graphs if not g.ran_eagerly)
        bad += not ok or planned <= 0
        print(f"{name:<36} planned {planned} B{'' if ok else '  <-- differs from eager'}")
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cpu-check", action="store_true", help="no GPU: compile the cases and compare with eager")
    if p.parse_args(argv).cpu_check:
        return check_on_cpu()
    if not torch.cuda.is_available():
        print("benchmarks/peak_memory.py needs a CUDA GPU (--cpu-check: compile the cases on the CPU)")
        return 2
    device = torch.device("cuda")
    print(f"{'graph':<48} {'planned MB':>11} {'+ workspace MB':>15} {'measured MB':>12} {'expected/measured':>18}")
    bad = 0
    for name, fn, args, options in cases(device):
        for label, opts in ((name, options), (f"{name} [no cudagraphs]", {**options, "cudagraphs": False})):
            planned, workspace, measured = measure(fn, args, opts)
            ratio = (planned + workspace) / measured if measured else float("inf")
            flag = "" if abs(ratio - 1) <= TOLERANCE else "  <-- off by more than 10%"
            bad += bool(flag)
            print(f"{label:<48} {planned / 1e6:>11.2f} {workspace / 1e6:>15.2f} {measured / 1e6:>12.2f} "
                  f"{ratio:>18.3f}{flag}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

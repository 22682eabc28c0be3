"""One (model, backend) measurement in a fresh process; prints one JSON line. Used by suite.py.

    python3 -m benchmarks.worker --model decoder --backend mini_inductor [--compile-only]

first_call_s: from torch.compile() to the first call's result (torch.compile() itself, also given
as torch_compile_s, then Dynamo, AOTAutograd, the backend's compile, kernel compiles, one run); the
caches it finds are whatever the environment points at (suite.py gives a cold run empty ones and a
warm run the same ones again). `--compile-only` stops after the first call and the correctness check.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import torch
from torch.utils._pytree import tree_leaves

from .models import MODELS
from .package_files import timing

BACKENDS = {
    "eager": None,
    "inductor": dict(),
    "inductor_reduce_overhead": dict(mode="reduce-overhead"),
    "cudagraphs": dict(backend="cudagraphs"),
    "mini_inductor": dict(backend="mini_inductor"),
    "mini_inductor_no_cudagraphs": dict(backend="mini_inductor", options={"cudagraphs": False}),
    # opt-in (--backends ...): benchmarks configs per kernel at the first call, so a slow cold compile
    "mini_inductor_max_autotune": dict(backend="mini_inductor", mode="max-autotune"),
    # opt-in: mini_inductor with Dynamo's own cache on (dynamo_cache.py; its switch is an environment
    # variable read at import, BACKEND_ENV below), so that a warm start traces nothing
    "mini_inductor_dynamo_cache": dict(backend="mini_inductor"),
}
BACKEND_ENV = {"mini_inductor_dynamo_cache": {"MINI_INDUCTOR_DYNAMO_CACHE": "1"}}
DEFAULT_BACKENDS = [b for b in BACKENDS if "max_autotune" not in b and b not in BACKEND_ENV]
TOL = {torch.float32: 1e-2, torch.float16: 5e-2, torch.bfloat16: 1e-1}


def _sync():
    torch.cuda.synchronize()


def run(model_name: str, backend: str, dtype: torch.dtype, compile_only: bool) -> dict:
    os.environ.update(BACKEND_ENV.get(backend, {}))
    if backend.startswith("mini_inductor"):
        import mini_inductor  # noqa: F401
    work = MODELS[model_name]("cuda", dtype)
    expected = [t.detach().clone() for t in tree_leaves(work.step(work.model)) if isinstance(t, torch.Tensor)]
    kwargs = BACKENDS[backend]
    # The first mark imports torch._inductor's CUDA-graph module (2 s on the GPU machine); mark once
    # here so that no backend's timed first call pays for that import.
    torch.compiler.cudagraph_mark_step_begin()
    _sync()
    # torch.compile() itself is timed too: with Dynamo's cache (MINI_INDUCTOR_DYNAMO_CACHE=1) a warm
    # start loads the compiled function's bytecode and guards there, not at the first call
    start = time.perf_counter()
    fn = work.model if kwargs is None else torch.compile(work.model, **kwargs)
    torch_compile_s = time.perf_counter() - start

    def step():
        torch.compiler.cudagraph_mark_step_begin()
        return work.step(fn)

    got = step()
    _sync()
    result = {"model": work.name, "backend": backend, "dtype": str(dtype).split(".")[-1],
              "first_call_s": time.perf_counter() - start, "torch_compile_s": torch_compile_s}
    got = [t for t in tree_leaves(got) if isinstance(t, torch.Tensor)]
    err = max(((a.double() - b.double()).abs().max().item() for a, b in zip(got, expected)), default=0.0)
    scale = max((b.double().abs().max().item() for b in expected), default=1.0) or 1.0
    result.update(max_abs_err=err, correct=len(got) == len(expected) and err <= TOL[dtype] * max(1.0, scale))
    if backend.startswith("mini_inductor"):
        result.update(_mini_inductor_compiles(), **_triton_setup(start))
    if compile_only:
        return result
    # 5 warm-up steps and one timed step set the calls per sample (about 50 ms of them, 5 to 200);
    # then the medians of 5 samples of that many back-to-back steps
    one = timing.bench(step, warmup=5, samples=1, device="cuda")
    n = max(5, min(200, int(50 / max(one.wall_ms, 1e-3))))
    steady = timing.bench(step, warmup=0, samples=5, calls=n, device="cuda")
    torch.cuda.reset_peak_memory_stats()
    step()
    _sync()
    result.update(wall_ms=steady.wall_ms, gpu_ms=steady.gpu_ms,
                  peak_mib=torch.cuda.max_memory_allocated() / 2**20,
                  # CUDA-graph outputs live in the graph's pool and never count as allocated: reserved
                  # memory (segments held, pools included) compares graphed and ungraphed backends fairly
                  peak_reserved_mib=torch.cuda.max_memory_reserved() / 2**20)
    return result


def _triton_setup(first_call_began: float) -> dict:
    """How long mini_inductor's Triton setup thread (started at its import: Triton's driver helper, then
    Triton's package hash) ran, and how much of it was left when the timed first call began; the same
    for its thread importing torch's lazily imported modules (mi_torch_imports_*). Inductor
    does the same work inside its first call; ours overlaps whatever ran between the import and the
    first call (here: building the model, the eager reference run), so only the part left shows in
    first_call_s."""
    from mini_inductor.runtime.launch.precompile import setup_times
    out = {}
    for what, start, end in (("triton_setup", "started", "hash"), ("torch_imports", "imports_started", "imports")):
        began, ended = setup_times.get(start), setup_times.get(end)
        if began is not None and ended is not None:
            out.update({f"mi_{what}_s": ended - began, f"mi_{what}_left_s": max(0.0, ended - first_call_began)})
    return out


def _mini_inductor_compiles() -> dict:
    """What mini_inductor's records say about this process's compiles: graphs by cache state (a warm
    start should show only "disk" and "disk (before AOT)" hits, the latter without AOT autograd),
    seconds inside the backend, seconds compiling kernels, AOT autograd's own seconds."""
    from mini_inductor import metrics
    graphs = [g for g in metrics.compiled_graphs if not g.ran_eagerly]
    cache: dict[str, int] = {}
    for g in graphs:
        cache[g.cache or "none"] = cache.get(g.cache or "none", 0) + 1
    return {"mi_graphs": len(graphs), "mi_cache": cache,
            "mi_backend_s": sum(g.compile_seconds for g in graphs),
            "mi_kernel_compile_s": sum(g.stage_seconds.get("kernel compile", 0.0) for g in graphs),
            "mi_aot_autograd_s": sum(g.stage_seconds.get("AOT autograd", 0.0) for g in graphs)}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True, choices=sorted(MODELS))
    p.add_argument("--backend", required=True, choices=sorted(BACKENDS))
    p.add_argument("--dtype", default="float16")
    p.add_argument("--compile-only", action="store_true")
    a = p.parse_args()
    try:
        res = run(a.model, a.backend, getattr(torch, a.dtype), a.compile_only)
    except Exception as e:  # noqa: BLE001  (a failing backend is a result, not a crash of the suite)
        res = {"model": a.model, "backend": a.backend, "error": f"{type(e).__name__}: {str(e)[:300]}"}
    print("RESULT " + json.dumps(res))


if __name__ == "__main__":
    main()

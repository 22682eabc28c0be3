"""One (model, backend) measurement in a fresh process; prints one JSON line. Used by suite.py.

    python3 -m benchmarks.worker --model decoder --backend mini_inductor [--compile-only]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
from torch.utils._pytree import tree_leaves

from .models import MODELS

BACKENDS = {
    "eager": None,
    "inductor": dict(),
    "inductor_reduce_overhead": dict(mode="reduce-overhead"),
    "cudagraphs": dict(backend="cudagraphs"),
    "mini_inductor": dict(backend="mini_inductor"),
}
TOL = {torch.float32: 1e-2, torch.float16: 5e-2, torch.bfloat16: 1e-1}


def _sync():
    torch.cuda.synchronize()


def run(model_name: str, backend: str, dtype: torch.dtype, compile_only: bool) -> dict:
    if backend == "mini_inductor":
        import mini_inductor  # noqa: F401
    work = MODELS[model_name]("cuda", dtype)
    expected = [t.detach().clone() for t in tree_leaves(work.step(work.model)) if isinstance(t, torch.Tensor)]
    kwargs = BACKENDS[backend]
    fn = work.model if kwargs is None else torch.compile(work.model, **kwargs)

    def step():
        torch.compiler.cudagraph_mark_step_begin()
        return work.step(fn)

    _sync()
    start = time.perf_counter()
    got = step()
    _sync()
    result = {"model": work.name, "backend": backend, "dtype": str(dtype).split(".")[-1],
              "first_call_s": time.perf_counter() - start}
    if compile_only:
        return result
    got = [t for t in tree_leaves(got) if isinstance(t, torch.Tensor)]
    err = max(((a.double() - b.double()).abs().max().item() for a, b in zip(got, expected)), default=0.0)
    scale = max((b.double().abs().max().item() for b in expected), default=1.0) or 1.0
    result.update(max_abs_err=err, correct=len(got) == len(expected) and err <= TOL[dtype] * max(1.0, scale))
    for _ in range(5):
        step()
    _sync()
    start = time.perf_counter()
    step()
    _sync()
    n = max(5, min(200, int(0.05 / max(time.perf_counter() - start, 1e-6))))
    walls, gpus = [], []
    for _ in range(5):
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start = time.perf_counter()
        begin.record()
        for _ in range(n):
            step()
        end.record()
        _sync()
        walls.append((time.perf_counter() - start) / n * 1e3)
        gpus.append(begin.elapsed_time(end) / n)
    torch.cuda.reset_peak_memory_stats()
    step()
    _sync()
    result.update(wall_ms=statistics.median(walls), gpu_ms=statistics.median(gpus),
                  peak_mib=torch.cuda.max_memory_allocated() / 2**20)
    return result


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

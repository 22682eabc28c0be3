"""Where mini_inductor's compile time goes, model by model, each run in a fresh process. Not a test.

    PYTHONPATH=. python3 -m benchmarks.compile_time [--models decoder,resnet] [--threads 16] [--dynamo-cache]

Per model, four first calls (compile + one run), each in a new process:
  cold_serial    empty caches, kernels compiled one by one at their first launch (compile_threads=0)
  cold_parallel  empty caches, kernels compiled on --threads threads before the first call
  warm           the caches cold_parallel left: compiled graphs from disk, kernels from Triton's cache
  inductor_cold  Inductor (default mode) with empty caches, for the issue's target (ours <= half)
  cold_dc, warm_dc   with --dynamo-cache: cold_parallel and warm again with MINI_INDUCTOR_DYNAMO_CACHE=1
                 (Dynamo's own cache: the warm start traces nothing; dynamo_cache.py)
First calls include torch.compile() itself (where Dynamo's cache is loaded).
and the backend's own seconds from mini_inductor's records (mi_backend_s, mi_kernel_compile_s).
"""
from __future__ import annotations

import argparse
import json
import tempfile

from .models import MODELS
from .suite import _worker


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--models", default=",".join(MODELS))
    p.add_argument("--dtype", default="float16")
    p.add_argument("--threads", type=int, default=16)
    p.add_argument("--timeout", type=int, default=600)
    p.add_argument("--dynamo-cache", action="store_true",
                   help="also cold and warm runs with MINI_INDUCTOR_DYNAMO_CACHE=1")
    a = p.parse_args()
    cols = ["cold_serial", "cold_parallel", "warm", "inductor_cold"]
    cols += ["cold_dc", "warm_dc"] if a.dynamo_cache else []
    print("model | " + " | ".join(cols) + " | warm/cold | cold/inductor | warm graphs by cache state"
          + (" | warm_dc/cold" if a.dynamo_cache else ""))
    for model in a.models.split(","):
        res = {}
        with tempfile.TemporaryDirectory() as cache:
            res["cold_serial"] = _worker(model, "mini_inductor", a.dtype, cache, True, a.timeout,
                                         {"MINI_INDUCTOR_COMPILE_THREADS": "0"})
        with tempfile.TemporaryDirectory() as cache:
            threads = {"MINI_INDUCTOR_COMPILE_THREADS": str(a.threads)}
            res["cold_parallel"] = _worker(model, "mini_inductor", a.dtype, cache, True, a.timeout, threads)
            res["warm"] = _worker(model, "mini_inductor", a.dtype, cache, True, a.timeout, threads)
        with tempfile.TemporaryDirectory() as cache:
            res["inductor_cold"] = _worker(model, "inductor", a.dtype, cache, True, a.timeout)
        if a.dynamo_cache:
            with tempfile.TemporaryDirectory() as cache:
                env = {"MINI_INDUCTOR_COMPILE_THREADS": str(a.threads), "MINI_INDUCTOR_DYNAMO_CACHE": "1"}
                res["cold_dc"] = _worker(model, "mini_inductor", a.dtype, cache, True, a.timeout, env)
                res["warm_dc"] = _worker(model, "mini_inductor", a.dtype, cache, True, a.timeout, env)
        secs = {c: res[c].get("first_call_s") for c in cols}
        cells = [f"{secs[c]:.2f} s" if secs[c] is not None else res[c].get("error", "?")[:30] for c in cols]
        ratio = lambda x, y: f"{x / y:.2f}" if x and y else "-"  # noqa: E731
        print(f"{model} | " + " | ".join(cells) + f" | {ratio(secs['warm'], secs['cold_parallel'])}"
              f" | {ratio(secs['cold_parallel'], secs['inductor_cold'])} | {res['warm'].get('mi_cache')}"
              + (f" | {ratio(secs['warm_dc'], secs['cold_parallel'])} {res['warm_dc'].get('mi_cache')}"
                 if a.dynamo_cache else ""), flush=True)
        print("  " + json.dumps({c: {k: v for k, v in res[c].items()
                                    if k.startswith(("mi_", "correct", "error", "torch_compile"))}
                                for c in cols}), flush=True)


if __name__ == "__main__":
    main()

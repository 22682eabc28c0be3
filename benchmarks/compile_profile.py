"""Where the first call's seconds go, for one model and backend: a cProfile of the first call in this
process, with whatever caches the environment points at. Not a test.

    PYTHONPATH=. python3 -m benchmarks.compile_profile --model launch_bound [--backend mini_inductor] [--no-profile]

Prints the first call's wall seconds, Dynamo's own stage times, and the functions with the most
cumulative and own time. Run it twice with the same TRITON_CACHE_DIR / MINI_INDUCTOR_CACHE_DIR /
TORCHINDUCTOR_CACHE_DIR to see a warm start.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import torch

from .models import MODELS
from .worker import BACKENDS


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="launch_bound")
    p.add_argument("--backend", default="mini_inductor")
    p.add_argument("--dtype", default="float16")
    p.add_argument("--top", type=int, default=35)
    p.add_argument("--no-profile", action="store_true", help="time the first call and its stages only")
    a = p.parse_args()
    t0 = time.perf_counter()
    if a.backend.startswith("mini_inductor"):
        import mini_inductor  # noqa: F401
    import triton  # noqa: F401  (its import is part of any backend's first call; time it apart)
    print(f"imports {time.perf_counter() - t0:.2f} s")
    work = MODELS[a.model]("cuda", getattr(torch, a.dtype))
    work.step(work.model)
    torch.cuda.synchronize()
    fn = torch.compile(work.model, **BACKENDS[a.backend])
    prof = cProfile.Profile()
    start = time.perf_counter()
    if not a.no_profile:
        prof.enable()
    work.step(fn)
    torch.cuda.synchronize()
    prof.disable()
    print(f"first call {time.perf_counter() - start:.2f} s ({a.model}, {a.backend})")
    try:
        from torch._dynamo.utils import compile_times
        print(compile_times(repr="str"))
    except Exception as e:  # the helper moved between torch versions; the profile below still holds
        print(f"(no Dynamo stage times: {e})")
    if a.backend.startswith("mini_inductor"):
        from mini_inductor import metrics
        for g in metrics.compiled_graphs:
            stages = ", ".join(f"{k} {v:.3f}" for k, v in g.stage_seconds.items())
            print(f"{g.name}: backend {g.compile_seconds:.3f} s, cache {g.cache or 'none'}; {stages}")
    for key in () if a.no_profile else ("cumulative", "tottime"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(key).print_stats(a.top)
        print(s.getvalue())


if __name__ == "__main__":
    main()

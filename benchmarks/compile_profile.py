"""Where the first call's seconds go, for one model and backend: a cProfile of the first call in this
process, with whatever caches the environment points at. Not a test.

    PYTHONPATH=. python3 -m benchmarks.compile_profile --model launch_bound [--backend mini_inductor] [--no-profile]

Prints the first call's wall seconds, Dynamo's own stage times, and the functions with the most
cumulative and own time. Run it twice with the same TRITON_CACHE_DIR / MINI_INDUCTOR_CACHE_DIR /
TORCHINDUCTOR_CACHE_DIR to see a warm start.

`--backend dynamo_only`: a backend that returns the traced graph's forward, so that the first call is
Dynamo's own cost (bytecode tracing, fake tensors, guards): the floor under any warm start that still
traces. `--after-other` traces a small unrelated module first, to tell the once-per-process part of a
trace from the part each model pays again.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

import torch
from torch import nn

from .models import MODELS
from .worker import BACKENDS


def _graph_forward(gm, example_inputs):
    return gm.forward


class _Other(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.norm = nn.Linear(8, 8), nn.LayerNorm(8)
        self.conv, self.bn = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)

    def forward(self, x, y):
        return nn.functional.gelu(self.norm(self.lin(x))).softmax(-1), self.bn(self.conv(y)).relu().mean()


def _trace_other(backend_kwargs: dict) -> None:
    start = time.perf_counter()
    with torch.no_grad():
        torch.compile(_Other().cuda().eval(), **backend_kwargs)(
            torch.randn(2, 8, device="cuda"), torch.randn(1, 3, 8, 8, device="cuda"))
    torch.cuda.synchronize()
    print(f"other module first: {time.perf_counter() - start:.2f} s")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="launch_bound")
    p.add_argument("--backend", default="mini_inductor", help="a suite backend, or dynamo_only")
    p.add_argument("--dtype", default="float16")
    p.add_argument("--top", type=int, default=35)
    p.add_argument("--no-profile", action="store_true", help="time the first call and its stages only")
    p.add_argument("--after-other", action="store_true", help="first compile a small unrelated module")
    a = p.parse_args()
    t0 = time.perf_counter()
    if a.backend.startswith("mini_inductor"):
        import mini_inductor  # noqa: F401
    import triton  # noqa: F401  (its import is part of any backend's first call; time it apart)
    print(f"imports {time.perf_counter() - t0:.2f} s")
    kwargs = dict(backend=_graph_forward) if a.backend == "dynamo_only" else BACKENDS[a.backend]
    if a.after_other:
        _trace_other(kwargs)
    work = MODELS[a.model]("cuda", getattr(torch, a.dtype))
    work.step(work.model)
    torch.cuda.synchronize()
    fn = torch.compile(work.model, **kwargs)
    if a.after_other:   # this model's stages and graphs only
        import torch._dynamo.utils as dynamo_utils
        getattr(dynamo_utils, "compilation_time_metrics", {}).clear()
        if a.backend.startswith("mini_inductor"):
            from mini_inductor import metrics
            metrics.reset()
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
        from mini_inductor.runtime.launch import compile_pool
        print(f"kernels by compile workers: {compile_pool.stats}")
    for key in () if a.no_profile else ("cumulative", "tottime"):
        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats(key).print_stats(a.top)
        print(s.getvalue())


if __name__ == "__main__":
    main()

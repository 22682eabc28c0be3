"""What Dynamo alone costs at a model's first call, in a fresh process: the floor under any warm start
that still traces (mini_inductor's own warm path serves the compiled graph from disk). Not a test.

    PYTHONPATH=. python3 -m benchmarks.dynamo_trace_cost --model resnet [--after-other]

The backend returns the traced graph's forward, so the seconds are Dynamo's: bytecode tracing, fake
tensor propagation, guards. `--after-other` first traces a small unrelated module, to tell the
once-per-process part of a trace from the part every model pays again. mini_inductor is not imported
(its import thread would do some of the once-per-process work ahead).
"""
from __future__ import annotations

import argparse
import time

import torch
from torch import nn

from .models import MODELS


def _graph_forward(gm, example_inputs):
    return gm.forward


class _Other(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.norm = nn.Linear(8, 8), nn.LayerNorm(8)
        self.conv, self.bn = nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4)

    def forward(self, x, y):
        return nn.functional.gelu(self.norm(self.lin(x))).softmax(-1), self.bn(self.conv(y)).relu().mean()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="launch_bound", choices=sorted(MODELS))
    p.add_argument("--dtype", default="float16")
    p.add_argument("--after-other", action="store_true")
    a = p.parse_args()
    import torch._dynamo.utils as dynamo_utils
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if a.after_other:
        start = time.perf_counter()
        with torch.no_grad():
            torch.compile(_Other().to(device).eval(), backend=_graph_forward)(
                torch.randn(2, 8, device=device), torch.randn(1, 3, 8, 8, device=device))
        print(f"other module traced first: {time.perf_counter() - start:.3f} s")
    work = MODELS[a.model](device, getattr(torch, a.dtype))
    work.step(work.model)   # eager once: lazy CUDA and library setup is not Dynamo's
    if device == "cuda":
        torch.cuda.synchronize()
    fn = torch.compile(work.model, backend=_graph_forward)
    dynamo_utils.compilation_time_metrics.clear()
    start = time.perf_counter()
    work.step(fn)
    if device == "cuda":
        torch.cuda.synchronize()
    stages = ("_compile.compile_inner", "bytecode_tracing", "get_fake_value", "variable_builder_call", "build_guards")
    times = {k: round(sum(v), 3) for k, v in dynamo_utils.compilation_time_metrics.items() if k in stages}
    print(f"{a.model}{' after another' if a.after_other else ''}: first call {time.perf_counter() - start:.3f} s; {times}")


if __name__ == "__main__":
    main()

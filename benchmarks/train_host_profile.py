"""Where a training step's host time goes with CUDA graphs on: the training loop of
benchmarks/dynamic_shapes.py (a 4-layer MLP with norms, fp32, AdamW, 7 batches of 256 and one of 100)
under Inductor reduce-overhead and mini_inductor, part by part, then a cProfile of mini_inductor's.
Not a test.

    PYTHONPATH=. python -m benchmarks train_host_profile [--epochs 20] [--top 25] [--model mlp|attention_causal]

`--model attention_causal`: the attention sweep's causal row instead (fp16, B 4, 16 heads, L 1024,
head dim 64, forward and backward of the written-out attention, which mini_inductor matches to SDPA;
no optimizer), against eager SDPA, where the sweep's queued time (0.51 against 0.22 ms) is the host's.

For each backend: host microseconds per step in zero_grad, forward, backward and the optimizer's step
(medians over the steps of the timed epochs, no synchronization inside a step, so a part's time is
the host's), the milliseconds per epoch, and torch.profiler's count of device-to-device copies and of
kernel launches per step. Then the host µs per step inside each of the CUDA-graph trees' own
functions (`PARTS`: timed by wrappers, inclusive, a few tenths of a µs each; no profiler running), and
cProfile's top functions (by own time) over the steps.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import time

import torch

from benchmarks.dynamic_shapes import _compile
from mini_inductor.examples import MLPWithNorm


def _loop(backend: str, model_name: str = "mlp"):
    torch._dynamo.reset()
    if model_name == "attention_causal":
        return _attention_loop(backend)
    torch.manual_seed(0)
    model = MLPWithNorm(512, 2048, 4).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batches = [torch.randn(256, 512, device="cuda") for _ in range(7)] + [torch.randn(100, 512, device="cuda")]
    run = _compile(model, backend)
    parts: dict[str, list[float]] = {"zero": [], "fwd": [], "bwd": [], "opt": []}

    def step(x, record: bool):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        t1 = time.perf_counter()
        loss = run(x).float().pow(2).mean()
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        opt.step()
        t4 = time.perf_counter()
        if record:
            for name, a, b in (("zero", t0, t1), ("fwd", t1, t2), ("bwd", t2, t3), ("opt", t3, t4)):
                parts[name].append((b - a) * 1e6)

    def epoch(record: bool = False):
        for x in batches:
            step(x, record)
    return epoch, parts, len(batches)


def _attention_loop(backend: str):
    import torch.nn.functional as F

    from benchmarks.attention_sweep import causal
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(4, 16, 1024, 64, device="cuda", dtype=torch.float16, generator=gen).requires_grad_()
               for _ in range(3))
    grad_out = torch.randn_like(q)
    if backend == "eager_sdpa":
        run = lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True)  # noqa: E731
    else:
        run = _compile(lambda q, k, v: causal(q, k, v, {}), backend)
    parts: dict[str, list[float]] = {"zero": [], "fwd": [], "bwd": []}

    def step(record: bool):
        t0 = time.perf_counter()
        for t in (q, k, v):
            t.grad = None
        t1 = time.perf_counter()
        out = run(q, k, v)
        t2 = time.perf_counter()
        out.backward(grad_out)
        t3 = time.perf_counter()
        if record:
            for name, a, b in (("zero", t0, t1), ("fwd", t1, t2), ("bwd", t2, t3)):
                parts[name].append((b - a) * 1e6)

    def epoch(record: bool = False):
        for _ in range(8):
            step(record)
    return epoch, parts, 8


# the functions whose inclusive host time per step is reported, per backend family ("module:Class.attr")
PARTS = {
    "mini_inductor": ["mini_inductor.runtime:CompiledGraph.__call__",
                      "mini_inductor.runtime.cudagraphs.trees:TreeFunction.__call__",
                      "mini_inductor.runtime.cudagraphs.trees:TreeManager.run",
                      "mini_inductor.runtime.cudagraphs.trees:TreeManager._try_end_execution",
                      "mini_inductor.runtime.cudagraphs.trees:TreeManager._save_adopted",
                      "mini_inductor.runtime.cudagraphs.trees:TreeManager._replay",
                      "mini_inductor.runtime.cudagraphs.trees:TreeManager._mutates_outside_pool",
                      "mini_inductor.runtime:current_backward_edges",
                      "mini_inductor.runtime:note_gradient_source",
                      "mini_inductor.runtime:backward_ran",
                      "mini_inductor.runtime.cudagraphs.nodes:GraphNode.check",
                      "mini_inductor.runtime.cudagraphs.nodes:GraphNode.run",
                      "mini_inductor.runtime.cudagraphs.nodes:GraphNode._rebuild_outputs",
                      "mini_inductor.runtime.cudagraphs.nodes:GraphNode._pin_replay_outputs",
                      "mini_inductor.runtime.cudagraphs.gradients:GradientsOutOfPool.__call__",
                      "mini_inductor.runtime.cudagraphs.utils:FunctionInfo.sizes_key",
                      "mini_inductor.runtime.cudagraphs.nodes:GraphNode._retire_cached",
                      "mini_inductor.runtime.cudagraphs.nodes:storage_at",
                      "mini_inductor.runtime.cudagraphs.nodes:tensor_on",
                      "mini_inductor.runtime.cudagraphs.nodes:_fresh_autograd_state",
                      "mini_inductor.runtime.cudagraphs.nodes:is_live",
                      "torch.cuda.graphs:CUDAGraph.replay"],
    "inductor": ["torch._inductor.cudagraph_trees:CUDAGraphTreeManager.run",
                 "torch._inductor.cudagraph_trees:CUDAGraphNode.run",
                 "torch._inductor.cudagraph_trees:CUDAGraphNode.check_invariants",
                 "torch.cuda.graphs:CUDAGraph.replay"],
}


def _timed_parts(backend: str):
    """Wrap the PARTS of `backend`'s family with timers: (totals by name and call count, undo)."""
    import importlib
    import functools
    family = "mini_inductor" if backend.startswith("mini_inductor") else "inductor" if "inductor" in backend else None
    totals: dict[str, list] = {}
    undo = []
    for path in PARTS.get(family, []):   # "module:Class.attr", or "module:function" as that module calls it
        module_name, _, attr_path = path.partition(":")
        owner_name, _, attr = attr_path.rpartition(".")
        try:
            module = importlib.import_module(module_name)
            owner = getattr(module, owner_name) if owner_name else module
            original = owner.__dict__[attr]
        except (ImportError, AttributeError, KeyError):
            continue
        slot = totals.setdefault(attr_path, [0.0, 0])

        def timed(*args, _original=original, _slot=slot, **kwargs):
            t0 = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                _slot[0] += time.perf_counter() - t0
                _slot[1] += 1
        setattr(owner, attr, functools.wraps(original)(timed))
        undo.append((owner, attr, original))

    def restore():
        for owner, attr, original in undo:
            setattr(owner, attr, original)
    return totals, restore


def measure(backend: str, epochs: int, top: int, model_name: str = "mlp") -> None:
    epoch, parts, steps = _loop(backend, model_name)
    for _ in range(3):
        epoch()
    torch.cuda.synchronize()
    walls = []
    for _ in range(epochs):
        start = time.perf_counter()
        epoch(record=True)
        torch.cuda.synchronize()
        walls.append((time.perf_counter() - start) * 1e3)
    host = "  ".join(f"{k} {statistics.median(v):.0f}" for k, v in parts.items())
    print(f"\n=== {backend}: {statistics.median(walls):.2f} ms per epoch; host µs per step: {host}")
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as tp:
        for _ in range(5):
            epoch()
        torch.cuda.synchronize()
    n = 5 * steps
    events = tp.key_averages()
    copies = sum(e.count for e in events if e.key == "cudaMemcpyAsync")
    launches = sum(e.count for e in events if e.key in ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx"))
    replays = sum(e.count for e in events if e.key == "cudaGraphLaunch")
    print(f"per step: cudaMemcpyAsync {copies / n:.1f}, kernel launches {launches / n:.1f}, graph launches {replays / n:.1f}")
    print(events.table(sort_by="self_cpu_time_total", row_limit=top))
    if backend.startswith("mini_inductor"):
        from mini_inductor.runtime.cudagraphs.trees import stats
        print("trees:", stats())
    gc_time = _gc_seconds(lambda: [epoch() for _ in range(5)])
    print(f"garbage collection: {gc_time * 1e6 / n:.0f} µs per step")
    totals, restore = _timed_parts(backend)
    try:
        for _ in range(5):
            epoch()
        torch.cuda.synchronize()
    finally:
        restore()
    for name, (seconds, calls) in totals.items():
        print(f"  {name}: {seconds * 1e6 / n:.0f} µs per step ({calls / n:.1f} calls)")
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(5):
        epoch()
    torch.cuda.synchronize()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    print(out.getvalue())
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(top)
    print(out.getvalue())


def _gc_seconds(work) -> float:
    """Seconds Python's cyclic garbage collector ran during `work`."""
    import gc
    spent, began = [0.0], [0.0]

    def note(phase, info):
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            spent[0] += time.perf_counter() - began[0]
    gc.callbacks.append(note)
    try:
        work()
        torch.cuda.synchronize()
    finally:
        gc.callbacks.remove(note)
    return spent[0]


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", default="inductor_reduce_overhead,mini_inductor")
    p.add_argument("--epochs", type=int, default=20)
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--model", default="mlp", choices=["mlp", "attention_causal"])
    a = p.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("benchmarks/train_host_profile.py needs a CUDA GPU")
    for backend in a.backends.split(","):
        measure(backend, a.epochs, a.top, a.model)


if __name__ == "__main__":
    main()

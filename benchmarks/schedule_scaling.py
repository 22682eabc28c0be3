"""Scheduling time against graph size: lower + schedule synthetic ATen graphs of 1k-8k nodes.

    python -m benchmarks.schedule_scaling [--sizes 1000 2000 4000 8000] [--profile 8000]

Each graph is a chain of blocks (about 12 ATen nodes each): a residual add, a row reduction, a
normalisation epilogue, a second reduction over the other dim, and a side branch that rejoins two
blocks later, so fusion sees vertical, horizontal, reduction and refused pairs. Times are wall-clock
seconds on this machine (no GPU needed: scheduling never runs a kernel). Growth should be near linear.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import time

os.environ.setdefault("TRITON_INTERPRET", "1")  # lower for the CPU as the test suite does

import torch  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

from mini_inductor import config  # noqa: E402
from mini_inductor.lowering.decompositions import decomposition_table  # noqa: E402
from mini_inductor.lowering import lower_graph  # noqa: E402
from mini_inductor.scheduler import schedule  # noqa: E402

NODES_PER_BLOCK = 12


def synthetic(blocks: int):
    def fn(x, r):
        side = [r, r]
        for i in range(blocks):
            h = x + side[-2]                      # residual from two blocks back
            s = h.sum(-1, keepdim=True)           # row reduction
            m = h.amax(-1, keepdim=True)          # a second reduction over the same rows
            y = (h - s * 0.01) * torch.sigmoid(m)
            c = y.sum(0, keepdim=True)            # column reduction: another iteration space
            x = torch.relu(y) + c * 0.5
            side.append(y * 0.25 + x)             # branch that rejoins later
        return x, side[-1]
    return fn


def build(target_nodes: int):
    blocks = max(1, target_nodes // NODES_PER_BLOCK)
    x, r = torch.randn(8, 16), torch.randn(8, 16)
    gm = make_fx(synthetic(blocks), decomposition_table=decomposition_table())(x, r)
    return gm, [x, r]


def measure(target_nodes: int, profile: bool = False) -> dict:
    gm, inputs = build(target_nodes)
    cfg = config.current()
    fx_nodes = sum(1 for n in gm.graph.nodes if n.op == "call_function")
    t0 = time.perf_counter()
    lowered = lower_graph(gm, inputs, f"synthetic_{target_nodes}", cfg)
    t1 = time.perf_counter()
    profiler = cProfile.Profile() if profile else None
    if profiler:
        profiler.enable()
    sched = schedule(lowered, cfg)
    if profiler:
        profiler.disable()
        pstats.Stats(profiler).sort_stats("cumulative").print_stats(25)
    t2 = time.perf_counter()
    return {"fx_nodes": fx_nodes, "buffers": len(lowered.buffers), "groups": len(sched.nodes),
            "decisions": len(sched.decisions), "lower_s": t1 - t0, "schedule_s": t2 - t1}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 4000, 8000])
    parser.add_argument("--profile", type=int, default=None, metavar="N", help="cProfile the scheduling of N nodes")
    args = parser.parse_args(argv)
    if args.profile:
        measure(args.profile, profile=True)
        return
    print(f"{'ATen nodes':>10} {'IR buffers':>10} {'groups':>7} {'decisions':>9} {'lower s':>8} "
          f"{'schedule s':>10} {'sched µs/buf':>12}")
    for n in args.sizes:
        r = measure(n)
        print(f"{r['fx_nodes']:>10} {r['buffers']:>10} {r['groups']:>7} {r['decisions']:>9} {r['lower_s']:>8.2f} "
              f"{r['schedule_s']:>10.2f} {r['schedule_s'] / r['buffers'] * 1e6:>12.0f}", flush=True)


if __name__ == "__main__":
    main()

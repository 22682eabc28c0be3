"""Drive the pipeline stage by stage on a small function, without Dynamo or aot_autograd.

    sched = schedule_fn(fn, x, y, max_fusion_size=1)       # make_fx → lower → schedule
    sched, gen, outs = run_fn(fn, x, y)                     # … → generate → load → call
"""
from __future__ import annotations

import torch
from torch.fx.experimental.proxy_tensor import make_fx

from mini_inductor import config
from mini_inductor.lowering.decompositions import decomposition_table
from mini_inductor.codegen import GeneratedModule, generate
from mini_inductor.caching.modules import load_module
from mini_inductor.lowering import LoweredGraph, lower_graph
from mini_inductor.runtime.interpreter import install as install_interpreter_shims
from mini_inductor.scheduler import Schedule, schedule


def lower_fn(fn, *args, name: str = "test_0", **options) -> tuple[LoweredGraph, config.Config]:
    cfg = config.current().replace(**options)
    gm = make_fx(fn, decomposition_table=decomposition_table())(*args)
    return lower_graph(gm, list(args), name, cfg), cfg


def schedule_fn(fn, *args, **options) -> Schedule:
    lowered, cfg = lower_fn(fn, *args, **options)
    return schedule(lowered, cfg)


def generate_fn(fn, *args, **options) -> tuple[Schedule, GeneratedModule]:
    lowered, cfg = lower_fn(fn, *args, **options)
    sched = schedule(lowered, cfg)
    return sched, generate(sched, cfg)


def run_fn(fn, *args, **options):
    """Compile stage by stage, run the generated module, check it against eager; return everything."""
    install_interpreter_shims()
    lowered, cfg = lower_fn(fn, *args, **options)
    sched = schedule(lowered, cfg)
    gen = generate(sched, cfg)
    module, _ = load_module(gen.source, cfg.cache_dir)
    outs = module.call(list(args), dict(lowered.constants))
    expected = fn(*args)
    expected = list(expected) if isinstance(expected, (list, tuple)) else [expected]
    assert len(outs) == len(expected)
    for got, want in zip(outs, expected):
        torch.testing.assert_close(got, want)
    return sched, gen, outs

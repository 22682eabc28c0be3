"""A timeline of one model's first call with mini_inductor: which thread did what, when. Not a test.

    PYTHONPATH=. python3 -m benchmarks.cold_timeline --model launch_bound

cProfile (compile_profile.py) charges a thread's time to whatever the main thread ran while it
waited for the GIL, so it cannot say what the first call waited for. This script wraps a few
functions instead and prints when each ran, on which thread, relative to the start of the first
call: Triton's setup at import (its driver helper, its package hash), each kernel compile,
each C-launcher build, each host-compiler and ptxas process, our wait for Triton's setup, and
our backend's stages. Run it with empty TRITON_CACHE_DIR / MINI_INDUCTOR_CACHE_DIR for a cold
start, or again with the same directories for a warm one.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import os
import subprocess
import threading
import time

import torch

EVENTS: list[tuple[str, str, float, float]] = []     # (what, thread, start, end), perf_counter seconds


def _timed(label, fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        began = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            name = label(*args, **kwargs) if callable(label) else label
            EVENTS.append((name, threading.current_thread().name, began, time.perf_counter()))
    return wrapper


def _wrap_processes() -> None:
    """Every child process (gcc, ptxas, ptxas --version), from its start to the end of its wait."""
    init, wait = subprocess.Popen.__init__, subprocess.Popen.wait

    def started(self, args, *rest, **kwargs):
        self._timeline = (os.path.basename(str(args[0] if isinstance(args, (list, tuple)) else args)),
                          time.perf_counter())
        init(self, args, *rest, **kwargs)

    def waited(self, *args, **kwargs):
        try:
            return wait(self, *args, **kwargs)
        finally:
            what, began = getattr(self, "_timeline", ("process", time.perf_counter()))
            if self.returncode is not None and not getattr(self, "_timeline_done", False):
                self._timeline_done = True
                EVENTS.append((f"process {what}", threading.current_thread().name, began, time.perf_counter()))
    subprocess.Popen.__init__, subprocess.Popen.wait = started, waited


def _wrap_triton() -> None:
    import triton.compiler as compiler
    import triton.runtime.cache as cache
    from triton.backends.nvidia import driver
    cache.triton_key = _timed("triton_key (hash Triton)", cache.triton_key)
    driver.CudaUtils.__init__ = _timed("Triton driver helper", driver.CudaUtils.__init__)
    # JITFunction takes `compile` from triton.compiler when it builds its binder, after this
    compiler.compile = _timed(lambda src, *a, **k: f"compile {getattr(src, 'name', '?')}", compiler.compile)
    driver.CudaLauncher.__init__ = _timed(lambda self, src, meta: f"launcher {getattr(src, 'name', '?')}",
                                          driver.CudaLauncher.__init__)


def _wrap_ours() -> None:
    from mini_inductor.runtime.launch import launcher, precompile
    precompile.wait_for_triton_setup = _timed(
        lambda *a, driver_only=False, **k: f"wait for Triton's {'driver' if driver_only else 'hash'}",
        precompile.wait_for_triton_setup)
    launcher.precompile = _timed("precompile (all kernels)", launcher.precompile)   # prepare_kernels calls it


def main() -> None:
    from .models import MODELS
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="launch_bound")
    p.add_argument("--dtype", default="float16")
    p.add_argument("--options", default="", help="backend options, e.g. cudagraphs=False")
    a = p.parse_args()
    _wrap_processes()
    zero = time.perf_counter()
    _wrap_triton()
    importlib.import_module("mini_inductor")   # starts Triton's setup thread
    imported = time.perf_counter()
    _wrap_ours()
    work = MODELS[a.model]("cuda", getattr(torch, a.dtype))
    work.step(work.model)
    torch.cuda.synchronize()
    options = {k: eval(v) for k, v in (kv.split("=") for kv in a.options.split(",") if kv)}
    fn = torch.compile(work.model, backend="mini_inductor", options=options)
    torch.compiler.cudagraph_mark_step_begin()
    torch.compiler.cudagraph_mark_step_begin()
    start = time.perf_counter()
    work.step(fn)
    torch.cuda.synchronize()
    end = time.perf_counter()
    print(f"{a.model}: import {imported - zero:.2f} s; first call {end - start:.3f} s (t = 0 below)")
    for what, thread, began, ended in sorted(EVENTS, key=lambda e: e[2]):
        print(f"  {began - start:+8.3f} {ended - start:+8.3f} {ended - began:7.3f} s  {thread[:28]:28s} {what}")
    from mini_inductor import metrics
    for g in metrics.compiled_graphs:
        stages = ", ".join(f"{k} {v:.3f}" for k, v in g.stage_seconds.items())
        print(f"{g.name}: backend {g.compile_seconds:.3f} s, cache {g.cache or 'none'}; {stages}")


if __name__ == "__main__":
    main()

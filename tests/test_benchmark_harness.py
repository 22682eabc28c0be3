"""The benchmark harness's own plumbing, on the CPU: what a worker process imports, the Triton-setup
figures a mini_inductor row carries, and that cold_timeline.py's wrappers still find what they wrap
in this Triton (a renamed function would otherwise only show on the GPU machine)."""
import os
import pathlib
import subprocess
import sys
import textwrap

from benchmarks import worker
from mini_inductor.runtime import precompile

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _python(code: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_eager_and_inductor_workers_do_not_import_mini_inductor():
    """Its import starts a thread that sets Triton up (and hashes it): not in another compiler's process."""
    out = _python("""
        import sys
        import benchmarks.worker
        from benchmarks.models import MODELS, TransformerBlock
        import torch
        block = TransformerBlock(16, 2)
        print(sorted(m for m in sys.modules if m.split(".")[0] == "mini_inductor"), len(MODELS))
    """)
    assert out.split("]")[0] == "[", out


def test_triton_setup_figures_are_left_out_when_the_setup_thread_never_ran(monkeypatch):
    monkeypatch.setattr(precompile, "setup_times", {})
    assert worker._triton_setup(0.0) == {}


def test_triton_setup_figures_say_how_much_was_left_at_the_first_call(monkeypatch):
    monkeypatch.setattr(precompile, "setup_times", {"started": 10.0, "driver": 10.4, "hash": 13.0})
    assert worker._triton_setup(12.5) == {"mi_triton_setup_s": 3.0, "mi_triton_setup_left_s": 0.5}
    assert worker._triton_setup(14.0)["mi_triton_setup_left_s"] == 0.0


def test_cold_timeline_wrappers_find_what_they_wrap():
    out = _python("""
        import importlib, subprocess, sys
        from benchmarks import cold_timeline as c
        c._wrap_processes()
        c._wrap_triton()
        importlib.import_module("mini_inductor")
        c._wrap_ours()
        subprocess.run(["true"])
        import triton.compiler
        from triton.backends.nvidia import driver
        from triton.runtime import cache
        wrapped = [triton.compiler.compile, driver.CudaLauncher.__init__, driver.CudaUtils.__init__,
                   cache.triton_key, sys.modules["mini_inductor.backend"].precompile,
                   sys.modules["mini_inductor.runtime.precompile"].wait_for_triton_setup]
        print(all(hasattr(f, "__wrapped__") for f in wrapped), [e[0] for e in c.EVENTS])
    """)
    assert out.startswith("True") and "'process true'" in out, out

"""The benchmark harness's own plumbing, on the CPU: what a worker process imports, the Triton-setup
figures a mini_inductor row carries, and that cold_timeline.py's wrappers still find what they wrap
in this Triton (a renamed function would otherwise only show on the GPU machine)."""
import os
import pathlib
import subprocess
import sys
import textwrap

from benchmarks import worker
from mini_inductor.runtime.launch import precompile

ROOT = pathlib.Path(__file__).resolve().parents[2]


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


def test_the_import_thread_has_its_own_figures(monkeypatch):
    monkeypatch.setattr(precompile, "setup_times", {"imports_started": 10.0, "imports": 10.25})
    assert worker._triton_setup(10.0) == {"mi_torch_imports_s": 0.25, "mi_torch_imports_left_s": 0.25}


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
                   cache.triton_key, sys.modules["mini_inductor.runtime.launch.launcher"].precompile,
                   sys.modules["mini_inductor.runtime.launch.precompile"].wait_for_triton_setup]
        print(all(hasattr(f, "__wrapped__") for f in wrapped), [e[0] for e in c.EVENTS])
    """)
    assert out.startswith("True") and "'process true'" in out, out


def test_a_workers_leftover_processes_are_ended_with_it():
    """suite._kill_group: a process the worker left behind (as Inductor's compile workers can be) must
    not keep running beside the next row's measurement."""
    import signal
    import time

    from benchmarks import suite
    proc = subprocess.Popen(["sh", "-c", "sleep 60 > /dev/null 2>&1 & echo $!"], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    out, _ = proc.communicate(timeout=30)
    leftover = int(out.strip())
    os.kill(leftover, 0)                     # still running after the worker itself exited
    suite._kill_group(proc)
    for _ in range(100):
        try:
            os.kill(leftover, 0)
        except ProcessLookupError:
            break
        # reaped by init once killed; until then it may show as a zombie, which signal 0 still finds
        if pathlib.Path(f"/proc/{leftover}/stat").read_text().split()[2] == "Z":
            break
        time.sleep(0.05)
    else:
        os.kill(leftover, signal.SIGKILL)
        raise AssertionError("the leftover process outlived _kill_group")
    suite._kill_group(proc)                  # nothing left: a no-op, no error


def test_a_worker_that_fails_gives_an_error_row():
    from benchmarks import suite
    row = suite._worker("launch_bound", "no_such_backend", "float16", "/tmp", False, 60)
    assert row["backend"] == "no_such_backend" and "invalid choice" in row["error"]


def test_repeated_timing_reports_the_median_of_the_processes_and_keeps_each():
    from benchmarks import suite
    row = {"backend": "mini_inductor", "wall_ms": 0.9, "gpu_ms": 0.8, "peak_mib": 10.0}
    more = [{"wall_ms": 0.5, "gpu_ms": 0.45, "peak_mib": 10.0}, {"error": "timed out after 60 s"},
            {"wall_ms": 0.6, "gpu_ms": 0.5, "peak_mib": 12.0}]
    suite._repeat_timing(row, more)
    assert row["wall_ms"] == 0.6 and row["gpu_ms"] == 0.5 and row["peak_mib"] == 10.0
    assert row["wall_ms_runs"] == [0.9, 0.5, 0.6] and row["repeat_errors"] == ["timed out after 60 s"]

"""The debug dir's output_code.py and kernel scripts of a dynamic graph (compiled once for every size) run
on their own, at the sizes the graph was traced with: its int inputs (size symbols, an int argument)
get their traced values as example inputs, as its tensors get their traced sizes."""
import os
import pathlib
import subprocess
import sys

import torch

ROOT = pathlib.Path(__file__).resolve().parents[2]


def scaled_row_sums(x, n):
    return (x * n).relu().sum(1) + x.shape[0]


def _run(script: pathlib.Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(script)], cwd=script.parent, capture_output=True, text=True,
                          timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))


def test_a_dynamic_graphs_output_code_and_kernels_run_standalone_at_the_traced_sizes(tmp_path):
    f = torch.compile(scaled_row_sums, backend="mini_inductor", options={"debug_dir": str(tmp_path)})
    for rows, n in ((4, 3), (6, 5)):   # the second call compiles with symbols: x's rows and n
        x = torch.randn(rows, 8)
        torch.testing.assert_close(f(x, n), scaled_row_sums(x, n))
    (dynamic,) = [p.parent for p in tmp_path.glob("run_*-pid_*/*/output_code.py") if "SIZE_SYMBOLS" in p.read_text()]
    source = (dynamic / "output_code.py").read_text()
    assert "InputSpec(size=None, stride=None, dtype=None, device=None, value=6)" in source   # x.shape[0]
    assert "InputSpec(size=None, stride=None, dtype=None, device=None, value=5)" in source   # n
    assert "InputSpec(size=(6, 8), stride=(8, 1)" in source
    run = _run(dynamic / "output_code.py")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "ms per call" in run.stdout
    (kernel,) = (dynamic / "kernels").glob("triton_*.py")
    assert "= 6   # the traced size" in kernel.read_text()
    run = _run(kernel)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "ms per launch" in run.stdout

"""`mini-inductor demo` end to end, in a subprocess, as a user runs it."""
import os
import pathlib
import re
import subprocess
import sys

import pytest
import torch

from mini_inductor.cli import main

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _demo(*args: str, interpret: bool) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("TRITON_INTERPRET", None)
    if interpret:
        env["TRITON_INTERPRET"] = "1"
        env["CUDA_VISIBLE_DEVICES"] = ""  # the interpreter path is the CPU one, also on a GPU machine
    return subprocess.run([sys.executable, "-m", "mini_inductor", "demo", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_demo_compiles_the_smallest_example_and_matches_eager_on_cpu():
    proc = _demo("--example", "softmax_chain", interpret=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert re.search(r"max abs error vs eager: \S+ .*: PASS", proc.stdout), proc.stdout
    assert "Fusion summary" in proc.stdout
    assert re.search(r"\btriton_(poi|red|per)_fused_\w+", proc.stdout), proc.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU path without the interpreter")
def test_demo_without_interpreter_on_cpu_says_so_and_runs_eagerly(monkeypatch, capsys):
    monkeypatch.delenv("TRITON_INTERPRET")
    assert main(["demo", "--example", "softmax_chain"]) == 0
    stdout = capsys.readouterr().out
    assert "TRITON_INTERPRET=1" in stdout
    assert "eager output: shape (8, 32)" in stdout


def test_demo_rejects_an_unknown_example(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--example", "no_such_model"])
    assert exit_info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


@pytest.mark.gpu
def test_demo_on_cuda_matches_eager_and_reports_speedup():
    proc = _demo("--example", "mlp", interpret=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASS" in proc.stdout
    assert re.search(r"speedup over eager: [\d.]+x", proc.stdout), proc.stdout
    assert re.search(r"\btriton_(poi|red|per)_fused_\w+", proc.stdout), proc.stdout

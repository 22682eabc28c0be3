"""`python -m benchmarks`: lists every benchmark script, runs one by name with its arguments, and
refuses an unknown name with the list. Each script imports and answers --help without a GPU."""
import os
import pathlib
import subprocess
import sys

import pytest

from benchmarks import __main__ as entry

ROOT = pathlib.Path(__file__).resolve().parents[2]
# modules of benchmarks/ that other modules import and nobody runs
LIBRARY_MODULES = {"__init__", "__main__", "models", "package_files"}
SCRIPTS = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem not in LIBRARY_MODULES)


def _run(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRITON_INTERPRET="1")
    return subprocess.run([sys.executable, "-m", "benchmarks", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)


def test_without_a_name_it_lists_every_benchmark_script_on_one_line_each():
    proc = _run()
    assert proc.returncode == 0, proc.stderr
    lines = {line.split()[0]: line for line in proc.stdout.splitlines() if line.startswith("  ")}
    assert sorted(lines) == SCRIPTS
    assert all(len(line.split()) > 2 for line in lines.values()), "a benchmark listed without its summary"


def test_an_unknown_name_exits_nonzero_with_the_list():
    proc = _run("no_such_benchmark")
    assert proc.returncode != 0
    assert "unknown benchmark 'no_such_benchmark'" in proc.stderr
    assert all(f"  {name} " in proc.stderr for name in SCRIPTS)


def test_a_name_runs_that_script_with_the_remaining_arguments():
    proc = _run("peak_memory", "--help")
    assert proc.returncode == 0, proc.stderr
    assert "usage: peak_memory.py" in proc.stdout
    assert "--cpu-check" in proc.stdout


@pytest.mark.filterwarnings("ignore:.*found in sys.modules:RuntimeWarning")  # imported by earlier tests
@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_imports_and_answers_help_without_a_gpu(name, capsys, monkeypatch):
    # in this process: one torch import for all of them (each is what `python -m benchmarks NAME --help` runs)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    with pytest.raises(SystemExit) as exit_:
        entry.main([name, "--help"])
    assert exit_.value.code == 0
    assert "usage:" in capsys.readouterr().out

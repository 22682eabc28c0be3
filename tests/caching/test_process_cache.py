"""The caches can be looked at: the process's in-memory caches (caching.PROCESS), the cache dir
(caching.describe, `mini-inductor cache`), and a reset forgets what the process holds."""
import os
import pathlib
import subprocess
import sys

import torch

import mini_inductor
from mini_inductor import caching, metrics
from mini_inductor.caching import PROCESS

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _f(x):
    return torch.relu(x) * 3 + 1


def _same_as_f(x):            # another function, the same ATen graph
    return torch.relu(x) * 3 + 1


def test_the_process_cache_holds_the_graph_and_module_and_counts_how_each_compile_was_served(tmp_path):
    mini_inductor.reset()
    assert not PROCESS.graphs and not PROCESS.modules and not PROCESS.hits
    x = torch.randn(16)
    with mini_inductor.config.patch(cache_dir=str(tmp_path), graph_cache=False):
        torch.compile(_f, backend="mini_inductor")(x)
        out = torch.compile(_same_as_f, backend="mini_inductor")(x)
    torch.testing.assert_close(out, _f(x))
    assert len(PROCESS.graphs) == 1 and len(PROCESS.modules) == 1
    assert PROCESS.hits == {"off": 1, "memory": 1}
    assert metrics.compiled_graphs[-1].cache == "memory"
    (kept,) = PROCESS.graphs.values()
    assert kept.compiled.source_path == metrics.compiled_graphs[-1].source_path
    assert "1 compiled graph, 1 generated module" in repr(PROCESS) and "memory 1" in repr(PROCESS)
    mini_inductor.reset()
    assert not PROCESS.graphs and not PROCESS.modules and not PROCESS.hits


def test_describe_counts_each_kind_of_entry_in_the_cache_dir(tmp_path):
    mini_inductor.reset()
    with mini_inductor.config.patch(cache_dir=str(tmp_path)):
        torch.compile(_f, backend="mini_inductor")(torch.randn(8))
    lines = caching.describe(str(tmp_path)).splitlines()
    assert lines[0] == f"mini_inductor cache {tmp_path}"
    by_kind = {line.split("MB", 1)[1].strip(): int(line.split()[0]) for line in lines[1:] if "MB" in line}
    graphs = next(n for kind, n in by_kind.items() if kind.startswith("compiled graphs"))
    modules = next(n for kind, n in by_kind.items() if kind.startswith("generated modules"))
    front = next(n for kind, n in by_kind.items() if kind.startswith("Dynamo graph"))
    assert graphs == len(list((tmp_path / "graphs").rglob("*.json"))) == 1
    assert front == 1
    assert modules == len(list(tmp_path.glob("*/mi_*"))) >= 1     # the source, and its bytecode
    assert "in this process" in lines[-1]


def test_the_cache_command_shows_the_cache_dir_and_rejects_a_missing_one(tmp_path):
    (tmp_path / "graphs" / "ab").mkdir(parents=True)
    (tmp_path / "graphs" / "ab" / "ab12.json").write_text("{}")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    cmd = [sys.executable, "-c", "import sys, mini_inductor_cli; sys.exit(mini_inductor_cli.main())", "cache"]
    shown = subprocess.run(cmd + ["--dir", str(tmp_path)], env=env, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert f"mini_inductor cache {tmp_path}" in shown.stdout
    assert any(line.split()[0] == "1" and "compiled graphs" in line for line in shown.stdout.splitlines())
    assert "in this process" not in shown.stdout
    missing = subprocess.run(cmd + ["--dir", str(tmp_path / "nope")], env=env, capture_output=True, text=True,
                             timeout=120)
    assert missing.returncode == 2 and "no cache dir at" in missing.stderr

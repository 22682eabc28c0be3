"""`mini-inductor --help / --version / list / why` answer without importing torch; `why`'s errors and
answers. Through real subprocesses of the `mini-inductor` entry (mini_inductor_cli:main)."""
import json
import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# runs the console script's entry, then says whether torch was imported
_ENTRY = ("import sys, mini_inductor_cli\n"
          "try:\n"
          "    code = mini_inductor_cli.main(sys.argv[1:])\n"
          "except SystemExit as e:\n"
          "    code = e.code\n"
          "print('torch imported:', 'torch' in sys.modules, file=sys.stderr)\n"
          "sys.exit(code)\n")


def _entry(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-c", _ENTRY, *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("args", [["--help"], ["list"], ["--version"], ["why", "inference_0", "buf0", "buf1"]])
def test_light_commands_do_not_import_torch(args, tmp_path):
    if args[0] == "why":
        (tmp_path / "report.json").write_text(json.dumps([_REPORT]))
        args = [*args, "--report", str(tmp_path)]
    proc = _entry(*args)
    assert proc.returncode == 0, proc.stderr
    assert "torch imported: False" in proc.stderr


def test_list_names_every_builtin_example_with_its_description():
    from mini_inductor.cli import EXAMPLES as NAMED
    from mini_inductor.examples import EXAMPLES

    assert NAMED == {name: e.description for name, e in EXAMPLES.items()}
    stdout = _entry("list").stdout
    for name, description in NAMED.items():
        assert name in stdout and description in stdout


def test_version_prints_the_package_version():
    from mini_inductor._version import __version__

    proc = _entry("--version")
    assert proc.stdout.strip() == f"mini-inductor {__version__}"


def test_why_without_a_report_says_to_run_explain_first_in_one_line(tmp_path):
    proc = _entry("why", "inference_0", "buf0", "buf1", "--report", str(tmp_path / "missing"))
    assert proc.returncode == 2
    error = proc.stderr.replace("torch imported: False", "").strip()
    assert "Traceback" not in error and len(error.splitlines()) == 1
    assert "mini-inductor explain" in error


def test_why_with_an_unknown_node_fails_and_names_the_close_matches(tmp_path):
    (tmp_path / "report.json").write_text(json.dumps([_REPORT]))
    proc = _entry("why", "inference_0", "buf0", "buf99", "--report", str(tmp_path))
    assert proc.returncode == 1
    assert "no node named buf99 in graph inference_0; did you mean" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_why_with_an_unknown_graph_fails_and_lists_the_graphs(tmp_path):
    (tmp_path / "report.json").write_text(json.dumps([_REPORT]))
    proc = _entry("why", "forward_7", "buf0", "buf1", "--report", str(tmp_path))
    assert proc.returncode == 1 and "compiled graphs: inference_0" in proc.stderr


def test_why_gives_both_nodes_ops_and_sources_and_the_nodes_in_between(tmp_path):
    (tmp_path / "report.json").write_text(json.dumps([_REPORT]))
    proc = _entry("why", "inference_0", "buf0", "buf3", "--report", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "cannot fuse buf0 with buf3: intermediate nodes between node1 & node2"
    assert "buf0 (kernel triton_per_fused_0): aten.amax.default" in proc.stdout
    assert "model.py:4 (forward): y = x.softmax(-1)" in proc.stdout
    assert "buf3 (kernel triton_poi_fused_1): aten.add.Tensor" in proc.stdout
    assert "model.py:6 (forward): return y + z" in proc.stdout
    between = proc.stdout.split("in between (2)")[1]
    assert "buf1 (extern call): aten.mm.default" in between and "buf2 (kernel triton_per_fused_0)" in between


# A graph's report as explain writes it: buf0 → buf1 (extern mm) → buf2 → buf3, and buf0 → buf3.
_SRC = 'File "/home/u/model.py", line {}, in forward: {}'
_REPORT = {
    "graph": "inference_0", "cache_hit": False, "nodes_before_fusion": 4, "groups": 3,
    "kernels": [
        {"name": "triton_per_fused_0", "kind": "reduction", "nodes": ["buf0", "buf2"], "ops": [],
         "sources": [], "bytes_read": 0, "bytes_written": 0},
        {"name": "triton_poi_fused_1", "kind": "pointwise", "nodes": ["buf3"], "ops": [], "sources": [],
         "bytes_read": 0, "bytes_written": 0}],
    "externs": [{"name": "buf1", "op": "aten.mm.default", "sources": [_SRC.format(5, "z = y @ w")]}],
    "fused": [{"node1": "buf0", "node2": "buf2", "round": 1}],
    "refused": [{"node1": "buf0", "node2": "buf3", "reason": "intermediate nodes between node1 & node2",
                 "outcome": ""},
                {"node1": "buf0", "node2": "buf1", "reason": "node2 is extern or nop", "outcome": ""}],
    "nodes": {
        "buf0": {"ops": ["aten.amax.default"], "sources": [_SRC.format(4, "y = x.softmax(-1)")], "reads": ["arg0_1"]},
        "buf1": {"ops": ["aten.mm.default"], "sources": [_SRC.format(5, "z = y @ w")], "reads": ["buf0"]},
        "buf2": {"ops": ["aten.sum.dim_IntList"], "sources": [_SRC.format(5, "z = y @ w")], "reads": ["buf1"]},
        "buf3": {"ops": ["aten.add.Tensor"], "sources": [_SRC.format(6, "return y + z")], "reads": ["buf0", "buf2"]},
    },
}

"""`mini-inductor explain / dump SCRIPT` on scripts as users write them: ending in sys.exit(main()),
raising after compiling, with a graph that runs eagerly, or missing. Real subprocesses."""
import io
import html
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

from mini_inductor.cli import Output
from mini_inductor.pipeline import DYNAMIC_SHAPES

ROOT = pathlib.Path(__file__).resolve().parents[2]

# `layer` compiles; `scaled` (dynamic=True, with dynamic_shapes='eager') runs eagerly; main's result is
# the exit code
EXITING_SCRIPT = textwrap.dedent("""\
    import sys; import mini_inductor; mini_inductor.config.dynamic_shapes = "eager"  # noqa: E401, E702
    import torch


    def layer(x):
        return torch.softmax(x * 2, -1) + 1


    def scaled(x):
        return torch.relu(x) * 3


    def main():
        torch.compile(layer)(torch.randn(4, 8))
        torch.compile(scaled, dynamic=True)(torch.randn(4, 8))
        print("compiled both")
        return 3


    if __name__ == "__main__":
        sys.exit(main())
    """)

RAISING_SCRIPT = textwrap.dedent("""\
    import torch


    def layer(x):
        return torch.softmax(x * 2, -1) + 1


    torch.compile(layer)(torch.randn(4, 8))
    raise ValueError("checkpoint not found")
    """)


def _cli(*args: str) -> subprocess.CompletedProcess:
    # the CPU path: the CLI turns Triton's interpreter on itself
    env = dict(os.environ, PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="")
    env.pop("TRITON_INTERPRET", None)
    return subprocess.run([sys.executable, "-m", "mini_inductor_cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def exiting(tmp_path_factory):
    folder = tmp_path_factory.mktemp("exiting")
    script = folder / "train.py"
    script.write_text(EXITING_SCRIPT)
    return folder, _cli("explain", str(script), "--out", str(folder / "report"))


def test_explain_keeps_the_report_of_a_script_that_ends_in_sys_exit(exiting):
    folder, proc = exiting
    assert proc.returncode == 3, proc.stdout + proc.stderr     # the script's own exit code
    assert "compiled both" in proc.stdout
    assert "the script called sys.exit(3)" in proc.stdout
    report = json.loads((folder / "report" / "report.json").read_text())
    compiled = [r for r in report if "kernels" in r]
    assert len(compiled) == 1 and compiled[0]["kernels"]
    page = (folder / "report" / "report.html").read_text()
    assert compiled[0]["kernels"][0]["name"] in page


def test_explain_lists_a_graph_that_ran_eagerly_with_reason_and_user_line(exiting):
    folder, proc = exiting
    report = json.loads((folder / "report" / "report.json").read_text())
    (eager,) = [r for r in report if "ran_eagerly" in r]
    assert eager["ran_eagerly"]["reason"] == DYNAMIC_SHAPES
    assert eager["ran_eagerly"]["source"] == f'File "{folder / "train.py"}", line 10, in scaled: return torch.relu(x) * 3'
    assert "'dynamic_shapes': 'eager'" in eager["ran_eagerly"]["hint"]
    assert "Graphs run eagerly" in proc.stdout and "train.py:10 (scaled)" in proc.stdout
    page = (folder / "report" / "report.html").read_text()
    assert "Graphs run eagerly" in page and eager["graph"] in page and html.escape(DYNAMIC_SHAPES) in page


def test_eager_graph_warning_points_at_the_users_line_and_says_what_to_do(exiting):
    folder, proc = exiting
    warning = next(line for line in proc.stderr.splitlines() if "runs eagerly" in line)
    assert warning.startswith(f"{folder / 'train.py'}:10: UserWarning: mini_inductor: graph ")
    assert "To compile it: drop options={'dynamic_shapes': 'eager'}" in warning


def test_explain_keeps_the_report_of_a_script_that_raises_and_names_the_line(tmp_path):
    script = tmp_path / "infer.py"
    script.write_text(RAISING_SCRIPT)
    proc = _cli("explain", str(script), "--out", str(tmp_path / "report"))
    assert proc.returncode == 1
    assert "the script raised ValueError: checkpoint not found" in proc.stdout
    assert f'File "{script}", line 9, in <module>: raise ValueError("checkpoint not found")' in proc.stdout
    assert proc.stderr.count("Traceback (most recent call last)") == 1     # the user's traceback, once
    assert proc.stderr.rstrip().endswith("ValueError: checkpoint not found")
    (graph,) = json.loads((tmp_path / "report" / "report.json").read_text())
    assert graph["kernels"]


def _run_without_a_gpu(script, interpret: bool = False) -> subprocess.CompletedProcess:
    """`python script` with no CUDA device visible, in Triton's interpreter only if `interpret`."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="")
    env.pop("TRITON_INTERPRET", None)
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    return subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)


def test_dump_keeps_the_graphs_of_a_script_that_raises_and_its_kernels_say_how_to_run_on_cpu(tmp_path):
    script = tmp_path / "infer.py"
    script.write_text(RAISING_SCRIPT)
    proc = _cli("dump", str(script), "--out", str(tmp_path / "dump"))
    assert proc.returncode == 1 and "the script raised ValueError" in proc.stdout
    (kernel, *_) = sorted((tmp_path / "dump").glob("*/kernels/triton_*.py"))
    assert "TRITON_INTERPRET=1 python" in kernel.read_text()
    run = _run_without_a_gpu(kernel)
    assert run.returncode != 0
    assert "no CUDA GPU is visible" in run.stderr and f"TRITON_INTERPRET=1 python {kernel.name}" in run.stderr
    assert "active drivers" not in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize("command", ["explain", "dump"])
def test_a_missing_script_is_a_one_line_error(command, tmp_path):
    args = [command, str(tmp_path / "nope.py"), "--out", str(tmp_path / "out")]
    proc = _cli(*args)
    assert proc.returncode == 2
    assert proc.stderr.strip() == f"mini-inductor {command}: error: no such script: {tmp_path / 'nope.py'}"


LONG_KERNEL = "triton_per_fused__native_layer_norm_add_gelu_mul_view_var_mean_rsqrt_sub_0"


@pytest.mark.parametrize("width", [40, 80])
def test_rich_table_never_cuts_the_kernel_name(width):
    from rich.console import Console

    text = io.StringIO()
    out = Output(Console(file=text, width=width, force_terminal=True, color_system=None))
    out.table("Kernels", ["kernel", "ATen ops", "source"],
              [[LONG_KERNEL, "aten.add.Tensor, aten.mul.Tensor, aten.var_mean.correction", "model.py:12"]])
    assert LONG_KERNEL in text.getvalue() and "…" not in text.getvalue()


def test_plain_table_never_cuts_the_kernel_name():
    text = io.StringIO()
    Output(file=text).table("Kernels", ["kernel", "ATen ops"], [[LONG_KERNEL, "aten.add.Tensor " * 20]])
    assert LONG_KERNEL in text.getvalue() and "…" not in text.getvalue()


def test_a_dumped_output_code_says_how_to_run_without_a_gpu_and_runs_in_the_interpreter(tmp_path):
    script = tmp_path / "infer.py"
    script.write_text(RAISING_SCRIPT)
    _cli("dump", str(script), "--out", str(tmp_path / "dump"))
    (module, *_) = sorted((tmp_path / "dump").glob("*/output_code.py"))
    assert "TRITON_INTERPRET=1 python" in module.read_text()
    run = _run_without_a_gpu(module)
    assert run.returncode != 0
    assert f"TRITON_INTERPRET=1 python {module}" in run.stderr
    assert "active drivers" not in run.stderr and "Traceback" not in run.stderr
    run = _run_without_a_gpu(module, interpret=True)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "ms per call" in run.stdout


def test_dump_of_a_script_that_compiles_nothing_says_why_on_stderr(tmp_path):
    script = tmp_path / "plain.py"
    script.write_text("import torch\nprint('no compile here', torch.ones(2).sum().item())\n")
    proc = _cli("dump", str(script), "--out", str(tmp_path / "dump"))
    assert proc.returncode == 1 and "no compile here" in proc.stdout
    assert "mini-inductor dump: no graph was compiled by mini_inductor: does the script call torch.compile" \
        in proc.stderr, proc.stderr
    assert 'backend="mini_inductor"' in proc.stderr and "--force" in proc.stderr


def test_explain_of_a_script_whose_first_compile_fails_names_the_failure_not_a_missing_torch_compile(tmp_path):
    script = tmp_path / "cast.py"   # codegen made to lose int32's Triton type: a codegen error, no fallback
    script.write_text("import torch\n"
                      "from mini_inductor.codegen import triton_ops\n"
                      "del triton_ops.TL_DTYPES[torch.int32]\n"
                      "torch.compile(lambda x: x.to(torch.int32) + 1)(torch.arange(8))\n")
    proc = _cli("explain", str(script), "--out", str(tmp_path / "report"))
    assert proc.returncode == 1
    assert ("no graph was compiled: mini_inductor raised CodegenError in the codegen stage of graph inference_0 "
            "(the script's error, below, names the op and why)") in proc.stdout, proc.stdout
    assert "does the script call torch.compile" not in proc.stdout
    assert "CodegenError: [codegen] aten._to_copy.default" in proc.stdout
    assert "covers the graphs compiled before that" not in proc.stdout   # no report was written


def test_explain_warns_at_the_scripts_torch_compile_that_it_drops_inductors_options(tmp_path):
    script = tmp_path / "tuned.py"
    script.write_text("import torch\n"
                      "f = torch.compile(lambda x: x.sin() + 1, options={'max_autotune': True})\n"
                      "f(torch.randn(4))\n")
    proc = _cli("explain", str(script), "--out", str(tmp_path / "report"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert (f"{script}:2: UserWarning: mini_inductor explain: dropping the options of backend 'inductor': "
            "['max_autotune']") in proc.stderr, proc.stderr


# a script beside a module of its own, as `python run.py` runs it: it imports the module and sees its argv
SIBLING_MODULE = "import torch\n\n\ndef layer(x):\n    return torch.relu(x) * 2\n"
SIBLING_SCRIPT = textwrap.dedent("""\
    import sys
    import torch
    import mylayers

    print("AS PYTHON RUNS IT:", sys.argv, __name__, sys.path[0])
    torch.compile(mylayers.layer)(torch.randn(4, 8))
    """)


@pytest.mark.parametrize("command", ["explain", "dump"])
def test_a_script_runs_as_python_runs_it_importing_the_modules_beside_it(command, tmp_path):
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "mylayers.py").write_text(SIBLING_MODULE)
    script = folder / "run.py"
    script.write_text(SIBLING_SCRIPT)
    python = subprocess.run([sys.executable, str(script), "--steps", "1"], cwd=ROOT, capture_output=True, text=True,
                            timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert python.returncode == 0, python.stderr
    (expected,) = [line for line in python.stdout.splitlines() if line.startswith("AS PYTHON RUNS IT:")]
    assert expected.endswith(f" __main__ {folder}")
    proc = _cli(command, str(script), "--out", str(tmp_path / "out"), "--", "--steps", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert expected in proc.stdout.splitlines()
    if command == "dump":
        assert (tmp_path / "out" / "inference_0" / "output_code.py").exists()


OWN_OPTIONS_SCRIPT = textwrap.dedent("""\
    import sys
    import torch


    def layer(x):
        return torch.softmax(x * 2, -1) + 1


    torch.compile(layer, backend="mini_inductor", options={"debug_dir": sys.argv[1]})(torch.randn(4, 8))
    """)


def test_explain_force_compiles_with_the_scripts_own_mini_inductor_options(tmp_path):
    script = tmp_path / "own_options.py"
    script.write_text(OWN_OPTIONS_SCRIPT)
    proc = _cli("explain", "--force", str(script), "--out", str(tmp_path / "report"), "--", str(tmp_path / "debug"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "dropping" not in proc.stderr, proc.stderr
    (graph,) = (tmp_path / "debug").glob("run_*-pid_*/inference_0")     # its debug_dir option took effect
    assert (graph / "output_code.py").stat().st_size > 0


def test_report_json_lists_the_graph_breaks_and_why_still_reads_it(tmp_path):
    script = tmp_path / "breaks.py"
    script.write_text(textwrap.dedent("""
        import torch

        def f(x):
            y = x.sin() * 2
            print("between the graphs")
            return y.cos() + 1

        torch.compile(f, backend="mini_inductor")(torch.randn(8))
        """))
    out = tmp_path / "report"
    proc = _cli("explain", str(script), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    entries = json.loads((out / "report.json").read_text())
    breaks = [e["graph_break"] for e in entries if "graph_break" in e]
    assert len(breaks) == 1 and 'line 6, in f: print("between the graphs")' in breaks[0]["source"], entries
    assert "print" in breaks[0]["reason"]
    graphs = [e["graph"] for e in entries if "graph" in e]
    assert len(graphs) == 2, entries
    # `why` reads the same report.json: a break entry is no graph of its own
    proc = _cli("why", "--report", str(out), graphs[0], "nonexistent_a", "nonexistent_b")
    assert "is not an explain report" not in proc.stdout + proc.stderr, proc.stdout + proc.stderr

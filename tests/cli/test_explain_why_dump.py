"""`mini-inductor explain / why / dump` and the fusion logs, end to end in subprocesses."""
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "fixtures" / "user_script.py"


def _cli(*args, env=None, timeout=600) -> subprocess.CompletedProcess:
    # the CPU path (Triton's interpreter), also on a GPU machine; the CLI turns the interpreter on itself
    full_env = dict(os.environ, PYTHONPATH=str(ROOT), CUDA_VISIBLE_DEVICES="", **(env or {}))
    full_env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run([sys.executable, "-m", "mini_inductor", *args], cwd=ROOT, env=full_env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


@pytest.fixture(scope="module")
def script_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("explain")
    proc = _cli("explain", str(SCRIPT), "--out", str(out), "--", "8")
    return out, proc.stdout


def test_explain_of_a_user_script_names_refused_pairs_with_reasons(script_report):
    out, stdout = script_report
    assert "user script done" in stdout                      # the script ran, with mini_inductor as backend
    assert "memory deps did not match" in stdout
    report = json.loads((out / "report.json").read_text())
    (graph,) = report
    assert any(r["reason"] == "memory deps did not match" for r in graph["refused"])
    names = [k["name"] for k in graph["kernels"]]
    assert len(names) == 2 and all(n.startswith("triton_per_fused_") for n in names)
    assert any("user_script.py" in s for k in graph["kernels"] for s in k["sources"])  # the user's lines


def test_explain_html_holds_the_picture_and_every_kernel_source(script_report):
    out, _ = script_report
    page = (out / "report.html").read_text()
    report = json.loads((out / "report.json").read_text())
    for kernel in report[0]["kernels"]:
        assert kernel["name"] in page
    assert "@triton" in page and "tl" in page              # highlighted kernel source
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org", "")
    assert '<svg xmlns="http://www.w3.org/2000/svg" class="kernel-graph"' in page   # drawn without Graphviz
    assert "digraph" in (out / "inference_0.dot").read_text()                      # DOT for Graphviz users
    if shutil.which("dot"):
        assert (out / "inference_0.svg").exists()


def test_why_answers_for_one_pair(script_report):
    out, _ = script_report
    report = json.loads((out / "report.json").read_text())[0]
    refused = next(r for r in report["refused"] if r["reason"] == "memory deps did not match")
    proc = _cli("why", report["graph"], refused["node1"], refused["node2"], "--report", str(out))
    assert f"cannot fuse {refused['node1']} with {refused['node2']}: memory deps did not match" in proc.stdout
    for node in (refused["node1"], refused["node2"]):              # both nodes' ops and the user's lines
        assert f"  {node} (kernel triton_per_fused_" in proc.stdout
    assert "user_script.py:" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "mini_inductor_cli", "why", report["graph"], "buf0", "no_such_node",
                           "--report", str(out)], cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "no node named no_such_node" in proc.stderr


def test_explain_lists_and_runs_builtin_examples(tmp_path):
    assert "softmax_chain" in _cli("explain", "--list").stdout
    proc = _cli("explain", "--example", "softmax_chain", "--out", str(tmp_path))
    assert "triton_per_fused_" in proc.stdout
    assert (tmp_path / "report.html").exists()


def test_dump_writes_graph_ir_and_kernels_that_run_on_their_own(tmp_path):
    _cli("dump", "--example", "softmax_chain", "--out", str(tmp_path))
    (folder,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    for name in ("aten_graph.txt", "ir_pre_fusion.txt", "ir_post_fusion.txt", "output_code.py"):
        assert (folder / name).stat().st_size > 0, name
    kernels = sorted((folder / "kernels").glob("triton_*.py"))
    assert kernels
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    for script in [folder / "output_code.py", *kernels]:
        proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"{script.name}: {proc.stderr}"
        assert "ms per" in proc.stdout


def test_fusion_log_shows_decisions_and_says_so_on_a_cache_hit():
    code = ("import torch, mini_inductor\n"
            "def f(x, w):\n"
            "    a = torch.relu(x) * w\n"
            "    return (a + a.t()).sum(-1)\n"
            "x, w = torch.randn(8, 8), torch.randn(8, 8)\n"
            "torch.compile(f, backend='mini_inductor')(x, w)\n"
            "torch.compile(lambda x, w: f(x, w), backend='mini_inductor')(x, w)\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRITON_INTERPRET="1", MINI_INDUCTOR_LOGS="fusion")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "[mini_inductor.fusion] cannot fuse" in proc.stderr
    assert "cache hit" in proc.stderr and "its fusion decisions" in proc.stderr


def test_unknown_log_name_is_a_clear_error():
    env = dict(os.environ, PYTHONPATH=str(ROOT), MINI_INDUCTOR_LOGS="fusion,nonsense")
    proc = subprocess.run([sys.executable, "-c", "import mini_inductor"], env=env, capture_output=True, text=True)
    assert proc.returncode != 0 and "unknown log(s) ['nonsense']" in proc.stderr


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Chromium (`make tools` installs it)")
def test_report_renders_in_a_headless_browser_with_the_picture(script_report, tmp_path):
    out, _ = script_report
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}"]
    url = (out / "report.html").as_uri()
    dom = subprocess.run(["chromium", *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert "triton_per_fused_" in dom.stdout
    assert 'class="kernel-graph"' in dom.stdout and 'class="boundary"' in dom.stdout   # picture and boundary rows
    shot = tmp_path / "report.png"
    subprocess.run(["chromium", *flags, "--window-size=1200,1400", f"--screenshot={shot}", url],
                   capture_output=True, text=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 20_000   # a real rendering, not a blank page


def test_schedule_log_shows_compile_progress_stage_by_stage():
    code = ("import torch, mini_inductor\n"
            "from mini_inductor import metrics\n"
            "torch.compile(lambda x: torch.softmax(x, -1) * 2, backend='mini_inductor')(torch.randn(4, 8))\n"
            "print(sorted(metrics.compiled_graphs[-1].stage_seconds))\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRITON_INTERPRET="1", MINI_INDUCTOR_LOGS="schedule")
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    for stage in ("lowering", "scheduling", "codegen", "loading"):
        assert f"{stage} done in" in proc.stderr
    assert "['AOT autograd', 'codegen', 'loading', 'lowering', 'scheduling']" in proc.stdout


def test_explain_and_dump_of_a_script_whose_graph_is_dynamic_report_it_at_its_traced_sizes(tmp_path):
    # a second size makes the graph dynamic: explain and dump crashed on its symbolic sizes (int() of a
    # symbol; review, session 33)
    script = tmp_path / "dyn.py"
    script.write_text("import torch\nf = torch.compile(lambda x: (x.sin() + 1).softmax(-1) * 2)\n"
                      "for n in (8, 9, 10):\n    f(torch.randn(n, 16))\n")
    proc = _cli("explain", str(script))
    assert "Traceback" not in proc.stderr and "Kernels" in proc.stdout
    out = tmp_path / "dump"
    _cli("dump", str(script), "--out", str(out))
    kernels = sorted(out.glob("*/kernels/triton_*.py"))
    assert len({k.parent.parent.name for k in kernels}) == 2   # the static and the dynamic graph
    env = dict(os.environ, PYTHONPATH=str(ROOT), TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    for script in kernels:
        proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0 and "ms per" in proc.stdout, f"{script}: {proc.stderr}"

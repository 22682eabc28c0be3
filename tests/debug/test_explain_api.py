"""`mini_inductor.explain(fn, *args)`: the notebook API's report object, its text and its HTML."""
import html.parser
import shutil
import subprocess

import pytest
import torch

import mini_inductor
from mini_inductor.pipeline import DYNAMIC_SHAPES


def layer(x, w):
    a = torch.relu(x) * w
    return (a + a.t()).sum(-1)    # the transposed read of `a` keeps it out of the sum's kernel


@pytest.fixture
def report(device):
    x, w = torch.randn(8, 8, device=device), torch.randn(8, 8, device=device)
    return mini_inductor.explain(layer, x, w), layer(x, w)


def test_explain_returns_the_kernels_fusion_decisions_and_timings_of_one_call(report):
    r, expected = report
    torch.testing.assert_close(r.output, expected)
    (graph,) = [g["graph"] for g in r.graphs]
    assert graph.startswith("inference_")
    assert r.kernels and all(k["name"].startswith("triton_") and k["graph"] == graph for k in r.kernels)
    assert all(any("test_explain_api.py" in s for s in k["sources"]) for k in r.kernels)
    assert any(d["reason"] == "memory deps did not match" for d in r.refused)
    assert {"lowering", "scheduling", "codegen"} <= set(r.compile_seconds[graph])
    assert r.ran_eagerly == []
    assert r.graphs[0]["nodes"]                     # the node details `why` reads
    refused = next(d for d in r.refused if d["reason"] == "memory deps did not match")
    assert r.why(graph, refused["node1"], refused["node2"]).startswith(
        f"cannot fuse {refused['node1']} with {refused['node2']}: memory deps did not match")


def test_explain_compiles_again_a_function_compiled_before_in_the_process(device):
    x, w = torch.randn(8, 8, device=device), torch.randn(8, 8, device=device)
    torch.compile(layer, backend="mini_inductor")(x, w)
    assert mini_inductor.explain(layer, x, w).kernels


def test_explain_lists_graphs_that_ran_eagerly_with_reason_and_source(device):
    x = torch.randn(6, 4, device=device)
    torch._dynamo.mark_dynamic(x, 0)
    with mini_inductor.config.patch(dynamic_shapes="eager"):
        r = mini_inductor.explain(lambda t: torch.relu(t) * 2, x)
    (eager,) = r.ran_eagerly
    assert eager["reason"] == DYNAMIC_SHAPES
    assert "test_explain_api.py" in eager["source"] and "'dynamic_shapes': 'eager'" in eager["hint"]
    assert "Graphs run eagerly" in str(r) and eager["name"] in str(r)


def test_str_is_the_text_summary_the_cli_prints(report):
    r, _ = report
    text = str(r)
    assert text.startswith("mini_inductor explain: layer")
    assert f"Graph {r.graphs[0]['graph']}" in text and "Kernel boundaries" in text and "memory deps did not match" in text
    for k in r.kernels:
        assert k["name"] in text
    assert repr(r) == text


def test_text_of_a_one_kernel_graph_counts_in_the_singular_and_has_no_empty_boundary_table(device):
    text = str(mini_inductor.explain(lambda x: torch.relu(x) * 2, torch.randn(8, device=device)))
    assert "1 node → 1 group: 1 Triton kernel, 0 extern calls" in text, text
    assert "Kernel boundaries: none (no two generated kernels could have been one)" in text, text
    assert "why not one kernel" not in text and "Of 0 refused candidate pairs" not in text
    assert "time: the bytes at" not in text     # (the boundaries' time column, when there is one)


def test_kernels_of_a_cpu_run_have_no_empty_timing_columns():
    text = str(mini_inductor.explain(lambda x: torch.relu(x) * 2, torch.randn(8)))
    header = next(ln for ln in text.splitlines() if ln.strip().startswith("kernel "))
    assert header.rstrip().endswith("bytes r/w") and "µs" not in text, header


def test_partitions_of_a_cpu_graph_say_that_no_cuda_graphs_run_there():
    lin = torch.nn.Linear(8, 8)
    with torch.no_grad():
        r = mini_inductor.explain(lambda x: torch.relu(lin(x)), torch.randn(4, 8))
    assert r.graphs[0]["device"] == "cpu"
    assert ("Partitions (what CUDA graphs would capture; on the CPU none run, and a CPU call such as a matmul "
            "ends a partition where its CUDA call would not)") in str(r)


def test_html_of_a_one_kernel_graph_counts_in_the_singular(device):
    page = mini_inductor.explain(lambda x: torch.relu(x) * 2, torch.randn(8, device=device)).html_page()
    assert "1 scheduler node → 1 group: 1 Triton kernel, 0 extern calls, 0 fallback ops" in page


@pytest.mark.gpu
def test_explain_on_cuda_times_every_kernel_of_the_call():
    x, w = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
    r = mini_inductor.explain(layer, x, w)
    assert r.kernels and all(k["time_ms"] and k["gb_per_s"] for k in r.kernels), r.kernels


class _Frames(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.srcdocs = []

    def handle_starttag(self, tag, attrs):
        if tag == "iframe":
            self.srcdocs.append(dict(attrs)["srcdoc"])


def test_repr_html_is_the_html_report_with_every_kernel(report):
    r, _ = report
    frames = _Frames()
    frames.feed(r._repr_html_())
    (page,) = frames.srcdocs                          # the page, in a frame of its own
    assert page == r.html_page() and page.startswith("<!DOCTYPE html>")
    for k in r.kernels:
        assert k["name"] in page
    assert "@triton" in page and "<script" not in page


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Chromium (`make tools` installs it)")
def test_repr_html_renders_in_a_headless_browser(report, tmp_path):
    r, _ = report
    cell = tmp_path / "cell.html"
    cell.write_text(f"<!DOCTYPE html><html><body>{r._repr_html_()}</body></html>")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}"]
    dom = subprocess.run(["chromium", *flags, "--dump-dom", cell.as_uri()], capture_output=True, text=True,
                         timeout=120)
    assert "<iframe" in dom.stdout and r.kernels[0]["name"] in dom.stdout
    shot = tmp_path / "cell.png"
    subprocess.run(["chromium", *flags, "--window-size=1000,700", f"--screenshot={shot}", cell.as_uri()],
                   capture_output=True, text=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 20_000   # the frame's page rendered, not a blank cell


def test_why_for_a_graph_not_in_the_report_names_the_graphs_that_are(report):
    # a bare StopIteration before (the README's example names inference_0; a module in grad mode
    # compiles forward_0; review, session 33)
    r, _ = report
    with pytest.raises(KeyError, match="compiled graphs: inference_"):
        r.why("forward_9", "buf0", "buf1")


def test_a_dynamic_graph_says_which_input_each_size_symbol_is_and_its_traced_value(device):
    x = torch.randn(6, 8, device=device)
    torch._dynamo.mark_dynamic(x, 0)
    r = mini_inductor.explain(lambda t: torch.relu(t).sum(1), x)
    (graph,) = r.graphs
    (said,) = graph["dynamic_sizes"]
    assert said.startswith("s") and said.endswith(", size 0 of arg1_1 (traced at 6)"), said
    assert f"dynamic: one compile for every size; {said}" in str(r)


def test_a_static_graph_has_no_dynamic_sizes(report):
    r, _ = report
    assert r.graphs[0]["dynamic_sizes"] == [] and "dynamic:" not in str(r)


def test_a_call_without_tensor_ops_says_dynamo_handed_over_no_graph():
    def size_plus_one(t):
        return t.shape[0] + 1
    text = str(mini_inductor.explain(size_plus_one, torch.randn(3)))
    assert "no graph reached mini_inductor: Dynamo found no tensor operations to compile in this call\n" in text
    assert "compiled before" not in text


def test_the_group_count_adds_up_when_a_call_has_several_results():
    # sort returns two tensors: its call (ATen's, for rows past the sort kernels' 1024), and a pick of
    # each result, which generates no code
    text = str(mini_inductor.explain(lambda x: torch.sort(x, -1)[0] * 2 + torch.sort(x, -1)[1], torch.randn(4, 1100)))
    line = next(ln for ln in text.splitlines() if " groups: " in ln)
    assert line.endswith("picks of a call's results (no code)"), line
    assert "MultiOutput" not in text and "result pick ×" in text

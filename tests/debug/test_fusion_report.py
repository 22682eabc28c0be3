"""The fusion report's data (graph_report): kernel boundaries with reason and cost, never-fusable pairs
counted, labels by op and source line, and the picture and DOT drawn from it, on real compiled graphs."""
import re
import xml.etree.ElementTree as ET

import pytest
import torch

import mini_inductor  # noqa: F401  (registers the backend)
from mini_inductor.debug import trace as debug_trace
from mini_inductor.debug.graphviz import to_dot
from mini_inductor.debug.html import graph_section
from mini_inductor.debug.picture import report_svg
from mini_inductor.debug.report import graph_report
from mini_inductor.examples import EXAMPLES

GPU = pytest.mark.gpu


def _traces(fn, *inputs):
    with debug_trace.capture() as traces, torch.no_grad():
        torch.compile(fn, backend="mini_inductor")(*inputs)
    return traces


@pytest.fixture(scope="module")
def block():
    """The model zoo's transformer block (the CLI's default example), compiled on the CPU."""
    torch._dynamo.reset()
    model, inputs = EXAMPLES["transformer_block"]("cpu", torch.float32)
    (trace,) = _traces(model, *inputs)
    return trace, graph_report(trace)


def _layer(x, w):
    y = torch.nn.functional.layer_norm(x, x.shape[-1:])
    a = torch.relu(y) * w
    return (a + a.t()).sum(-1)   # the transposed read of `a` keeps it out of the sum's kernel


def test_every_boundary_joins_two_generated_kernels_and_says_why_they_stayed_apart(block):
    _, report = block
    kernels = {k["name"]: k for k in report["kernels"]}
    assert report["boundaries"]
    for b in report["boundaries"]:
        assert b["producer"] in kernels and b["consumer"] in kernels and b["producer"] != b["consumer"]
        assert b["relation"] in ("dependency", "sibling")
        refused = {(r["node1"], r["node2"]): r["reason"] for r in report["refused"]}
        assert refused[(b["node1"], b["node2"])] == b["reason"]   # the scheduler's own refusal of this pair
        assert b["bytes_written"] + b["bytes_read"] > 0


def test_the_residual_add_after_the_mlp_is_a_boundary_with_the_matmuls_in_between(block):
    _, report = block
    externs = {e["name"]: e for e in report["externs"]}
    final = report["kernels"][-1]
    assert final["label_ops"] == "add"
    (b,) = [b for b in report["boundaries"] if b["consumer"] == final["name"] and b["relation"] == "dependency"]
    assert b["reason"] == "intermediate nodes between node1 & node2"
    assert [externs[u]["op"] for u in b["between"] if u in externs] == ["aten.addmm.default"] * 2
    (passed,) = b["buffers"]                                          # the residual stream x + attn(...)
    producer = next(k for k in report["kernels"] if k["name"] == b["producer"])
    assert passed in producer["writes"]
    assert b["bytes_written"] == b["bytes_read"] == 2 * 16 * 64 * 4    # (2, 16, 64) float32, written and read once


def test_pairs_with_an_extern_call_on_one_side_are_only_counted(block):
    _, report = block
    externs = {e["name"] for e in report["externs"]}
    assert not any(b["producer"] in externs or b["consumer"] in externs for b in report["boundaries"])
    never = report["never_fuse"]
    assert set(never["by_reason"]) == {"node1 is extern or nop", "node2 is extern or nop"}
    assert never["extern_ops"]["addmm"] >= 4
    # every refused pair is accounted for once: at a boundary, never fusable, or fused through others later
    at_boundaries = sum(b["refused_pairs"] for b in report["boundaries"])
    assert at_boundaries == never["at_boundaries"]
    assert at_boundaries + never["pairs"] + never["fused_later"] == never["refused"] == len(report["refused"])


def test_nodes_are_labelled_by_their_ops_and_the_users_source_line(block):
    _, report = block
    labels = {k["name"]: k["label"] for k in report["kernels"]} | {e["name"]: e["label"] for e in report["externs"]}
    assert labels[report["kernels"][0]["name"]].startswith("var_mean, ")    # ln1, in graph order
    assert any(re.fullmatch(r"mul, erf, add — examples\.py:\d+", label) for label in labels.values())  # GELU
    assert sum(label.startswith("addmm — examples.py:") for label in labels.values()) == 4
    assert not any(re.search(r"\bbuf\d+\b", label) for label in labels.values())


def test_a_direct_dependency_boundary_costs_the_write_and_the_read_back():
    x, w = torch.randn(8, 8), torch.randn(8, 8)
    (trace,) = _traces(_layer, x, w)
    report = graph_report(trace)
    (b,) = report["boundaries"]
    assert (b["relation"], b["reason"], b["between"]) == ("dependency", "memory deps did not match", [])
    assert b["bytes_written"] == b["bytes_read"] == 8 * 8 * 4
    assert report["never_fuse"]["pairs"] == 0
    assert b["seconds"] == pytest.approx(2 * 8 * 8 * 4 / report["bandwidth"]["bytes_per_s"])


def test_boundary_time_uses_the_measured_bandwidth_when_kernels_were_timed(block):
    trace, untimed = block
    assert untimed["bandwidth"]["source"] == "nominal" and "H100" in untimed["bandwidth"]["note"]
    timings = {k["name"]: 0.002 * (i + 1) for i, k in enumerate(untimed["kernels"])}   # ms per launch
    report = graph_report(trace, timings)
    moved = sum(k["bytes_read"] + k["bytes_written"] for k in report["kernels"])
    rate = moved / (sum(timings.values()) / 1e3)
    assert report["bandwidth"]["source"] == "measured"
    assert report["bandwidth"]["bytes_per_s"] == pytest.approx(rate)
    for b in report["boundaries"]:
        assert b["seconds"] == pytest.approx((b["bytes_written"] + b["bytes_read"]) / rate)


def test_picture_draws_flow_and_boundaries_not_every_refused_pair(block):
    _, report = block
    svg = ET.fromstring(report_svg(report))
    ns = "{http://www.w3.org/2000/svg}"
    assert svg.get("width") == "100%" and len(svg.get("viewBox").split()) == 4
    paths = svg.iter(f"{ns}path")
    classes = [p.get("class") for p in paths if p.get("class")]
    assert classes.count("boundary dependency") + classes.count("boundary sibling") == len(report["boundaries"])
    drawn = {g.get("data-name") for g in svg.iter(f"{ns}g") if "node" in (g.get("class") or "")}
    units = {k["name"] for k in report["kernels"]} | {e["name"] for e in report["externs"]}
    assert units <= drawn
    flow = [e for e in report["edges"] if e["src"] in drawn]
    assert classes.count("flow") + classes.count("boundary dependency") == len(flow)
    # every box lies inside the viewBox, so the scaled picture shows all of it
    left, top, width, height = map(float, svg.get("viewBox").split())
    for rect in svg.iter(f"{ns}rect"):
        x, y, w, h = (float(rect.get(a)) for a in ("x", "y", "width", "height"))
        assert left <= x and x + w <= left + width and top <= y and y + h <= top + height


def test_the_page_embeds_its_own_picture_and_keeps_dot_for_graphviz_users(block):
    _, report = block
    page = graph_section(report, "digraph {}", None, {}, dot_file="inference_0.dot")
    assert 'class="kernel-graph"' in page and "inference_0.dot" in page
    assert page.count('class="boundary"') == len(report["boundaries"])
    assert "can never fuse" in page and "overflow: auto" not in page
    dot = to_dot(report)
    assert sum("#d93025" in line for line in dot.splitlines()) == len(report["boundaries"])   # red edges
    assert "node1 is extern or nop" not in dot


@GPU
def test_explain_on_a_gpu_prices_boundaries_at_the_measured_bandwidth():
    from mini_inductor.debug import explain

    traces, timings = explain.run_example("transformer_block")
    (report,) = explain.build_reports(traces, timings)
    assert report["bandwidth"]["source"] == "measured", report["bandwidth"]
    assert report["boundaries"] and all(b["seconds"] > 0 for b in report["boundaries"])
    untimed = graph_report(traces[0])                  # no timings: the device's nominal peak, named
    assert untimed["bandwidth"]["source"] == "nominal"
    assert torch.cuda.get_device_name() in untimed["bandwidth"]["note"]

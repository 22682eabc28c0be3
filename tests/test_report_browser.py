"""The fusion report as a user sees it, in a real headless Chromium: labelled kernels, the boundary table
and a picture that fits the page (read from the DOM), plus a screenshot."""
import json

import pytest
import torch

import mini_inductor  # noqa: F401  (registers the backend)
from headless_chromium import BINARY, Chromium
from mini_inductor.debug import explain
from mini_inductor.debug import trace as debug_trace
from mini_inductor.examples import EXAMPLES

pytestmark = pytest.mark.skipif(BINARY is None, reason="needs Chromium on PATH (`make tools` installs it)")

# What the page shows, measured by the browser: labels, rows, and where the picture lies.
MEASURE = """(() => {
  const svg = document.querySelector('.picture svg');
  const box = svg.getBoundingClientRect();
  const doc = document.documentElement;
  const clipping = [];
  for (let e = svg.parentElement; e; e = e.parentElement) {
    const s = getComputedStyle(e);
    if (s.overflowX !== 'visible' || s.overflowY !== 'visible' || s.maxHeight !== 'none')
      clipping.push(e.tagName + '.' + e.className + ' ' + s.overflowX + '/' + s.overflowY + ' ' + s.maxHeight);
  }
  const view = svg.viewBox.baseVal, content = svg.getBBox();
  const texts = sel => [...svg.querySelectorAll(sel)].map(t => t.textContent);
  return {
    left: box.left + scrollX, right: box.right + scrollX, width: box.width, height: box.height,
    scrollWidth: doc.scrollWidth, clientWidth: doc.clientWidth, clipping,
    content: [content.x, content.y, content.x + content.width, content.y + content.height],
    view: [view.x, view.y, view.width, view.height],
    kernelOps: texts('g.node.pointwise text.ops, g.node.reduction text.ops'),
    externOps: texts('g.node.extern text.ops'),
    firstLines: [...svg.querySelectorAll('g.node')].map(g => g.querySelector('text')?.textContent),
    overflowingLabels: [...svg.querySelectorAll('g.node')].filter(g => g.querySelector('rect') && Math.max(
        ...[...g.querySelectorAll('text')].map(t => t.getComputedTextLength())) >
        +g.querySelector('rect').getAttribute('width')).map(g => g.dataset.name),
    boundaryRows: [...document.querySelectorAll('tr.boundary')].map(r => r.innerText),
    neverFuse: document.querySelector('.never-fuse')?.innerText ?? '',
  };
})()"""


@pytest.fixture(scope="module")
def block_report(tmp_path_factory):
    """report.html of the model zoo's transformer block, written as `mini-inductor explain` writes it."""
    torch._dynamo.reset()
    model, inputs = EXAMPLES["transformer_block"]("cpu", torch.float32)
    with debug_trace.capture() as traces, torch.no_grad():
        torch.compile(model, backend="mini_inductor")(*inputs)
    out = tmp_path_factory.mktemp("report")
    reports = explain.build_reports(traces)
    paths = explain.write_reports(reports, traces, str(out), "transformer block")
    return out, json.loads((out / "report.json").read_text())[0], paths["html"]


def test_report_in_chromium_shows_labelled_kernels_boundaries_and_the_whole_picture(block_report, tmp_path):
    out, report, page = block_report
    with Chromium(tmp_path / "profile", width=1280, height=900) as browser:
        browser.open(f"file://{page}")
        seen = browser.evaluate(MEASURE)
        browser.screenshot(tmp_path / "report.png")
    # node labels: the ops and the user's line, not bufN
    assert any(t.startswith("var_mean") for t in seen["kernelOps"]) and "mul, erf, add" in seen["kernelOps"]
    assert seen["externOps"].count("addmm") == 4
    assert not any(t.startswith("buf") for t in seen["firstLines"])
    assert not seen["overflowingLabels"]                 # every label fits in its box as the browser draws it
    # one row per boundary, naming both kernels and the scheduler's reason
    assert len(seen["boundaryRows"]) == len(report["boundaries"]) >= 1
    for row, b in zip(seen["boundaryRows"], report["boundaries"]):
        assert b["producer"] in row and b["consumer"] in row and b["reason"] in row
    assert "can never fuse" in seen["neverFuse"] and "addmm" in seen["neverFuse"]
    # the picture is not clipped: inside the page's width, no scrolling or clipping box around it,
    # and everything drawn lies inside the viewBox
    assert seen["left"] >= 0 and seen["right"] <= seen["scrollWidth"] and seen["right"] <= seen["clientWidth"]
    assert seen["clipping"] == []
    x0, y0, x1, y1 = seen["content"]
    vx, vy, vw, vh = seen["view"]
    assert vx <= x0 and vy <= y0 and x1 <= vx + vw and y1 <= vy + vh
    assert seen["height"] > 0 and seen["height"] / seen["width"] == pytest.approx(vh / vw, rel=0.02)
    shot = tmp_path / "report.png"
    assert shot.stat().st_size > 20_000, "a real rendering, not a blank page"


def test_picture_shrinks_to_a_narrow_window_instead_of_overflowing(block_report, tmp_path):
    _, _, page = block_report
    with Chromium(tmp_path / "profile", width=360, height=800) as browser:
        browser.open(f"file://{page}")
        seen = browser.evaluate(MEASURE)
    assert seen["right"] <= seen["clientWidth"] and seen["clipping"] == []
    assert seen["width"] < seen["view"][2]               # drawn smaller than its natural size, all of it

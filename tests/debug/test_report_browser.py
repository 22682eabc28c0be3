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

# What the page shows, measured by the browser, per picture: labels, boundary edges, where it lies.
MEASURE = """(() => {
  const doc = document.documentElement;
  const pictures = [...document.querySelectorAll('.picture')].map(div => {
    const svg = div.querySelector('svg');
    const box = svg.getBoundingClientRect();
    const clipping = [];
    for (let e = svg.parentElement; e; e = e.parentElement) {
      const s = getComputedStyle(e);
      if (s.overflowX !== 'visible' || s.overflowY !== 'visible' || s.maxHeight !== 'none')
        clipping.push(e.tagName + '.' + e.className + ' ' + s.overflowX + '/' + s.overflowY + ' ' + s.maxHeight);
    }
    const view = svg.viewBox.baseVal, content = svg.getBBox();
    const texts = sel => [...svg.querySelectorAll(sel)].map(t => t.textContent);
    return {
      left: box.left + scrollX, right: box.right + scrollX, width: box.width, height: box.height, clipping,
      content: [content.x, content.y, content.x + content.width, content.y + content.height],
      view: [view.x, view.y, view.width, view.height],
      kernelOps: texts('g.node.pointwise text.ops, g.node.reduction text.ops'),
      externOps: texts('g.node.extern text.ops'),
      firstLines: [...svg.querySelectorAll('g.node')].map(g => g.querySelector('text')?.textContent),
      overflowingLabels: [...svg.querySelectorAll('g.node')].filter(g => g.querySelector('rect') && Math.max(
          ...[...g.querySelectorAll('text')].map(t => t.getComputedTextLength())) >
          +g.querySelector('rect').getAttribute('width')).map(g => g.dataset.name),
      redEdges: svg.querySelectorAll('path.boundary').length,
    };
  });
  return {
    pictures, scrollWidth: doc.scrollWidth, clientWidth: doc.clientWidth,
    boundaryRows: [...document.querySelectorAll('tr.boundary')].map(r => r.innerText),
    neverFuse: [...document.querySelectorAll('.never-fuse')].map(p => p.innerText),
  };
})()"""


@pytest.fixture(scope="module")
def training_report(tmp_path_factory):
    """report.html of a training step of the model zoo's transformer block (its forward and backward graphs),
    written as `mini-inductor explain` writes it."""
    torch._dynamo.reset()
    model, (x,) = EXAMPLES["transformer_block"]("cpu", torch.float32)
    with debug_trace.capture() as traces:
        torch.compile(model, backend="mini_inductor")(x.requires_grad_(True)).sum().backward()
    out = tmp_path_factory.mktemp("report")
    paths = explain.write_reports(explain.build_reports(traces), traces, str(out), "transformer block")
    return json.loads((out / "report.json").read_text()), paths["html"]


def _assert_whole(picture, client_width):
    """Not clipped: inside the page's width, no scrolling or clipping box around it, all drawn in the viewBox."""
    assert picture["left"] >= 0 and picture["right"] <= client_width
    assert picture["clipping"] == []
    x0, y0, x1, y1 = picture["content"]
    vx, vy, vw, vh = picture["view"]
    assert vx <= x0 and vy <= y0 and x1 <= vx + vw and y1 <= vy + vh
    assert picture["height"] / picture["width"] == pytest.approx(vh / vw, rel=0.02)


def test_report_in_chromium_shows_labelled_kernels_boundaries_and_whole_pictures(training_report, tmp_path):
    reports, page = training_report
    assert [r["graph"].split("_")[0] for r in reports] == ["forward", "backward"]
    with Chromium(tmp_path / "profile", width=1280, height=900) as browser:
        browser.open(f"file://{page}")
        seen = browser.evaluate(MEASURE)
        browser.screenshot(tmp_path / "report.png")
    assert len(seen["pictures"]) == 2
    forward, backward = seen["pictures"]
    # node labels: the ops and the user's line, not bufN
    assert any(t.startswith("var_mean") for t in forward["kernelOps"]) and "addmm" in forward["externOps"]
    assert "mm" in backward["externOps"]
    for picture in seen["pictures"]:
        assert not any(t.startswith("buf") for t in picture["firstLines"])
        assert not picture["overflowingLabels"]          # every label fits in its box as the browser draws it
    # red edges: the boundaries only, not every refused pair
    for picture, report in zip(seen["pictures"], reports):
        assert picture["redEdges"] == len(report["boundaries"]) < len(report["refused"])
    # one row per boundary, naming both kernels and the scheduler's reason; the rest in one line per graph
    boundaries = [b for r in reports for b in r["boundaries"]]
    assert len(seen["boundaryRows"]) == len(boundaries) >= 2
    for row, b in zip(seen["boundaryRows"], boundaries):
        assert b["producer"] in row and b["consumer"] in row and b["reason"] in row
    assert len(seen["neverFuse"]) == 2 and "can never fuse" in seen["neverFuse"][0] and "addmm" in seen["neverFuse"][0]
    for picture in seen["pictures"]:
        _assert_whole(picture, seen["clientWidth"])
        assert picture["right"] <= seen["scrollWidth"]
    shot = tmp_path / "report.png"
    assert shot.stat().st_size > 20_000, "a real rendering, not a blank page"


def test_pictures_shrink_to_a_narrow_window_instead_of_overflowing(training_report, tmp_path):
    _, page = training_report
    with Chromium(tmp_path / "profile", width=360, height=800) as browser:
        browser.open(f"file://{page}")
        seen = browser.evaluate(MEASURE)
    for picture in seen["pictures"]:
        _assert_whole(picture, seen["clientWidth"])
        assert picture["width"] < picture["view"][2]    # drawn smaller than its natural size, all of it

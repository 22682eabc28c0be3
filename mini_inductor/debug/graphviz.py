"""The kernel graph as DOT text, for users with Graphviz (`dot -Tsvg`); the HTML report does not need it.

    kernels (green/orange boxes) and extern calls (grey); graph inputs are left out
    grey edges carry data; red edges are kernel boundaries (numbered as in the report's table)
"""
from __future__ import annotations

import html
import shutil
import subprocess
from typing import Any


def _q(s: str) -> str:
    """A DOT string literal; real newlines become DOT line breaks."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(report: dict[str, Any], trace=None) -> str:
    """DOT text of one graph_report: the same nodes and edges as the HTML picture (trace is not needed)."""
    lines = [f"digraph {_q(report['graph'])} {{", "  rankdir=TB;", '  node [fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=9];']
    drawn = set()
    for k in report["kernels"]:
        color = "#fde7d9" if k["kind"] == "reduction" else "#e6f4ea"
        label = "\n".join(x for x in (k.get("label_ops") or ", ".join(k["ops"]), k.get("where", ""), k["name"]) if x)
        lines.append(f'  {_q(k["name"])} [shape=box, style="rounded,filled", fillcolor="{color}", label={_q(label)}];')
        drawn.add(k["name"])
    for e in report["externs"]:
        label = "\n".join(x for x in (e.get("label_ops") or e["op"], e.get("where", ""), e["name"]) if x)
        lines.append(f'  {_q(e["name"])} [shape=box, style=filled, fillcolor="#e8eaed", label={_q(label)}];')
        drawn.add(e["name"])
    numbered = {(b["producer"], b["consumer"]): i + 1 for i, b in enumerate(report.get("boundaries", []))}
    for e in report.get("edges", []):
        if e["src"] in drawn and e["dst"] in drawn:
            n = numbered.get((e["src"], e["dst"]))
            style = f' [color="#d93025", penwidth=2, fontcolor="#d93025", label="{n}"]' if n else ' [color="#80868b"]'
            lines.append(f"  {_q(e['src'])} -> {_q(e['dst'])}{style};")
    flow = {(e["src"], e["dst"]) for e in report.get("edges", [])}
    for (a, b), n in numbered.items():
        if (a, b) not in flow:
            lines.append(f'  {_q(a)} -> {_q(b)} [style=dashed, color="#d93025", fontcolor="#d93025", dir=none, '
                         f'constraint=false, label="{n}"];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def render_svg(dot_source: str) -> str | None:
    """SVG from DOT with Graphviz, or None when `dot` is not installed."""
    dot = shutil.which("dot")
    if dot is None:
        return None
    proc = subprocess.run([dot, "-Tsvg"], input=dot_source, capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        return None
    svg = proc.stdout
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg


GRAPHVIZ_HINT = ("Graphviz's `dot` is not installed: the report draws its own pictures; the .dot files are "
                 "there for `dot -Tsvg` if you install it.")


def escape(s: str) -> str:
    return html.escape(s, quote=True)

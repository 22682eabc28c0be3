"""The fused graph as a picture: DOT text, rendered to SVG by Graphviz's `dot` when installed.

    inputs (ellipses) → kernels (one box per kernel, its fused buffers inside) / extern calls (grey)
    red dashed edges: refused fusion candidates, labelled with the reason
"""
from __future__ import annotations

import html
import shutil
import subprocess
from typing import Any

MAX_REFUSED_EDGES = 40


def _q(s: str) -> str:
    """A DOT string literal; real newlines become DOT line breaks."""
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def to_dot(report: dict[str, Any], trace) -> str:
    lowered, sched = trace.lowered, trace.schedule
    owner: dict[str, str] = {}
    lines = [f"digraph {_q(report['graph'])} {{", "  rankdir=TB;", '  node [fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=9];']
    for inp in lowered.inputs:
        if inp is not None:
            lines.append(f'  {_q(inp.name)} [shape=ellipse, style=filled, fillcolor="#e8f0fe", label={_q(inp.name)}];')
    for i, k in enumerate(report["kernels"]):
        lines.append(f"  subgraph cluster_{i} {{")
        color = "#fde7d9" if k["kind"] == "reduction" else "#e6f4ea"
        label = f"{k['name']}\n{', '.join(k['ops'][:4])}{' …' if len(k['ops']) > 4 else ''}"
        lines.append(f'    label={_q(label)}; style="rounded,filled"; fillcolor="{color}";')
        for n in k["nodes"]:
            owner[n] = n
            lines.append(f'    {_q(n)} [shape=box, style=filled, fillcolor=white];')
        lines.append("  }")
    for e in report["externs"]:
        owner[e["name"]] = e["name"]
        lines.append(f'  {_q(e["name"])} [shape=box, style=filled, fillcolor="#dddddd", '
                     f'label={_q(e["name"] + chr(10) + e["op"])}];')
    seen = set()
    for group in sched.nodes:
        for member in group.get_nodes():
            for dep in sorted(member.reads, key=lambda d: d.name):
                src = dep.name
                if src == member.name or (src, member.name) in seen:
                    continue
                if src in owner or any(i is not None and i.name == src for i in lowered.inputs):
                    seen.add((src, member.name))
                    lines.append(f"  {_q(src)} -> {_q(member.name)};")
    for r in report["refused"][:MAX_REFUSED_EDGES]:
        a, b = r["node1"].split("_")[0], r["node2"].split("_")[0]
        if a in owner and b in owner:
            lines.append(f'  {_q(a)} -> {_q(b)} [style=dashed, color="#d93025", fontcolor="#d93025", '
                         f'constraint=false, label={_q(r["reason"])}];')
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


GRAPHVIZ_HINT = ("Graphviz's `dot` is not installed, so the picture is DOT only "
                 "(install it: `apt-get install graphviz`, or `make tools`).")


def escape(s: str) -> str:
    return html.escape(s, quote=True)

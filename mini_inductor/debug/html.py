"""One self-contained HTML file (no scripts, no network) with the picture, the tables and the kernels."""
from __future__ import annotations

from typing import Any

from .graphviz import GRAPHVIZ_HINT, escape

_STYLE = """
body { font-family: -apple-system, Helvetica, Arial, sans-serif; margin: 24px; color: #202124; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 28px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f1f3f4; }
.picture { overflow: auto; border: 1px solid #ddd; padding: 8px; max-height: 900px; }
.note { color: #5f6368; font-size: 13px; }
pre { font-size: 12px; overflow: auto; }
details { margin: 6px 0; }
"""


def _table(columns: list[str], rows: list[list[Any]]) -> str:
    if not rows:
        return '<p class="note">none</p>'
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _highlight(source: str) -> str:
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer
    except ImportError:
        return f"<pre>{escape(source)}</pre>"
    return highlight(source, PythonLexer(), HtmlFormatter(noclasses=True, nobackground=False))


def _mib(n) -> str:
    return "n/a" if n is None else f"{n / 2**20:.2f} MiB"


def graph_section(report: dict[str, Any], dot_source: str, svg: str | None, kernel_sources: dict[str, str]) -> str:
    g = report
    parts = [f'<h2 id="{escape(g["graph"])}">Graph {escape(g["graph"])}</h2>',
             f'<p>{g["nodes_before_fusion"]} scheduler nodes → {g["groups"]} groups: {len(g["kernels"])} Triton '
             f'kernels, {len(g["externs"])} extern calls, {sum(f["count"] for f in g["fallbacks"])} fallback ops'
             f'{" (served from the cache)" if g["cache_hit"] else ""}. Output code: '
             f'<code>{escape(str(g["source_path"]))}</code></p>']
    parts.append('<div class="picture">' + (svg if svg else
                 f'<p class="note">{escape(GRAPHVIZ_HINT)}</p><pre>{escape(dot_source)}</pre>') + "</div>")
    parts.append("<h3>Kernels</h3>" + _table(
        ["kernel", "fused nodes", "ATen ops", "source lines", "bytes read", "bytes written"],
        [[k["name"], ", ".join(k["nodes"]), ", ".join(k["ops"]), "\n".join(k["sources"]), k["bytes_read"],
          k["bytes_written"]] for k in g["kernels"]]))
    parts.append("<h3>Refused fusion candidates</h3>" + _table(
        ["node 1", "node 2", "reason", "outcome"],
        [[r["node1"], r["node2"], r["reason"], r.get("outcome", "")] for r in g["refused"]]))
    parts.append("<h3>Extern calls and fallbacks</h3>" + _table(
        ["buffer", "op", "source lines"], [[e["name"], e["op"], "\n".join(e["sources"])] for e in g["externs"]])
        + _table(["fallback op", "count", "why"], [[f["op"], f["count"], f["why"]] for f in g["fallbacks"]]))
    mem = g["memory"]
    workspace = mem.get("graphed_workspace_bytes")
    parts.append("<h3>Memory and partitions</h3>"
                 f'<p>planned peak: {_mib(mem.get("planned_peak_bytes"))}'
                 + (f' (+{_mib(workspace)} cuBLAS workspace while recording a CUDA graph)' if workspace else "")
                 + f'; estimated bytes moved: {_mib(mem.get("estimated_bytes_moved"))}</p>'
                 + _table(["partition", "cudagraph-safe", "reason", "inputs", "outputs"],
                          [[p.get("name"), p.get("safe"), p.get("reason") or "", ", ".join(p.get("inputs") or []),
                            ", ".join(p.get("outputs") or [])] for p in g["partitions"]]))
    parts.append("<h3>Kernel sources</h3>")
    for name, src in kernel_sources.items():
        parts.append(f"<details><summary><code>{escape(name)}</code></summary>{_highlight(src)}</details>")
    return "\n".join(parts)


def html_page(title: str, sections: list[str]) -> str:
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>"
            f"<h1>{escape(title)}</h1>" + "\n".join(sections) + "</body></html>\n")

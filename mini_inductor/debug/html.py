"""One self-contained HTML file (no scripts, no network) with the picture, the tables and the kernels."""
from __future__ import annotations

from typing import Any

from .boundaries import human_bytes as _size, human_seconds as _duration, never_fuse_line, plural
from .graphviz import escape
from .picture import report_svg

_STYLE = """
body { font-family: -apple-system, Helvetica, Arial, sans-serif; margin: 24px; color: #202124; }
h1 { font-size: 22px; } h2 { font-size: 18px; margin-top: 28px; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 8px 0; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f1f3f4; }
.picture { border: 1px solid #ddd; padding: 8px; }   /* no scroll box: the SVG scales to the width */
tr.boundary td { background: #fff8f7; } .never-fuse { font-size: 14px; }
.note { color: #5f6368; font-size: 13px; }
pre { font-size: 12px; overflow-x: auto; }
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


def _html_table(columns: list[str], rows: list[tuple[str, list[str]]], cls: str) -> str:
    """Rows of cells that are HTML already: (row id, cells)."""
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join(f'<tr id="{escape(rid)}" class="{cls}">' + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"
                   for rid, cells in rows)
    return f'<table class="{cls}s"><tr>{head}</tr>{body}</table>'


def boundary_table(report: dict[str, Any]) -> str:
    """The kernel boundaries of one graph: who meets whom, why they stayed apart, what it costs."""
    g = report
    label = {k["name"]: k.get("label", k["name"]) for k in g["kernels"]}
    label.update({e["name"]: e.get("label", e["op"]) for e in g["externs"]})
    rows = []
    for i, b in enumerate(g.get("boundaries", []), 1):
        def side(name):
            return f"<b>{escape(label.get(name, name))}</b><br><code>{escape(name)}</code>"
        if b["relation"] == "dependency":
            what = f"writes {escape(', '.join(b['buffers']))}, the second reads it back"
        else:
            what = f"both read {escape(', '.join(b['buffers']) or 'nothing in common')}"
        why = escape(b["reason"])
        if b.get("meaning"):
            why += f"<br><small>{escape(b['meaning'])}</small>"
        if b.get("between"):
            why += "<br><small>in between: " + escape("; ".join(label.get(u, u) for u in b["between"])) + "</small>"
        cost = b["bytes_written"] + b["bytes_read"]
        rows.append((f"{g['graph']}-boundary-{i}", [
            f"<b>{i}</b>", side(b["producer"]), side(b["consumer"]), what, why,
            f'<span title="{cost} bytes">{_size(b["bytes_written"])} written + {_size(b["bytes_read"])} read back'
            f"</span>", _duration(b.get("seconds"))]))
    if not rows:
        table = '<p class="note">No boundary: no two generated kernels of this graph could have been one.</p>'
    else:
        table = _html_table(["#", "producer kernel", "consumer kernel", "what crosses", "why not one kernel",
                             "bytes", "time"], rows, "boundary")
    never = g.get("never_fuse")
    line = f'<p class="never-fuse">{escape(never_fuse_line(never))}</p>' if never else ""
    rate = g.get("bandwidth")
    note = f'<p class="note">Time: the bytes at {escape(rate["note"])}.</p>' if rate else ""
    return table + line + note


def graph_section(report: dict[str, Any], dot_source: str = "", svg: str | None = None,
                  kernel_sources: dict[str, str] | None = None, *, dot_file: str | None = None) -> str:
    """One graph's part of the page. svg: a picture to show instead of the one drawn from the report;
    dot_source is kept for callers of the old signature (the DOT text goes to a file, which dot_file names)."""
    g = report
    boundaries = g.get("boundaries", [])
    total = sum(b["bytes_written"] + b["bytes_read"] for b in boundaries)
    seconds = sum(b.get("seconds") or 0 for b in boundaries)
    parts = [f'<h2 id="{escape(g["graph"])}">Graph {escape(g["graph"])}</h2>',
             f'<p>{plural(g["nodes_before_fusion"], "scheduler node")} → {plural(g["groups"], "group")}: '
             f'{plural(len(g["kernels"]), "Triton kernel")}, '
             f'{plural(sum(1 for e in g["externs"] if e["op"] != "MultiOutput"), "extern call")}, '
             f'{plural(sum(f["count"] for f in g["fallbacks"]), "fallback op")}'
             f'{" (served from the cache)" if g["cache_hit"] else ""}. '
             f'{len(boundaries)} kernel boundar{"y" if len(boundaries) == 1 else "ies"}: {_size(total)} written '
             f'and read back across them (about {_duration(seconds)}). Output code: '
             f'<code>{escape(str(g["source_path"]))}</code></p>']
    parts.append("<h3>Kernel boundaries</h3><p class=\"note\">Pairs of generated kernels that could have been one: "
                 "the second reads what the first wrote, or both read the same buffer.</p>" + boundary_table(g))
    picture = svg if svg is not None else report_svg(g)
    legend = ("Boxes: green pointwise kernels, orange reductions, grey extern calls (graph inputs are not drawn). "
              "Grey arrows carry data; red arrows (numbered as in the table) are boundaries, dashed red lines "
              "join kernels that read the same buffer.")
    if dot_file:
        legend += f" Graphviz users: the same graph as DOT in {dot_file}."
    parts.append(f'<h3>Kernel graph</h3><div class="picture">{picture}</div><p class="note">{escape(legend)}</p>')
    parts.append("<h3>Kernels</h3>" + _table(
        ["kernel", "ops — source", "fused nodes", "ATen ops", "source lines", "bytes read", "bytes written", "µs"],
        [[k["name"], k.get("label", ""), ", ".join(k["nodes"]), ", ".join(k["ops"]), "\n".join(k["sources"]),
          k["bytes_read"], k["bytes_written"], f"{k['time_ms'] * 1e3:.1f}" if k.get("time_ms") else ""]
         for k in g["kernels"]]))
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
    overlap = g.get("overlap") or {}
    if overlap.get("collectives"):
        parts.append("<h3>Collectives and overlap</h3>" + _table(
            ["collective", "op", "issued at", "waited at", "nodes that run meanwhile"],
            [[c["collective"], c["op"], c["issued_at"], c["waited_at"], ", ".join(c["overlapped"]) or "none"]
             for c in overlap["collectives"]])
            + "".join(f'<p class="note">{escape(m)}</p>' for m in overlap.get("moves", [])))
    parts.append(f"<details><summary>Every refused fusion candidate ({len(g['refused'])} pairs of scheduler "
                 "nodes, as the scheduler saw them)</summary>" + _table(
                     ["node 1", "node 2", "reason", "outcome"],
                     [[r["node1"], r["node2"], r["reason"], r.get("outcome", "")] for r in g["refused"]])
                 + "</details>")
    parts.append("<h3>Kernel sources</h3>")
    for name, src in (kernel_sources or {}).items():
        parts.append(f"<details><summary><code>{escape(name)}</code></summary>{_highlight(src)}</details>")
    return "\n".join(parts)


def html_page(title: str, sections: list[str]) -> str:
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
            f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>"
            f"<h1>{escape(title)}</h1>" + "\n".join(sections) + "</body></html>\n")

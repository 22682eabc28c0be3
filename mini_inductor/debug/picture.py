"""The report's picture in pure Python: a layered layout of the kernel graph, drawn as inline SVG.

    svg = report_svg(report)      # from graph_report's data; no Graphviz, no scripts

Layout (the Sugiyama scheme, kept small):
    1. layers: longest path from the sources (networkx's topological generations)
    2. an edge spanning several layers gets a dummy point in each layer it crosses
    3. order within a layer: barycenter sweeps, down and up, keeping the order with fewest crossings
    4. x: each node goes to the mean x of its neighbours, overlaps resolved by averaging a
       left-to-right and a right-to-left packing (both keep the gaps, so their mean does too)

Boxes are kernels and extern calls (graph inputs are left out: they would draw long lines to every
reader). Only dependency edges and boundary edges are drawn: grey arrows carry data from one box to
the next, red ones are boundaries between two generated kernels (numbered as in the boundary table),
dashed red ones join siblings that read the same buffer.
"""
from __future__ import annotations

import dataclasses
import html
from typing import Any

import networkx as nx

CHAR_W = {"ops": 7.2, "where": 6.4, "name": 6.0}   # px per character at the fonts below (generous)
LINE_H = 16
NODE_GAP, LAYER_GAP, MARGIN = 28, 54, 16
FILL = {"pointwise": "#e6f4ea", "reduction": "#fde7d9", "extern": "#e8eaed", "template": "#e8f0fe"}
RED, GREY = "#d93025", "#80868b"


@dataclasses.dataclass
class Box:
    id: str
    kind: str                          # pointwise, reduction, extern
    lines: list[tuple[str, str]]       # (css class, text)
    title: str                         # tooltip
    width: float = 0.0
    height: float = 0.0
    x: float = 0.0                     # centre
    y: float = 0.0                     # top


def _box(id_: str, kind: str, lines: list[tuple[str, str]], title: str) -> Box:
    lines = [(c, t) for c, t in lines if t]
    width = max(CHAR_W[c] * len(t) for c, t in lines) + 20
    return Box(id_, kind, lines, title, max(width, 70.0), len(lines) * LINE_H + 12)


def _crossings(order: list[list[str]], succ: dict[str, list[str]]) -> int:
    total = 0
    for upper, lower in zip(order, order[1:]):
        pos = {n: i for i, n in enumerate(lower)}
        ends = [(i, pos[s]) for i, n in enumerate(upper) for s in succ.get(n, []) if s in pos]
        total += sum(1 for a in range(len(ends)) for b in range(a + 1, len(ends))
                     if (ends[a][0] - ends[b][0]) * (ends[a][1] - ends[b][1]) < 0)
    return total


def layered_layout(boxes: dict[str, Box], edges: list[tuple[str, str]]) -> tuple[dict[str, list], float, float]:
    """Place boxes (sets x, y) and route edges; returns ({edge key: points}, width, height)."""
    graph = nx.DiGraph()
    graph.add_nodes_from(boxes)
    graph.add_edges_from(edges)
    layer_of = {n: i for i, gen in enumerate(nx.topological_generations(graph)) for n in gen}
    for n in boxes:   # a node that depends on nothing sits just above its first consumer, not at the top
        if graph.in_degree(n) == 0 and graph.out_degree(n):
            layer_of[n] = min(layer_of[s] for s in graph.successors(n)) - 1
    rank = {n: i for i, n in enumerate(boxes)}   # the caller's order (schedule order) breaks ties
    order: list[list[str]] = [[] for _ in range(max(layer_of.values(), default=-1) + 1)]
    for n in sorted(boxes, key=rank.get):
        order[layer_of[n]].append(n)
    succ: dict[str, list[str]] = {}
    pred: dict[str, list[str]] = {}
    chains: dict[str, list[str]] = {}
    width = {n: b.width for n, b in boxes.items()}
    for u, v in edges:
        chain = [u]
        for layer in range(layer_of[u] + 1, layer_of[v]):
            dummy = f"\0{u}\0{v}\0{layer}"
            order[layer].append(dummy)
            width[dummy] = 8.0
            chain.append(dummy)
        chain.append(v)
        chains[f"{u}\0{v}"] = chain
        for a, b in zip(chain, chain[1:]):
            succ.setdefault(a, []).append(b)
            pred.setdefault(b, []).append(a)

    best, best_cross = [list(layer) for layer in order], _crossings(order, succ)
    for sweep in range(8):
        down = sweep % 2 == 0
        layers = range(1, len(order)) if down else range(len(order) - 2, -1, -1)
        for i in layers:
            ref = {n: j for j, n in enumerate(order[i - 1 if down else i + 1])}
            old = {n: j for j, n in enumerate(order[i])}

            def key(n):
                near = [ref[m] for m in (pred if down else succ).get(n, []) if m in ref]
                return sum(near) / len(near) if near else old[n]
            order[i].sort(key=key)
        cross = _crossings(order, succ)
        if cross < best_cross:
            best, best_cross = [list(layer) for layer in order], cross
    order = best

    x: dict[str, float] = {}
    for layer in order:
        left = 0.0
        for n in layer:
            x[n] = left + width[n] / 2
            left += width[n] + NODE_GAP
    for sweep in range(6):
        down = sweep % 2 == 0
        for layer in (order if down else order[::-1]):
            want = []
            for n in layer:
                near = [x[m] for m in (pred if down else succ).get(n, [])] + \
                       [x[m] for m in (succ if down else pred).get(n, [])]
                want.append(sum(near) / len(near) if near else x[n])
            gaps = [(width[a] + width[b]) / 2 + NODE_GAP for a, b in zip(layer, layer[1:])]
            lo, hi = list(want), list(want)
            for j in range(1, len(layer)):
                lo[j] = max(want[j], lo[j - 1] + gaps[j - 1])
            for j in range(len(layer) - 2, -1, -1):
                hi[j] = min(want[j], hi[j + 1] - gaps[j])
            for j, n in enumerate(layer):
                x[n] = (lo[j] + hi[j]) / 2
    shift = MARGIN - min((x[n] - width[n] / 2 for n in x), default=0.0)
    top, tops, heights = float(MARGIN), [], []
    for layer in order:
        h = max((boxes[n].height for n in layer if n in boxes), default=LINE_H)
        tops.append(top)
        heights.append(h)
        top += h + LAYER_GAP
    for i, layer in enumerate(order):
        for n in layer:
            x[n] += shift
            if n in boxes:
                boxes[n].x, boxes[n].y = x[n], tops[i] + (heights[i] - boxes[n].height) / 2
    routes = {}
    layer_index = {n: i for i, layer in enumerate(order) for n in layer}
    for key, chain in chains.items():
        points = [(boxes[chain[0]].x, boxes[chain[0]].y + boxes[chain[0]].height)]
        for dummy in chain[1:-1]:
            i = layer_index[dummy]
            points += [(x[dummy], tops[i]), (x[dummy], tops[i] + heights[i])]
        points.append((boxes[chain[-1]].x, boxes[chain[-1]].y))
        routes[key] = points
    right = max((x[n] + width[n] / 2 for n in x), default=0.0) + MARGIN
    return routes, right, top - LAYER_GAP + MARGIN


def _path(points: list[tuple[float, float]]) -> str:
    """Cubic segments with vertical tangents through the points."""
    d = f"M{points[0][0]:.1f},{points[0][1]:.1f}"
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if abs(x1 - x0) < 0.5:
            d += f" L{x1:.1f},{y1:.1f}"
        else:
            dy = (y1 - y0) / 2
            d += f" C{x0:.1f},{y0 + dy:.1f} {x1:.1f},{y1 - dy:.1f} {x1:.1f},{y1:.1f}"
    return d


def _rows(boxes: dict[str, Box]) -> dict[float, list[Box]]:
    """Boxes by layer (their centre line), left to right."""
    rows: dict[float, list[Box]] = {}
    for b in boxes.values():
        rows.setdefault(round(b.y + b.height / 2, 1), []).append(b)
    return {y: sorted(bs, key=lambda b: b.x) for y, bs in rows.items()}


def _sibling_path(a: Box, b: Box, rows: dict[float, list[Box]]) -> tuple[str, list[tuple[float, float]]]:
    """A dashed line between two kernels that read the same buffer, and where its badge may go."""
    ya, yb = a.y + a.height / 2, b.y + b.height / 2
    if abs(ya - yb) < 1:
        a, b = sorted((a, b), key=lambda box: box.x)
        row = rows[round(ya, 1)]
        if row.index(b) - row.index(a) == 1:   # neighbours: straight across the gap
            x0, x1 = a.x + a.width / 2, b.x - b.width / 2
            return f"M{x0:.1f},{ya:.1f} L{x1:.1f},{ya:.1f}", [((x0 + x1) / 2, ya)]
        lift = min(40.0, 12 + (b.x - a.x) / 10)   # farther apart: an arc over the boxes between them
        d = f"M{a.x:.1f},{a.y:.1f} C{a.x:.1f},{a.y - lift:.1f} {b.x:.1f},{b.y - lift:.1f} {b.x:.1f},{b.y:.1f}"
        return d, [((a.x + b.x) / 2, a.y - lift * 0.75)]
    if ya > yb:
        a, b = b, a
    start, end = (a.x + a.width / 4, a.y + a.height), (b.x + b.width / 4, b.y)
    mid = ((start[0] + end[0]) / 2, (start[1] + end[1]) / 2)
    return _path([start, end]), [mid, (start[0], start[1] + 14), (end[0], end[1] - 14)]


def _esc(s: str) -> str:
    return html.escape(s, quote=True)


def report_svg(report: dict[str, Any]) -> str:
    """The kernel graph of one graph_report as an <svg> element that scales to its container's width."""
    graph = report["graph"]
    boxes: dict[str, Box] = {}
    for unit in report.get("order", [k["name"] for k in report["kernels"]] + [e["name"] for e in report["externs"]]):
        k = next((k for k in report["kernels"] if k["name"] == unit), None)
        if k is not None:
            boxes[unit] = _box(unit, k["kind"], [("ops", k.get("label_ops") or ", ".join(k["ops"])),
                                                 ("where", k.get("where", "")), ("name", unit)],
                               f"{unit}\n{k['kind']} kernel of {', '.join(k['nodes'])}\n" + "\n".join(k["sources"]))
            continue
        e = next(e for e in report["externs"] if e["name"] == unit)
        boxes[unit] = _box(unit, "extern", [("ops", e.get("label_ops") or e["op"]), ("where", e.get("where", "")),
                                            ("name", f"{unit}: extern call")],
                           f"{unit}: {e['op']} (extern call)\n" + "\n".join(e["sources"]))
    flow = [(e["src"], e["dst"]) for e in report.get("edges", []) if e["src"] in boxes and e["dst"] in boxes]
    routes, width, height = layered_layout(boxes, flow)
    numbered = {(b["producer"], b["consumer"]): i + 1 for i, b in enumerate(report.get("boundaries", []))}
    arrow = f"arrow-{_esc(graph)}"   # marker ids are per graph: one page holds several pictures
    out = [f'<defs><marker id="{arrow}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
           f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{GREY}"/></marker>'
           f'<marker id="{arrow}-red" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
           f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{RED}"/></marker></defs>']
    badges: list[tuple[int, list[tuple[float, float]]]] = []   # (number, candidate places, best first)
    for (u, v) in flow:
        points = routes[f"{u}\0{v}"]
        n = numbered.get((u, v))
        if n is None:
            out.append(f'<path class="flow" d="{_path(points)}" fill="none" stroke="{GREY}" stroke-width="1.3" '
                       f'marker-end="url(#{arrow})"/>')
            continue
        out.append(f'<path class="boundary dependency" data-boundary="{n}" d="{_path(points)}" fill="none" '
                   f'stroke="{RED}" stroke-width="2.4" marker-end="url(#{arrow}-red)"/>')
        middles = [((p[0] + q[0]) / 2, (p[1] + q[1]) / 2) for p, q in zip(points, points[1:])]
        badges.append((n, sorted(middles, key=lambda m: abs(middles.index(m) - (len(middles) - 1) / 2))))
    rows = _rows(boxes)
    top = 0.0   # arcs over the first row reach above it: the viewBox grows upwards to show them
    for (u, v), n in numbered.items():
        if (u, v) in flow or u not in boxes or v not in boxes:
            continue
        d, places = _sibling_path(boxes[u], boxes[v], rows)
        badges.append((n, places))
        top = min(top, min(y for _, y in places) - 12, min(boxes[u].y, boxes[v].y) - 42)
        out.append(f'<path class="boundary sibling" data-boundary="{n}" d="{d}" fill="none" stroke="{RED}" '
                   'stroke-width="2" stroke-dasharray="6,4"/>')
    for b in boxes.values():
        left = b.x - b.width / 2
        out.append(f'<g class="node {b.kind}" data-name="{_esc(b.id)}"><title>{_esc(b.title)}</title>'
                   f'<rect x="{left:.1f}" y="{b.y:.1f}" width="{b.width:.1f}" height="{b.height:.1f}" rx="6" '
                   f'fill="{FILL[b.kind]}" stroke="#5f6368" stroke-width="1"/>')
        for i, (cls, text) in enumerate(b.lines):
            size, weight, color = {"ops": (12, "600", "#202124"), "where": (11, "400", "#3c4043"),
                                   "name": (10, "400", "#5f6368")}[cls]
            family = "monospace" if cls == "name" else "Helvetica, Arial, sans-serif"
            out.append(f'<text class="{cls}" x="{b.x:.1f}" y="{b.y + 6 + (i + 0.75) * LINE_H:.1f}" '
                       f'text-anchor="middle" font-family="{family}" font-size="{size}" font-weight="{weight}" '
                       f'fill="{color}">{_esc(text)}</text>')
        out.append("</g>")
    placed: list[tuple[float, float]] = []
    for n, places in badges:   # the first place not on another badge
        cx, cy = next((p for p in places if all(abs(p[0] - a) + abs(p[1] - b) > 24 for a, b in placed)), places[0])
        placed.append((cx, cy))
        out.append(f'<a href="#{_esc(graph)}-boundary-{n}"><g class="badge"><circle cx="{cx:.1f}" cy="{cy:.1f}" r="9" '
                   f'fill="#fff" stroke="{RED}" stroke-width="1.5"/><text x="{cx:.1f}" y="{cy + 4:.1f}" '
                   f'text-anchor="middle" font-family="Helvetica, Arial, sans-serif" font-size="11" '
                   f'font-weight="700" fill="{RED}">{n}</text></g></a>')
    out.append("</svg>")
    head = (f'<svg xmlns="http://www.w3.org/2000/svg" class="kernel-graph" '
            f'viewBox="0 {top:.0f} {width:.0f} {height - top:.0f}" width="100%" '
            f'style="max-width:{width:.0f}px;height:auto;display:block" role="img" aria-label="kernel graph of '
            f'{_esc(graph)}">')
    return "\n".join([head] + out)

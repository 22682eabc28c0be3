"""Where a graph's generated kernels meet: the boundaries fusion left, why each stayed, what it costs.

A *boundary* is a pair of generated Triton kernels that could have been one kernel: the consumer
reads what the producer wrote (a dependency), or both read the same buffer (siblings). Pairs with an
extern call, a fallback or a nop on one side can never fuse; they are only counted.

    flow = dataflow(sched, unit_names, input_names, nbytes, itemsize)
    boundaries = kernel_boundaries(flow, kernels, decisions, nbytes, bytes_per_s)
    never = never_fuse_summary(flow, kernels, externs, decisions)
    never_fuse_line(never)   "Of 22 refused candidate pairs: 9 lie at the kernel boundaries; 12 can never fuse, …"
"""
from __future__ import annotations

import dataclasses
import re
from collections import Counter
from typing import Any

import networkx as nx

from .why import reason_meaning

# ops that move no data (views, tuple items): left out of a label unless a kernel holds nothing else
_VIEW_OPS = {"view", "_unsafe_view", "reshape", "expand", "permute", "transpose", "t", "squeeze", "unsqueeze",
             "slice", "select", "alias", "split", "split_with_sizes", "as_strided", "getitem", "unbind",
             "_reshape_alias", "expand_as", "view_as"}
_SOURCE = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+)')

# Peak memory bandwidth from the vendors' data sheets, bytes/s, for GPUs the timings do not cover.
# Matched in order against the device name: the first key found in it wins.
NOMINAL_BANDWIDTH = [("H200", 4.8e12, "H200 HBM3e peak"), ("H100 PCIe", 2.0e12, "H100 PCIe HBM2e peak"),
                     ("H100 NVL", 3.9e12, "H100 NVL HBM3 peak"), ("H100", 3.35e12, "H100 SXM HBM3 peak"),
                     ("A100-SXM4-40GB", 1.555e12, "A100 40GB HBM2 peak"),
                     ("A100-PCIE-40GB", 1.555e12, "A100 40GB HBM2 peak"), ("A100", 2.0e12, "A100 80GB HBM2e peak")]
DEFAULT_NOMINAL = (3.35e12, "H100 SXM HBM3 peak")


def short_op(op: str) -> str:
    """'aten.var_mean.correction' → 'var_mean'; other names are kept."""
    parts = op.split(".")
    return parts[1] if len(parts) >= 2 and parts[0] in ("aten", "prims") else op


def unit_label(origins, fx_order: dict[str, int], fallback: str) -> dict[str, str]:
    """{'ops': 'add, relu', 'where': 'model.py:42'}: the ops in graph order and the user's source lines."""
    ordered = sorted(origins, key=lambda o: fx_order.get(o.node, len(fx_order)))
    ops = list(dict.fromkeys(short_op(o.op) for o in ordered))
    compute = [o for o in ordered if short_op(o.op) not in _VIEW_OPS]
    shown = [op for op in ops if op not in _VIEW_OPS] or ops or [fallback]
    text = ", ".join(shown[:5]) + (f" +{len(shown) - 5}" if len(shown) > 5 else "")
    lines: dict[str, set[int]] = {}
    for o in compute or ordered:
        m = _SOURCE.search(o.source or "")
        if m:
            lines.setdefault(m.group("path").rsplit("/", 1)[-1], set()).add(int(m.group("line")))
    where = "; ".join(f"{f}:{', '.join(str(n) for n in sorted(ns))}" for f, ns in lines.items())
    return {"ops": text, "where": where, "label": f"{text} — {where}" if where else text}


@dataclasses.dataclass
class Dataflow:
    """Who reads what from whom, at the level of kernels and extern calls ("units")."""

    order: list[str]                                  # units in schedule order
    members: dict[str, str]                           # scheduler node (bufN) → its unit
    reads: dict[str, dict[str, int]]                  # unit → buffer → bytes it loads of it
    edges: dict[tuple[str, str], list[str]]           # (producer unit or graph input, consumer) → buffers
    graph: nx.DiGraph                                 # units and inputs, dependency edges only

    def unit_of(self, scheduler_name: str) -> str | None:
        """The unit of a (possibly fused, 'buf8_buf9') scheduler node name, None when it spans several."""
        names = [scheduler_name] if scheduler_name in self.members else scheduler_name.split("_")
        units = {self.members.get(n) for n in names}
        return units.pop() if len(units) == 1 else None


def dataflow(sched, unit_names: list[str], input_names: set[str], nbytes: dict[str, int],
             itemsize: dict[str, int]) -> Dataflow:
    """unit_names: per scheduler group, its kernel name or extern buffer name."""
    from ..scheduler.dependencies import MemoryDep

    members = {m.name: unit for group, unit in zip(sched.nodes, unit_names) for m in group.get_nodes()}
    aliases = getattr(sched, "aliases", {}) or {}
    reads: dict[str, dict[str, int]] = {}
    edges: dict[tuple[str, str], list[str]] = {}
    graph = nx.DiGraph()
    graph.add_nodes_from(unit_names)
    for group, unit in zip(sched.nodes, unit_names):
        loads = reads.setdefault(unit, {})
        for dep in sorted(group.reads, key=lambda d: d.name):
            name = dep.name if dep.name in members or dep.name in input_names else aliases.get(dep.name, dep.name)
            src = members.get(name, name if name in input_names else None)
            if src is None or src == unit:
                continue
            size, whole = itemsize.get(name, 0), nbytes.get(name, 0)
            n = dep.numbytes(size, whole // size) if isinstance(dep, MemoryDep) and size else whole
            loads[name] = max(loads.get(name, 0), n)
            buffers = edges.setdefault((src, unit), [])
            if name not in buffers:
                buffers.append(name)
            graph.add_edge(src, unit)
    return Dataflow(list(unit_names), members, reads, edges, graph)


def _refused_pairs(decisions) -> dict[tuple[str, str], Any]:
    """Each refused pair once (as report["refused"] lists them), with its latest decision."""
    pairs: dict[tuple[str, str], Any] = {}
    for d in decisions:
        if not d.fused:
            pairs[(d.node1, d.node2)] = d
    return pairs


def kernel_boundaries(flow: Dataflow, kernels: list[dict], decisions, nbytes: dict[str, int],
                      bytes_per_s: float) -> list[dict[str, Any]]:
    """Each pair of generated kernels that could have been one, in schedule order, with reason and cost."""
    names = [k["name"] for k in kernels]
    is_kernel = set(names)
    position = {n: i for i, n in enumerate(flow.order)}
    pairs: dict[tuple[str, str], str] = {}
    for (src, dst), _ in flow.edges.items():
        if src in is_kernel and dst in is_kernel:
            pairs[(src, dst)] = "dependency"
    readers: dict[str, list[str]] = {}
    for unit in names:
        for buf in flow.reads.get(unit, {}):
            readers.setdefault(buf, []).append(unit)
    for buf, units in readers.items():   # siblings: consecutive readers of a buffer (as the scheduler pairs them)
        for a, b in zip(units, units[1:]):
            pairs.setdefault((a, b), "sibling")
    for d in decisions:
        a, b = flow.unit_of(d.node1), flow.unit_of(d.node2)
        if not d.fused and a in is_kernel and b in is_kernel and a != b:
            a, b = sorted((a, b), key=position.get)
            pairs.setdefault((a, b), "sibling")
    label = {k["name"]: k.get("label", k["name"]) for k in kernels}
    refusals: dict[frozenset, list] = {}
    for d in _refused_pairs(decisions).values():   # in decision order: the last is the latest round's
        refusals.setdefault(frozenset((flow.unit_of(d.node1), flow.unit_of(d.node2))), []).append(d)
    out = []
    for (a, b), relation in sorted(pairs.items(), key=lambda p: (position[p[0][1]], position[p[0][0]])):
        if relation == "dependency":
            passed = flow.edges[(a, b)]
            written = sum(nbytes.get(buf, 0) for buf in passed)
        else:
            passed = [buf for buf in flow.reads.get(b, {}) if buf in flow.reads.get(a, {})]
            written = 0
        read = sum(flow.reads[b].get(buf, 0) for buf in passed)
        refused = refusals.get(frozenset((a, b)), [])
        decision = refused[-1] if refused else None
        reason = decision.reason if decision is not None else (
            f"never a candidate pair (more than fusion_window other users of "
            f"{', '.join(passed) or 'their buffers'} lie between them)")
        between = sorted(nx.descendants(flow.graph, a) & nx.ancestors(flow.graph, b), key=position.get)
        out.append({
            "producer": a, "consumer": b, "relation": relation, "buffers": passed,
            "producer_label": label[a], "consumer_label": label[b],
            "node1": decision.node1 if decision else "", "node2": decision.node2 if decision else "",
            "reason": reason, "meaning": reason_meaning(reason), "refused_pairs": len(refused), "between": between,
            "bytes_written": written, "bytes_read": read,
            "seconds": (written + read) / bytes_per_s if bytes_per_s else None,
        })
    return out


def never_fuse_summary(flow: Dataflow, kernels: list[dict], externs: list[dict], decisions) -> dict[str, Any]:
    """The refused pairs with an extern call (matmul, conv, attention, fallback, nop) on one side, counted,
    beside how many refused pairs lie at boundaries and how many ended up in one kernel anyway."""
    # (a MultiOutput picks one result of the call before it: named as what it is, not by the IR's class)
    extern_op = {e["name"]: "result pick" if e["op"] == "MultiOutput" else short_op(e["op"]) for e in externs}
    is_kernel = {k["name"] for k in kernels}
    reasons, ops = Counter(), Counter()
    resolved = at_boundaries = 0
    refused = _refused_pairs(decisions)
    for d in refused.values():
        a, b = flow.unit_of(d.node1), flow.unit_of(d.node2)
        if a in extern_op or b in extern_op:
            reasons[d.reason] += 1
            ops.update(extern_op[u] for u in {a, b} if u in extern_op)
        elif a in is_kernel and a == b:
            resolved += 1
        elif a in is_kernel and b in is_kernel:
            at_boundaries += 1
    return {"pairs": sum(reasons.values()), "by_reason": dict(reasons.most_common()),
            "extern_ops": dict(ops.most_common()), "fused_later": resolved, "at_boundaries": at_boundaries,
            "refused": len(refused)}


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def never_fuse_line(summary: dict[str, Any]) -> str:
    """One line accounting for every refused pair, the never-fusable ones counted by reason."""
    parts = []
    if "at_boundaries" in summary:
        n = summary["at_boundaries"]
        parts.append(f"{n} {'lies' if n == 1 else 'lie'} at the kernel boundaries")
    if summary["pairs"]:
        reasons = ", ".join(f"{r} ×{n}" for r, n in summary["by_reason"].items())
        ops = ", ".join(f"{op} ×{n}" for op, n in summary["extern_ops"].items())
        parts.append(f"{summary['pairs']} can never fuse, an extern call being on one side ({reasons}; "
                     f"calls: {ops})")
    else:
        parts.append("none has an extern call on one side")
    if summary.get("fused_later"):
        parts.append(f"{summary['fused_later']} ended up in one kernel through other fusions")
    total = summary.get("refused", summary["pairs"] + summary.get("fused_later", 0))
    return f"Of {plural(total, 'refused candidate pair')}: " + "; ".join(parts) + "."


def bandwidth(kernels: list[dict], device) -> dict[str, Any]:
    """The bandwidth boundary costs are priced at: measured over the timed kernels, else a nominal peak."""
    timed = [k for k in kernels if k.get("time_ms")]
    if timed:
        moved = sum(k["bytes_read"] + k["bytes_written"] for k in timed)
        seconds = sum(k["time_ms"] for k in timed) / 1e3
        if moved and seconds:
            rate = moved / seconds
            return {"bytes_per_s": rate, "source": "measured",
                    "note": f"measured: {rate / 1e9:.0f} GB/s, the bytes over the time of this graph's "
                            f"{len(timed)} timed kernel{'s' if len(timed) != 1 else ''}"}
    rate, what = DEFAULT_NOMINAL
    where = "this graph ran on the CPU; the time is what the traffic would take on that GPU"
    if device is not None and getattr(device, "type", None) == "cuda":
        rate, what, where = _cuda_nominal(device)
    return {"bytes_per_s": rate, "source": "nominal",
            "note": f"nominal: {rate / 1e12:.2f} TB/s ({what}; {where}), no kernel timings in this report"}


def _cuda_nominal(device) -> tuple[float, str, str]:
    import torch

    try:
        props = torch.cuda.get_device_properties(device)
    except (RuntimeError, AssertionError):
        return (*DEFAULT_NOMINAL, "the device could not be queried")
    for key, rate, what in NOMINAL_BANDWIDTH:
        if key in props.name:
            return rate, what, props.name
    clock_khz, bus_bits = getattr(props, "memory_clock_rate", 0), getattr(props, "memory_bus_width", 0)
    if clock_khz and bus_bits:   # double data rate: two transfers per clock
        return clock_khz * 1e3 * 2 * bus_bits / 8, "memory clock × bus width", props.name
    return (*DEFAULT_NOMINAL, f"{props.name} unknown")


def human_bytes(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def human_seconds(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    for unit, scale in (("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.2f} {unit}"
    return f"{seconds * 1e9:.1f} ns"


def boundary_rows(report: dict[str, Any]) -> list[list[str]]:
    """The boundary table as text cells, for the terminal."""
    label = {k["name"]: k.get("label", k["name"]) for k in report["kernels"]}
    rows = []
    for i, b in enumerate(report.get("boundaries", []), 1):
        why = b["reason"] + (f" ({len(b['between'])} kernels/calls in between)" if b.get("between") else "")
        rows.append([str(i), f"{label[b['producer']]}  ({b['producer']})", f"{label[b['consumer']]}  ({b['consumer']})",
                     why, f"{human_bytes(b['bytes_written'])} + {human_bytes(b['bytes_read'])}",
                     human_seconds(b.get("seconds"))])
    return rows

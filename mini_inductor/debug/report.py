"""The fusion report of one compiled graph, as plain data (JSON-able) built from a GraphTrace.

    report = graph_report(trace)
    report["kernels"]   [{name, kind, nodes, ops, sources, label, bytes_read, bytes_written, time_ms}, ...]
    report["boundaries"][{producer, consumer, relation, buffers, reason, between, bytes_written, bytes_read,
                          seconds}, ...]   pairs of generated kernels that could have been one (boundaries.py)
    report["never_fuse"]{pairs, by_reason, extern_ops, fused_later}   refused pairs with an extern side, counted
    report["bandwidth"] {bytes_per_s, source: measured | nominal, note}   what boundary seconds are priced at
    report["edges"]     [{src, dst, buffers}, ...]         which kernel, call or input feeds which
    report["refused"]   [{node1, node2, reason}, ...]      every refused candidate pair, once
    report["fused"]     [{node1, node2, round}, ...]
    report["fallbacks"] [{op, count, why}, ...]
    report["externs"]   [{name, op, sources}, ...]
    report["memory"]    {planned_peak_bytes, estimated_bytes_moved, graphed_workspace_bytes} where known
    report["partitions"][{name, safe, reason, nodes, inputs, outputs}, ...] where it gives them
    report["overlap"]   {collectives: [{collective, op, wait, issued_at, waited_at, overlapped}, ...],
                         moves: [str, ...]}   each collective's span, and what the overlap pass moved
"""
from __future__ import annotations

import re
from typing import Any

from ..distributed.overlap import collective_spans
from ..lowering.ir import InputBuffer
from . import boundaries as bnd
from ..lowering.lowerings import LOWERINGS
from ..lowering import symbolic
from ..lowering.sizevars import static_int
from ..lowering.symbolic import hint
from ..scheduler.nodes import template_in


def _buffer_bytes(lowered) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for b in list(lowered.buffers) + [i for i in lowered.inputs if isinstance(i, InputBuffer)]:
        if getattr(b, "layout", None) is not None:
            try:
                sizes[b.name] = hint(b.layout.numel()) * b.layout.dtype.itemsize
            except NotImplementedError:
                pass
    for name, t in lowered.constants.items():
        sizes[name] = t.numel() * t.element_size()
    return sizes


def _kernel_launches(source: str) -> list[tuple[str, list[str]]]:
    """(kernel name, argument names) of each launch in the wrapper, in order."""
    launches = []
    for m in re.finditer(r"^\s*(triton_\w+)\[\(.*?\)\]\((.*)\)\s*$", source, re.M):
        args = [a.strip() for a in m.group(2).split(",")]
        launches.append((m.group(1), [a for a in args if re.fullmatch(r"[A-Za-z_]\w*", a)]))
    return launches


def _itemsizes(lowered) -> dict[str, int]:
    out = {}
    for b in list(lowered.buffers) + [i for i in lowered.inputs if isinstance(i, InputBuffer)]:
        if getattr(b, "layout", None) is not None:
            out[b.name] = b.layout.dtype.itemsize
    out.update({n: t.element_size() for n, t in lowered.constants.items()})
    return out


def _bytes_read(group, members: set[str], args: list[str], nbytes: dict[str, int], itemsize: dict[str, int]) -> int:
    """Bytes the kernel loads: per distinct access, the elements its index can reach (scheduler.md §16.6)."""
    from ..scheduler.dependencies import MemoryDep

    total, seen = 0, set()
    for node in group.get_nodes():
        for dep in node.reads:
            if dep.name in members or dep.name not in args or dep in seen:
                continue
            seen.add(dep)
            size = itemsize.get(dep.name, 0)
            whole = nbytes.get(dep.name, 0)
            total += dep.numbytes(size, whole // size) if isinstance(dep, MemoryDep) and size else whole
    return total


def graph_report(trace, timings: dict[str, float] | None = None) -> dict[str, Any]:
    """The report of one traced graph; timings: measured ms per launch by kernel name (GPU runs). A
    dynamic graph's bytes are at its traced sizes."""
    with symbolic.using(getattr(trace, "shapes", None)):
        return _graph_report(trace, timings)


def _graph_report(trace, timings: dict[str, float] | None = None) -> dict[str, Any]:
    sched, lowered, gen = trace.schedule, trace.lowered, trace.generated
    fx_order = {n.name: i for i, n in enumerate(trace.gm.graph.nodes)} if trace.gm is not None else {}
    nbytes = _buffer_bytes(lowered)
    itemsize = _itemsizes(lowered)
    launches = dict(_kernel_launches(gen.source))
    removed = set(getattr(gen, "removed_buffers", set()))
    kernels, externs, unit_names = [], [], []
    kernel_names = iter(gen.kernel_names)
    for node in sched.nodes:
        origins = node.origins
        ops = sorted({o.op for o in origins})
        sources = sorted({o.source for o in origins if o.source})
        template = template_in(node)
        as_cublas = template is not None and template.choice == "cublas"   # the ATen call ran instead
        # cuBLASLt applied the epilogue itself: one call, no kernel (scheduler/matmul_activation.py)
        in_lt = as_cublas and any(d.name == template.name and d.lt_epilogue for d in getattr(sched, "matmuls", ()))
        if node.is_extern() or as_cublas and (len(node.get_nodes()) == 1 or in_lt):
            op = "aten._addmm_activation.default" if in_lt else \
                getattr(node.node, "op_name", None) or str(getattr(template, "op", type(node.node).__name__))
            label = bnd.unit_label(origins, fx_order, bnd.short_op(op))
            # a MultiOutput picks one result of the call before it: name that call
            shown = f"output of {label['ops']}" if op == "MultiOutput" else bnd.short_op(op)
            externs.append({"name": node.name, "op": op, "sources": sources, "label_ops": shown,
                            "where": label["where"],
                            "label": f"{shown} — {label['where']}" if label["where"] else shown})
            unit_names.append(node.name)
            continue
        name = next(kernel_names, node.name)
        unit_names.append(name)
        label = bnd.unit_label(origins, fx_order, name)
        ms = (timings or {}).get(name)   # measured ms per launch (GPU runs)
        members = [n.name for n in node.get_nodes()]
        args = launches.get(name, [])
        written = [m for m in members if m not in removed]
        read = [a for a in args if a not in written]
        moved = _bytes_read(node, set(members), read, nbytes, itemsize) + sum(nbytes.get(w, 0) for w in written)
        kernels.append({
            # left to cuBLAS: the ATen call, then this kernel of the epilogue
            "cublas": str(template.op) if as_cublas else None,
            "name": name, "kind": ("template" if template is not None and not as_cublas else
                                   "reduction" if node.is_reduction() else "pointwise"), "nodes": members,
            "ops": ops, "sources": sources, "reads": read, "writes": written,
            "label": label["label"], "label_ops": label["ops"], "where": label["where"],
            "bytes_read": _bytes_read(node, set(members), read, nbytes, itemsize),
            "bytes_written": sum(nbytes.get(w, 0) for w in written),
            "time_ms": ms, "gb_per_s": moved / (ms * 1e6) if ms else None,
        })
    refused: dict[tuple[str, str], str] = {}
    fused = []
    for d in sched.decisions:
        if d.fused:
            fused.append({"node1": d.node1, "node2": d.node2, "round": d.round})
        else:
            refused.setdefault((d.node1, d.node2), d.reason)
    kernel_of = {n: k["name"] for k in kernels for n in k["nodes"]}

    def outcome(a: str, b: str) -> str:
        ka, kb = kernel_of.get(a.split("_")[0]), kernel_of.get(b.split("_")[0])
        return f"both end up in {ka} through other fusions" if ka is not None and ka == kb else ""
    fallbacks = [{"op": op, "count": n, "why": getattr(lowered, "fallback_reasons", {}).get(op) or _fallback_reason(op)}
                 for op, n in sorted(lowered.fallback_ops.items())]
    memory = {k: getattr(sched, k, None) or getattr(trace.record, k, None)
              for k in ("planned_peak_bytes", "estimated_bytes_moved")}
    # the cuBLAS workspace a CUDA-graph recording allocates besides the planned buffers
    memory["graphed_workspace_bytes"] = getattr(trace.record, "graphed_workspace_bytes", None)
    partitions = []
    for i, p in enumerate(getattr(sched, "partitions", None) or []):
        partitions.append({k: _plain(getattr(p, k, None)) for k in ("name", "safe", "reason", "nodes", "inputs", "outputs")}
                          | {"index": i})
    inputs = {i.name for i in lowered.inputs if isinstance(i, InputBuffer)} | set(lowered.constants)
    flow = bnd.dataflow(sched, unit_names, inputs, nbytes, itemsize)
    device = sched.nodes[0].get_device() if sched.nodes else None
    rate = bnd.bandwidth(kernels, device)
    return {
        "graph": trace.name, "cache_hit": bool(getattr(trace.record, "cache_hit", False)),
        "device": str(device) if device is not None else None,
        "nodes_before_fusion": sched.nodes_before_fusion, "groups": len(sched.nodes),
        "kernels": kernels, "externs": externs, "fused": fused,
        "refused": [{"node1": a, "node2": b, "reason": r, "outcome": outcome(a, b)} for (a, b), r in refused.items()],
        "boundaries": bnd.kernel_boundaries(flow, kernels, sched.decisions, nbytes, rate["bytes_per_s"]),
        "never_fuse": bnd.never_fuse_summary(flow, kernels, externs, sched.decisions), "bandwidth": rate,
        "order": unit_names, "edges": [{"src": s, "dst": d, "buffers": b} for (s, d), b in flow.edges.items()],
        "fallbacks": fallbacks, "memory": memory, "partitions": partitions,
        "overlap": {"collectives": collective_spans(sched.nodes),
                    "moves": [str(m) for m in getattr(sched, "overlap_moves", [])]},
        "removed_dead_nodes": list(sched.removed), "source_path": trace.record.source_path,
        "stage_seconds": dict(getattr(trace.record, "stage_seconds", {})),
        "layout": getattr(trace.record, "layout", ""),   # the channels-last pass (lowering/layout_opt.py)
        # each matmul: a Triton template (what fused into it) or cuBLAS (why), with max-autotune's timings
        "matmuls": [d.describe() for d in getattr(sched, "matmuls", [])]
        + list(getattr(lowered, "matmul_notes", [])),
        "dynamic_sizes": _dynamic_sizes(trace),
    }


def _dynamic_sizes(trace) -> list[str]:
    """A dynamic graph's size symbols, each with where the call reads it and its traced value:
    ["s33: size 0 of arg0_1 (traced at 3)", "u0: read from data by nonzero"]; [] for a static graph."""
    shapes = getattr(trace, "shapes", None)
    if shapes is None or not shapes.dynamic:
        return []
    placeholders = [n for n in trace.gm.graph.nodes if n.op == "placeholder"] if trace.gm is not None else []
    said = []
    for symbol, (index, kind, dim) in shapes.sources.items():
        name = placeholders[index].name if index < len(placeholders) else f"input {index}"
        where = {"size": f"size {dim} of {name}", "stride": f"stride {dim} of {name}",
                 "offset": f"storage offset of {name}"}.get(kind, f"int input {name}")
        if kind == "int":   # Dynamo passes a tensor's symbolic size as an int input too: name the tensor
            where += next((f", size {d} of {p.name}" for p in placeholders for d in _dims_of(p, symbol)), "")
        hint = shapes.hints.get(symbol)
        said.append(f"{symbol}: {where}" + (f" (traced at {int(hint)})" if hint is not None else ""))
    for symbol, (node, _) in shapes.unbacked.items():
        said.append(f"{symbol}: read from data by {node}")
    return said


def _dims_of(placeholder, symbol) -> list[int]:
    """The dims of a tensor input whose size is exactly `symbol`."""
    val = placeholder.meta.get("val")
    shape = getattr(val, "shape", ())
    return [d for d, size in enumerate(shape) if str(size) == str(symbol)]


def _plain(x):
    if isinstance(x, (list, tuple, set)):
        return [_plain(y) for y in x]
    if isinstance(x, (str, int, float, bool)) or x is None:
        return x
    return getattr(x, "name", str(x))


def _fallback_reason(op_name: str) -> str:
    registered = {str(k) for k in LOWERINGS}
    short = op_name.split("aten.", 1)[-1]
    if any(r.endswith(short) or r == short for r in registered):
        return "its lowering declined these arguments (dtype, device or variant not generated)"
    return "no lowering: runs as the ATen op"


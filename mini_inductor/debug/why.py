"""`mini-inductor why GRAPH A B`: one pair's fusion decision, read from an explain report.

    report["nodes"] = node_details(trace)      # explain adds this to every graph's report
    print(why(report, "buf0", "buf8"))        # raises UnknownNode for a name not in the graph

Works on the report's plain JSON data only (no torch, no compiler), so `why` answers at once.
A node name is a scheduler node (`buf3`) or a fused group (`buf0_buf1_buf2`, its members joined by "_").
"""
from __future__ import annotations

import difflib
import re
from typing import Any


# The scheduler's refusal reasons (scheduler/fusion.py) in a user's words, matched by prefix.
REASON_MEANINGS = [
    ("no shared data accessed alike", "they access what they share in different patterns (a transposed or "
                                      "broadcast read), so one kernel would not load or store less"),
    ("no shared data", "they access no buffer in common, so one kernel would not load or store less"),
    ("intermediate nodes", "other kernels or calls lie on the path from the first to the second"),
    ("memory deps did not match", "the second reads the first's output at other indices than it was written "
                                  "(e.g. transposed), so values cannot pass in registers"),
    ("fusing a write into a read", "the second overwrites, at other indices, a buffer the first reads"),
    ("numel/rnumel mismatch", "they loop over different sizes (elements or reduction length)"),
    ("nodes numel incompatibility", "the pointwise part's size is neither the reduction's input nor its output"),
    ("exceeds max fusion", "the kernel would hold more than config max_fusion_size nodes"),
    ("will increase peak memory", "they are far apart: one kernel would keep buffers alive longer"),
    ("will create cycle", "a path through other kernels leads from one to the other and back"),
    ("a scatter with atomics", "a scatter with atomic adds runs in a kernel of its own"),
    ("node1 must go before node2", "the second must run before the first"),
    ("device mismatch", "they run on different devices"),
    ("node1 is extern or nop", "the first is a library call (a matmul, attention, an op without a lowering) or "
                               "moves no data, and no generated kernel takes one in"),
    ("node2 is extern or nop", "the second is a library call (a matmul, attention, an op without a lowering) or "
                               "moves no data, and no generated kernel takes one in"),
]


def reason_meaning(reason: str) -> str:
    return next((meaning for prefix, meaning in REASON_MEANINGS if reason.startswith(prefix)), "")


class UnknownNode(LookupError):
    """A node name the graph does not have; the message lists the close matches or the known nodes."""


def node_details(trace) -> dict[str, dict[str, Any]]:
    """Per scheduler node of a traced graph: its ATen ops, the user's source lines and the buffers it reads."""
    details = {}
    for group in trace.schedule.nodes:
        for member in group.get_nodes():
            origins = getattr(member.node, "origins", ())
            details[member.name] = {
                "ops": sorted({o.op for o in origins}),
                "sources": sorted({o.source for o in origins if o.source}),
                "reads": sorted({d.name for d in member.reads} - {member.name}),
            }
    return details


def why(report: dict[str, Any], node_a: str, node_b: str) -> str:
    """Answer 'why were A and B (not) fused?' from one graph's report, with both nodes' ops and sources."""
    for name in (node_a, node_b):
        _check_known(report, name)
    lines = [_verdict(report, node_a, node_b)]
    for name in (node_a, node_b):
        lines.append("  " + _describe(report, name))
    decision = _refusal(report, node_a, node_b)
    if decision is not None and decision["reason"].startswith("intermediate nodes"):
        lines.append(_between(report, decision["node1"], decision["node2"]))
    return "\n".join(lines)


def _refusal(report, a: str, b: str) -> dict | None:
    return next((d for d in report["refused"] if {d["node1"], d["node2"]} == {a, b}), None)


def _verdict(report, a: str, b: str) -> str:
    for d in report["fused"]:
        if {d["node1"], d["node2"]} == {a, b}:
            return f"{a} and {b} were fused (round {d['round']})."
    d = _refusal(report, a, b)
    if d is not None:
        outcome = f" ({d['outcome']})" if d.get("outcome") else ""
        meaning = reason_meaning(d["reason"])
        return f"cannot fuse {d['node1']} with {d['node2']}: {d['reason']}{outcome}" + (
            f"\n  that is: {meaning}" if meaning else "")
    ka, kb = _kernel_of(report, a), _kernel_of(report, b)
    if ka is not None and ka == kb:
        return f"{a} and {b} are in the same kernel {ka} (fused through other nodes)."
    return (f"{a} and {b} were never a candidate pair: they share no buffer, or are further apart "
            f"than the fusion window, or one is an extern call.")


def _members(name: str) -> list[str]:
    return name.split("_")


def _known_nodes(report) -> set[str]:
    known = {n for k in report["kernels"] for n in k["nodes"]} | {e["name"] for e in report["externs"]}
    return known | set(report.get("nodes", {}))


def _check_known(report, name: str) -> None:
    known = _known_nodes(report)
    groups = {d[key] for d in report["fused"] + report["refused"] for key in ("node1", "node2")}
    if name in known or name in groups or all(m in known for m in _members(name)):
        return
    close = difflib.get_close_matches(name, sorted(known | groups), n=5)
    hint = f"did you mean {', '.join(close)}?" if close else f"nodes: {', '.join(_natural(known))}"
    raise UnknownNode(f"no node named {name} in graph {report['graph']}; {hint}")


def _natural(names) -> list[str]:
    """buf2 before buf10."""
    return sorted(names, key=lambda n: (len(n), n))


def _kernel_of(report, name: str) -> str | None:
    first = _members(name)[0]
    for k in report["kernels"]:
        if first in k["nodes"]:
            return k["name"]
    return None


def _describe(report, name: str) -> str:
    """`buf8 (kernel triton_…): aten.add.Tensor, … at model.py:51 `x = x + …``"""
    nodes = report.get("nodes", {})
    extern = {e["name"]: e for e in report["externs"]}
    ops: set[str] = set()
    sources: set[str] = set()
    for member in _members(name):
        if member in nodes:
            ops |= set(nodes[member]["ops"])
            sources |= set(nodes[member]["sources"])
        elif member in extern:
            ops.add(extern[member]["op"])
            sources |= set(extern[member]["sources"])
    kernel = _kernel_of(report, name)
    if kernel is None and _members(name)[0] in extern:
        where = "extern call"
    elif kernel is not None:
        where = f"kernel {kernel}"
    else:
        where = "removed"
    if not nodes and kernel is not None:   # a report from before node details: the kernel's ops
        k = next(k for k in report["kernels"] if k["name"] == kernel)
        ops, sources = set(k["ops"]), set(k["sources"])
    text = f"{name} ({where}): {', '.join(sorted(ops)) or 'ops unknown'}"
    for source in sorted(sources)[:3]:   # a file's line, or "in forward of Linear (...)" where Dynamo kept none
        text += f"\n      {'' if source.startswith('in ') else 'at '}{short_source(source)}"
    return text


def short_source(source: str) -> str:
    """'File "/a/b/model.py", line 51, in forward: x = f(x)' → 'model.py:51 (forward): x = f(x)'."""
    if not source.startswith('File "'):
        return source
    path, _, rest = source[len('File "'):].partition('", line ')
    if ", in " not in rest:   # no function named: 'File "f.py", line 4: code'
        line, _, code = rest.partition(": ")
        return f"{path.rsplit('/', 1)[-1]}:{line}: {code.strip()}"
    line, _, rest = rest.partition(", in ")
    func, _, code = rest.partition(": ")
    # the function Dynamo resumes after a graph break is the user's function, past the break
    func = re.sub(r"^torch_dynamo_resume_in_(.+)_at_\d+$", r"\1", func)
    return f"{path.rsplit('/', 1)[-1]}:{line} ({func}): {code.strip()}"


def _between(report, node1: str, node2: str) -> str:
    """The nodes that depend on node1 and that node2 depends on: fusing the pair would have to run them
    inside the one kernel, between its two halves."""
    nodes = report.get("nodes")
    if not nodes:
        return "  (this report has no node dependencies: run `mini-inductor explain` again to list the nodes in between)"
    consumers: dict[str, set[str]] = {}
    for name, info in nodes.items():
        for src in info["reads"]:
            consumers.setdefault(src, set()).add(name)
    first, second = set(_members(node1)), set(_members(node2))
    after_first = _reach(first, lambda n: consumers.get(n, ()))
    before_second = _reach(second, lambda n: nodes.get(n, {}).get("reads", ()))
    between = _natural((after_first & before_second) - first - second)
    if not between:
        return "  in between: no node found in the report's dependencies"
    rows = [f"  in between ({len(between)}): {node2} needs them, and they need {node1}:"]
    rows += ["    " + _describe(report, n).replace("\n", "\n    ") for n in between]
    return "\n".join(rows)


def _reach(start: set[str], step) -> set[str]:
    seen, todo = set(), list(start)
    while todo:
        for nxt in step(todo.pop()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen

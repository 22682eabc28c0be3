"""Buffer lifetimes: each buffer is freed right after the last node that uses it."""
from __future__ import annotations

from ..lowering.graph import LoweredGraph
from ..lowering.ir import InputBuffer, MultiOutput
from ..lowering.sizevars import product
from ..lowering.symbolic import hint
from .nodes import BaseSchedulerNode, SchedulerNode


def compute_last_use(nodes: list[BaseSchedulerNode], output_names: list[str], graph: LoweredGraph,
                     aliases: dict[str, str] | None = None,
                     releasable_inputs: set[str] = frozenset()) -> list[list[str]]:
    """Per node (in order), the buffers whose last use it is.

    Buffers produced in this graph, and the graph inputs in `releasable_inputs` (the caller hands
    those over: the wrapper drops its reference after their last use, so a boxed input can die
    before the call returns). Graph outputs are never freed. `aliases` maps a name sharing another's
    storage (a view, an in-place result) to its group's root: the root lives until the last use of
    any name in its group, and is kept if any of them is a graph output.
    """
    aliases = aliases or {}
    owned = {n.name for node in nodes for n in node.get_nodes()} | set(releasable_inputs)
    keep = set(output_names) | {aliases[n] for n in output_names if n in aliases}
    last: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for name in node.used_buffer_names() | node.get_names():
            if name in owned:
                last[name] = i
    for name, root in aliases.items():
        if name in last and root in owned:
            last[root] = max(last.get(root, 0), last[name])
    frees: list[list[str]] = [[] for _ in nodes]
    for name, i in last.items():
        if name not in keep:
            frees[i].append(name)
    return [sorted(f, key=_buffer_order) for f in frees]


def releasable_inputs(graph: LoweredGraph, output_names: list[str], aliases: dict[str, str],
                      mutated_roots: set[str]) -> set[str]:
    """Graph inputs the wrapper may let go of after their last use (scheduler.md §16.2).

    Not: graph outputs, inputs that an output views or aliases (their storage lives on in the
    output), inputs written in place (the caller reads the new values).
    """
    names = {b.name for b in graph.inputs if isinstance(b, InputBuffer)}
    kept_groups = {aliases.get(n, n) for n in list(output_names) + list(mutated_roots)}
    return {n for n in names if aliases.get(n, n) not in kept_groups}


def _buffer_order(name: str):
    digits = "".join(ch for ch in name if ch.isdigit())
    return (int(digits) if digits else 0, name)


def estimate_bytes_moved(nodes: list[BaseSchedulerNode], buffers: dict[str, tuple[int, int]],
                         output_names: list[str]) -> int:
    """Bytes read and written by all kernels and extern calls, "worst-case inputs, best-case fusion".

    `buffers` maps a name to (numel, itemsize). A buffer written and consumed inside one fused kernel
    is never in memory, so it costs nothing. A single SchedulerNode touches at most (its iteration
    count × accesses) elements of a buffer: a broadcast read of a small buffer costs its size once.
    """
    def nbytes(name: str) -> int:
        numel, itemsize = buffers.get(name, (0, 0))
        return numel * itemsize

    users: dict[str, set[int]] = {}
    for i, node in enumerate(nodes):
        for name in node.used_buffer_names():
            users.setdefault(name, set()).add(i)
    children: dict[str, int] = {}
    for node in nodes:
        if isinstance(getattr(node, "node", None), MultiOutput):
            parent = node.node.parent.name
            children[parent] = children.get(parent, 0) + nbytes(node.name)
    keep = set(output_names)
    total = 0
    for i, node in enumerate(nodes):
        if node.is_extern():
            if not isinstance(node.node, MultiOutput):
                total += sum(nbytes(d.name) for d in node.reads)
                total += nbytes(node.name) or children.get(node.name, 0)
            continue
        internal = {n for n in node.get_names() if n not in keep and users.get(n, set()) <= {i}}
        accesses: dict[str, int] = {}
        for dep in list(node.reads) + list(node.writes):
            if dep.name not in internal:
                accesses[dep.name] = accesses.get(dep.name, 0) + 1
        if isinstance(node, SchedulerNode):
            iterations = hint(product(node.body.sizes + node.body.reduction_sizes))
            for name, count in accesses.items():
                numel, itemsize = buffers.get(name, (0, 0))
                total += min(numel, iterations * count) * itemsize
        else:
            total += sum(nbytes(name) for name in accesses)
    return total

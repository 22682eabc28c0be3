"""Recomputing cheap pointwise buffers of a looped kernel where they are read, instead of storing them.

Lowering realizes a pointwise value that several consumers read (`exp(x - max)` of a softmax is
read by the sum and by the division). Fused into one looped kernel, the value is produced in one
loop over the row and read in a later one, so it would go to memory and back:

    loop 1:  max                      loop 1:  max
    loop 2:  e = exp(x - M); store e  loop 2:  s += exp(x - M)
             s += e               →
    loop 3:  load e; e / S            loop 3:  exp(x - M) / S

A kernel-local pointwise node whose body is cheap (few loads) is therefore never generated on its
own: each load of its buffer evaluates the node's body at the loaded element (`recompute_load`),
and the buffer is neither stored nor allocated.
"""
from __future__ import annotations

from typing import Any

import sympy

from ..lowering.ir import Layout, Pointwise
from ..lowering.sizevars import FloorDiv, ModularIndexing, simplify, static_int
from ..lowering.virtualized import ops
from ..scheduler.nodes import SchedulerNode

# a body loading more values than this is stored once rather than re-read by every loop using it
MAX_RECOMPUTED_LOADS = 4


def element_index(index: sympy.Expr, layout: Layout, ranges: dict) -> list[sympy.Expr] | None:
    """The element (one expression per dim) at storage offset `index` of a dense layout, or None
    when the layout is not dense (overlapping, gapped or offset) and an offset names no one element."""
    if layout.offset != 0:
        return None
    try:
        dims = sorted((static_int(st), static_int(s), d) for d, (s, st) in enumerate(zip(layout.size, layout.stride))
                      if static_int(s) != 1)
    except NotImplementedError:
        return None
    expected = 1
    for st, s, _ in dims:
        if st != expected:
            return None
        expected *= s
    out: list[sympy.Expr] = [sympy.Integer(0)] * len(layout.size)
    for st, s, d in dims:
        inner = FloorDiv(index, st) if expected == st * s else ModularIndexing(index, st, s)
        out[d] = simplify(inner, ranges)
    return out


def recomputable_nodes(nodes: list[SchedulerNode], kernel_local: set[str], inside_loop) -> dict[str, SchedulerNode]:
    """Pointwise members of a looped kernel whose values are recomputed where they are read."""
    found = {}
    for node in nodes:
        if node.is_reduction() or node.name not in kernel_local or not inside_loop(node):
            continue
        if not isinstance(node.node.data, Pointwise) or node.node.get_mutation_names():
            continue   # a scatter's store is not its value at one element
        layout = node.node.layout
        if element_index(sympy.Integer(0), layout, {}) is None:
            continue
        loads, _ = node.node.data.body_cost()
        if loads <= MAX_RECOMPUTED_LOADS:
            found[node.name] = node
    return found


def recompute_load(node: SchedulerNode, index: sympy.Expr, ranges: dict, dtype) -> Any | None:
    """The value `node` would have stored at `index`, evaluated by the ops handler in force (None when
    the index names no single element). `dtype` is the buffer's: the value is rounded to it as a store would."""
    element = element_index(index, node.node.layout, ranges)
    if element is None:
        return None
    return ops.to_dtype(node.node.data.inner_fn(element), dtype)

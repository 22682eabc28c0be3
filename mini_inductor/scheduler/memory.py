"""Buffer lifetimes: each buffer is freed right after the last node that uses it."""
from __future__ import annotations

from ..lowering.graph import LoweredGraph
from .nodes import BaseSchedulerNode


def compute_last_use(nodes: list[BaseSchedulerNode], output_names: list[str], graph: LoweredGraph) -> list[list[str]]:
    """Per node (in order), the buffers produced in this graph whose last use it is.

    Graph outputs are never freed; neither are graph inputs (the caller owns them).
    """
    produced = {n.name for node in nodes for n in node.get_nodes()}
    keep = set(output_names)
    last: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for name in node.used_buffer_names() | node.get_names():
            if name in produced:
                last[name] = i
    frees: list[list[str]] = [[] for _ in nodes]
    for name, i in last.items():
        if name not in keep:
            frees[i].append(name)
    return [sorted(f, key=_buffer_order) for f in frees]


def _buffer_order(name: str):
    digits = "".join(ch for ch in name if ch.isdigit())
    return (int(digits) if digits else 0, name)

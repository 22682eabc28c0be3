"""Fusion legality (with a reason for every refusal) and scoring."""
from __future__ import annotations

import dataclasses
import logging

from .dependencies import MemoryDep
from .nodes import BaseSchedulerNode, FusedSchedulerNode

fusion_log = logging.getLogger("mini_inductor.fusion")

# Horizontal pairs further apart than this in the original order would stretch buffer lifetimes.
HORIZONTAL_DISTANCE_LIMIT = 64


@dataclasses.dataclass
class FusionDecision:
    """One candidate pair considered: fused, or refused with a reason (the CLI and logs read these)."""

    node1: str
    node2: str
    round: int
    score: tuple | None
    fused: bool
    reason: str = ""


class WhyNoFuse:
    """Formats "cannot fuse A with B: reason" only when the fusion log is on."""

    def __init__(self, n1: BaseSchedulerNode, n2: BaseSchedulerNode):
        self.n1, self.n2 = n1, n2
        self.reason = ""

    def __call__(self, reason: str, *args) -> str:
        self.reason = reason % args if args else reason
        if fusion_log.isEnabledFor(logging.DEBUG):
            fusion_log.debug("cannot fuse %s with %s: %s", self.n1.name, self.n2.name, self.reason)
        return self.reason


def can_fuse(n1: BaseSchedulerNode, n2: BaseSchedulerNode, *, max_fusion_size: int,
             node_of: dict) -> str | None:
    """None when n1 (first) and n2 may share one kernel; otherwise the reason they may not."""
    why = WhyNoFuse(n1, n2)
    if n1 is n2:
        return why("same node")
    if n1.is_extern():
        return why("node1 is extern or nop")
    if n2.is_extern():
        return why("node2 is extern or nop")
    if n2.get_names() & n1.ancestors:
        return why("node1 must go before node2")
    if n1.get_device() != n2.get_device():
        return why("device mismatch (%s vs %s)", n1.get_device(), n2.get_device())
    if not (n1.used_buffer_names() & n2.used_buffer_names()):
        return why("no shared data")
    if len(n1.get_nodes()) + len(n2.get_nodes()) > max_fusion_size:
        return why("exceeds max fusion")
    if n1.get_names() & n2.ancestors:
        reason = _vertical(n1, n2, node_of)
        if reason:
            return why(reason)
    elif max(abs(n1.min_order - n2.max_order), abs(n2.min_order - n1.max_order)) > HORIZONTAL_DISTANCE_LIMIT:
        return why("will increase peak memory")
    reason = _backend(n1, n2)
    return why(reason) if reason else None


def _matches(read, write) -> bool:
    if not (isinstance(read, MemoryDep) and isinstance(write, MemoryDep)) or read.name != write.name:
        return False
    if read.is_indirect() or write.is_indirect():
        return False
    r, w = read.normalized(), write.normalized()
    if r.index != w.index:
        return False
    return len(r.sizes) >= len(w.sizes) and tuple(r.sizes[:len(w.sizes)]) == tuple(w.sizes)


def _vertical(n1, n2, node_of) -> str | None:
    names1 = n1.get_names()
    remaining = set()
    for dep in n2.unmet_dependencies:
        if not any(_matches(dep, w) for w in n1.writes):
            remaining.add(dep.name)
    if remaining & names1:
        return "memory deps did not match"
    for name in remaining:
        container = node_of.get(name)
        if container is not None and container.ancestors & names1:
            return "intermediate nodes between node1 & node2"
    for w in n2.writes:
        for r in n1.reads:
            if r.name == w.name and not _matches(r, w):
                return "fusing a write into a read with different indexing formula"
    return None


def _backend(n1, n2) -> str | None:
    _, numel1, rnumel1 = n1.group
    _, numel2, rnumel2 = n2.group
    red1, red2 = n1.is_reduction(), n2.is_reduction()
    if red1 and red2:
        return None if (numel1, rnumel1) == (numel2, rnumel2) else "numel/rnumel mismatch (reduce)"
    if not red1 and not red2:
        return None if (numel1, rnumel1) == (numel2, rnumel2) else "numel/rnumel mismatch (non-reduce)"
    pw, red = (n1, n2) if red2 else (n2, n1)
    _, numel_r, rnumel_r = red.group
    for member in pw.get_nodes():
        _, numel_p, _ = member.group
        if numel_p not in (numel_r * rnumel_r, numel_r):
            return "nodes numel incompatibility"
    return None


def will_fusion_create_cycle(n1, n2, node_of: dict) -> bool:
    """A path n1 → (other fused nodes) → n2 would make the fused node depend on itself."""
    combined = n1.get_names() | n2.get_names()
    combined_ancestors = (n1.ancestors | n2.ancestors) - combined
    visited: set[int] = set()

    def found_path(node) -> bool:
        if id(node) in visited:
            return False
        visited.add(id(node))
        if not isinstance(node, FusedSchedulerNode):
            return False
        if node.get_names() <= combined_ancestors:
            return False
        if node.ancestors & combined:
            return True
        return any(found_path(node_of[a]) for a in node.ancestors - combined_ancestors if a in node_of)

    return any(found_path(node_of[a]) for a in combined_ancestors if a in node_of)


def score_fusion(n1: BaseSchedulerNode, n2: BaseSchedulerNode, buffer_bytes: dict[str, int]) -> tuple:
    """(like-with-like saves memory, bytes shared, -distance): higher fuses first."""
    memory = sum(buffer_bytes.get(name, 0) for name in n1.used_buffer_names() & n2.used_buffer_names())
    distance = max(abs(n1.min_order - n2.max_order), abs(n2.min_order - n1.max_order))
    return (memory > 0, n1.is_reduction() == n2.is_reduction() and memory > 0, memory, -distance)

"""Fusion legality (with a reason for every refusal) and scoring."""
from __future__ import annotations

import dataclasses
import logging
from typing import Callable

from ..lowering.ir import Buffer
from ..lowering.sizevars import canonical_vars
from .dependencies import MemoryDep
from .nodes import BaseSchedulerNode, FusedSchedulerNode, SchedulerNode, template_in

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
    """The reason a pair may not fuse. The scheduler logs "cannot fuse A with B: reason" once per
    pair and reason (a pair refused again in a later round is not logged or recorded twice)."""

    def __init__(self, n1: BaseSchedulerNode, n2: BaseSchedulerNode):
        self.n1, self.n2 = n1, n2
        self.reason = ""

    def __call__(self, reason: str, *args) -> str:
        self.reason = reason % args if args else reason
        return self.reason


def can_fuse(n1: BaseSchedulerNode, n2: BaseSchedulerNode, *, max_fusion_size: int,
             node_of: dict, buffer_bytes: dict[str, int],
             template_check: Callable[[BaseSchedulerNode, BaseSchedulerNode], str | None] | None = None
             ) -> str | None:
    """None when n1 (first) and n2 may share one kernel; otherwise the reason they may not.

    `template_check(n1, n2)`: the scheduler's own reasons against a matmul template taking n2 as an
    epilogue or n1 as a prologue (scheduler/matmul_choice.py `fusion_check`), or None."""
    why = WhyNoFuse(n1, n2)
    if n1 is n2:
        return why("same node")
    if n1.is_extern():
        return why("node1 is extern or nop")
    if n2.is_extern():
        return why("node2 is extern or nop")
    if n2.bits & n1.ancestor_bits:
        return why("node1 must go before node2")
    if n1.mutations or n2.mutations:
        return why("a scatter with atomics (%s) runs in a kernel of its own",
                   n1.name if n1.mutations else n2.name)
    if n1.get_device() != n2.get_device():
        return why("device mismatch (%s vs %s)", n1.get_device(), n2.get_device())
    if n1.is_template() or n2.is_template():
        reason = _template(n1, n2)
        if reason is None and template_check is not None:
            reason = template_check(n1, n2)
        if reason:
            return why(reason)
        if n2.is_template():   # a prologue: computed where the template loads it, by its own rules
            if len(n1.get_nodes()) + len(n2.get_nodes()) > max_fusion_size:
                return why("exceeds max fusion")
            return None
    if shared_bytes(n1, n2, buffer_bytes) == 0:
        common = sorted(set(_accesses(n1)) & set(_accesses(n2)))
        if common:   # they do share a buffer, so say how they differ rather than that nothing is shared
            return why("no shared data accessed alike: each accesses %s in a different order "
                       "(a transposed or broadcast read)", ", ".join(common))
        return why("no shared data")
    if len(n1.get_nodes()) + len(n2.get_nodes()) > max_fusion_size:
        return why("exceeds max fusion")
    if n1.bits & n2.ancestor_bits:
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
        if container is not None and container.ancestor_bits & n1.bits:
            return "intermediate nodes between node1 & node2"
    for w in n2.writes:
        for r in n1.reads:
            if r.name == w.name and not _matches(r, w):
                return "fusing a write into a read with different indexing formula"
    return None


def _template(n1, n2) -> str | None:
    """A matmul template group (n1) takes pointwise consumers of its outputs over the same iteration
    space (epilogues); reads of its output at another index are refused by `_vertical`."""
    if n2.is_template():
        return "a matmul template fuses with no other template" if n1.is_template() else _prologue(n1, n2)
    if not n1.bits & n2.ancestor_bits:
        return "a matmul template fuses only with consumers of its output (epilogues)"
    if n2.is_reduction():
        return "a reduction is not a matmul template's epilogue"
    if n2.group[1] != n1.group[1]:
        return f"epilogue of {n2.group[1]} elements, the template's output has {n1.group[1]}"
    return None


def _prologue(n1, n2) -> str | None:
    """n1 computed inside template group n2 where the template loads its input (a cast or scale of
    it): one pointwise node writing, contiguously, a buffer the template reads whole (not a view).
    That it has no other reader is the scheduler's check (matmul_choice.fusion_check)."""
    if not isinstance(n1, SchedulerNode) or n1.is_reduction():
        return "a matmul template's prologue is one pointwise node"
    t = template_in(n2)
    if t.batched:
        return "a bmm template takes no prologue"
    names = [x.name if isinstance(x, Buffer) else x.data.name for x in (t.a, t.b)]
    if names[0] == names[1]:
        return "a matmul template of one buffer by itself takes no prologue"
    if n1.name not in names:
        return "a matmul template takes as prologue only the producer of one of its inputs"
    operand = (t.a, t.b)[names.index(n1.name)]
    if not isinstance(operand, Buffer) and not _permutes(operand.layout, n1.node.layout):
        return "a matmul template takes a prologue only through a permutation of its buffer (a transpose)"
    lay = n1.node.layout
    (write,) = [w.normalized() for w in n1.writes]
    if not lay.is_contiguous() or lay.offset != 0 or not isinstance(write, MemoryDep) or \
            len(write.sizes) != 1 or write.index != canonical_vars(1)[0]:
        return "a matmul template's prologue must write its buffer contiguously"
    return None


def _permutes(view, base) -> bool:
    """`view` (a strided layout over `base`'s storage) holds every element of `base` once: its dims
    are a permutation of the contiguous `base`'s (a transposed weight)."""
    if view.offset != 0 or sorted(int(s) for s in view.size) != sorted(int(s) for s in base.size):
        return False
    order = sorted(zip((int(st) for st in view.stride), (int(s) for s in view.size)), reverse=True)
    expected = 1
    for stride, size in reversed(order):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


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


def will_fusion_create_cycle(n1, n2, node_of: dict, names_by_order: list[str] | None = None,
                             fused_bits: int | None = None) -> bool:
    """A path n1 → (other fused nodes) → n2, or back, would make the fused node depend on itself.

    Ancestor sets are of the nodes before fusion, so only fused containers can add paths they do not
    show: search backwards from the pair's ancestors through fused containers only.
    `names_by_order[i]` names the node of bit i; `fused_bits` has the bits of all fused members.
    """
    if names_by_order is None:
        names_by_order = _names_by_order(node_of)
    if fused_bits is None:
        fused_bits = sum(c.bits for c in {id(c): c for c in node_of.values()}.values()
                         if isinstance(c, FusedSchedulerNode))
    combined = n1.bits | n2.bits
    combined_ancestors = (n1.ancestor_bits | n2.ancestor_bits) & ~combined
    visited: set[int] = set()

    def fused_containers(mask: int):
        """Fused containers with a member in `mask` that could add a path: not already visited and
        not made only of nodes that already count as ancestors."""
        mask &= fused_bits
        while mask:
            low = mask & -mask
            container = node_of[names_by_order[low.bit_length() - 1]]
            mask &= ~(container.bits | low)
            if container.bits & ~combined_ancestors and id(container) not in visited:
                yield container

    def found_path(node) -> bool:
        visited.add(id(node))
        if node.ancestor_bits & combined:
            return True
        return any(found_path(c) for c in fused_containers(node.ancestor_bits & ~combined_ancestors))

    # Start from the fused containers that straddle the ancestor set (members inside and outside it).
    # Find them from whichever side has fewer fused members: usually few fused nodes lie outside.
    inside = fused_bits & combined_ancestors
    outside = fused_bits & ~combined_ancestors & ~combined
    if _popcount(outside) < _popcount(inside):
        starts = (c for c in fused_containers(outside) if c.bits & combined_ancestors)
    else:
        starts = fused_containers(combined_ancestors)
    return any(found_path(c) for c in starts)


def _popcount(x: int) -> int:
    return x.bit_count() if hasattr(x, "bit_count") else bin(x).count("1")


def _names_by_order(node_of: dict) -> list[str]:
    members = {m.min_order: m.name for c in node_of.values() for m in c.get_nodes()}
    return [members.get(i, "") for i in range(max(members) + 1)] if members else []


def _accesses(node: BaseSchedulerNode) -> dict[str, list]:
    """Buffer name → the node's accesses of it (MemoryDeps in normalized form); cached on the node."""
    cached = getattr(node, "_accesses_cache", None)
    if cached is None:
        cached = {}
        for dep in node.reads | node.writes:
            cached.setdefault(dep.name, []).append(dep.normalized() if isinstance(dep, MemoryDep) else dep)
        node._accesses_cache = cached
    return cached


def _same_data(a, b) -> bool:
    """Two accesses touch the same elements in the same iteration (a broadcast may drop trailing loops)."""
    if isinstance(a, MemoryDep) and isinstance(b, MemoryDep):
        if a.index != b.index or a.is_indirect() or b.is_indirect():
            return False
        short, long_ = (a.sizes, b.sizes) if len(a.sizes) <= len(b.sizes) else (b.sizes, a.sizes)
        return tuple(long_[:len(short)]) == tuple(short)
    return a == b


def shared_bytes(n1: BaseSchedulerNode, n2: BaseSchedulerNode, buffer_bytes: dict[str, int]) -> int:
    """Bytes both nodes access the same way: what one kernel would read or write once instead of twice.

    Accesses compare in canonical form, so a producer's write and its consumer's elementwise read
    match, and so do two elementwise reads; a transposed read of the same buffer shares nothing.
    """
    acc1, acc2 = _accesses(n1), _accesses(n2)
    if len(acc1) > len(acc2):
        acc1, acc2 = acc2, acc1
    total = 0
    for name, deps1 in acc1.items():
        deps2 = acc2.get(name)
        if deps2 and any(_same_data(a, b) for a in deps1 for b in deps2):
            total += buffer_bytes.get(name, 1)
    return total


def score_fusion(n1: BaseSchedulerNode, n2: BaseSchedulerNode, buffer_bytes: dict[str, int]) -> tuple:
    """(saves memory, like-with-like saves memory, bytes shared, -distance): higher fuses first."""
    memory = shared_bytes(n1, n2, buffer_bytes)
    distance = max(abs(n1.min_order - n2.max_order), abs(n2.min_order - n1.max_order))
    return (memory > 0, n1.is_reduction() == n2.is_reduction() and memory > 0, memory, -distance)

"""Scheduling for overlap: each collective issued as early as its inputs allow, each wait as late as
its readers allow, so that communication runs while independent kernels compute.

    fused order                      after reorder_for_overlap
    ───────────────────────────      ────────────────────────────────
    k0  x = relu(a)                  k0  x = relu(a)
    k1  y = sin(b)                   ag  g = all_gather(x)     ← issued as soon as x exists
    ag  g = all_gather(x)            k1  y = sin(b)            ← computes while g is in flight
    w   g = wait(g)                  k2  z = y * 2
    k2  z = y * 2                    w   g = wait(g)           ← waited just before its first reader
    k3  out = g @ z                  k3  out = g @ z

Rules that keep it correct:
- a node moves only past nodes it does not depend on, nor they on it (every dependency counts: data,
  and the ordering deps around mutations, scheduler/mutation.py);
- collectives keep their relative order (every rank must issue the same collectives in the same
  order); waits may pass each other;
- a collective that a CUDA graph may capture (policy.py) does not move past a node that it may not
  (`unsafe`): the move would cut a graphed partition in two; one on CUDA that it may not capture (a
  gloo group's) does not move at all, for the same reason (and it waits on the host anyway).

A memory budget (option `overlap_memory_budget`, bytes): each collective's result is allocated from
its issue to its wait, so moving either widens that span. A move stops where the results in flight
across a node would pass the budget (the node where it stopped is named in the move); without it, an
FSDP step issuing every layer's all-gather at the start would hold the whole model gathered at once.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

from .collectives import is_collective, is_wait


@dataclasses.dataclass(frozen=True)
class OverlapMove:
    """One collective issued earlier, or one wait done later, than in the fused order."""

    node: str                   # the scheduler node (a CollectiveKernel's or WaitKernel's buffer)
    op: str                     # its op, "_c10d_functional.all_gather_into_tensor.default"
    kind: str                   # "issue early" or "wait late"
    overlapped: tuple[str, ...]  # the nodes it now runs across (at most 8 named)
    count: int                  # how many nodes in all
    budget_stop: str = ""       # the node the memory budget stopped it at, if it did

    def __str__(self) -> str:
        more = self.count - len(self.overlapped)
        names = ", ".join(self.overlapped) + (f" and {more} more" if more > 0 else "")
        where = "before" if self.kind == "issue early" else "after"
        verb = "issued" if self.kind == "issue early" else "waited for"
        stop = f" (the memory budget stopped it at {self.budget_stop})" if self.budget_stop else ""
        return f"{verb} {self.node} ({self.op.split('.')[1] if '.' in self.op else self.op}) {where} {names}{stop}"


def _kernel(node):
    buf = getattr(node, "node", None)
    return buf if node.is_extern() else None


def reorder_for_overlap(nodes: Sequence, unsafe: Callable[[object], bool] = lambda n: False,
                        budget: int | None = None, nbytes: Callable[[object], int] = lambda n: 0
                        ) -> tuple[list, list[OverlapMove]]:
    """`nodes` (scheduled, fused) reordered for overlap, and what moved. `unsafe(node)`: the node
    cannot be captured in a CUDA graph (see the module's docstring). `budget`: the most bytes of
    collective results in flight across any node (None: no limit); `nbytes(node)`: a collective's."""
    kinds = ["collective" if is_collective(_kernel(n)) else "wait" if is_wait(_kernel(n)) else "" for n in nodes]
    if "collective" not in kinds:
        return list(nodes), []
    from ..scheduler.partition import predecessors   # (here: the scheduler package imports this module)
    preds = predecessors(nodes)
    succs: list[set[int]] = [set() for _ in nodes]
    for i, p in enumerate(preds):
        for j in p:
            succs[j].add(i)
    capturable = [bool(k) and not getattr(_kernel(n), "capture_reason", "x") for n, k in zip(nodes, kinds)]
    # an uncapturable collective or wait on CUDA stays where it is, and bounds the moves of the others
    pinned = [bool(k) and not capturable[i] and _kernel(nodes[i]).get_device().type == "cuda"
              for i, k in enumerate(kinds)]
    blocks = [bool(unsafe(n)) and (not k or pinned[i]) for i, (n, k) in enumerate(zip(nodes, kinds))]
    collective = [k == "collective" for k in kinds]
    kinds = [k if not pinned[i] else "" for i, k in enumerate(kinds)]

    # each wait's collective (by index), and each collective's result size: what is in flight
    index = {name: k for k, n in enumerate(nodes) for name in n.get_names()}
    issuer = {i: index.get(getattr(_kernel(nodes[i]).collective, "name", None))
              for i, k in enumerate(kinds) if k == "wait"}
    size = {i: nbytes(nodes[i]) for i, c in enumerate(collective) if c}

    def in_flight(order: list[int], j: int) -> int:
        """Bytes of collective results allocated while node j runs (issued before it, waited after)."""
        pos = {n: k for k, n in enumerate(order)}
        return sum(size.get(c, 0) for w, c in issuer.items()
                   if c is not None and pos[c] < pos[j] < pos[w])

    def over_budget(order: list[int], j: int, extra: int) -> bool:
        return budget is not None and extra > 0 and in_flight(order, j) + extra > budget

    order = list(range(len(nodes)))
    moves: list[OverlapMove] = []
    for i in [i for i, k in enumerate(kinds) if k == "collective"]:
        at = order.index(i)
        to, stop = at, ""
        while to > 0:
            j = order[to - 1]
            if j in preds[i] or collective[j] or (capturable[i] and blocks[j]):
                break
            if over_budget(order, j, size.get(i, 0)):
                stop = nodes[j].name
                break
            to -= 1
        if to < at:
            moves.append(_move(nodes, i, order[to:at], "issue early", stop))
            order[to:at + 1] = [i] + order[to:at]
    for i in reversed([i for i, k in enumerate(kinds) if k == "wait"]):
        at = order.index(i)
        to, stop = at, ""
        while to + 1 < len(order):
            j = order[to + 1]
            if j in succs[i] or (capturable[i] and blocks[j]):
                break
            if issuer.get(i) is not None and over_budget(order, j, size.get(issuer[i], 0)):
                stop = nodes[j].name
                break
            to += 1
        if to > at:
            moves.append(_move(nodes, i, order[at + 1:to + 1], "wait late", stop))
            order[at:to + 1] = order[at + 1:to + 1] + [i]
    return [nodes[i] for i in order], moves


def _move(nodes, i: int, across: list[int], kind: str, stop: str = "") -> OverlapMove:
    return OverlapMove(nodes[i].name, _kernel(nodes[i]).op_name, kind,
                       tuple(nodes[j].name for j in across[:8]), len(across), stop)


def collective_spans(nodes: Sequence) -> list[dict]:
    """Per collective of a schedule, where it is issued and where it is waited for (positions in
    `nodes`), and the nodes that run in between: what the schedule's description and the fusion
    report show. A coalesced collective has a row per result it is waited for by."""
    position = {name: k for k, n in enumerate(nodes) for name in n.get_names()}
    rows = []
    for k, n in enumerate(nodes):
        kernel = _kernel(n)
        if not is_wait(kernel):
            continue
        source = kernel.inputs()[0]
        producer = getattr(source, "parent", source)
        issued = position.get(producer.name)
        if issued is None:
            continue
        rows.append({"collective": producer.name, "op": producer.op_name.split(".")[1], "wait": n.name,
                     "issued_at": issued, "waited_at": k,
                     "overlapped": [m.name for m in nodes[issued + 1:k] if not is_wait(_kernel(m))]})
    return rows


def overlap_summary(nodes: Sequence) -> list[str]:
    """A line per collective (see collective_spans)."""
    lines = []
    for row in collective_spans(nodes):
        between = len(row["overlapped"])
        lines.append(f"{row['op']} {row['collective']} issued at {row['issued_at']}, waited at {row['waited_at']} "
                     f"({row['wait']}): {between} node{'s' if between != 1 else ''} overlap it")
    return lines

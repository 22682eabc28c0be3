"""Scheduler nodes: what the scheduler orders and fuses.

    SchedulerNode             one ComputedBuffer (a Pointwise, Reduction or Scan loop nest)
    ExternKernelSchedulerNode an ATen call; never fused
    TemplateSchedulerNode     a matmul template (ir.MatmulTemplate): takes pointwise epilogues
    FusedSchedulerNode        an ordered list of SchedulerNodes that becomes one kernel (a template's
                              group: the template first, then its epilogues)
"""
from __future__ import annotations

import torch

from ..errors import SchedulingError
from ..lowering.ir import Buffer, ComputedBuffer, ExternKernel, MatmulTemplate, MultiOutput, Origin
from ..lowering.sizevars import canonical_vars, product
from ..lowering.symbolic import size_value
from .dependencies import Dep, LoopBody, MemoryDep, StarDep, analyze_body


class BaseSchedulerNode:
    name: str
    reads: set[Dep]
    writes: set[Dep]
    unmet_dependencies: set[Dep]
    min_order: int = 0
    max_order: int = 0
    # Sets of nodes as bits of an int, bit i = the node at position i of the order before fusion:
    # a union is one OR, so ancestor sets of long chains stay cheap (no quadratic set copies).
    bits: int = 0                     # this node's members
    ancestor_bits: int = 0            # every node this one depends on, transitively (members excluded)
    mutations: list[str] = []         # buffers this node writes in place (extern calls, scatters; see mutation.py)

    def get_nodes(self) -> list["BaseSchedulerNode"]:
        return [self]

    def get_names(self) -> set[str]:
        return {n.name for n in self.get_nodes()}

    def is_extern(self) -> bool:
        return False

    def is_reduction(self) -> bool:
        return False

    def is_template(self) -> bool:
        """A matmul template, or a fused group that starts with one."""
        return False

    def used_buffer_names(self) -> set[str]:
        return {d.name for d in self.reads | self.writes}

    @property
    def origins(self) -> tuple[Origin, ...]:
        seen: dict[Origin, None] = {}
        for n in self.get_nodes():
            for o in n.node.origins:
                seen[o] = None
        return tuple(seen)

    def __repr__(self):
        return f"{type(self).__name__}({self.name})"


class SchedulerNode(BaseSchedulerNode):
    def __init__(self, node: ComputedBuffer):
        self.node = node
        self.name = node.name
        self.body: LoopBody = analyze_body(node)
        self._group: tuple | None = None
        self.reads = set(self.body.reads)
        self.writes = set(self.body.writes)
        # a scatter adds into another buffer: it reads that buffer's old contents, all of them
        self.reads |= {StarDep(name) for name in node.get_mutation_names()}
        if self.is_reduction() and not node.is_scan:
            # a reduction's store uses only the outer loops (a scan's, every loop)
            self.writes = {MemoryDep(d.name, d.index, tuple(self.body.sizes)) for d in self.writes}
        self.unmet_dependencies = set()

    def is_reduction(self) -> bool:
        return self.node.is_reduction

    def get_device(self) -> torch.device:
        return self.node.get_device()

    @property
    def group(self) -> tuple:
        """(device, numel, rnumel); computed once, as fusion asks for it per candidate pair."""
        if self._group is None:
            numel = size_value(product(self.body.sizes))
            rnumel = size_value(product(self.body.reduction_sizes)) if self.is_reduction() else 1
            self._group = (self.get_device(), numel, rnumel)
        return self._group


class ExternKernelSchedulerNode(BaseSchedulerNode):
    def __init__(self, node: Buffer):
        self.node = node
        self.name = node.name
        if isinstance(node, MultiOutput):
            self.reads = {StarDep(node.parent.name)}
        else:
            assert isinstance(node, ExternKernel)
            self.reads = {StarDep(b.name) for b in node.inputs()}
        self.writes = {StarDep(node.name)}
        self.unmet_dependencies = set()

    def is_extern(self) -> bool:
        return True

    def get_device(self) -> torch.device:
        return self.node.get_device()


class TemplateSchedulerNode(BaseSchedulerNode):
    """A matmul template. It reads its inputs whole (StarDeps: a tile reads rows and columns) and
    writes its output element by element over [M, N] or [B, M, N], so that a consumer reading the
    output at the same index matches that write and can fuse as an epilogue (fusion.py)."""

    def __init__(self, node: MatmulTemplate):
        self.node = node
        self.name = node.name
        self.reads = {StarDep(b.name) for b in node.inputs()}
        sizes = tuple(node.layout.size)
        index = node.layout.index(canonical_vars(len(sizes)))
        self.writes = {MemoryDep(node.name, index, sizes)}
        self.unmet_dependencies = set()

    def is_template(self) -> bool:
        return True

    def get_device(self) -> torch.device:
        return self.node.get_device()

    @property
    def group(self) -> tuple:
        return (self.get_device(), size_value(product(self.node.layout.size)), 1)


class FusedSchedulerNode(BaseSchedulerNode):
    """Several SchedulerNodes in one kernel; takes its reduction member's group."""

    def __init__(self, snodes: list[SchedulerNode]):
        self.snodes = snodes
        self.name = "_".join(n.name for n in snodes)
        names = {n.name for n in snodes}
        writes: set[Dep] = set().union(*(n.writes for n in snodes))
        self.writes = writes
        self.reads = {d for n in snodes for d in n.reads if not (d.name in names and d in writes)}
        self.unmet_dependencies = {d for n in snodes for d in n.unmet_dependencies if d.name not in names}
        self.min_order = min(n.min_order for n in snodes)
        self.max_order = max(n.max_order for n in snodes)
        self.bits = 0
        ancestor_bits = 0
        for n in snodes:
            self.bits |= n.bits
            ancestor_bits |= n.ancestor_bits
        self.ancestor_bits = ancestor_bits & ~self.bits

    @staticmethod
    def fuse(a: BaseSchedulerNode, b: BaseSchedulerNode) -> "FusedSchedulerNode":
        # members keep the original (topological) order, whatever order the pair came in
        members = sorted(a.get_nodes() + b.get_nodes(), key=lambda n: n.min_order)
        return FusedSchedulerNode(members)  # type: ignore[arg-type]

    def get_nodes(self):
        return list(self.snodes)

    def is_reduction(self) -> bool:
        return any(n.is_reduction() for n in self.snodes)

    def is_template(self) -> bool:
        return any(n.is_template() for n in self.snodes)

    def get_device(self) -> torch.device:
        return self.snodes[0].get_device()

    @property
    def group(self) -> tuple:
        for n in self.snodes:
            if n.is_reduction() or n.is_template():
                return n.group
        return self.snodes[0].group


def template_in(node: BaseSchedulerNode) -> MatmulTemplate | None:
    """The matmul template of a scheduler node (alone, or fused with its prologues and epilogues), or None."""
    if not isinstance(node, BaseSchedulerNode) or not node.is_template():
        return None
    return next(m.node for m in node.get_nodes() if isinstance(m, TemplateSchedulerNode))


def template_parts(node: BaseSchedulerNode) -> tuple[list, "TemplateSchedulerNode", list]:
    """(prologue nodes, the template, epilogue nodes) of a template group, in kernel order."""
    members = node.get_nodes()
    at = next(i for i, m in enumerate(members) if isinstance(m, TemplateSchedulerNode))
    return members[:at], members[at], members[at + 1:]


def create_node(buf: Buffer, graph: str | None = None) -> BaseSchedulerNode:
    """The scheduler node of one lowered buffer. Every buffer must name the FX nodes it came from
    (kernel names, source-line comments, reports and provenance all read them): none is a bug in
    the lowering that made it, raised here rather than compiled into an anonymous kernel."""
    if not buf.origins:
        raise SchedulingError(f"buffer {buf.name} ({buf!r}) has no origin FX node; the lowering that "
                              "created it must record the ATen node it came from", graph=graph)
    if isinstance(buf, ComputedBuffer):
        return SchedulerNode(buf)
    if isinstance(buf, MatmulTemplate):
        return TemplateSchedulerNode(buf)
    return ExternKernelSchedulerNode(buf)

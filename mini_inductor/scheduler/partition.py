"""Graph partitions: the ordered nodes cut into runs that a CUDA graph can capture, and runs it cannot.

    [k0 k1 mm k2] [nonzero] [k3 k4]      ← scheduled order
     partition_0   unsafe_0  partition_1
     safe          unsafe    safe

A node is cudagraph-unsafe when it runs on the CPU or copies between devices, when its output size
depends on data (nonzero, .item()), when ATen syncs with the device to run it (boolean-mask indices,
an error check read on the host), when it reads a graph input's memory outside the input's view (an
as_strided with a storage offset: a CUDA graph replays on a copy of the view), or when its ATen op is
tagged `cudagraph_unsafe`. Each partition
knows its inputs (buffers read but produced elsewhere, graph inputs, buffers whose last use it holds)
and its outputs (buffers it produces that are used after it, or are graph outputs).

Before the cut, `reorder_for_partitions` moves independent safe and unsafe work apart so that each
kind forms as few runs as possible: every safe run is one CUDA graph to record and replay.
"""
from __future__ import annotations

import bisect
import dataclasses
import heapq

import sympy
import torch

from ..lowering import symbolic
from ..lowering.ir import ExternKernel, InputBuffer, MultiOutput
from .nodes import BaseSchedulerNode, template_in

aten = torch.ops.aten

# Tags of ATen ops whose output size (or host value) depends on the data: they sync with the device.
_DATA_DEPENDENT_TAGS = {getattr(torch.Tag, t) for t in ("dynamic_output_shape", "data_dependent_output")
                        if hasattr(torch.Tag, t)}
DATA_DEPENDENT_OPS = {aten.nonzero.default, aten._local_scalar_dense.default, aten.item.default,
                      aten.is_nonzero.default}
# Untagged ops that copy a device value to the host: a linalg op's error codes, checked on the CPU.
SYNCING_OPS = {aten._linalg_check_errors.default}
# Indexing ops that turn boolean (or uint8) mask indices into positions with nonzero, a device sync;
# the output size of index_put does not show it (it is the input's), so the indices are looked at.
MASK_INDEXED_OPS = {aten.index.Tensor, aten._unsafe_index.Tensor, aten.index_put.default, aten.index_put_.default,
                    aten._unsafe_index_put.default, aten._index_put_impl_.default}
_UNSAFE_TAG = getattr(torch.Tag, "cudagraph_unsafe", None)
# ATen ops (overload packets) whose CUDA kernels run through a cuBLAS or cuBLASLt handle: a warm-up or
# recording of a partition that calls one allocates a cuBLAS workspace (runtime/cudagraphs/cublas_workspace.py).
CUBLAS_OPS = frozenset({
    "aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm", "aten.addbmm", "aten.mv", "aten.addmv",
    "aten.dot", "aten.vdot", "aten.matmul", "aten.linear", "aten._addmm_activation", "aten._int_mm",
    "aten._scaled_mm", "aten._grouped_mm", "aten._scaled_grouped_mm", "aten.triangular_solve",
    "aten.linalg_solve_triangular",
})

# Ops whose CUDA kernels always run through cuBLASLt; aten.addmm does when its bias is 1-d (the bias
# goes in the matmul's epilogue, beta == 1). cuBLASLt takes a workspace of its own besides cuBLAS's.
CUBLASLT_OPS = frozenset({"aten._addmm_activation", "aten._scaled_mm", "aten._scaled_grouped_mm"})
_ADDMM = frozenset({"aten.addmm"})


@dataclasses.dataclass
class GraphPartition:
    """A maximal run of scheduled nodes that are all cudagraph-safe, or all unsafe."""

    name: str                    # "partition_0" (safe) or "unsafe_1"
    safe: bool
    reason: str                  # why unsafe ("" when safe)
    nodes: list[str]             # scheduler node (group) names, in order
    node_indices: list[int]      # their positions in Schedule.nodes
    inputs: list[str] = dataclasses.field(default_factory=list)
    outputs: list[str] = dataclasses.field(default_factory=list)
    has_kernels: bool = False    # holds GPU work: a generated kernel or a library call (else not worth graphing)
    cublas_calls: list[str] = dataclasses.field(default_factory=list)  # its extern calls that run cuBLAS
    cublaslt_calls: list[str] = dataclasses.field(default_factory=list)  # ... of them, those through cuBLASLt


def _in(ops: frozenset[str], op_name: str) -> bool:
    """Whether the op named "aten.mm.default" (or the packet "aten.mm") is one of `ops` (packets)."""
    return op_name in ops or op_name.rsplit(".", 1)[0] in ops


def calls_cublas(op_name: str) -> bool:
    """Whether the ATen op named "aten.mm.default" (or "aten.mm") runs through cuBLAS on CUDA."""
    return _in(CUBLAS_OPS, op_name)


def calls_cublaslt(node: ExternKernel) -> bool:
    """Whether this extern call runs through cuBLASLt on CUDA (see CUBLASLT_OPS)."""
    if _in(CUBLASLT_OPS, node.op_name):
        return True
    if not _in(_ADDMM, node.op_name) or not node.args:
        return False
    bias = node.args[0]
    beta = node.kwargs.get("beta", 1)
    return hasattr(bias, "get_size") and len(bias.get_size()) == 1 and beta == 1


def cudagraph_unsafe_reason(node: BaseSchedulerNode, user_unsafe: frozenset[str] = frozenset()) -> str:
    """Why this node cannot be captured in a CUDA graph, or "" if it can.

    `user_unsafe`: ATen op names the user listed (option cudagraph_unsafe_ops), as "aten.mm" (every
    overload) or "aten.mm.default".
    """
    if not node.is_extern():
        return ""
    buf = node.node
    if isinstance(buf, MultiOutput):
        return cudagraph_unsafe_reason_of(buf.parent, user_unsafe)
    return cudagraph_unsafe_reason_of(buf, user_unsafe)


def cudagraph_unsafe_reason_of(buf, user_unsafe: frozenset[str] = frozenset()) -> str:
    if not isinstance(buf, ExternKernel):
        return ""
    op = buf.op
    if user_unsafe and (buf.op_name in user_unsafe or buf.op_name.rsplit(".", 1)[0] in user_unsafe):
        return f"{buf.op_name} is listed in cudagraph_unsafe_ops"
    tags = set(getattr(op, "tags", ()))
    if op in DATA_DEPENDENT_OPS or tags & _DATA_DEPENDENT_TAGS:
        return f"data-dependent output ({buf.op_name})"
    if op in MASK_INDEXED_OPS and _has_mask_indices(buf):
        return f"boolean-mask indices: ATen syncs to find their positions ({buf.op_name})"
    if op in SYNCING_OPS or (op is aten.histc.default and _histc_reads_its_range(buf)) \
            or (op is aten.multinomial.default and _multinomial_checks_on_the_host(buf)):
        return f"syncs with the device ({buf.op_name})"
    if _UNSAFE_TAG is not None and _UNSAFE_TAG in tags:
        return f"{buf.op_name} is tagged cudagraph_unsafe"
    if getattr(buf, "defines_symbols", ()):
        # `call` reads the symbol from the result on the host before any partition that takes it: a call
        # inside a partition would bind it there, after the partition was passed it (a slice defines one
        # under torch 2.11: NameError on CUDA, session 35)
        return f"defines the size {', '.join(buf.defines_symbols)} that later code reads ({buf.op_name})"
    # sizes of symbols the graph's inputs give (a dynamic graph's) are known before the call, unbacked
    # ones once the (unsafe) call that defines them has run; others come from data
    known = symbolic.current().known()
    if buf.layout is not None and any(isinstance(s, sympy.Expr) and s.free_symbols - known
                                      for s in buf.layout.size):
        return f"data-dependent output sizes ({buf.op_name})"
    if getattr(buf, "capture_reason", ""):   # a collective or its wait (distributed/policy.py)
        return buf.capture_reason
    if buf.get_device().type == "cpu":
        return f"extern kernel on the CPU ({buf.op_name})"
    if _reads_outside_an_input(buf):
        return f"a storage offset into a graph input's memory, which a CUDA graph's copy of it lacks ({buf.op_name})"
    if buf.cudagraph_unsafe:
        return f"device copy or CPU tensor ({buf.op_name})"
    return ""


def _reads_outside_an_input(buf: ExternKernel) -> bool:
    """as_strided with an explicit storage offset of a graph input (or a view of one) in ATen: the offset
    counts from the input's storage, which the copy a CUDA graph replays on does not hold (it starts at
    the view; session 48's first CUDA run of test_views.py read other elements)."""
    if getattr(buf.op, "overloadpacket", None) is not aten.as_strided:
        return False
    offset = buf.args[3] if len(buf.args) > 3 else buf.kwargs.get("storage_offset")
    inputs = buf.inputs()
    return offset is not None and bool(inputs) and isinstance(inputs[0], InputBuffer)


def _has_mask_indices(buf: ExternKernel) -> bool:
    indices = buf.args[1] if len(buf.args) > 1 else buf.kwargs.get("indices", ())
    return any(i is not None and hasattr(i, "get_dtype") and i.get_dtype() in (torch.bool, torch.uint8)
               for i in indices or ())


def _histc_reads_its_range(buf: ExternKernel) -> bool:
    """histc with min == max (the default 0, 0) takes the range from the data's min and max, on the host."""
    args = list(buf.args) + [None] * 4
    low = args[2] if args[2] is not None else buf.kwargs.get("min", 0)
    high = args[3] if args[3] is not None else buf.kwargs.get("max", 0)
    return low == high


def _multinomial_checks_on_the_host(buf: ExternKernel) -> bool:
    """multinomial without replacement, or of one sample, reads its input's validity on the host."""
    args = list(buf.args) + [None] * 3
    samples = args[1] if args[1] is not None else buf.kwargs.get("num_samples", 1)
    replacement = args[2] if args[2] is not None else buf.kwargs.get("replacement", False)
    return not replacement or samples == 1


def partition_nodes(nodes: list[BaseSchedulerNode], frees_after: list[list[str]], output_names: list[str],
                    input_order: dict[str, int], user_unsafe: frozenset[str] = frozenset()) -> list[GraphPartition]:
    """Cut `nodes` into safe/unsafe runs and compute each run's inputs and outputs (deterministic order)."""
    runs: list[tuple[bool, list[int], list[str]]] = []
    for i, node in enumerate(nodes):
        reason = cudagraph_unsafe_reason(node, user_unsafe)
        safe = not reason
        if runs and runs[-1][0] == safe:
            runs[-1][1].append(i)
            if reason and reason not in runs[-1][2]:
                runs[-1][2].append(reason)
        else:
            runs.append((safe, [i], [reason] if reason else []))

    used_in: dict[str, list[int]] = {}
    for k, (_, indices, _) in enumerate(runs):
        for i in indices:
            for name in nodes[i].used_buffer_names():
                used_in.setdefault(name, []).append(k)
    last_use_in = {name: k for k, (_, indices, _) in enumerate(runs) for i in indices for name in frees_after[i]}
    outputs = set(output_names)

    def order(name: str):
        if name in input_order:
            return (0, input_order[name], name)
        digits = "".join(ch for ch in name if ch.isdigit())
        return (1, int(digits) if digits else 0, name)

    partitions = []
    counts = {True: 0, False: 0}
    for k, (safe, indices, reasons) in enumerate(runs):
        produced = {n for i in indices for n in nodes[i].get_names()}
        inputs = {n for i in indices for n in nodes[i].used_buffer_names() if n not in produced}
        # a buffer from an earlier partition that dies here is passed in to be freed; a graph input
        # is not (a CUDA graph would copy it in just to drop it): `call` lets go of it itself
        inputs |= {n for n, where in last_use_in.items() if where == k and n not in produced and n not in input_order}
        outs = {n for n in produced if n in outputs or any(u > k for u in used_in.get(n, ()))}
        externs = [nodes[i].node for i in indices if nodes[i].is_extern() and isinstance(nodes[i].node, ExternKernel)]
        # a matmul template that may run as its cuBLAS call (scheduler/matmul_choice.py)
        externs += [t.as_extern() for i in indices for t in [template_in(nodes[i])]
                    if t is not None and t.choice != "template"]
        partitions.append(GraphPartition(
            name=f"{'partition' if safe else 'unsafe'}_{counts[safe]}", safe=safe, reason="; ".join(reasons),
            nodes=[nodes[i].name for i in indices], node_indices=list(indices),
            inputs=sorted(inputs, key=order), outputs=sorted(outs, key=order),
            has_kernels=any(not nodes[i].is_extern() or isinstance(nodes[i].node, ExternKernel) for i in indices),
            cublas_calls=[e.op_name for e in externs if calls_cublas(e.op_name)],
            cublaslt_calls=[e.op_name for e in externs if calls_cublas(e.op_name) and calls_cublaslt(e)]))
        counts[safe] += 1
    return partitions


@dataclasses.dataclass(frozen=True)
class PartitionMove:
    """One node the partition-aware reorder moved ahead of nodes of the other kind (safe vs unsafe)."""

    node: str                    # the node (group) that moved
    overtook: tuple[str, ...]    # the first (at most 8) of the nodes that ran before it and now run after it
    safe: bool                   # the moved node is cudagraph-safe
    reason: str
    count: int = 0               # how many nodes it overtook in all

    def __str__(self) -> str:
        more = self.count - len(self.overtook)
        names = ", ".join(self.overtook) + (f" and {more} more" if more > 0 else "")
        return f"moved {self.node} before {names}: {self.reason}"


def count_runs(safe: list[bool]) -> tuple[int, int]:
    """(safe runs, unsafe runs) of a sequence of node kinds: the partitions it would be cut into."""
    runs = [s for i, s in enumerate(safe) if i == 0 or s != safe[i - 1]]
    return sum(runs), len(runs) - sum(runs)


def predecessors(nodes: list[BaseSchedulerNode]) -> list[set[int]]:
    """For each node of a schedule, the positions of the nodes it depends on (data and ordering deps)."""
    owner = {name: i for i, n in enumerate(nodes) for name in n.get_names()}
    preds: list[set[int]] = []
    for i, n in enumerate(nodes):
        deps = {owner[d.name] for m in n.get_nodes() for d in m.unmet_dependencies if d.name in owner}
        deps.discard(i)
        preds.append(deps)
    return preds


def reorder_for_partitions(nodes: list[BaseSchedulerNode], user_unsafe: frozenset[str] = frozenset()
                           ) -> tuple[list[BaseSchedulerNode], list[PartitionMove]]:
    """Reorder independent safe and unsafe work so that the nodes fall into as few partitions as possible.

        fused order:  gpu1 cpu1 gpu2 cpu2      (gpu2 does not read cpu1)   2 graphs
        reordered:    gpu1 gpu2 cpu1 cpu2                                  1 graph

    A list schedule over the dependencies (data deps and the ordering deps around mutations): it runs
    every ready node of one kind, then every ready node of the other kind, and so on; among ready
    nodes of a kind the earliest in the fused order goes first. Running a kind until nothing of it is
    ready leaves the fewest switches for the start kind it began with; both start kinds are tried.
    Unsafe nodes keep their relative order (they may sync, touch host state or draw from a CPU
    generator); a safe node may overtake unsafe nodes, and safe nodes that wait on an unsafe one.
    The new order is kept only if it has fewer graphed (safe) partitions, or as many and fewer
    partitions in all; the memory plan is computed afterwards, on the order returned.
    """
    kinds = [not cudagraph_unsafe_reason(n, user_unsafe) for n in nodes]
    before = count_runs(kinds)
    if before[0] <= 1 and before[1] <= 1:
        return nodes, []
    preds = predecessors(nodes)
    unsafe = [i for i, s in enumerate(kinds) if not s]
    for a, b in zip(unsafe, unsafe[1:]):
        preds[b].add(a)
    best = None
    for start in (True, False):
        order = _alternating_schedule(preds, kinds, start)
        runs = count_runs([kinds[i] for i in order])
        if best is None or runs < best[0]:
            best = (runs, order)
    runs, order = best
    if runs >= before:
        return nodes, []
    moves = _describe_moves(nodes, kinds, order, before[0], runs[0])
    return [nodes[i] for i in order], moves


def _alternating_schedule(preds: list[set[int]], kinds: list[bool], start: bool) -> list[int]:
    """Topological order that drains the ready nodes of one kind before switching to the other."""
    succs: list[list[int]] = [[] for _ in preds]
    waiting = [len(p) for p in preds]
    for i, p in enumerate(preds):
        for j in p:
            succs[j].append(i)
    ready: dict[bool, list[int]] = {True: [], False: []}
    for i, w in enumerate(waiting):
        if w == 0:
            heapq.heappush(ready[kinds[i]], i)
    order: list[int] = []
    kind = start
    while len(order) < len(preds):
        if not ready[kind]:
            kind = not kind
            if not ready[kind]:
                raise RuntimeError("partition reorder: the dependencies form a cycle")
            continue
        i = heapq.heappop(ready[kind])
        order.append(i)
        for j in succs[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready[kinds[j]], j)
    return order


def _describe_moves(nodes, kinds, order, safe_before: int, safe_after: int) -> list[PartitionMove]:
    """Each node that now runs ahead of nodes of the other kind that ran before it in the fused order."""
    position = [0] * len(order)
    for k, i in enumerate(order):
        position[i] = k
    earlier: dict[bool, list[tuple[int, int]]] = {True: [], False: []}   # kind → sorted (position, index)
    moves = []
    for i, node in enumerate(nodes):
        others = earlier[not kinds[i]]
        first = bisect.bisect_right(others, (position[i], len(nodes)))
        if first < len(others):
            overtook = tuple(nodes[j].name for _, j in others[first:first + 8])   # in their new order
            what = "cudagraph-safe" if kinds[i] else "unsafe"
            why = f"{what}, depends on none of them ({safe_before} → {safe_after} graphed partitions)"
            moves.append(PartitionMove(node.name, overtook, kinds[i], why, len(others) - first))
        bisect.insort(earlier[kinds[i]], (position[i], i))
    return moves

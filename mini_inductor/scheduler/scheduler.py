"""The Scheduler: IR buffers → ordered, fused kernel groups with buffer lifetimes.

    nodes from buffers → dead-node elimination → dependencies (data deps; alias groups; ordering
    deps around mutations, see mutation.py) → topological order
    → fusion rounds (legality with reasons, cycle check, score; ordering deps made redundant by a
    round pruned before the next) → partition-aware reorder
    → last-use freeing (graph inputs too, where the caller hands them over) → bytes-moved estimate
    → overlap: collectives issued early, waits done late (distributed/overlap.py)
    → partitions (cudagraph-safe runs, with their inputs and outputs)
"""
from __future__ import annotations

import dataclasses
import logging
import time

import sympy
from torch.utils._pytree import tree_leaves

from ..config import Config
from ..distributed.overlap import OverlapMove, overlap_summary, reorder_for_overlap
from ..lowering.graph import LoweredGraph
from ..lowering.ir import Buffer, InputBuffer, Layout, MultiOutput, ReinterpretView
from ..lowering.symbolic import hint
from .dependencies import Dep, MemoryDep, WeakDep
from .fusion import FusionDecision, can_fuse, score_fusion, will_fusion_create_cycle
from .matmul_choice import MatmulDecision, choose_matmuls, fusion_check
from .memory import compute_last_use, estimate_bytes_moved, releasable_inputs
from .mutation import add_mutation_deps, alias_groups
from .nodes import BaseSchedulerNode, FusedSchedulerNode, create_node
from .partition import (GraphPartition, PartitionMove, cudagraph_unsafe_reason, partition_nodes,
                        reorder_for_partitions)

fusion_log = logging.getLogger("mini_inductor.fusion")
schedule_log = logging.getLogger("mini_inductor.schedule")

MAX_FUSION_ROUNDS = 10


@dataclasses.dataclass
class Schedule:
    """What codegen receives: the ordered kernel groups and when each buffer dies."""

    graph: LoweredGraph
    nodes: list[BaseSchedulerNode]               # in execution order; fused groups are FusedSchedulerNodes
    frees_after: list[list[str]]                 # per node: buffers whose last use it is
    output_names: list[str]
    decisions: list[FusionDecision]
    nodes_before_fusion: int
    removed: list[str]                           # dead nodes eliminated
    seconds: float = 0.0
    partitions: list[GraphPartition] = dataclasses.field(default_factory=list)
    estimated_bytes_moved: int = 0               # bytes the kernels and extern calls read and write
    aliases: dict[str, str] = dataclasses.field(default_factory=dict)    # name sharing a storage → its root
    mutations: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # storage root → mutating nodes
    partition_moves: list[PartitionMove] = dataclasses.field(default_factory=list)  # the partition-aware reorder
    unused_inputs: list[str] = dataclasses.field(default_factory=list)  # graph inputs no node reads: dropped first
    overlap_moves: list[OverlapMove] = dataclasses.field(default_factory=list)  # collectives early, waits late
    matmuls: list[MatmulDecision] = dataclasses.field(default_factory=list)  # each matmul template's fate

    def mutated_inputs(self) -> list[int]:
        """Positions of the graph inputs that the graph writes in place."""
        return [b.index for b in self.graph.inputs if isinstance(b, InputBuffer) and b.name in self.mutations]

    def describe(self) -> str:
        """The schedule after fusion, a group a line, with the refusals (for the debug dir)."""
        lines = [f"# schedule of {self.graph.name}: {self.nodes_before_fusion} nodes → {len(self.nodes)} groups"]
        for i, node in enumerate(self.nodes):
            kind = "extern" if node.is_extern() else ("template" if node.is_template() else
                                                      "reduction" if node.is_reduction() else "pointwise")
            members = ", ".join(n.name for n in node.get_nodes())
            ops = ", ".join(sorted({o.op for o in node.origins}))
            frees = f"  frees {', '.join(self.frees_after[i])}" if self.frees_after[i] else ""
            lines.append(f"{i:3d} {kind:9s} [{members}]  ops: {ops}{frees}")
        refused = [d for d in self.decisions if not d.fused]
        if refused:
            lines.append("# refused candidate pairs")
            lines += [f"cannot fuse {d.node1} with {d.node2}: {d.reason}" for d in refused]
        if self.removed:
            lines.append("# removed dead nodes: " + ", ".join(self.removed))
        inputs = {b.name: b.index for b in self.graph.inputs if isinstance(b, InputBuffer)}
        for root, nodes in self.mutations.items():
            which = f" (input {inputs[root]})" if root in inputs else ""
            lines.append(f"# {root}{which} mutated by {', '.join(nodes)}")
        lines += [f"# matmul {d.describe()}" for d in self.matmuls]
        lines += [f"# matmul {note}" for note in self.graph.matmul_notes]
        lines.append(f"# estimated bytes moved: {self.estimated_bytes_moved}")
        lines += [f"# reorder for partitions: {move}" for move in self.partition_moves]
        lines += [f"# overlap: {move}" for move in self.overlap_moves]
        lines += [f"# collective: {line}" for line in overlap_summary(self.nodes)]
        for p in self.partitions:
            why = f" ({p.reason})" if p.reason else ""
            lines.append(f"# {p.name}{why}: nodes {', '.join(p.nodes)}; inputs {', '.join(p.inputs) or '-'}; "
                         f"outputs {', '.join(p.outputs) or '-'}")
        return "\n".join(lines)


def schedule(graph: LoweredGraph, cfg: Config) -> Schedule:
    return Scheduler(graph, cfg).run()


class Scheduler:
    def __init__(self, graph: LoweredGraph, cfg: Config):
        self.graph = graph
        self.cfg = cfg
        self.decisions: list[FusionDecision] = []

    def run(self) -> Schedule:
        start = time.perf_counter()
        nodes = [create_node(b, self.graph.name) for b in self.graph.buffers]
        output_names = self._output_names()
        nodes, removed = self._eliminate_dead(nodes, output_names)
        self._compute_dependencies(nodes)
        self._order_after_symbol_defs(nodes)
        groups = alias_groups(nodes)
        mutations = add_mutation_deps(nodes, groups)
        aliases = groups.aliases()
        nodes = self._topological_sort(nodes)
        for i, n in enumerate(nodes):
            n.min_order = n.max_order = i
            n.bits = 1 << i
        self._compute_ancestors(nodes)
        self._names_by_order = [n.name for n in nodes]
        before = len(nodes)
        nodes = self._fuse(nodes)
        matmuls = choose_matmuls(nodes, self.cfg.matmul_templates, self.cfg.max_autotune,
                                 self.cfg.cublaslt_activations, set(self._output_names()))
        user_unsafe = self.cfg.unsafe_op_names()
        moves: list[PartitionMove] = []
        if self.cfg.reorder_for_partitions:
            nodes, moves = reorder_for_partitions(nodes, user_unsafe)
            if moves:
                schedule_log.info("%s: reorder for partitions moved %d nodes (%s)", self.graph.name, len(moves),
                                  moves[0].reason.rsplit("(", 1)[-1].rstrip(")"))
            for move in moves:
                schedule_log.debug("%s: %s", self.graph.name, move)
        nbytes = self._buffer_bytes()
        nodes, overlap = reorder_for_overlap(nodes, lambda n: cudagraph_unsafe_reason(n, user_unsafe),
                                             self.cfg.overlap_memory_budget,
                                             lambda n: sum(nbytes.get(name, 0) for name in n.get_names()))
        for move in overlap:
            schedule_log.debug("%s: %s", self.graph.name, move)
        input_order = {b.name: i for i, b in enumerate(self.graph.inputs) if b is not None}
        input_order.update({name: len(input_order) + i for i, name in enumerate(self.graph.constants)})
        released = releasable_inputs(self.graph, output_names, aliases, set(mutations))
        frees = compute_last_use(nodes, output_names, self.graph, aliases, released)
        dying = {name for names in frees for name in names}
        unused_inputs = sorted((n for n in released if n not in dying), key=input_order.get)
        moved = estimate_bytes_moved(nodes, self._buffer_sizes(), output_names)
        partitions = partition_nodes(nodes, frees, output_names, input_order, user_unsafe)
        result = Schedule(self.graph, nodes, frees, output_names, self.decisions, before, removed,
                          time.perf_counter() - start, partitions, moved, aliases, mutations, moves, unused_inputs,
                          overlap, matmuls)
        schedule_log.info("%s: %d nodes → %d groups in %.3f s", self.graph.name, before, len(nodes), result.seconds)
        return result

    def _output_names(self) -> list[str]:
        names = []
        for out in self.graph.outputs:
            if isinstance(out, ReinterpretView):
                names.append(out.data.name)
            elif isinstance(out, Buffer):
                names.append(out.name)
        return names

    def _eliminate_dead(self, nodes, output_names):
        """Drop nodes nobody reads (extern calls stay: they may have side effects; so does a scatter
        into a buffer that is read)."""
        live = set(output_names)
        kept = []
        removed = []
        for node in reversed(nodes):
            if node.name in live or node.is_extern() and not isinstance(node.node, MultiOutput) or \
                    not node.is_extern() and any(n in live for n in node.node.get_mutation_names()):
                kept.append(node)
                live |= {d.name for d in node.reads}
                if isinstance(node.node, MultiOutput):
                    live.add(node.node.parent.name)
            else:
                removed.append(node.name)
        return list(reversed(kept)), sorted(removed)

    def _compute_dependencies(self, nodes) -> None:
        produced = {n.name for n in nodes}
        for n in nodes:
            n.unmet_dependencies = {d for d in n.reads if d.name in produced and d.name != n.name}

    def _order_after_symbol_defs(self, nodes) -> None:
        """A node whose sizes or indices use an unbacked symbol (u0 = x.item()) runs after the extern call
        that the wrapper reads the symbol from: an ordering dep, as the node reads no buffer of it."""
        defs = {str(sym): name for sym, name in self.graph.symbol_defs.items()}
        if not defs:
            return
        for n in nodes:
            used = {str(s) for s in _symbols_of(n)} & defs.keys()
            n.unmet_dependencies |= {WeakDep(defs[s]) for s in used if defs[s] != n.name}

    def _topological_sort(self, nodes):
        """Depth-first, dependencies by name, so the order is deterministic and close to the input's."""
        by_name = {n.name: n for n in nodes}
        seen: set[str] = set()
        order = []

        def visit(n):
            if n.name in seen:
                return
            seen.add(n.name)
            for dep in sorted(n.unmet_dependencies, key=lambda d: d.name):
                visit(by_name[dep.name])
            order.append(n)
        for n in nodes:
            visit(n)
        return order

    def _compute_ancestors(self, nodes) -> None:
        """Transitive dependencies as bit sets, in one pass over the topological order."""
        by_name = {n.name: n for n in nodes}
        for n in nodes:
            acc = 0
            for name in {dep.name for dep in n.unmet_dependencies}:
                producer = by_name[name]
                acc |= producer.bits | producer.ancestor_bits
            n.ancestor_bits = acc

    def _buffer_sizes(self) -> dict[str, tuple[int, int]]:
        """name → (numel, itemsize) of every buffer, graph input and constant."""
        sizes = {}
        for b in list(self.graph.buffers) + [b for b in self.graph.inputs if isinstance(b, InputBuffer)]:
            if b.layout is not None:
                sizes[b.name] = (hint(b.layout.numel()), b.layout.dtype.itemsize)
        for name, t in self.graph.constants.items():
            sizes[name] = (t.numel(), t.element_size())
        return sizes

    def _buffer_bytes(self) -> dict[str, int]:
        return {name: numel * itemsize for name, (numel, itemsize) in self._buffer_sizes().items()}

    def _fuse(self, nodes):
        nbytes = self._buffer_bytes()
        readers: dict[str, set[str]] = {}
        for n in nodes:
            for d in n.reads:
                readers.setdefault(d.name, set()).add(n.name)
        self._template_check = fusion_check(self.cfg.matmul_templates, self.cfg.max_autotune, readers,
                                            set(self._output_names()), {n.name: n for n in nodes},
                                            self.cfg.cublaslt_activations)
        self._recorded: set[tuple[str, str, str]] = set()
        start = len(nodes)
        fused_bits = 0  # members of fused nodes: the only nodes through which fusion can close a cycle
        rounds = 0
        for rnd in range(MAX_FUSION_ROUNDS):
            if len(nodes) <= 1:
                break
            rounds += 1
            fusion_log.debug("attempting fusion (%d/%d): %d nodes", rnd + 1, MAX_FUSION_ROUNDS, len(nodes))
            node_of = {name: n for n in nodes for name in n.get_names()}
            candidates = self._candidates(nodes, node_of, rnd, nbytes)
            candidates.sort(key=lambda p: p[2], reverse=True)
            fusion_log.debug("found %d possible fusions", len(candidates))
            fused_any = False
            for a, b, _ in candidates:
                a, b = node_of[a.get_nodes()[0].name], node_of[b.get_nodes()[0].name]
                if a is b:
                    continue
                if a.min_order > b.min_order:
                    a, b = b, a
                score = score_fusion(a, b, nbytes)
                reason = can_fuse(a, b, max_fusion_size=self.cfg.max_fusion_size, node_of=node_of, buffer_bytes=nbytes,
                                  template_check=self._template_check)
                if reason is None and will_fusion_create_cycle(a, b, node_of, self._names_by_order, fused_bits):
                    reason = "will create cycle"
                if reason is not None:
                    self._refuse(a, b, rnd, score, reason)
                    continue
                fusion_log.debug("fusing %s with %s", a.name, b.name)
                self.decisions.append(FusionDecision(a.name, b.name, rnd, score, True))
                fused = FusedSchedulerNode.fuse(a, b)
                fused_bits |= fused.bits
                for name in fused.get_names():
                    node_of[name] = fused
                fused_any = True
            unique = list({id(n): n for n in node_of.values()}.values())
            fusion_log.debug("completed fusion round (%d/%d): fused %d nodes into %d nodes", rnd + 1,
                             MAX_FUSION_ROUNDS, len(nodes), len(unique))
            nodes = self._reorder(unique)
            pruned = prune_redundant_deps(nodes, node_of)
            if pruned:
                fusion_log.debug("pruned %d redundant ordering deps", pruned)
            if not fused_any and not pruned:
                break   # a pruned dep may unblock a pair, so that alone earns another round
        fusion_log.debug("fusion complete (%d iterations): %d nodes → %d", rounds, start, len(nodes))
        return nodes

    def _refuse(self, a, b, rnd: int, score, reason: str) -> None:
        """Record (and log) a refusal, once per pair and reason across rounds."""
        key = (a.name, b.name, reason)
        if key in self._recorded:
            return
        self._recorded.add(key)
        fusion_log.debug("cannot fuse %s with %s: %s", a.name, b.name, reason)
        self.decisions.append(FusionDecision(a.name, b.name, rnd, score, False, reason))

    def _candidates(self, nodes, node_of, rnd, nbytes):
        """Pairs of nodes that use a common buffer, each within `fusion_window` of the other, with scores."""
        by_buffer: dict[str, list[BaseSchedulerNode]] = {}
        for n in nodes:
            for name in sorted(n.used_buffer_names()):
                by_buffer.setdefault(name, []).append(n)
        window = self.cfg.fusion_window
        seen: set[tuple[int, int]] = set()
        pairs = []
        for users in by_buffer.values():
            users = sorted(users, key=lambda n: n.min_order)
            for i, a in enumerate(users):
                for b in users[i + 1:i + 1 + window]:
                    key = (id(a), id(b))
                    if key in seen:
                        continue
                    seen.add(key)
                    score = score_fusion(a, b, nbytes)
                    reason = can_fuse(a, b, max_fusion_size=self.cfg.max_fusion_size, node_of=node_of,
                                      buffer_bytes=nbytes, template_check=self._template_check)
                    if reason is None:
                        pairs.append((a, b, score))
                    else:
                        self._refuse(a, b, rnd, score, reason)
        return pairs

    def _reorder(self, nodes):
        """Sort by original position, then re-sort topologically over the fused groups."""
        nodes = sorted(nodes, key=lambda n: n.min_order)
        owner = {name: n for n in nodes for name in n.get_names()}
        seen: set[int] = set()
        order = []

        def visit(n):
            if id(n) in seen:
                return
            seen.add(id(n))
            deps = sorted({owner[d.name].min_order: owner[d.name] for d in _all_unmet(n)
                           if d.name in owner and owner[d.name] is not n}.items())
            for _, dep in deps:
                visit(dep)
            order.append(n)
        for n in nodes:
            visit(n)
        return order


def _symbols_of(n: BaseSchedulerNode) -> set:
    """The free symbols of a node's layout, loop ranges, accesses, the values its body computes from
    sizes (x * (n // u0): a kernel argument) and (an extern call's) arguments."""
    buf = n.node
    exprs = []
    layout = getattr(buf, "layout", None)
    if layout is not None:
        exprs += [*layout.size, *layout.stride, layout.offset]
    data = getattr(buf, "data", None)
    exprs += [*getattr(data, "ranges", ()), *getattr(data, "reduction_ranges", ())]
    exprs += [e for d in n.reads if isinstance(d, MemoryDep) for e in (d.index, *d.sizes)]
    exprs += [a for a in tree_leaves((getattr(buf, "args", ()), getattr(buf, "kwargs", {}))) if isinstance(a, sympy.Basic)]
    exprs += [e for a in tree_leaves(getattr(buf, "args", ())) if isinstance(getattr(a, "layout", None), Layout)
              for e in (*a.layout.size, *a.layout.stride, a.layout.offset)]
    body = set().union(*(getattr(getattr(m, "body", None), "symbols", ()) for m in n.get_nodes()))
    return body.union(*(e.free_symbols for e in exprs if isinstance(e, sympy.Basic)))


def _all_unmet(n: BaseSchedulerNode) -> set[Dep]:
    return set().union(*(m.unmet_dependencies for m in n.get_nodes()))


def prune_redundant_deps(nodes: list[BaseSchedulerNode], node_of: dict[str, BaseSchedulerNode]) -> int:
    """Drop the ordering deps (WeakDeps) that fusion made redundant; return how many (scheduler.md §4.3).

    A WeakDep is redundant when it points into the node's own container, at a container the node also
    depends on through a real dep (that edge orders the two already), or at a buffer no longer
    scheduled (removed as dead). A WeakDep is not a MemoryDep, so while it stays, vertical fusion
    refuses the pair ("memory deps did not match"): pruning after each round lets a later round fuse.

        B: WeakDep(A), reads P       round 1 fuses A with P     B: reads AP  →  round 2 fuses AP with B

    Members are pruned too: a fused node collects its members' deps again whenever it fuses.
    """
    pruned = 0
    for node in nodes:
        real = {id(node_of[d.name]) for d in node.unmet_dependencies
                if not isinstance(d, WeakDep) and d.name in node_of}

        def redundant(dep: Dep) -> bool:
            owner = node_of.get(dep.name)
            return isinstance(dep, WeakDep) and (owner is None or owner is node or id(owner) in real)

        pruned += sum(1 for d in node.unmet_dependencies if redundant(d))
        for holder in {id(h): h for h in [node, *node.get_nodes()]}.values():
            holder.unmet_dependencies = {d for d in holder.unmet_dependencies if not redundant(d)}
    return pruned

"""Mutation and aliasing: extern calls that write into buffers they did not create, or return views.

ATen calls mutate or alias; their schemas say which arguments they write (`Tensor(a!) self`) and
which outputs alias an argument (`-> Tensor(a)`). Kernels write their own buffers, except a
ScatterBuffer, which adds into its target (`get_mutation_names`). From these:

    buf0 = sum(x)              reads x (version 0)
    buf1 = aten.add_(x, 1)     mutates x, returns x:  WeakDep(buf0)  (buf0 reads x before it changes)
    buf2 = buf0 + buf1         reads x (version 1):   WeakDep(buf1)  (after the mutation)

Names that share a storage form one alias group (a view, an in-place result, its base); a reader of
any of them reads the group's storage, so reads and mutations are ordered per group. A mutation's
version chain is its group's list of mutating nodes, in program order.
"""
from __future__ import annotations

from ..lowering.ir import ComputedBuffer, ExternKernel, MultiOutput, buffer_names
from .dependencies import WeakDep
from .nodes import BaseSchedulerNode


def _schema_arguments(kernel: ExternKernel):
    """(schema argument, value passed) pairs; empty when the op has no schema."""
    schema = getattr(kernel.op, "_schema", None)
    if schema is None:
        return []
    pairs = []
    for i, arg in enumerate(schema.arguments):
        if i < len(kernel.args) and not arg.kwarg_only:
            pairs.append((arg, kernel.args[i]))
        elif arg.name in kernel.kwargs:
            pairs.append((arg, kernel.kwargs[arg.name]))
    return pairs


def mutated_buffers(kernel: ExternKernel) -> list[str]:
    """Buffers the call writes in place (schema arguments marked `!`), in argument order."""
    names = []
    for arg, value in _schema_arguments(kernel):
        if arg.alias_info is not None and arg.alias_info.is_write:
            names += [n for n in buffer_names(value) if n not in names]
    return names


def aliased_buffers(kernel: ExternKernel) -> list[str]:
    """Buffers whose storage the call's output(s) share: the arguments in an alias set of a return.

    An op without a schema may alias anything it is given. A kernel that knows better says so itself
    (`aliased_inputs`: a collective and its wait, distributed/collectives.py).
    """
    if hasattr(kernel, "aliased_inputs"):
        return kernel.aliased_inputs()
    schema = getattr(kernel.op, "_schema", None)
    if schema is None:
        return [b.name for b in kernel.inputs()]
    sets: set[str] = set()
    any_set = False    # a list return (`Tensor(a)[]`) keeps its alias set on the element type, not here
    for ret in schema.returns:
        if ret.alias_info is not None:
            sets |= set(ret.alias_info.after_set) | set(ret.alias_info.before_set)
            any_set |= not (ret.alias_info.after_set or ret.alias_info.before_set)
    names = []
    for arg, value in _schema_arguments(kernel):
        info = arg.alias_info
        if info is not None and (any_set or sets & (set(info.before_set) | set(info.after_set))):
            names += [n for n in buffer_names(value) if n not in names]
    return names


class AliasGroups:
    """Union-find over buffer names that share one storage; `root(name)` is the group's first name."""

    def __init__(self) -> None:
        self.parent: dict[str, str] = {}

    def root(self, name: str) -> str:
        while self.parent.get(name, name) != name:
            name = self.parent[name]
        return name

    def join(self, alias: str, base: str) -> None:
        a, b = self.root(alias), self.root(base)
        if a != b:
            self.parent[a] = b

    def aliases(self) -> dict[str, str]:
        """Every name that is not its group's root → the root."""
        return {n: self.root(n) for n in self.parent if self.root(n) != n}


def alias_groups(nodes: list[BaseSchedulerNode]) -> AliasGroups:
    groups = AliasGroups()
    for node in nodes:
        ir = getattr(node, "node", None)
        kernel = ir.parent if isinstance(ir, MultiOutput) else ir
        if isinstance(kernel, ExternKernel):
            for base in aliased_buffers(kernel):
                groups.join(node.name, base)
    return groups


def add_mutation_deps(nodes: list[BaseSchedulerNode], groups: AliasGroups) -> dict[str, list[str]]:
    """Give each node the ordering deps that keep program order around mutations (nodes in program order).

    A mutating node waits for every earlier reader of its storage (they must see the old values) and
    for the previous mutation; any later user of the storage waits for the mutation. Returns the
    version chains: storage root → mutating node names in order.
    """
    readers: dict[str, list[str]] = {}
    last_mutation: dict[str, str] = {}
    versions: dict[str, list[str]] = {}
    for node in nodes:
        node.mutations = []
        ir = getattr(node, "node", None)
        if isinstance(ir, ExternKernel):
            node.mutations = mutated_buffers(ir)
        elif isinstance(ir, ComputedBuffer):
            node.mutations = ir.get_mutation_names()
        mutated = {groups.root(n) for n in node.mutations}
        used = {groups.root(d.name) for d in node.reads} | mutated
        for root in sorted(used):
            previous = last_mutation.get(root)
            if previous is not None and previous != node.name:
                node.unmet_dependencies.add(WeakDep(previous, root))
        for root in sorted(mutated):
            for reader in readers.pop(root, []):
                if reader != node.name:
                    node.unmet_dependencies.add(WeakDep(reader, root))
            last_mutation[root] = node.name
            versions.setdefault(root, []).append(node.name)
        for root in used - mutated:
            readers.setdefault(root, []).append(node.name)
    return versions

"""The training graph's split into forward and backward: torch's min-cut partitioner, after a CSE of
the joint graph done here.

torch's partitioner first merges duplicate nodes of the joint graph (`torch._functorch.config.cse`,
on by default), and its CSE imports `torch._inductor.pattern_matcher` for two helpers about mutation
regions. That module imports Inductor's lowerings and templates: about 1 s of the first training
compile of every process on the CPU machine (2 s under load), for a backend that uses none of them.
So `min_cut_partition` runs the partitioner with that CSE off, on a joint graph already merged by
`joint_graph_cse`, which follows the same rules (checked against torch's own on real joint graphs:
tests/lowering/test_joint_cse.py):

  - a node is merged into an earlier one with the same target and the same arguments (earlier
    nodes standing for merged ones; a constant's type counts, so 1, 1.0 and True differ; a symbolic
    number counts as its expression node), where a float is its exact value: torch's CSE takes
    `x * -0.0` for `x * 0.0` (they compare equal), so that 1 / (x * -0.0) gave +inf (torch 2.13),
  - but not across a mutation (each mutating op starts a new region: an op whose schema says it
    writes, an `out=` call, or a Python callable named like an in-place op),
  - and never: placeholders, outputs, get_attr nodes, random ops (torch's list), `aten.empty`,
    nodes whose storage an output shares (each output must stay its own tensor), nor nodes whose
    value carries an unbacked symbol.
"""
from __future__ import annotations

import re
from typing import Any

import torch
import torch.fx as fx
from torch._functorch import config as functorch_config
from torch._functorch.compile_utils import rand_ops
from torch._functorch.partitioners import min_cut_rematerialization_partition
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols
from torch.multiprocessing.reductions import StorageWeakRef

aten = torch.ops.aten

_RANDOM = frozenset(rand_ops)
try:
    from torch._higher_order_ops.auto_functionalize import AutoFunctionalized as _AUTO_FUNCTIONALIZED
except ImportError:   # (no such op in this torch: nothing is one)
    _AUTO_FUNCTIONALIZED = ()
_STATEFUL_WORDS = frozenset({"set", "enter", "exit", "seed"})


def _named_in_place(name: str) -> bool:
    """A Python callable or method that may write in place, by its name: a trailing underscore (`add_`),
    an underscore before a dot, or set, enter, exit or seed as a word of it (`manual_seed`). Wider than
    torch's rule where they differ (a dunder name counts here): a region too many only merges less."""
    return name.endswith("_") or "_." in name or not _STATEFUL_WORDS.isdisjoint(re.split(r"[\W_]+", name))


def min_cut_partition(joint_module: fx.GraphModule, joint_inputs, **kwargs):
    """torch's min-cut rematerialization partitioner on the joint graph after `joint_graph_cse`
    (the partitioner's own CSE off: it would import Inductor)."""
    if functorch_config.cse:
        joint_module.graph = joint_graph_cse(joint_module.graph)
    with functorch_config.patch(cse=False):
        return min_cut_rematerialization_partition(joint_module, joint_inputs, **kwargs)


def joint_graph_cse(graph: fx.Graph) -> fx.Graph:
    """A new graph with `graph`'s duplicate nodes merged (the module's docstring)."""
    out = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    first: dict[Any, tuple[fx.Node, int]] = {}   # key -> (the node kept, its mutation region)
    output = next(n for n in reversed(graph.nodes) if n.op == "output")
    returned = {_storage(n) for n in output.all_input_nodes} - {None}
    region = 0
    for node in graph.nodes:
        if _mutates(node):
            region += 1
        if not _mergeable(node, returned):
            env[node] = out.node_copy(node, lambda n: env[n])
            continue
        key = (node.target, _canonical(node.args, env), _canonical(node.kwargs, env))
        kept = first.get(key)
        if kept is not None and kept[1] == region:
            env[node] = kept[0]
            continue
        env[node] = out.node_copy(node, lambda n: env[n])
        first[key] = (env[node], region)   # (a later duplicate past a mutation merges into this one)
    return out


def _mutates(node: fx.Node) -> bool:
    target = node.target
    if isinstance(target, torch._ops.OpOverload):
        return target._schema.is_mutable
    if isinstance(target, _AUTO_FUNCTIONALIZED):   # a functional wrapper of a mutating op
        return False
    if node.op in ("call_function", "call_method"):
        name = target if isinstance(target, str) else getattr(target, "__name__", "")
        if _named_in_place(name):
            return True
    return node.kwargs.get("out") is not None


def _mergeable(node: fx.Node, returned: set) -> bool:
    if node.op != "call_function":
        return False
    packet = getattr(node.target, "overloadpacket", node.target)
    if packet in _RANDOM or packet is aten.empty:
        return False
    if returned and _storage(node) in returned:
        return False
    val = node.meta.get("val")
    if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)) and free_unbacked_symbols(val):
        return False
    return True


def _storage(node: fx.Node):
    """The storage of the node's tensor value (weakly), or None."""
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor):
        return None
    try:
        return StorageWeakRef(val.untyped_storage())
    except NotImplementedError:   # a tensor without storage (sparse, a subclass)
        return None


def _canonical(value, env: dict) -> Any:
    """A hashable form of an argument: nodes as the node they stand for now, symbolic numbers as their
    expression node, constants with their type, containers by kind."""
    if isinstance(value, fx.Node):
        return ("node", env.get(value, value))
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return ("sym", value.node)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_canonical(v, env) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple((k, _canonical(v, env)) for k, v in value.items()))
    if isinstance(value, slice):
        return ("slice", _canonical((value.start, value.stop, value.step), env))
    if isinstance(value, (float, complex)):
        return (type(value), repr(value))   # -0.0 is not 0.0 here (x * -0.0 is not x * 0.0), NaN is NaN
    try:
        hash(value)
    except TypeError:
        return ("object", id(value))
    return (type(value), value)

"""Higher-order ops (torch.cond, while_loop, map, scan, flex attention, invoke_subgraph) as ATen calls
inside a compiled graph: the rest of the graph keeps its kernels.

An ATen graph holds such an op's functions as submodules, read by get_attr nodes. Each becomes a
`Subgraph`: a function of the generated module, whose body is the code FX wrote for the submodule, so
the module still runs on its own and its text (so its cache key) holds the branches. The op is then
an ordinary extern call (a counted fallback) that the wrapper makes with those functions, as eager
makes it; it is never captured in a CUDA graph (cond and while_loop read their predicate on the host).

    cond = torch.ops.higher_order.cond(gt, subgraph_true_graph_0, subgraph_false_graph_0, (x,))

A submodule that reads attributes of its own (a cond inside a cond's branch) or whose code needs a
global FX's usual ones don't cover keeps the whole graph eager, with that reason; so does any other
higher-order op (user Triton kernels' wrappers name their kernel by a number valid in one process).
"""
from __future__ import annotations

import dataclasses
import re

import torch

# the higher-order ops the wrapper calls with Subgraph functions (by their torch.ops.higher_order name)
CALLED_HOPS = frozenset({"cond", "while_loop", "map_impl", "scan", "associative_scan", "flex_attention",
                         "flex_attention_backward", "invoke_subgraph"})
HOP_FALLBACK = "a higher-order op: ATen runs it with its functions, outside CUDA graphs (lowering/subgraphs.py)"
# the globals FX's code of a graph refers to, which the generated module defines (codegen/wrapper.py)
FX_GLOBALS = frozenset({"torch", "inf", "nan", "device", "NoneType", "fx_pytree", "pytree"})


@dataclasses.dataclass(frozen=True)
class Subgraph:
    """A submodule of the graph as a function of the generated module: `name` and its `source`."""

    name: str
    source: str

    def __repr__(self) -> str:   # (reports and logs print extern calls' arguments)
        return f"Subgraph({self.name})"


def called_hop(target) -> bool:
    return isinstance(target, torch._ops.HigherOrderOperator) and target.name() in CALLED_HOPS


def subgraph_of(node_name: str, gm: torch.fx.GraphModule) -> Subgraph:
    """The submodule `gm` (read by get_attr node `node_name`) as a function; ValueError where it cannot
    be one (see `refusal`)."""
    why = refusal(gm)
    if why is not None:
        raise ValueError(why)
    code = gm.graph.python_code(root_module="self")
    name = f"subgraph_{node_name}"
    source, n = re.subn(r"def forward\(self,? ?", f"def {name}(", code.src.strip(), count=1)
    assert n == 1, code.src
    return Subgraph(name, source)


def refusal(gm) -> str | None:
    """Why the submodule `gm` cannot be a function of the generated module, or None."""
    if not isinstance(gm, torch.fx.GraphModule):
        return f"a {type(gm).__name__} submodule, not an FX graph"
    if any(n.op in ("get_attr", "call_module") for n in gm.graph.nodes):
        return "a submodule that reads attributes of its own (nested higher-order ops)"
    extra = set(gm.graph.python_code(root_module="self").globals) - FX_GLOBALS
    if extra:
        return f"a submodule whose code needs {sorted(extra)}"
    return None


def unsupported_hop_reason(node: torch.fx.Node, gm: torch.fx.GraphModule) -> str | None:
    """Why the higher-order op at `node` keeps its whole graph eager, or None when the wrapper calls it."""
    target = node.target
    if not called_hop(target):
        return f"higher-order op {target.name()} (node %{node.name})"
    for arg in node.all_input_nodes:
        if arg.op == "get_attr":
            value = getattr(gm, arg.target, None)
            why = refusal(value) if isinstance(value, torch.nn.Module) else None
            if why is not None:
                return f"higher-order op {target.name()} (node %{node.name}): {why}"
    return None

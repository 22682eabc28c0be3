"""What lowering reads off the ATen FX graph before it walks it (graph.py `GraphLowering._run`).

    scalar_chains_for_the_gpu(graph)   CPU 0-d values only GPU ops read → the GPU to compute them on
    output_bases(graph)                the outputs and what they view: realized with eager's strides
    as_strided_bases(graph)            what an as_strided reads the storage of: the same
    view_source(node), is_view(target) a view node's source, whether an op returns a view
"""
from __future__ import annotations

import operator

import torch
import torch.fx

from .trees import leaves as _leaves

aten = torch.ops.aten


def scalar_chains_for_the_gpu(graph: torch.fx.Graph) -> dict[torch.fx.Node, torch.device]:
    """The CPU 0-d tensors a graph computes from sizes and numbers for GPU ops alone, with that GPU.

    AOT autograd traces a float made of sizes (`1 / math.sqrt(x.size(-1))`, nearest interpolation's
    scale) as 0-d tensors on the CPU: scalar_tensor, sqrt, true_divide, a cast. Lowered where they are,
    each is an ATen call on the CPU and its result a copy to the GPU before the kernel that reads it
    (session 35's CUDA run). Computed on the GPU, the chain is part of that kernel. A node qualifies
    when its value is a CPU 0-d tensor from a deterministic, non-mutating op whose tensor arguments all
    qualify (no graph input: its data is the user's), and each of its readers qualifies or is a GPU op
    on one device; not when it is returned, or read on the CPU (`.item()`, a CPU op). A 0-d CPU
    constant of the graph qualifies too (`y[:, 0] = 1.0` lifts one): its value becomes the kernel's."""
    gm = graph.owning_module

    def constant(n: torch.fx.Node):
        value = getattr(gm, n.target, None) if n.op == "get_attr" and gm is not None else None
        return value if isinstance(value, torch.Tensor) else None

    def is_tensor(n: torch.fx.Node) -> bool:
        return n.op == "get_attr" or isinstance(n.meta.get("val"), torch.Tensor)

    def local(n: torch.fx.Node) -> bool:
        val, target = n.meta.get("val"), n.target
        if n.op == "get_attr":
            value = constant(n)
            return (value is not None and value.device.type == "cpu" and value.dim() == 0
                    and not value.dtype.is_complex and not value.requires_grad)
        return (n.op == "call_function" and isinstance(target, torch._ops.OpOverload)
                and isinstance(val, torch.Tensor) and getattr(val, "fake_mode", None) is not None
                and val.device.type == "cpu" and val.dim() == 0 and not val.dtype.is_complex
                and not target._schema.is_mutable and not is_view(target)
                and torch.Tag.nondeterministic_seeded not in target.tags)
    chain = {n for n in graph.nodes if local(n)}
    if not chain:
        return {}
    devices: dict[torch.fx.Node, torch.device] = {}
    changed = True
    while changed:
        changed, devices = False, {}
        for n in reversed(graph.nodes):   # readers first
            if n not in chain:
                continue
            found = set()
            for u in n.users:
                val = u.meta.get("val")
                if u in chain:
                    found.add(devices.get(u))
                elif u.op == "call_function" and isinstance(val, torch.Tensor) and val.device.type == "cuda":
                    found.add(val.device)
                else:
                    found.add(None)
            tensor_args = [a for a in _leaves((n.args, n.kwargs)) if isinstance(a, torch.fx.Node) and is_tensor(a)]
            if len(found) != 1 or None in found or any(a not in chain for a in tensor_args):
                chain.discard(n)
                changed = True
                break
            devices[n] = found.pop()
    return devices


def output_bases(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    """The outputs and every node an output is a view (or an in-place result) of, through chains of views.

    Realized with eager's strides, such a base makes each view of it that the graph returns come out
    with eager's strides too, so the output is that view and not a copy: outputs that share storage
    in eager share it compiled (an inference graph's aliasing is ours to keep; AOT autograd only
    regenerates aliases of intermediates when autograd is on)."""
    found: set[torch.fx.Node] = set()
    for node in graph.find_nodes(op="output"):
        for arg in _leaves(node.args):
            while isinstance(arg, torch.fx.Node) and arg not in found:
                found.add(arg)
                arg = view_source(arg)
    return found


def as_strided_bases(graph: torch.fx.Graph) -> set[torch.fx.Node]:
    """The nodes an as_strided reads the storage of, through chains of views: realized with eager's
    strides, the storage holds each element where eager's does (`(x.t() * 2).as_strided(...)` read a
    row-major buffer where eager's is column-major)."""
    found: set[torch.fx.Node] = set()
    for node in graph.nodes:
        if node.op == "call_function" and getattr(node.target, "overloadpacket", None) is aten.as_strided:
            arg = node.args[0] if node.args else None
            while isinstance(arg, torch.fx.Node) and arg not in found:
                found.add(arg)
                arg = view_source(arg)
    return found


def view_source(node: torch.fx.Node) -> torch.fx.Node | None:
    """The node `node` is a view of, or None when it is not a view."""
    # a getitem of a view op's list (split, chunk, unbind) is a view of that op's input too
    viewing = node.op == "call_function" and node.args and (
        is_view(node.target) or (node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node)
                                 and is_view(node.args[0].target)))
    return node.args[0] if viewing and isinstance(node.args[0], torch.fx.Node) else None


def is_view(target) -> bool:
    schema = getattr(target, "_schema", None)
    return bool(schema and schema.returns and schema.returns[0].alias_info is not None)

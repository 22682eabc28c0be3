"""mm, addmm and bmm as Triton matmul templates (ir.MatmulTemplate), where option `matmul_templates`
allows and the matmul is one a template generates; otherwise the cuBLAS call (ATen's on the CPU), as
before, with the reason recorded (`GraphLowering.matmul_notes`, shown by `explain`).

    mm(a, b)              → MatmulTemplate(a, b)                   [M, N]
    addmm(bias, a, b)     → MatmulTemplate(a, b, bias)             bias added to the fp32 accumulator
    addmm(.., beta, alpha)→ alpha * MatmulTemplate(a, b) + beta * bias   (pointwise: epilogues)
    bmm(a, b)             → MatmulTemplate(a, b)                   [B, M, N], batch on a grid axis

Whether a template or cuBLAS finally runs is the scheduler's choice (scheduler/matmul_choice.py):
the template node can still become the ATen call (`MatmulTemplate.as_extern`).
"""
from __future__ import annotations

import torch

from ..config import interpreting
from .ir import IRNode, Layout, MatmulTemplate, StorageBox, current_graph, realize_as_tensor
from .sizevars import static_int

aten = torch.ops.aten

TEMPLATE_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MAX_BATCH = 65535      # the batch is grid axis 1, which CUDA limits to 65535 programs


def template_refusal(op_name: str, inputs: list[IRNode], dims: int) -> str | None:
    """Why this matmul stays a cuBLAS call (None: it may become a template)."""
    graph = current_graph()
    mode = graph.cfg.matmul_templates
    device = inputs[0].get_device()
    if mode == "off":
        return "matmul_templates='off'"
    unsafe = graph.cfg.unsafe_op_names()
    if op_name in unsafe or f"{op_name}.default" in unsafe:
        return "listed in cudagraph_unsafe_ops: the ATen call, outside CUDA graphs"
    if device.type == "cpu" and (mode == "auto" or not interpreting()):
        return "a CPU matmul becomes a Triton template only with matmul_templates='always' and TRITON_INTERPRET=1"
    if device.type not in ("cuda", "cpu"):
        return f"device {device.type}"
    dtypes = {x.get_dtype() for x in inputs}
    if len(dtypes) != 1 or next(iter(dtypes)) not in TEMPLATE_DTYPES:
        return f"dtypes {sorted(map(str, dtypes))} (templates take one of float16, bfloat16, float32)"
    if any(x.get_device() != device for x in inputs):
        return "inputs on several devices"
    a, b = inputs[-2], inputs[-1]
    if len(a.get_size()) != dims or len(b.get_size()) != dims:
        return f"{op_name} of {len(a.get_size())}-D and {len(b.get_size())}-D inputs"
    try:
        sizes = [static_int(s) for x in inputs for s in x.get_size()]
    except NotImplementedError:
        return "symbolic sizes (the template is generated for static sizes)"
    if any(s == 0 for s in sizes):
        return "an empty input"
    if dims == 3 and static_int(a.get_size()[0]) > MAX_BATCH:
        return f"a batch over {MAX_BATCH} (grid axis 1)"
    return None


def _note(op_name: str, inputs: list[IRNode], reason: str) -> None:
    shapes = " x ".join("x".join(str(s) for s in x.get_size()) for x in inputs[-2:])
    library = "cuBLAS" if inputs[-1].get_device().type == "cuda" else "ATen"
    current_graph().matmul_notes.append(f"{op_name} {shapes} {inputs[-1].get_dtype()}: {library} ({reason})")


def _template(op, a: IRNode, b: IRNode, bias: IRNode | None = None) -> StorageBox:
    graph = current_graph()
    a, b = realize_as_tensor(a), realize_as_tensor(b)
    bias = realize_as_tensor(bias) if bias is not None else None
    size = [*a.get_size()[:-1], b.get_size()[-1]]
    layout = Layout.contiguous(a.get_device(), a.get_dtype(), size)
    node = MatmulTemplate(graph.new_buffer_name(), layout, op, a, b, bias)
    graph.register_buffer(node)
    return StorageBox(node)


def mm_template(a: IRNode, b: IRNode) -> StorageBox | None:
    """mm as a template, or None (the caller makes the cuBLAS call; the reason is noted)."""
    reason = template_refusal("aten.mm", [a, b], 2)
    if reason is not None:
        _note("aten.mm", [a, b], reason)
        return None
    return _template(aten.mm.default, a, b)


def addmm_template(bias: IRNode, a: IRNode, b: IRNode) -> StorageBox | None:
    """addmm (alpha = beta = 1) as a template adding `bias` to its accumulator, or None."""
    reason = template_refusal("aten.addmm", [bias, a, b], 2)
    if reason is None and len(bias.get_size()) > 2:
        reason = f"a {len(bias.get_size())}-D bias"
    if reason is not None:
        _note("aten.addmm", [bias, a, b], reason)
        return None
    return _template(aten.addmm.default, a, b, bias)


def bmm_template(a: IRNode, b: IRNode) -> StorageBox | None:
    reason = template_refusal("aten.bmm", [a, b], 3)
    if reason is not None:
        _note("aten.bmm", [a, b], reason)
        return None
    return _template(aten.bmm.default, a, b)

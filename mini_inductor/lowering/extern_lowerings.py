"""Library calls with a pointwise part: the call stays extern, the pointwise part is IR that fuses."""
from __future__ import annotations

import torch

from .ir import Layout, current_graph
from .lowerings import lowering_of, register_lowering
from .matmul_lowerings import addmm_template, bmm_template, mm_template

aten = torch.ops.aten


@register_lowering(aten.addmm)
def addmm(bias, mat1, mat2, *, beta=1, alpha=1):
    """addmm through cuBLAS in the inputs' dtype (bias added in cuBLAS's epilogue); with scaling
    factors, an mm whose bias add becomes an epilogue of the next kernel.

    Not torch's decomposition: it upcasts fp16/bf16 inputs to fp32 and runs the matmul in fp32. Not
    mm + a fused bias either: on the H100, cuBLAS's plain fp32 mm of an (8, 256) activation with a
    transposed (256, 256) weight took 31 µs where addmm took 3 µs (measured in a CUDA graph), and the
    bias costs nothing in cuBLASLt's epilogue.
    """
    m, n = mat1.get_size()[0], mat2.get_size()[1]
    layout = Layout.contiguous(mat1.get_device(), mat1.get_dtype(), [m, n])
    if alpha == 1 and beta == 1 and len(bias.get_size()) <= 2:
        return addmm_template(bias, mat1, mat2) or \
            current_graph().make_extern(aten.addmm.default, (bias, mat1, mat2), {}, layout)
    product = mm_template(mat1, mat2) or current_graph().make_extern(aten.mm.default, (mat1, mat2), {}, layout)
    if alpha != 1:
        product = lowering_of(aten.mul.Tensor)(product, alpha)
    if beta == 0:
        return product
    if beta != 1:
        bias = lowering_of(aten.mul.Tensor)(bias, beta)
    return lowering_of(aten.add.Tensor)(product, bias)


@register_lowering(aten.mm.default)
def mm(mat1, mat2):
    """A matmul template where option matmul_templates allows (matmul_lowerings.py); None: the cuBLAS call."""
    return mm_template(mat1, mat2)


@register_lowering(aten.bmm.default)
def bmm(mat1, mat2):
    return bmm_template(mat1, mat2)

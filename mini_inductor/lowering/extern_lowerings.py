"""Library calls with a pointwise part: the call stays extern, the pointwise part is IR that fuses."""
from __future__ import annotations

import torch

from .ir import Layout, current_graph
from .lowerings import lowering_of, register_lowering

aten = torch.ops.aten


@register_lowering(aten.addmm)
def addmm(bias, mat1, mat2, *, beta=1, alpha=1):
    """mm through cuBLAS in the inputs' dtype; the bias add becomes an epilogue of the next kernel.

    (torch's own addmm decomposition upcasts fp16/bf16 inputs to fp32 first, which would run the
    matmul in fp32.)
    """
    m, n = mat1.get_size()[0], mat2.get_size()[1]
    layout = Layout.contiguous(mat1.get_device(), mat1.get_dtype(), [m, n])
    product = current_graph().make_extern(aten.mm.default, (mat1, mat2), {}, layout)
    if alpha != 1:
        product = lowering_of(aten.mul.Tensor)(product, alpha)
    if beta == 0:
        return product
    if beta != 1:
        bias = lowering_of(aten.mul.Tensor)(bias, beta)
    return lowering_of(aten.add.Tensor)(product, bias)

"""Library calls with a pointwise part: the call stays extern, the pointwise part is IR that fuses."""
from __future__ import annotations

import torch

from .ir import Layout, current_graph
from .lowerings import lowering_of, register_lowering
from .matmul_lowerings import addmm_template, bmm_template, mm_template
from .eager_strides import _is_pointwise
from .symbolic import hint

aten = torch.ops.aten


@register_lowering(aten.addmm)
def addmm(bias, mat1, mat2, *, beta=1, alpha=1):
    """addmm through cuBLAS in the inputs' dtype (bias added in cuBLAS's epilogue); with scaling
    factors, or in float32 when every use is pointwise (_bias_fuses_downstream), an mm whose bias add
    becomes part of the next kernel.

    Not torch's decomposition: it upcasts fp16/bf16 inputs to fp32 and runs the matmul in fp32. Not
    mm + a fused bias either: on the H100, cuBLAS's plain fp32 mm of an (8, 256) activation with a
    transposed (256, 256) weight took 31 µs where addmm took 3 µs (measured in a CUDA graph), and the
    bias costs nothing in cuBLASLt's epilogue.
    """
    m, n = mat1.get_size()[0], mat2.get_size()[1]
    layout = Layout.contiguous(mat1.get_device(), mat1.get_dtype(), [m, n])
    if alpha == 1 and beta == 1 and len(bias.get_size()) <= 2 and not _bias_fuses_downstream(mat1, bias):
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


# views an addmm's bias add can be read through and stay lazy in one consumer's kernel (the split of a
# linear layer's output into heads: view → transpose → clone). Not split, chunk or unbind: the add
# would be realized once for all of their parts (SwiGLU's gate and up halves took two kernels where
# addmm took one); not as_strided, unfold or dtype views, which lowering realizes or runs in ATen.
_VIEWS = frozenset({aten.view.default, aten._unsafe_view.default, aten.reshape.default, aten.permute.default,
                    aten.transpose.int, aten.t.default, aten.expand.default, aten.slice.Tensor, aten.select.int,
                    aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.unsqueeze.default,
                    aten.alias.default})


def _pointwise_uses(node) -> bool:
    """Every use of `node`'s value, looking through views (the split of a linear layer's output into
    heads: view → transpose → clone), is a pointwise op (torch's tag, as eager_strides reads it)."""
    if not node.users:
        return False
    for user in node.users:
        if user.target in _VIEWS:
            if not _pointwise_uses(user):
                return False
        elif not _is_pointwise(user.target):
            return False
    return True


def _bias_fuses_downstream(mat1, bias) -> bool:
    """A float32 addmm on CUDA (no TF32) of 64 rows or more, whose uses are all pointwise, runs as mm,
    its bias added in the kernel of those uses. On the H100 (benchmarks/addmm_split.py, session 24)
    cuBLASLt's addmm took up to twice the plain mm's time at 64 to 2048 rows (512 x 3072 -> 768, a
    GPT-2 down-projection: 102 against 66 µs), and within 13% the other way at the shapes where it won;
    at 8 rows the mm could take 9 times as long (31.7 against 3.6 µs, 256 -> 256), and with TF32 the
    two were even (0.38 to 1.29). On an H200 (session 32) the mm was at most 5% slower at 512 to 8192
    rows (2048 x 768 -> 768) and up to 1.6 times faster; ViT-B/16's q, k and v projections (3152 x
    768 -> 768, then split into heads: views and a copy) took 101 µs as mm and 110 as addmm. The
    bias costs nothing in the next kernel. Half types keep cuBLASLt's
    bias: the product would be rounded once more before the add (torch's Inductor keeps them too)."""
    node = current_graph().current_node
    return (mat1.get_dtype() == torch.float32 and mat1.get_device().type == "cuda" and len(bias.get_size()) == 1
            and not torch.backends.cuda.matmul.allow_tf32 and hint(mat1.get_size()[0]) >= 64
            and node is not None and node.target is aten.addmm.default and _pointwise_uses(node))


@register_lowering(aten.mm.default)
def mm(mat1, mat2):
    """A matmul template where option matmul_templates allows (matmul_lowerings.py); None: the cuBLAS call."""
    return mm_template(mat1, mat2)


@register_lowering(aten.bmm.default)
def bmm(mat1, mat2):
    return bmm_template(mat1, mat2)

"""cuBLAS's own activation epilogues: relu(addmm) and tanh-GELU(addmm) as one `aten._addmm_activation`.

Where the scheduler or max-autotune leaves an addmm to cuBLAS (scheduler/matmul_choice.py), its bias
already stays in cuBLAS's epilogue (MatmulTemplate.as_extern). cuBLASLt also applies a ReLU or a
tanh-approximated GELU to the product before it is stored; torch binds that as
`aten._addmm_activation(bias, a, b, use_gelu=...)`: on CUDA, cuBLASLt where its layouts allow, else
addmm followed by the activation in place, GELU in its tanh form either way; on the CPU addmm then
ReLU or *exact* GELU. So tanh-GELU is fused on CUDA only, ReLU on any device. With config option
`cublaslt_activations`, such a call replaces the ATen addmm and the epilogue kernel after it, which
otherwise reads the product back and writes it again. (cuBLASLt's ReLU may map a NaN product to 0
where eager keeps NaN; one reason the option is off by default.)

The epilogue qualifies when it is one pointwise node, of the addmm's layout (contiguous, 2-D), that
loads nothing but the product, element for element, and computes ReLU or tanh-GELU of it; and the
product itself is read by nothing else (a graph output, or a GELU's saved input in training, keeps
the two apart). In "auto" on CUDA the scheduler fuses an epilogue into a template only where the cost
model prefers the template (matmul_choice.fusion_check), except such an activation, which it keeps
with the addmm it follows for codegen to hand to cuBLASLt. Which function the node computes is found by running its loop body in float64 on
probe values (`activation_of`): the decompositions of relu and gelu reach the scheduler as arithmetic,
and a body that agrees with the function to float64 rounding on a dense grid of probes is that
function, where a near miss (exact GELU against its tanh form differs by up to 5e-4) is not taken.
"""
from __future__ import annotations

import sympy
import torch
import torch.nn.functional as F

from ..lowering.ir import ComputedBuffer, ExternKernel, MatmulTemplate, Pointwise
from ..lowering.sizevars import contiguous_strides, index_vars
from ..lowering.virtualized import set_ops_handler

aten = torch.ops.aten

ACTIVATIONS = {"relu": torch.relu, "gelu": lambda x: F.gelu(x, approximate="tanh")}
FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


class _NotMatched(Exception):
    pass


class _Probe:
    """An ops handler evaluating a pointwise body on float64 probe values: the one load it may make is
    of `name` at `index` (the output's own element); any other load, index or op is not a match."""

    ARITHMETIC = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "truediv": torch.div,
                  "maximum": torch.maximum, "minimum": torch.minimum, "pow": torch.pow}
    COMPARISONS = {"gt": torch.gt, "ge": torch.ge, "lt": torch.lt, "le": torch.le, "eq": torch.eq, "ne": torch.ne}
    UNARY = {"neg": torch.neg, "tanh": torch.tanh, "relu": torch.relu, "exp": torch.exp, "erf": torch.erf,
             "sigmoid": torch.sigmoid, "abs": torch.abs, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
             "reciprocal": torch.reciprocal, "square": torch.square}

    def __init__(self, name: str, index: sympy.Expr, values: torch.Tensor):
        self.name, self.index, self.values = name, index, values

    def load(self, name, index):
        if name != self.name or sympy.expand(index - self.index) != 0:
            raise _NotMatched(f"loads {name}[{index}]")
        return self.values

    def constant(self, value, dtype):
        if dtype == torch.bool:
            return torch.tensor(bool(value))
        if dtype not in FLOAT_DTYPES:
            raise _NotMatched(f"a {dtype} constant")
        return torch.tensor(float(value), dtype=torch.float64)

    def to_dtype(self, x, dtype, src_dtype=None):
        if dtype not in FLOAT_DTYPES:     # a float rounding only changes the value within the dtype's tolerance
            raise _NotMatched(f"a cast to {dtype}")
        return x.to(torch.float64)

    def where(self, c, a, b):
        return torch.where(c, a, b)

    def __getattr__(self, op):
        if op in self.ARITHMETIC:
            return lambda a, b: self.ARITHMETIC[op](a, b).to(torch.float64)
        if op in self.COMPARISONS:
            return self.COMPARISONS[op]
        if op in self.UNARY:
            return self.UNARY[op]
        raise _NotMatched(f"ops.{op}")


def probe_values() -> torch.Tensor:
    """Dense over [-10, 10] (both functions' interesting range), small magnitudes and large ones."""
    grid = torch.linspace(-10.0, 10.0, 4001, dtype=torch.float64)
    small = torch.tensor([0.0, 1e-6, -1e-6, 1e-3, -1e-3], dtype=torch.float64)
    large = torch.tensor([50.0, -50.0, 1e3, -1e3, 6e4, -6e4], dtype=torch.float64)
    return torch.cat([grid, small, large])


def activation_of(node: ComputedBuffer, product: str, product_index: sympy.Expr, dims) -> str | None:
    """"relu" or "gelu" (tanh) when `node`'s body is that function of `product` at `product_index`
    (in terms of `dims`, the node's index variables), else None."""
    if not isinstance(node.data, Pointwise):
        return None
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    with unset_fake_temporarily():   # real float64 probes, inside the compile's fake mode
        return _activation_of(node, product, product_index, dims)


def _activation_of(node, product, product_index, dims) -> str | None:
    values = probe_values()
    try:
        with set_ops_handler(_Probe(product, product_index, values)):
            out = node.data.inner_fn(dims)
    except _NotMatched:
        return None
    except (RuntimeError, TypeError, ValueError):   # a body the probe cannot evaluate is no match either
        return None
    if not isinstance(out, torch.Tensor) or out.shape != values.shape or out.dtype != torch.float64:
        return None
    for name, fn in ACTIVATIONS.items():
        want = fn(values)
        if torch.allclose(out, want, rtol=1e-12, atol=1e-12):
            return name
    return None


def device_computes(act: str, device: torch.device) -> bool:
    """aten._addmm_activation on `device` computes `act` (its GELU is the tanh form on CUDA only)."""
    return act == "relu" or device.type == "cuda"


def fused_activation(template: MatmulTemplate, epilogue: list, product_readers: set, is_output: bool,
                     group: int) -> tuple[ExternKernel, str] | None:
    """(the aten._addmm_activation call computing the epilogue's buffer, "relu" or "gelu") where the
    module docstring's conditions hold, else None (codegen, for a template group left to cuBLAS).
    `product_readers`: the groups reading the template's buffer; `is_output`: the graph returns it."""
    if len(epilogue) != 1 or is_output or not product_readers <= {group}:
        return None
    node = epilogue[0].node
    act = lt_activation(template, node)
    if act is None:
        return None
    call = ExternKernel(node.name, node.layout, aten._addmm_activation.default, (template.bias, template.a, template.b),
                        {"use_gelu": act == "gelu"}, fallback=False, origins=(*template.origins, *node.origins))
    return call, act


def lt_activation(template: MatmulTemplate, node) -> str | None:
    """"relu" or "gelu" where `node` (a buffer) is that activation of `template`'s addmm, as one
    aten._addmm_activation on this device computes it, with the layouts it writes; else None. Who
    else reads the product is the caller's to check."""
    # a 1-D bias: cuBLASLt's bias epilogue, and what the partitions count as a cuBLASLt call for the
    # workspace a CUDA graph reserves (partition.py calls_cublaslt), whichever of the two calls runs
    if template.op is not aten.addmm.default or template.bias is None or len(template.bias.get_size()) != 1:
        return None
    lay, out = template.layout, node.layout
    if not isinstance(node, ComputedBuffer) or node.order is not None or out is None:
        return None
    if len(lay.size) != 2 or lay.dtype != out.dtype or lay.device != out.device or lay.dtype not in FLOAT_DTYPES[:3]:
        return None
    contiguous = tuple(contiguous_strides(lay.size))
    if any(tuple(x.size) != tuple(lay.size) or tuple(x.stride) != contiguous or x.offset != 0 for x in (lay, out)):
        return None
    if list(node.data.ranges) != list(lay.size):
        return None
    dims = index_vars("c", 2)
    act = activation_of(node, template.name, lay.index(dims), dims)
    return act if act is not None and device_computes(act, lay.device) else None


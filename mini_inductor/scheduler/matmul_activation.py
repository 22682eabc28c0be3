"""cuBLAS's own activation epilogues: relu(addmm) and tanh-GELU(addmm) as one `aten._addmm_activation`.

Where the scheduler or max-autotune leaves an addmm to cuBLAS (scheduler/matmul_choice.py), its bias
already stays in cuBLAS's epilogue (MatmulTemplate.as_extern). cuBLASLt also applies a ReLU or a
tanh-approximated GELU to the product before it is stored; torch binds that as
`aten._addmm_activation(bias, a, b, use_gelu=...)`: on CUDA, cuBLASLt where its layouts allow, else
addmm followed by the activation in place, GELU in its tanh form either way; on the CPU addmm then
ReLU or *exact* GELU. So tanh-GELU is fused on CUDA only, ReLU on any device. With config option
`cublaslt_activations` (on by default), such a call replaces the ATen addmm and the epilogue kernel
after it, which otherwise reads the product back and writes it again, or a template with the
activation fused (on an H200, session 29, cuBLASLt's epilogue was faster than both). A NaN or an
infinite product comes out as eager's relu or gelu gives it (the same NaNs, on the H200).

The epilogue qualifies when its pointwise nodes, all of the addmm's layout (contiguous, 2-D), load
nothing but the product and each other, element for element, and the one whose result leaves the
epilogue computes ReLU or tanh-GELU of the product; and the product and the buffers between are read
by nothing else (a graph output, or a GELU's saved input in training, keeps the two apart). An fp16
or bf16 GELU needs more than one node: its decomposition keeps the float32 upcast of the product as
a buffer of its own, fused into the same kernel. In "auto" on CUDA such an activation stays with
the addmm it follows (matmul_choice.fusion_check) and goes to cuBLASLt whatever the cost model says
of a template (matmul_choice.choose_matmuls). Which function the nodes compute is found by running
their loop bodies in float64 on probe values (`activation_of`), each cast rounding as it would: the
decompositions of relu and gelu reach the scheduler as arithmetic, and a body that agrees with the
function, rounded to the result's dtype, on a dense grid of probes, infinities and NaN included, is
that function. A near miss is not taken: exact GELU against its tanh form (up to 5e-4 apart), a
rounding to bfloat16 before a float32 ReLU, `where(y > 0, y, 0)` (0 at a NaN, where relu gives NaN).
"""
from __future__ import annotations

import math

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
    """An ops handler evaluating a pointwise body on float64 probe values. The loads it may make are of
    `name` at `index` (the output's own element) and of the epilogue's own intermediate buffers
    (`inner`: name -> ComputedBuffer of the same shape) at their own element, which it evaluates in
    turn; any other load, index or op is not a match."""

    ARITHMETIC = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "truediv": torch.div,
                  "maximum": torch.maximum, "minimum": torch.minimum, "pow": torch.pow}
    COMPARISONS = {"gt": torch.gt, "ge": torch.ge, "lt": torch.lt, "le": torch.le, "eq": torch.eq, "ne": torch.ne}
    UNARY = {"neg": torch.neg, "tanh": torch.tanh, "relu": torch.relu, "exp": torch.exp, "erf": torch.erf,
             "sigmoid": torch.sigmoid, "abs": torch.abs, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
             "reciprocal": torch.reciprocal, "square": torch.square}

    def __init__(self, name: str, index: sympy.Expr, values: torch.Tensor, dims=(), inner=None):
        self.name, self.index, self.values = name, index, values
        self.dims, self.inner, self.done = dims, dict(inner or {}), {}

    def load(self, name, index):
        if name in self.inner:
            buf = self.inner[name]
            if sympy.expand(index - buf.layout.index(self.dims)) != 0:
                raise _NotMatched(f"loads {name}[{index}]")
            if name not in self.done:   # its body, here and now, under this same handler
                self.done[name] = buf.data.inner_fn(self.dims)
            return self.done[name]
        if name != self.name or sympy.expand(index - self.index) != 0:
            raise _NotMatched(f"loads {name}[{index}]")
        return self.values

    def constant(self, value, dtype):
        if dtype == torch.bool:
            return torch.tensor(bool(value))
        if dtype not in FLOAT_DTYPES:
            raise _NotMatched(f"a {dtype} constant")
        return torch.tensor(float(value), dtype=torch.float64)

    def to_dtype(self, x, dtype, src_dtype=None, **_):
        if dtype not in FLOAT_DTYPES:
            raise _NotMatched(f"a cast to {dtype}")
        return x.to(dtype).to(torch.float64)   # its rounding too: relu(y.bfloat16().float()) is not relu(y)

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


def probe_values(dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """Dense over [-10, 10] (both functions' interesting range), small magnitudes, large ones, infinities
    and NaN (where(y > 0, y, 0) is not ReLU at a NaN, nor y * (y > 0) at -inf), as `dtype` holds them."""
    grid = torch.linspace(-10.0, 10.0, 4001, dtype=torch.float64)
    small = torch.tensor([0.0, 1e-6, -1e-6, 1e-3, -1e-3], dtype=torch.float64)
    large = torch.tensor([50.0, -50.0, 1e3, -1e3, 6e4, -6e4], dtype=torch.float64)
    special = torch.tensor([math.inf, -math.inf, math.nan], dtype=torch.float64)
    return torch.cat([grid, small, large, special]).to(dtype).to(torch.float64)


def activation_of(node: ComputedBuffer, product: str, product_index: sympy.Expr, dims, inner=None,
                  product_dtype: torch.dtype = torch.float64) -> str | None:
    """"relu" or "gelu" (tanh) when `node`'s body is that function of `product` at `product_index`
    (in terms of `dims`, the node's index variables), else None. `inner`: the buffers between the
    product and `node` (name -> buffer), each read at its own element and evaluated in place."""
    if not isinstance(node.data, Pointwise) or any(not isinstance(b.data, Pointwise) for b in (inner or {}).values()):
        return None
    # asked up to three times a template (the fusion check, the choice, codegen): kept on the node
    key = (product, str(product_index), tuple(sorted(inner or {})), product_dtype)
    memo = node.__dict__.setdefault("_lt_probes", {})
    if key not in memo:
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        with unset_fake_temporarily():   # real float64 probes, inside the compile's fake mode
            memo[key] = _activation_of(node, product, product_index, dims, inner, product_dtype)
    return memo[key]


def _activation_of(node, product, product_index, dims, inner=None, product_dtype=torch.float64) -> str | None:
    values = probe_values(product_dtype)
    try:
        with set_ops_handler(_Probe(product, product_index, values, dims, inner)):
            out = node.data.inner_fn(dims)
    except _NotMatched:
        return None
    except (RuntimeError, TypeError, ValueError):   # a body the probe cannot evaluate is no match either
        return None
    if not isinstance(out, torch.Tensor) or out.shape != values.shape or out.dtype != torch.float64:
        return None
    result = node.get_dtype() if hasattr(node, "get_dtype") else torch.float64
    out = out.to(result).to(torch.float64)                  # both rounded as the node stores them
    for name, fn in ACTIVATIONS.items():
        want = fn(values).to(result).to(torch.float64)
        if torch.allclose(out, want, rtol=1e-12, atol=1e-12, equal_nan=True):
            return name
    return None


def device_computes(act: str, device: torch.device) -> bool:
    """aten._addmm_activation on `device` computes `act` (its GELU is the tanh form on CUDA only)."""
    return act == "relu" or device.type == "cuda"


def epilogue_activation(template: MatmulTemplate, nodes: list, read_outside) -> tuple[str, object, list] | None:
    """("relu" or "gelu", the node computing it, the nodes between) where the epilogue `nodes`
    (scheduler nodes) compute that activation of `template`'s addmm as one aten._addmm_activation on
    this device computes it, else None. `read_outside(name)`: whether anything but `nodes` reads the
    buffer `name`, or the graph returns it. The product and every buffer between it and the result
    must be read by the epilogue alone: none of them is stored."""
    if read_outside(template.name):
        return None
    read_inside = {d.name for n in nodes for d in n.reads}
    finals = [n for n in nodes if n.name not in read_inside]
    if template.name not in read_inside or len(finals) != 1:
        return None
    final = finals[0]
    between = [n for n in nodes if n is not final]
    if any(read_outside(n.name) for n in between):
        return None
    act = lt_activation(template, final.node, {n.name: n.node for n in between})
    return (act, final, between) if act is not None else None


def fused_activation(template: MatmulTemplate, epilogue: list, users: dict, outputs: set,
                     group: int) -> tuple[ExternKernel, str, list[str]] | None:
    """(the aten._addmm_activation call computing the epilogue's result, "relu" or "gelu", the names of
    the buffers it makes unneeded) where `epilogue_activation` finds one, else None (codegen, for a
    template group left to cuBLAS). `users`: buffer name -> the groups reading it; `outputs`: the
    graph's outputs."""
    found = epilogue_activation(template, epilogue, lambda name: name in outputs or not users.get(name, set()) <= {group})
    if found is None:
        return None
    act, final, between = found
    node = final.node
    call = ExternKernel(node.name, node.layout, aten._addmm_activation.default, (template.bias, template.a, template.b),
                        {"use_gelu": act == "gelu"}, fallback=False,
                        origins=(*template.origins, *(o for n in (*between, final) for o in n.node.origins)))
    return call, act, [template.name, *(n.name for n in between)]


def lt_activation(template: MatmulTemplate, node, inner=None) -> str | None:
    """"relu" or "gelu" where `node` (a buffer) is that activation of `template`'s addmm, through the
    buffers `inner` (name -> buffer, each of the product's shape), as one aten._addmm_activation on
    this device computes it, with the layouts it writes; else None. Who else reads the product and
    the buffers between is the caller's to check."""
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
    inner = dict(inner or {})
    for buf in (node, *inner.values()):
        if not isinstance(buf, ComputedBuffer) or buf.order is not None or buf.layout is None \
                or list(buf.data.ranges) != list(lay.size):
            return None
    if any(tuple(x.size) != tuple(lay.size) or tuple(x.stride) != contiguous or x.offset != 0
           for x in (lay, out, *(b.layout for b in inner.values()))):
        return None
    dims = index_vars("c", 2)
    act = activation_of(node, template.name, lay.index(dims), dims, inner, lay.dtype)
    return act if act is not None and device_computes(act, lay.device) else None

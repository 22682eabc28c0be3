"""Gradients of the flash-attention op's extra tensors: a learnable bias (T5's or Swin's relative
position bias, a bias table flex attention's score_mod indexes), ALiBi slopes that are parameters.

    flash_attention_extra_backward(dout, q, k, v, out, lse, extra, mod, index) -> d loss / d extra[index]

A float extra tensor t<n> that requires grad gets d loss / d t<n> = sum over the scores it reaches of
dS · d mod / d t<n> (score_mod.gradient with wrt="t<n>"; dS = P (dP - delta), as the backward's), summed
over every batch, head, query and key it broadcasts along. The generated kernel `flash_bwd_dt<n>`
(kernels.py) walks a query block's key blocks as dq's kernel does (the same block table) and sums
in float32: along the keys in registers where the tensor is the same for every key (a per-row bias,
a per-head slope), into memory by atomic adds where it varies along them (a full bias, a per-key
one). The sum's order is not fixed, so the result may differ in the last bits from call to call.
It is an op of its own, called by flash.py's autograd formula once per such tensor: each recomputes
the scores, so a tensor that needs no gradient costs nothing.
"""
from __future__ import annotations

import torch
from torch import Tensor

from ..runtime.launch.autotune import next_power_of_2
from . import flash, score_mod, tables

_SCHEMA = ("(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor[] extra, str mod,"
           " int index, bool empty_rows_zero=False, Tensor? grad_lse=None) -> Tensor")


def has_gradient(mod: str, extra, index: int) -> bool:
    """Whether the op's extra tensor `index` can have a gradient: a float tensor that `mod` reads
    through a differentiable path."""
    return extra[index].is_floating_point() and \
        score_mod.gradient(score_mod.parse(mod).tree, wrt=f"t{index}") is not None


def reference_extra_backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, extra, mod: str, index: int,
                             empty_rows_zero: bool = False, grad_lse: Tensor | None = None) -> Tensor:
    """The gradient on the materialized score matrix, in float32 (an op's implementation runs below
    autograd: the formula, not autograd)."""
    sm = score_mod.parse(mod)
    t = extra[index]
    grad = score_mod.gradient(sm.tree, wrt=f"t{index}")
    if grad is None:
        return torch.zeros_like(t)
    _, env, _, dscore = flash.reference_dscore(dout, q, k, v, extra, sm, empty_rows_zero, grad_lse)
    full = torch.as_tensor(score_mod.evaluate(grad, {**env, "g": dscore}), device=q.device).float()
    full = full.expand(torch.broadcast_shapes(full.shape, dscore.shape))
    gather = next((g for g in sm.gathers if g.n == index), None)
    if gather is None:
        return full.sum_to_size(t.shape).to(t.dtype).contiguous()
    # read at a computed index: each score's gradient is added at the index it read
    where = tuple(torch.as_tensor(score_mod.evaluate(e, env), device=q.device).long().expand(full.shape)
                  for e in _index_of(sm.tree, index))
    dt = torch.zeros(t.shape, dtype=torch.float32, device=q.device)
    return dt.index_put_(where, full, accumulate=True).to(t.dtype)


def _index_of(tree: score_mod.Node, index: int) -> tuple:
    """The index expressions `tree` reads extra tensor t<index> at (one per dim)."""
    if tree.op == "index" and tree.args[0].value == f"t{index}":
        return tree.args[1:]
    for a in tree.args:
        found = _index_of(a, index)
        if found:
            return found
    return ()


def triton_extra_backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, extra,
                          sm: score_mod.ScoreMod, index: int, empty_rows_zero: bool = False,
                          grad_lse: Tensor | None = None) -> Tensor:
    B, Hq, L, _ = q.shape
    S = k.shape[2]
    tensors, strides = tables.extra_args(extra, (B, Hq, L, S), q.device, sm)
    plan = flash._plan_for(q, v, extra, sm, True, strides)
    dq_m, dq_n, dq_meta = plan.dq
    dout = dout.to(q.dtype)
    t = extra[index]
    gather = next((g for g in sm.gathers if g.n == index), None)
    if gather is None:
        shape4 = (1,) * (4 - t.dim()) + tuple(t.shape)
        dt = torch.zeros(shape4, dtype=torch.float32, device=q.device)
        # its strides seen at [B, Hq, L, S]: 0 along the dims it broadcasts along (a size-1 dim)
        dt_strides = [st if n > 1 else 0 for n, st in zip(shape4, dt.stride())]
        dt_base = dt
    else:   # read at a computed index: DT's layout is t's (score_mod.Gather.layout)
        dt = torch.zeros(t.shape, dtype=torch.float32, device=q.device)
        offset, dt_strides = gather.layout(dt, L, S)
        dt_base = tables.at_offset(dt, offset)
    dt_i, dt_j = dt_strides[2] != 0 and L > 1, dt_strides[3] != 0 and S > 1   # it varies along i, j
    delta = torch.empty(B, Hq, L, dtype=torch.float32, device=q.device)
    if plan.skip:
        table = tables.block_ranges(sm, L, S, dq_m, dq_n, q.device, True, extra, q_block_m=plan.block_m,
                                   empty_rows_zero=empty_rows_zero)
        ranges = (table.kv_lo, table.kv_hi, table.full_lo, table.full_hi, table.tab_b, table.tab_h)
    else:
        ranges = (delta,) * 4 + (0, 0)   # not read
    with flash._launch_context(q):
        flash.backward_delta(plan, out, dout, delta, grad_lse)
        kernel = getattr(plan.module, f"flash_bwd_dt{index}")
        kernel[(-(-L // dq_m), B * Hq)](q, k, v, dout, lse, delta, dt_base, *tensors, *ranges,
                                        *q.stride(), *k.stride(), *v.stride(), *dout.stride(), *strides,
                                        *dt_strides, *flash._sizes(q, k, v), EMPTY_ROWS_ZERO=empty_rows_zero,
                                        DT_I=dt_i, DT_J=dt_j, DT_DIAG=dt_i and dt_j and dt_strides[3] == -dt_strides[2],
                                        DIAGONALS=next_power_of_2(dq_m + dq_n - 1), **dq_meta)
    return dt.reshape(t.shape).to(t.dtype)


@torch.library.custom_op("mini_inductor::flash_attention_extra_backward", mutates_args=(), schema=_SCHEMA)
def flash_attention_extra_backward(grad_out, q, k, v, out, lse, extra, mod, index, empty_rows_zero=False,
                                   grad_lse=None):
    sm = flash._check(q, k, v, extra, mod)
    if not has_gradient(mod, extra, index):
        return torch.zeros_like(extra[index], memory_format=torch.contiguous_format)
    if q.numel() == 0 or k.numel() == 0 or v.numel() == 0 or not flash._uses_triton(q):
        return reference_extra_backward(grad_out, q, k, v, extra, mod, index, empty_rows_zero, grad_lse)
    return triton_extra_backward(grad_out, q, k, v, out, lse, extra, sm, index, empty_rows_zero, grad_lse)


@torch.library.register_fake("mini_inductor::flash_attention_extra_backward")
def _extra_backward_fake(grad_out, q, k, v, out, lse, extra, mod, index, empty_rows_zero=False, grad_lse=None):
    return extra[index].new_empty(extra[index].shape)

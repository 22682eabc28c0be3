"""A stand-in for torch.ops.mini_inductor.flash_attention in the matcher's tests, in plain torch.

It implements the contract of mini_inductor/attention/__init__.py under another name
(mini_inductor_test::flash_attention_reference), so that the tests of match.py run before and
without the Triton op; `mod` is read with `ast` and evaluated on whole [B, Hq, L, S] tensors.
"""
from __future__ import annotations

import ast
import math
import operator

import torch

_BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
           ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.BitAnd: operator.and_,
           ast.BitOr: operator.or_}
_COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
            ast.Eq: operator.eq, ast.NotEq: operator.ne}
_CALLS = {"where": torch.where, "tanh": torch.tanh, "exp": torch.exp, "log": torch.log, "sigmoid": torch.sigmoid,
          "abs": torch.abs, "sqrt": torch.sqrt, "minimum": torch.minimum, "maximum": torch.maximum}


def _tensor(x, like):
    return x if isinstance(x, torch.Tensor) else torch.tensor(x, device=like.device)


def evaluate(mod: str, names: dict):
    """The value of the contract's `mod` expression, with `names` bound (s, b, h, i, j, t0, ..., L, S)."""
    like = names["s"]

    def ev(node):
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
            return node.value
        if isinstance(node, ast.Name):
            return math.inf if node.id == "inf" else names[node.id]
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -ev(node.operand)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Invert):
            return ~_tensor(ev(node.operand), like)
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return _BINARY[type(node.op)](ev(node.left), ev(node.right))
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
            return _COMPARE[type(node.ops[0])](ev(node.left), ev(node.comparators[0]))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _CALLS:
            args = [ev(a) for a in node.args]
            if node.func.id in ("where", "minimum", "maximum"):
                args = [args[0]] + [_tensor(a, like).to(like.dtype) if not isinstance(a, torch.Tensor) else a
                                    for a in args[1:]]
            return _CALLS[node.func.id](*[_tensor(a, like) if i == 0 else a for i, a in enumerate(args)])
        raise ValueError(f"mod {mod!r}: {ast.dump(node)} is not in the contract's language")
    return ev(ast.parse(mod, mode="eval"))


def reference(q, k, v, extra, mod):
    """The contract's result, computed with whole score matrices."""
    b, hq, L, e = q.shape
    hkv, S = k.shape[1], k.shape[2]
    k = k.repeat_interleave(hq // hkv, dim=1)
    v = v.repeat_interleave(hq // hkv, dim=1)
    s = q.float() @ k.float().transpose(-2, -1)
    dev = q.device
    names = {"s": s, "L": L, "S": S,
             "b": torch.arange(b, device=dev)[:, None, None, None], "h": torch.arange(hq, device=dev)[:, None, None],
             "i": torch.arange(L, device=dev)[:, None], "j": torch.arange(S, device=dev)}
    names.update({f"t{n}": t for n, t in enumerate(extra)})
    scores = evaluate(mod, names)
    scores = torch.broadcast_to(_tensor(scores, s).to(torch.float32), s.shape)
    return (torch.softmax(scores, dim=-1) @ v.float()).to(q.dtype).contiguous()


@torch.library.custom_op("mini_inductor_test::flash_attention_reference", mutates_args=())
def flash_attention_reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, extra: list[torch.Tensor],
                              mod: str) -> torch.Tensor:
    return reference(q, k, v, extra, mod)


@flash_attention_reference.register_fake
def _(q, k, v, extra, mod):
    return q.new_empty(q.shape[:-1] + v.shape[-1:])


@torch.library.custom_op("mini_inductor_test::flash_attention_reference_backward", mutates_args=())
def flash_attention_reference_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, extra: list[torch.Tensor],
                                       mod: str, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    # torch.func, not torch.autograd: a custom op's body runs below the autograd dispatch key
    _, pull_back = torch.func.vjp(lambda q, k, v: reference(q, k, v, extra, mod), q, k, v)
    return pull_back(grad)


@flash_attention_reference_backward.register_fake
def _(q, k, v, extra, mod, grad):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup(ctx, inputs, output):
    q, k, v, extra, mod = inputs
    ctx.save_for_backward(q, k, v, *extra)
    ctx.mod = mod


def _backward(ctx, grad):
    q, k, v, *extra = ctx.saved_tensors
    dq, dk, dv = torch.ops.mini_inductor_test.flash_attention_reference_backward(q, k, v, extra, ctx.mod, grad)
    return dq, dk, dv, [None] * len(extra), None


flash_attention_reference.register_autograd(_backward, setup_context=_setup)

OP = torch.ops.mini_inductor_test.flash_attention_reference.default

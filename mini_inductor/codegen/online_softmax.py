"""Online softmax: a looped kernel's row max and sum(exp(v - max)) in one loop over the row.

A softmax (or log-softmax) lowers to  M = max(v),  S = sum(exp(v - M)),  out = f(v, M, S).
Looped, S needs M, so the kernel reads the row three times:

    loop 1:  m = max(m, v)                          → M
    loop 2:  s += exp(v - M)                        → S
    loop 3:  out = f(v, M, S)

Carrying a running sum rescaled whenever the running max grows saves loop 2:

    loop 1:  m' = max(m, v);  s = s * exp(m - m') + exp(v - m');  m = m'    → M, S
    loop 2:  out = f(v, M, S)

`find_online_softmax` recognises the pair by evaluating both nodes' bodies into expression trees:
the sum's value must be exp(V - load(M's buffer at M's own index)) where V is the max's value.
`OnlineSoftmaxOps` then emits both reductions while the max node is generated.

Rows that eager turns into NaN stay NaN: where M is ±inf or NaN every exp(v - M) of eager's sum has
an inf - inf (or a NaN) in it, so S is NaN there; the running sum instead guards its -inf lanes
(a lane that has seen only -inf adds 0, not exp(-inf - -inf)) and sets S to NaN at the end.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import sympy
import torch

from ..lowering.sizevars import simplify
from ..lowering.virtualized import POINTWISE_OPS, set_ops_handler
from ..scheduler.nodes import SchedulerNode
from .recompute import element_index


@dataclasses.dataclass(frozen=True)
class OnlineSoftmax:
    """A max node and the sum node computed with it in the max's loop."""

    max_node: str
    sum_node: str
    sum_index: sympy.Expr        # where the sum node stores (kernel terms)


class _NoMatch(Exception):
    pass


class _TreeOps:
    """An ops handler that evaluates a body into nested tuples, to compare two bodies' values."""

    def __init__(self, ranges: dict, pointwise: dict[str, SchedulerNode]):
        self.ranges = ranges
        self.pointwise = pointwise              # members whose loads are replaced by their bodies
        self.reduced: tuple | None = None     # (reduction type, dtype, src dtype, value tree)
        self.stored: tuple | None = None        # (buffer, index)

    def load(self, name, index):
        index = simplify(index, self.ranges)
        node = self.pointwise.get(name)
        if node is not None and node.node.get_dtype() == torch.float32:
            element = element_index(index, node.node.layout, self.ranges)
            if element is not None:
                return node.node.data.inner_fn(element)
        return ("load", name, index)

    def constant(self, value, dtype):
        return ("constant", value, dtype)

    def index_expr(self, expr, dtype):
        return ("index_expr", simplify(expr, self.ranges), dtype)

    def to_dtype(self, x, dtype, src_dtype=None):
        return ("to_dtype", x, dtype)

    def where(self, c, a, b):
        return ("where", c, a, b)

    def masked(self, mask, body, other):
        raise _NoMatch("masked body")

    def indirect_indexing(self, value, size, check=True):
        raise _NoMatch("indirect load")

    def reduction(self, dtype, src_dtype, reduction_type, value):
        self.reduced = (reduction_type, dtype, src_dtype, value)
        return ("reduction",)

    def store_reduction(self, name, index, value):
        self.stored = (name, simplify(index, self.ranges))

    def store(self, name, index, value):
        raise _NoMatch("pointwise node")

    def __getattr__(self, name):
        if name in POINTWISE_OPS:
            return lambda *args: (name,) + args
        if name.startswith("__"):
            raise AttributeError(name)
        raise _NoMatch(f"ops.{name}")   # an op this matcher does not model: not a softmax


def _reduction_tree(kernel, node: SchedulerNode, ranges: dict, pointwise: dict) -> _TreeOps | None:
    """The node's reduction and store as trees in kernel terms, or None if it has no plain form."""
    xvars, rvars = kernel._node_vars(node, True)
    index, rindex = node.body.reindex(xvars, rvars)
    tree = _TreeOps(ranges, pointwise)
    try:
        with set_ops_handler(tree):
            node.node.store_body(index, rindex)
    except _NoMatch:
        return None
    return tree if tree.reduced is not None and tree.stored is not None else None


def find_online_softmax(kernel, nodes: list[SchedulerNode], ranges: dict) -> dict[str, OnlineSoftmax]:
    """Max→sum(exp(v - max)) pairs of a looped kernel, keyed by both nodes' names; `ranges` are the
    kernel's index variables' ranges."""
    found: dict[str, OnlineSoftmax] = {}
    pointwise = {n.name: n for n in nodes if not n.is_reduction()}
    trees = {n.name: _reduction_tree(kernel, n, ranges, pointwise) for n in nodes
             if n.is_reduction() and getattr(n.node.data, "reduction_type", None) in ("max", "sum")}
    maxes = {n: t for n, t in trees.items() if t is not None and t.reduced[0] == "max"}
    for name, t in trees.items():
        if t is None or t.reduced[0] != "sum" or t.reduced[1] != torch.float32:
            continue
        for mname, m in maxes.items():
            if mname in found or m.reduced[1] != torch.float32:
                continue
            expected = ("exp", ("sub", m.reduced[3], ("load", m.stored[0], m.stored[1])))
            if t.reduced[3] == expected:
                pair = OnlineSoftmax(mname, name, t.stored[1])
                found[mname] = found[name] = pair
                break
    return found


class OnlineSoftmaxOps:
    """Wraps the kernel's TritonOps while a paired max node is generated: its max reduction becomes
    the online max-and-sum; `store_sum` then stores the sum for the paired sum node."""

    def __init__(self, inner: Any, pair: OnlineSoftmax):
        self.inner = inner
        self.pair = pair
        self.total: Any = None

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def reduction(self, dtype: torch.dtype, src_dtype: torch.dtype, reduction_type: str, value):
        if reduction_type != "max" or self.total is not None:
            return self.inner.reduction(dtype, src_dtype, reduction_type, value)
        k = self.inner.k
        sec = k.section
        mask = "xmask & rmask"
        value = self.inner.to_dtype(value, torch.float32)
        m, s = k.newvar(torch.float32), k.newvar(torch.float32)
        sec.init += [f"{m} = tl.full([XBLOCK, RBLOCK], float(\"-inf\"), tl.float32)",
                     f"{s} = tl.zeros([XBLOCK, RBLOCK], tl.float32)"]
        m_new, alpha, term = (k.newvar(torch.float32) for _ in range(3))
        sec.lines += [
            f"{m_new} = tl.where({mask}, triton_helpers.maximum({m}, {value}), {m})",
            # equal maxima (both -inf, both inf) keep the sum as it is; exp(m - m') would be NaN
            f"{alpha} = tl.where({m} == {m_new}, 1.0, tl.exp({m} - {m_new}))",
            # a lane that has seen only -inf adds nothing (exp(-inf - -inf) would be NaN)
            f"{term} = tl.where({m_new} == float(\"-inf\"), 0.0, tl.exp({value} - {m_new}))",
            f"{s} = tl.where({mask}, {s} * {alpha} + {term}, {s})",
            f"{m} = {m_new}",
        ]
        big_m, total = k.newvar(torch.float32), k.newvar(torch.float32)
        sec.finalize += [
            f"{big_m} = triton_helpers.max2({m}, 1)[:, None]",
            f"{total} = tl.sum({s} * tl.exp({m} - {big_m}), 1)[:, None]",
            # eager's sum is NaN where the max is ±inf or NaN (inf - inf in every term)
            f"{total} = tl.where(({big_m} > float(\"-inf\")) & ({big_m} < float(\"inf\")), {total}, float(\"nan\"))",
        ]
        self.total = total
        k.reduction_cache[("max", value.name, dtype)] = big_m
        return big_m

    def store_sum(self) -> None:
        if self.total is None:
            raise AssertionError(f"online softmax: {self.pair.max_node} emitted no max reduction")
        self.inner.store_reduction(self.pair.sum_node, self.pair.sum_index, self.total)

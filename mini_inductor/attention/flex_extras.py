"""The captured tensors of a flex_attention call's score_mod and mask_mod, as the flash op's extra tensors
(attention/flex.py reads the submodules; this module keeps what they index and how).

    _Expr       a translated value: its expression (modification.py's tuples) and eager's dtype
    _Captured   a captured tensor and the index items read so far
    _Extras     one extra per (tensor, indexing): `resolve` gives ("t", n), or ("gather", n, items) where
                an item is computed (score_mod.Gather); `compose` indexes one table by another's values
    _drop_unread, _wrapped_gathers, _shift_gathers   the extras the final modification reads, and the
                negative indices eager counts from the end (the tensor doubled, the index moved up)
    _extra_view a plain extra as a tensor broadcasting to [B, Hq, L, S], in Dynamo's graph
"""
from __future__ import annotations

import dataclasses
import operator

import torch
import torch.fx

from . import score_mod
from .modification import NearMiss, _binary, known_eq, render, shape_of, static, value_of

_AXES = "bhij"                                  # the score's axes, in the order of [B, Hq, L, S]


# ── values ───────────────────────────────────────────────────────────────────────────────────────
@dataclasses.dataclass(frozen=True)
class _Expr:
    """A translated value: its expression (modification.py's tuples) and the dtype eager computes it in
    (None for a Python number, whose `number` is kept for type promotion)."""

    expr: tuple
    dtype: torch.dtype | None
    number: object = None

    def promotes_as(self):
        return self.number if self.dtype is None else torch.empty((), dtype=self.dtype)


@dataclasses.dataclass(frozen=True)
class _Captured:
    """A captured tensor (a node of Dynamo's graph), indexed so far by `index` (one item per leading dim:
    an index name of _AXES, or an int)."""

    node: torch.fx.Node
    index: tuple = ()

    @property
    def rank(self) -> int:
        return len(shape_of(self.node))


class _Extras:
    """The captured tensors as the call's extra tensors, one per (tensor, indexing): `resolve` gives the
    extra of a tensor indexed by all its dims (tN), else the partly indexed tensor."""

    def __init__(self, emit=None, extents: dict | None = None):
        self.specs: list[tuple[torch.fx.Node, tuple]] = []
        self.emit = emit   # a match._Emitter before the call: the tensors `compose` makes
        self.extents = extents or {}   # the score grid's sizes by index name (b, h, i, j)
        # decisions taken on sizes at their hints (SymBools), guarded only where the call is rewritten
        # (`guard_pending`): a near miss leaves no guard, so Dynamo does not recompile for it
        self.pending: list = []

    def decide(self, cond) -> bool:
        """`cond`, a bool or a SymBool over sizes, at its hint; a SymBool kept to be guarded."""
        if isinstance(cond, torch.SymBool):
            hint = cond.node.hint
            if hint is None:
                raise NearMiss("a size read from data (an unbacked symbol) decides how a captured tensor is read")
            self.pending.append(cond)
            return bool(hint)
        return bool(cond)

    def specialize(self, size) -> int:
        """A size as its hint; a symbolic one kept to be guarded equal to it."""
        if isinstance(size, int):
            return size
        hint = size.node.hint
        if hint is None:
            raise NearMiss("a captured tensor's size read from data (an unbacked symbol) would need a value")
        self.decide(size == hint)
        return int(hint)

    def guard_pending(self) -> None:
        """Guard every decision taken at a hint (the call is rewritten)."""
        for cond in self.pending:
            bool(cond)

    def items_of(self, n: int) -> tuple:
        """The index items of extra n, as a gather's (index names as ("idx", name), ints as numbers)."""
        return tuple(("idx", a) if isinstance(a, str) else ("num", a) if isinstance(a, int) else a
                     for a in self.specs[n][1])

    def compose(self, outer: torch.fx.Node, d: int, n: int) -> tuple[torch.fx.Node, tuple]:
        """(`outer` with its dim d indexed by the values of extra n, the index items of its dims from d
        on): in Dynamo's graph, outer.index_select(d, values) with dim d unflattened to the values'
        shape, a negative value counted from the end as eager's indexing counts it. Only the part of
        extra n the scores read takes part (`_read_region`): eager reads no other value, so another
        out of range raises in neither. Extra n is an integer tensor, as it is (not `_extra_view`'s)."""
        if self.emit is None:
            raise NearMiss(f"{outer.name} is indexed by a captured tensor's values")
        inner = self.specs[n][0]
        items = self.items_of(n)
        inner, items = self._read_region(inner, items)
        size = shape_of(outer)[d]
        flat = self.emit("call_method", "reshape", inner, -1)
        flat = self.emit("call_function", torch.where, self.emit("call_function", operator.lt, flat, 0),
                         self.emit("call_function", operator.add, flat, size), flat)
        x = self.emit("call_method", "index_select", outer, d, flat)
        rank = len(shape_of(inner))
        if rank == 0:     # a 0-d tensor's one value: the dim goes
            x = self.emit("call_method", "squeeze", x, d)
        elif rank > 1:
            x = self.emit("call_method", "unflatten", x, d, tuple(shape_of(inner)))
        return x, items

    def _read_region(self, inner: torch.fx.Node, items: tuple) -> tuple[torch.fx.Node, tuple]:
        """`inner` narrowed, dim by dim, to the indices `items` reach over the score grid, and the items
        moved to match; as it is where a size is symbolic or an index leaves the dim (wrapped
        indices: `_wrapped_gathers` decides those later)."""
        shape = shape_of(inner)
        ranges = [_item_range(item, self.extents) for item in items]
        if not static(*shape) or any(r is None or r[0] < 0 or r[1] >= size for r, size in zip(ranges, shape)):
            return inner, items
        moved = []
        for e, ((lo, hi), item) in enumerate(zip(ranges, items)):
            if (lo, hi) != (0, shape[e] - 1):
                inner = self.emit("call_method", "narrow", inner, e, lo, hi - lo + 1)
            moved.append(item if lo == 0 else ("num", item[1] - lo) if item[0] == "num" else
                         _binary("-", item, ("num", lo)))
        return inner, tuple(moved)

    def resolve(self, c: _Captured):
        if len(c.index) < c.rank:
            return c
        value = value_of(c.node)
        if value.dtype not in (torch.bool, torch.float16, torch.bfloat16, torch.float32, torch.int32, torch.int64):
            raise NearMiss(f"{c.node.name} is {value.dtype}: extra tensors are bool, int32, int64 or 16/32-bit floats")
        names = [a for a in c.index if isinstance(a, str)]
        if len(set(names)) != len(names) or any(isinstance(a, tuple) for a in c.index):
            # a computed index, or one index twice (a diagonal): the tensor as it is, read at the index
            # by the op (score_mod.Gather), `_analyse` checks it stays inside the tensor
            index = tuple(("idx", a) if isinstance(a, str) else a if isinstance(a, tuple) else
                          ("num", _nonnegative(c.node, d, a, self)) for d, a in enumerate(c.index))
            key = (c.node, index)
        else:
            key = (c.node, c.index)
        if key not in self.specs:
            self.specs.append(key)
        n = self.specs.index(key)
        if key[1] is not c.index:
            return _Expr(("gather", n, key[1]), value.dtype)
        return _Expr(("t", n), value.dtype)


def _item_range(item: tuple, extents: dict) -> tuple[int, int] | None:
    """The least and greatest value of an index item (`_Extras.items_of`'s form) over the score grid of
    `extents` (static sizes), or None."""
    if item[0] == "num":
        return (item[1], item[1]) if isinstance(item[1], int) else None
    coefs = score_mod.affine_text(render(item))
    if coefs is None or len(extents) < 4 or not static(*extents.values()):
        return None
    return score_mod.affine_range(coefs, extents["b"], extents["h"], extents["i"], extents["j"])


def _nonnegative(node: torch.fx.Node, d: int, item: int, extras: "_Extras") -> int:
    """An int index of dim d of a captured tensor, a negative one counted from the end as eager's is."""
    size = shape_of(node)[d]
    if item >= 0:
        return item
    size = extras.specialize(size)   # (a table made dynamic: its size, guarded where rewritten)
    if item + size < 0:
        raise NearMiss(f"{node.name} is indexed by {item}, outside its dim {d} (or a symbolic one)")
    return item + size


def _gathered(index: tuple) -> bool:
    """Whether an extra's index items (`_Extras.specs`) read it at a computed index."""
    return any(isinstance(a, tuple) for a in index)


# ── the extras a modification reads ──────────────────────────────────────────────────────────────
def _drop_unread(expr, extras: _Extras):
    """`expr` with its extras renumbered to those it reads, `extras.specs` cut to them: an integer
    tensor whose values index another (`_Extras.compose`) is read in Dynamo's graph, not by the op."""
    read: list[int] = []

    def walk(e):
        if isinstance(e, tuple) and e and e[0] in ("t", "gather"):
            if e[1] not in read:
                read.append(e[1])
        if isinstance(e, tuple):
            for x in e:
                walk(x)
    walk(expr)
    read.sort()
    if read == list(range(len(extras.specs))):
        return expr
    new = {old: n for n, old in enumerate(read)}
    extras.specs = [extras.specs[old] for old in read]

    def renumber(e):
        if not isinstance(e, tuple):
            return e
        if e and e[0] in ("t", "gather"):
            return (e[0], new[e[1]], *(renumber(x) for x in e[2:]))
        return tuple(renumber(x) for x in e)
    return renumber(expr)


def _wrapped_gathers(parsed: score_mod.ScoreMod, extras: _Extras, extents: tuple) -> dict[int, dict[int, int]]:
    """Where a captured tensor's computed index reaches below 0 on the score grid (`bias[h, q_idx -
    kv_idx]` under a causal mask): eager counts a negative index from the end, which the op reads as
    the tensor doubled along that dim (`_rewrite` cats it to itself) at the index plus its size. Per
    extra, {dim: size} of those dims. A NearMiss past the end, or below minus the size (eager raises).
    Under dynamic shapes the comparisons are decided at the sizes' hints and guarded where the call
    is rewritten (`_Extras.decide`: Dynamo recompiles where they change)."""
    wraps: dict[int, dict[int, int]] = {}
    for g in parsed.gathers:
        node = extras.specs[g.n][0]
        for d, size in enumerate(shape_of(node)):
            lo, hi = g.index_range(d, *extents)
            if extras.decide(lo < -size) or extras.decide(hi >= size):
                raise NearMiss(f"{node.name} is read at an index of dim {d} that runs from {lo} to {hi} over the "
                               f"scores, outside its size {size}")
            if extras.decide(lo < 0):   # (a symbolic size, a table made dynamic, is specialized: its size is the shift)
                wraps.setdefault(g.n, {})[d] = extras.specialize(size)
    return wraps


def _shift_gathers(e, wraps: dict[int, dict[int, int]]):
    """The expression `e` with each wrapped index (_wrapped_gathers) moved up by its dim's size."""
    if not isinstance(e, tuple):
        return e
    if e and e[0] == "gather" and e[1] in wraps:
        dims = wraps[e[1]]
        return ("gather", e[1], tuple(_shifted(x, dims[d]) if d in dims else x for d, x in enumerate(e[2])))
    return tuple(_shift_gathers(x, wraps) for x in e)


def _shifted(x, by: int):
    """The index expression `x` plus `by`, added into its constant where it ends with one."""
    if x[0] == "bin" and x[1] in "+-" and x[3][0] == "num" and isinstance(x[3][1], int):
        c = x[3][1] if x[1] == "+" else -x[3][1]
        return ("bin", "+", x[2], ("num", c + by)) if c + by >= 0 else ("bin", "-", x[2], ("num", -(c + by)))
    return _binary("+", x, ("num", by))


def _extra_view(emit, node, index: tuple, extents: dict, size_of):
    """The captured tensor `node` indexed by `index` as a tensor broadcasting to [B, Hq, L, S]: ints
    selected, the indexed dims permuted to b, h, i, j order, cut to the score's extent, size-1 dims
    where an index is not used."""
    if _gathered(index):
        return node   # read at a computed index: the tensor as it is (score_mod.Gather)
    x = node
    for d in reversed(range(len(index))):
        if isinstance(index[d], int):
            size = shape_of(x)[d]
            pos = index[d] + size if index[d] < 0 else index[d]
            if not isinstance(pos, int) or not (isinstance(size, int) and 0 <= pos < size):
                raise NearMiss(f"{node.name} is indexed by {index[d]}, outside its dim {d} (or a symbolic one)")
            x = emit("call_method", "select", x, d, pos)
    names = [a for a in index if isinstance(a, str)]
    order = sorted(range(len(names)), key=lambda d: _AXES.index(names[d]))
    if order != list(range(len(names))):
        x = emit("call_method", "permute", x, *order)
    present = [names[d] for d in order]
    for d, axis in enumerate(present):
        size, want = shape_of(x)[d], extents[axis]
        if known_eq(size, want) or known_eq(size, 1):
            continue
        if static(size, want):
            if size < want:
                raise NearMiss(f"{node.name}'s dim of {size} is indexed by {axis} up to {want}: out of range")
            x = emit("call_method", "narrow", x, d, 0, want)
        else:
            x = emit("call_method", "narrow", x, d, 0, size_of(axis))
    for p, axis in enumerate(_AXES):
        if axis not in present:
            x = emit("call_method", "unsqueeze", x, p)
    return x

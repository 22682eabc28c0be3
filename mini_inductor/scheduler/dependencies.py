"""Dependencies, found by running loop bodies under a recording `ops` handler.

    MemoryDep(name, index, sizes)   reads or writes `name` at `index`, an expression of the
                                    canonical loop variables c0, c1, ... ranging over `sizes`
    StarDep(name)                   the whole buffer (extern calls, indirect indexing)
    WeakDep(name)                   ordering only (a later mutation must wait for this reader)

Canonical form: loops are simplified first (size-1 loops dropped, neighbouring loops merged when
every access walks them contiguously), then variables are renamed c0, c1, ... in order (the index
math, `merge_loops`, `simplify` and `canonical_vars`, is lowering/sizevars.py's). So a
pointwise producer's write and its consumer's elementwise read compare equal whatever shapes the
FX graph used. `normalized()` merges across the pointwise/reduction split as well, which is the
form that decides whether a pointwise producer can feed a reduction inside its loop.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Callable

from ..lowering.ir import ComputedBuffer
from ..lowering.sizevars import INDEX_CACHE_SIZE, Expr, canonical_vars, merge_loops, simplify
from ..lowering.symbolic import hint
from ..lowering.virtualized import POINTWISE_OPS, set_ops_handler


@dataclasses.dataclass(frozen=True)
class MemoryDep:
    name: str
    index: Expr
    sizes: tuple[Expr, ...]

    def normalized(self) -> "MemoryDep":
        """Merge all mergeable loops, ignoring the pointwise/reduction split (cached: fusion asks often)."""
        return _normalized(self)

    def is_indirect(self) -> bool:
        """The index holds a loaded value (a `tmp` symbol): gather/scatter-like access."""
        return _is_indirect(self.index)

    def numbytes(self, itemsize: int, buffer_numel: int) -> int:
        """Bytes this access touches: the product of the ranges of the variables it uses."""
        if self.is_indirect():
            return buffer_numel * itemsize
        used = self.index.free_symbols
        n = 1
        for v, s in zip(canonical_vars(len(self.sizes)), self.sizes):
            if v in used:
                n *= hint(s)   # (a dynamic graph's size at its traced value: for scores and reports)
        return min(n, buffer_numel) * itemsize

    def __str__(self):
        return f"MemoryDep({self.name}, {self.index}, {[str(s) for s in self.sizes]})"


def _normalized(dep: MemoryDep) -> MemoryDep:
    index, sizes = _normalized_access(dep.index, dep.sizes)
    return MemoryDep(dep.name, index, sizes)


@functools.lru_cache(maxsize=INDEX_CACHE_SIZE)
def _normalized_access(index: Expr, sizes: tuple[Expr, ...]) -> tuple[Expr, tuple[Expr, ...]]:
    """Keyed by the access alone (not the buffer's name): buffers read alike share the work."""
    vars_ = canonical_vars(len(sizes))
    new_sizes, reindex = merge_loops(list(sizes), [index], vars_)
    new_vars = canonical_vars(len(new_sizes))
    new_index = simplify(index.xreplace(dict(zip(vars_, reindex(new_vars)))), dict(zip(new_vars, new_sizes)))
    return new_index, tuple(new_sizes)


@functools.lru_cache(maxsize=INDEX_CACHE_SIZE)
def _is_indirect(index: Expr) -> bool:
    """Keyed by the index alone: hashing a whole MemoryDep costs more than the answer saves."""
    return any(getattr(s, "name", "").startswith("tmp") for s in index.free_symbols)


@dataclasses.dataclass(frozen=True)
class StarDep:
    name: str

    def __str__(self):
        return f"StarDep({self.name})"


@dataclasses.dataclass(frozen=True)
class WeakDep:
    name: str
    mutating_buf: str = ""

    def __str__(self):
        return f"WeakDep({self.name})"


Dep = MemoryDep | StarDep | WeakDep


class RecordingHandler:
    """The ops handler that records loads and stores; every other op is a no-op."""

    def __init__(self) -> None:
        self.reads: list[tuple[str, Expr]] = []
        self.writes: list[tuple[str, Expr]] = []
        self.indirect = 0
        self.op_counts: dict[str, int] = {}
        self.symbols: set = set()   # of values the body computes from sizes (x * (n // u0))

    def load(self, name, index):
        self.reads.append((name, index))
        return "load"

    def store(self, name, index, value, mode=None):
        self.writes.append((name, index))

    store_reduction = store

    def reduction(self, dtype, src_dtype, reduction_type, value):
        self._count(reduction_type)
        return ("red",) * 3 if reduction_type in ("welford_reduce", "welford_combine") else "red"

    def scan(self, dtype, scan_type, value):
        self._count(f"cum{scan_type}")
        return "scan"

    def sort(self, dtype, descending, value):
        self._count("sort")
        return "sort"

    def constant(self, value, dtype):
        self.symbols |= getattr(value, "free_symbols", set())
        return "const"

    def index_expr(self, expr, dtype):
        self.symbols |= getattr(expr, "free_symbols", set())
        return "index"

    def to_dtype(self, x, dtype, src_dtype=None):
        return x

    def where(self, c, a, b):
        self._count("where")
        return a

    def masked(self, mask, body, other):
        return body()

    def _count(self, name):
        self.op_counts[name] = self.op_counts.get(name, 0) + 1

    def __getattr__(self, name):
        if name in POINTWISE_OPS:
            def op(*args, **kwargs):
                self._count(name)
                return name
            return op
        raise AttributeError(name)


@dataclasses.dataclass
class LoopBody:
    """A ComputedBuffer's loops after simplification, and the accesses it makes in them."""

    sizes: list[Expr]                 # pointwise (outer) loop sizes, simplified
    reduction_sizes: list[Expr]       # reduction loop sizes, simplified
    reindex: Callable                 # (vars, rvars) -> (original index, original rindex)
    reads: list[MemoryDep]
    writes: list[MemoryDep]
    op_counts: dict[str, int]
    symbols: frozenset = frozenset()  # size symbols the body's values use (not its loop variables)


def analyze_body(buf: ComputedBuffer) -> LoopBody:
    """Run the body once symbolically: simplify its loops, then record canonical reads and writes."""
    ranges, rranges = buf.get_ranges()
    xv, rv = canonical_vars(len(ranges), "x"), canonical_vars(len(rranges), "r")
    first = _record(buf, xv, rv)
    exprs = [e for _, e in first.reads + first.writes]
    sizes, reindex_x = merge_loops(ranges, exprs, xv)
    rsizes, reindex_r = merge_loops(rranges, exprs, rv)

    def reindex(new_x, new_r):
        return reindex_x(new_x), reindex_r(new_r)

    cv = canonical_vars(len(sizes) + len(rsizes))
    rec = _record(buf, *reindex(cv[:len(sizes)], cv[len(sizes):]))
    var_ranges = dict(zip(cv, sizes + rsizes))
    all_sizes = tuple(sizes + rsizes)
    reads = [MemoryDep(n, simplify(e, var_ranges), all_sizes) for n, e in rec.reads]
    writes = [MemoryDep(n, simplify(e, var_ranges), all_sizes) for n, e in rec.writes]
    return LoopBody(sizes, rsizes, reindex, list(dict.fromkeys(reads)), writes, rec.op_counts,
                    frozenset(rec.symbols - set(cv)))


def _record(buf: ComputedBuffer, index, rindex) -> RecordingHandler:
    rec = RecordingHandler()
    with set_ops_handler(rec):
        buf.store_body(index, rindex)
    return rec

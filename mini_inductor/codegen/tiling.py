"""2-D tiles for pointwise kernels whose accesses do not agree on a contiguous dimension.

A 1-D pointwise kernel walks its elements in the order of its loops, so an access that is contiguous
along another loop (the read of `x.t().contiguous()`, of `x + y.t()`, of an NCHW → NHWC copy) jumps
by its stride at every element. A 2-D tile lets both sides be coalesced:

            XBLOCK over the write's stride-1 loop (w)
          ┌──────────────────────┐
    YBLOCK│ store: contiguous →  │   the Y loops are the others, the read's stride-1 loop (r) last:
    over  │ load:  contiguous ↓  │   each column of the tile is a contiguous run of the read
    r     └──────────────────────┘

Triton picks a layout per access and moves the tile between them through shared memory.
Only kernels whose nodes share one loop nest are tiled; everything else stays 1-D.
"""
from __future__ import annotations

import dataclasses

import sympy

from ..lowering.sizevars import canonical_vars, product, static_int
from ..scheduler.dependencies import MemoryDep

# CUDA's limit on grid axis 1, which holds the X blocks (axis 0, the Y blocks, goes to 2**31 - 1)
MAX_GRID_AXIS1 = 65535


@dataclasses.dataclass(frozen=True)
class Tiling:
    """The loops of `sizes` split into the kernel's Y and X index: yindex walks `ydims` (row-major,
    the last fastest), xindex walks `xdim`."""

    sizes: tuple[int, ...]
    ydims: tuple[int, ...]
    xdim: int

    @property
    def ynumel(self) -> int:
        return int(product(self.sizes[d] for d in self.ydims))

    @property
    def xnumel(self) -> int:
        return self.sizes[self.xdim]


def _unit_stride_dim(dep: MemoryDep, n: int) -> int | None:
    """The loop along which `dep` is contiguous (coefficient 1), if its index is linear in the loops."""
    if dep.is_indirect() or not dep.index.free_symbols:
        return None
    vars_ = canonical_vars(n)
    if any(v in a.free_symbols for a in dep.index.atoms(sympy.Function) for v in vars_):
        return None  # div/mod of a loop variable: not a plain strided access
    ones = [d for d, v in enumerate(vars_) if dep.index.coeff(v) == 1]
    return ones[0] if len(ones) == 1 else None


def _coeff(dep: MemoryDep, n: int, dim: int) -> sympy.Expr:
    return dep.index.coeff(canonical_vars(n)[dim])


def choose_tiling(nodes, xblock_limit: int) -> Tiling | None:
    """A 2-D tiling for a pointwise kernel of `nodes`, or None where 1-D tiles are as good.

    Tiled when some access is contiguous along a loop other than the write's contiguous loop and
    strided (not broadcast) along the write's: under 1-D tiles that access would be uncoalesced.
    """
    if not nodes or any(n.is_reduction() for n in nodes):
        return None
    sizes = tuple(nodes[0].body.sizes)
    if len(sizes) < 2 or any(tuple(n.body.sizes) != sizes for n in nodes):
        return None
    try:
        sizes = tuple(static_int(s) for s in sizes)
    except NotImplementedError:
        return None
    n = len(sizes)
    writes = [d for node in nodes for d in node.writes if isinstance(d, MemoryDep) and len(d.sizes) == n]
    w = next((u for u in (_unit_stride_dim(d, n) for d in writes) if u is not None), None)
    if w is None:
        return None
    accesses = [d for node in nodes for d in list(node.reads) + list(node.writes)
                if isinstance(d, MemoryDep) and len(d.sizes) == n]
    for dep in accesses:
        r = _unit_stride_dim(dep, n)
        if r is None or r == w or _coeff(dep, n, w) in (0, 1):
            continue
        tiling = Tiling(sizes, tuple(d for d in range(n) if d not in (w, r)) + (r,), w)
        if -(-tiling.xnumel // xblock_limit) > MAX_GRID_AXIS1 or tiling.ynumel < 2 or tiling.xnumel < 2:
            return None
        return tiling
    return None


def is_outer_reduction(nodes) -> bool:
    """The kernel's reduction reads its input contiguously across rows and strided along them
    (a sum over dim 0): blocks should then be wide in rows and short in the reduction."""
    for node in nodes:
        if not node.is_reduction():
            continue
        nx, nr = len(node.body.sizes), len(node.body.reduction_sizes)
        if nx == 0 or nr == 0:
            return False
        vars_ = canonical_vars(nx + nr)
        x_in, r_in = vars_[nx - 1], vars_[-1]
        outer = inner = False
        for dep in node.reads:
            if not isinstance(dep, MemoryDep) or dep.is_indirect():
                continue
            if any({x_in, r_in} & a.free_symbols for a in dep.index.atoms(sympy.Function)):
                continue
            cx, cr = dep.index.coeff(x_in), dep.index.coeff(r_in)
            if cr == 1:
                inner = True
            elif cx == 1 and cr != 0:
                outer = True
        return outer and not inner
    return False

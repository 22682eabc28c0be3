"""Split reductions: a reduction with too few rows to fill the GPU becomes two.

    x.sum() over 16M elements: 1 row of 16M         → first pass:  1024 rows of 16K → partials (1024,)
                                                      second pass: 1 row of 1024    → the sum
    x.sum(0) of a (65536, 8) tensor: 8 rows of 64K  → first pass:  (split, 8) rows of 64K/split each
                                                      second pass: 8 rows of `split`

Each pass is an ordinary Reduction (its own kernel): the first reads the input in `split` chunks
per row, the second combines the partials. Welford (var, mean) passes (mean, m2, weight) triples
and combines them with `welford_combine`. argmax/argmin are not split.

Layout of the partials: when the reduced dims include the input's last dim (an inner reduction)
the chunk index is the partials' last dim, so each first-pass row reads a contiguous run; for an
outer reduction (sum over dim 0) it is their first dim, so neighbouring rows of a first-pass block
read neighbouring elements.
"""
from __future__ import annotations

from typing import Callable

import sympy
import torch

from .ir import ComputedBuffer, Layout, Reduction, current_graph
from .sizevars import FloorDiv, ModularIndexing, product, static_int
from .virtualized import ops

# split only rows of at least this many elements (shorter rows take a few µs on one SM: a second
# launch and losing the one-kernel softmax/norm fusion cost more than the parallelism gains)...
SPLIT_MIN_RNUMEL = 8192
# ...when there are fewer rows than this (an H100 has 132 SMs)...
SPLIT_MAX_ROWS = 256
# ...into about this many first-pass rows in all, each chunk at least SPLIT_MIN_CHUNK elements long
SPLIT_TARGET_ROWS = 1024
SPLIT_MIN_CHUNK = 1024

# how the second pass combines the first pass's partials
COMBINE = {"sum": "sum", "prod": "prod", "max": "max", "min": "min", "any": "any", "welford_reduce": "welford_combine"}


def split_factor(numel: int, rnumel: int, reduction_type: str) -> int:
    """How many chunks each reduction row is cut into (1: no split)."""
    if reduction_type not in COMBINE or rnumel < SPLIT_MIN_RNUMEL or numel >= SPLIT_MAX_ROWS:
        return 1
    want = -(-SPLIT_TARGET_ROWS // numel)
    split = 1 << (min(want, rnumel // SPLIT_MIN_CHUNK).bit_length() - 1)  # a power of 2, at most both
    if reduction_type == "welford_reduce":
        # every chunk must hold the same number of elements: Welford counts them
        while split > 1 and rnumel % split:
            split //= 2
    return split if split > 1 else 1


def _identity(reduction_type: str, dtype: torch.dtype):
    """The value a masked-off element contributes (the tail of the last chunk)."""
    if reduction_type == "sum":
        return 0
    if reduction_type == "prod":
        return 1
    if reduction_type == "any":
        return False
    largest = reduction_type == "min"
    if dtype.is_floating_point:
        return float("inf") if largest else float("-inf")
    if dtype == torch.bool:
        return largest
    info = torch.iinfo(dtype)
    return info.max if largest else info.min


def _unflatten(flat: sympy.Expr, sizes: list) -> list[sympy.Expr]:
    out, inner = [], sympy.Integer(1)
    for i in reversed(range(len(sizes))):
        out.append(FloorDiv(flat, inner) if i == 0 else ModularIndexing(flat, inner, sizes[i]))
        inner = inner * sizes[i]
    return list(reversed(out))


def make_split_reduction(device, acc: torch.dtype, compute: torch.dtype, inner_fn: Callable, kept: list,
                         reduced: list, reduction_type: str, output_index: int, split: int, inner: bool,
                         source: object, dims: tuple) -> ComputedBuffer:
    """The second pass's buffer (over `kept`); the first pass's buffers are registered before it.

    `inner_fn(index, rindex)` is the unsplit reduction's body, of the IR node `source` reduced over
    `dims`: the reduced values of one (source, dims, type) share one first pass (Welford's mean and m2).
    """
    graph = current_graph()
    rnumel = static_int(product(reduced))
    chunk = -(-rnumel // split)
    ranges1 = list(kept) + [sympy.Integer(split)] if inner else [sympy.Integer(split)] + list(kept)
    cache = graph.__dict__.setdefault("_split_partials", {})
    key = (id(source), dims, reduction_type, compute)
    hit = cache.get(key)
    if hit is not None:
        partials = hit[0]
    else:
        def first_fn(index, rindex):
            kidx, s = (index[:-1], index[-1]) if inner else (index[1:], index[0])
            flat = s * chunk + rindex[0]
            if split * chunk == rnumel:
                return inner_fn(kidx, _unflatten(flat, reduced))
            in_range = ops.lt(ops.index_expr(flat, torch.int64), ops.constant(rnumel, torch.int64))
            return ops.masked(in_range, lambda: inner_fn(kidx, _unflatten(flat, reduced)),
                              _identity(reduction_type, compute))

        outputs = 3 if reduction_type == "welford_reduce" else 1
        partials = []
        for i in range(outputs):
            red = Reduction(device, acc, first_fn, ranges1, (), [sympy.Integer(chunk)], reduction_type, compute, i)
            buf = ComputedBuffer(graph.new_buffer_name(), Layout.contiguous(device, acc, ranges1), red)
            graph.register_buffer(buf)
            partials.append(buf)
        cache[key] = (partials, source)  # holding `source` keeps its id from being reused

    def second_fn(index, rindex):
        idx = list(index) + [rindex[0]] if inner else [rindex[0]] + list(index)
        values = [ops.load(b.name, b.layout.index(idx)) for b in partials]
        return tuple(values) if len(values) == 3 else values[0]

    red = Reduction(device, acc, second_fn, list(kept), (), [sympy.Integer(split)], COMBINE[reduction_type], acc,
                    output_index)
    buf = ComputedBuffer(graph.new_buffer_name(), Layout.contiguous(device, acc, kept), red)
    graph.register_buffer(buf)
    return buf

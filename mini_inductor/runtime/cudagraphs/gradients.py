"""A backward's parameter gradients, moved out of the CUDA-graph pool for autograd to adopt.

Pool memory cannot become `.grad`: the next replay overwrites it. Left in the pool (and held, see
nodes.py `pin_gradient`), each gradient is copied by AccumulateGrad into a tensor of its own: an
allocation and a copy launch per parameter, about 20 µs of host time each on the H100, most of a
small model's backward. Here one allocation per dtype and one batched copy (`torch._foreach_copy_`)
give every parameter's gradient fresh memory, as views of one buffer that nothing else holds, which
AccumulateGrad adopts as they are.

    GradientsOutOfPool(idxs)(out) -> (out with those positions replaced, the positions)

Each view starts at a multiple of ALIGN bytes (generated kernels and CUDA graphs that later read a
gradient, a compiled optimizer step say, specialize on 16-byte alignment). The layout (which
positions, their shapes, dtypes and offsets) is worked out at the first call and kept while the
outputs keep it: parameters do not change shape.
"""
from __future__ import annotations

import torch

ALIGN = 128   # bytes


class _Group:
    """The gradients of one dtype and device: their positions, and the pieces of the buffer
    (`split_with_sizes`, one call for all of them: a padding piece after each gradient where the next
    would be misaligned), with the shape each gradient's piece is viewed as where it is not 1-d."""

    def __init__(self, dtype: torch.dtype, device: torch.device, idxs: list[int], shapes: list[torch.Size]):
        self.dtype, self.device, self.idxs = dtype, device, idxs
        self.shapes = shapes
        step = max(1, ALIGN // torch.empty((), dtype=dtype).element_size())
        self.pieces: list[int] = []                         # split sizes, gradients and padding
        self.picks: list[tuple[int, torch.Size | None]] = []   # (piece, shape to view it as, or None)
        total = 0
        for shape in shapes:
            n = shape.numel()
            self.picks.append((len(self.pieces), None if len(shape) == 1 else shape))
            self.pieces.append(n)
            total += n
            pad = -total % step
            if pad:
                self.pieces.append(pad)
                total += pad
        self.numel = total

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        pieces = flat.split_with_sizes(self.pieces)
        return [pieces[p] if shape is None else pieces[p].view(shape) for p, shape in self.picks]


class GradientsOutOfPool:
    def __init__(self, idxs: tuple[int, ...]):
        self.idxs = tuple(idxs)
        self.groups: list[_Group] | None = None
        self.moved: frozenset[int] = frozenset()   # the positions the groups cover

    def __call__(self, out) -> tuple[list, frozenset[int]]:
        """`out` (a backward's outputs) with the parameters' gradients in fresh memory, and their positions."""
        if not self.idxs or torch.is_grad_enabled():   # create_graph: autograd's own rules apply
            return out, frozenset()
        if self.groups is None or not self._fits(out):
            self.groups = self._plan(out)
            self.moved = frozenset(i for g in self.groups for i in g.idxs)
        if not self.groups:
            return out, self.moved
        out = list(out)
        for g in self.groups:
            fresh = g.views(torch.empty(g.numel, dtype=g.dtype, device=g.device))
            torch._foreach_copy_(fresh, [out[i] for i in g.idxs])
            for i, t in zip(g.idxs, fresh):
                out[i] = t
        return out, self.moved

    def _fits(self, out) -> bool:
        n = len(out)
        for g in self.groups:
            for i, shape in zip(g.idxs, g.shapes):
                t = out[i] if i < n else None
                if not isinstance(t, torch.Tensor) or t.dtype is not g.dtype or t.shape != shape:
                    return False
        return True

    def _plan(self, out) -> list[_Group]:
        found: dict[tuple, list[int]] = {}
        for i in self.idxs:
            t = out[i] if i < len(out) else None
            if isinstance(t, torch.Tensor) and t.layout == torch.strided and t.numel():
                found.setdefault((t.dtype, t.device), []).append(i)
        return [_Group(dtype, device, idxs, [out[i].shape for i in idxs]) for (dtype, device), idxs in found.items()]

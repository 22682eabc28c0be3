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
outputs keep it: parameters do not change shape. The buffer is cut into its views by one C++ call.
"""
from __future__ import annotations

import torch

ALIGN = 128   # bytes


class _Group:
    """The gradients of one dtype and device: their positions, and the pieces of the buffer, cut in
    one call (`unflatten_dense_tensors`, after the shapes of meta tensors: a padding piece after each
    gradient where the next would be misaligned). Python's `split_with_sizes` then a `view` per
    gradient took 6 µs a gradient on the CPU machine (24 of GPT-2's: 144 µs, on the H200 host's
    slower Python most of the 250 µs the copy out of the pool took a step, session 27); the one
    call takes 1-2 µs a piece."""

    def __init__(self, dtype: torch.dtype, device: torch.device, idxs: list[int], shapes: list[torch.Size]):
        self.dtype, self.device, self.idxs = dtype, device, idxs
        self.shapes = shapes
        step = max(1, ALIGN // torch.empty((), dtype=dtype).element_size())
        self.likes: list[torch.Tensor] = []      # the pieces' shapes, gradients and padding (meta tensors)
        self.picks: list[int] = []               # the gradients' pieces
        total = 0
        for shape in shapes:
            self.picks.append(len(self.likes))
            self.likes.append(torch.empty(shape, dtype=dtype, device="meta"))
            total += shape.numel()
            pad = -total % step
            if pad:
                self.likes.append(torch.empty(pad, dtype=dtype, device="meta"))
                total += pad
        self.numel = total

    def views(self, flat: torch.Tensor) -> list[torch.Tensor]:
        pieces = torch._C._nn.unflatten_dense_tensors(flat, self.likes)
        return [pieces[p] for p in self.picks]


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

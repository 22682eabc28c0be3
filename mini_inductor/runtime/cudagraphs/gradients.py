"""A backward's parameter gradients, moved out of the CUDA-graph pool for autograd to adopt.

Pool memory cannot become `.grad`: the next replay overwrites it. Left in the pool (and held, see
nodes.py `pin_gradient`), each gradient is copied by AccumulateGrad into a tensor of its own: an
allocation and a copy launch per parameter, about 20 µs of host time each on the H100, most of a
small model's backward. Here one allocation per dtype and one batched copy (`torch._foreach_copy_`)
give every parameter's gradient fresh memory, as views of one buffer that nothing else holds, which
AccumulateGrad adopts as they are.

    GradientsOutOfPool(idxs)(out) -> (out with those positions replaced, the positions)

The buffer is kept from one step to the next: when nothing but the mover holds it any more (the
optimizer's `zero_grad()` set every `.grad` it became to None, and nobody kept one), the next backward
copies into it again, with neither an allocation nor the views made anew (together about 100 µs of a
GPT-2 step's host time on the H200). The mover's own views are registered as cached tensors (as the
trees' outputs are): AccumulateGrad allows such a tensor the one extra reference, and adopts it still.
A buffer that anything else holds (gradient accumulation, a `.grad` kept by the user, a view of one) is
left to its holders, and that step's gradients get a new one.

Each view starts at a multiple of ALIGN bytes (generated kernels and CUDA graphs that later read a
gradient, a compiled optimizer step say, specialize on 16-byte alignment). The layout (which
positions, their shapes, dtypes and offsets) is worked out at the first call and kept while the
outputs keep it: parameters do not change shape. The buffer is cut into its views by one C++ call.
"""
from __future__ import annotations

import sys

import torch
from torch.multiprocessing.reductions import StorageWeakRef

from .utils import counters

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
        self.held: list[torch.Tensor] = []    # the last buffer's views (registered cached tensors)
        self.storage: StorageWeakRef | None = None
        self.baseline = 0                     # its storage's uses while only the mover holds it

    def buffer(self) -> list[torch.Tensor]:
        """The gradients' tensors of this step: the last step's when only the mover holds them, else
        views of a new buffer (which the mover holds from now on)."""
        if self.held and torch._C._storage_Use_Count(self.storage.cdata) == self.baseline and \
                all(t._use_count() == 1 and sys.getrefcount(t) == 3 and not t.requires_grad for t in self.held):
            counters["gradient_buffers_reused"] += 1
            return self.held   # (the references counted: the list, the loop's name, getrefcount's argument)
        counters["gradient_buffers"] += 1
        self.release()
        flat = torch.empty(self.numel, dtype=self.dtype, device=self.device)
        pieces = torch._C._nn.unflatten_dense_tensors(flat, self.likes)
        self.held = [pieces[p] for p in self.picks]
        self.storage = StorageWeakRef(flat.untyped_storage())
        del flat, pieces
        torch._C._set_cached_tensors_enabled(True)   # Dynamo's reset turns the registry off globally
        for t in self.held:
            torch._C._add_cached_tensor(t)
        self.baseline = torch._C._storage_Use_Count(self.storage.cdata)
        return self.held

    def release(self) -> None:
        """Let go of the buffer (whoever holds it keeps it, as a plain tensor)."""
        if self.held:
            torch._C._set_cached_tensors_enabled(True)
            for t in self.held:
                torch._C._remove_cached_tensor(t)
        self.held, self.storage, self.baseline = [], None, 0


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
            self.release()
            self.groups = self._plan(out)
            self.moved = frozenset(i for g in self.groups for i in g.idxs)
        if not self.groups:
            return out, self.moved
        out = list(out)
        for g in self.groups:
            fresh = g.buffer()
            torch._foreach_copy_(fresh, [out[i] for i in g.idxs])
            for i, t in zip(g.idxs, fresh):
                out[i] = t
        return out, self.moved

    def release(self) -> None:
        for g in self.groups or ():
            g.release()

    def __del__(self):
        try:
            self.release()
        except Exception:  # noqa: BLE001  (interpreter shutdown: torch may be gone)
            pass

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

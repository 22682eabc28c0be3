"""A backward's parameter gradients and the CUDA-graph pool: adopted in it, or moved out of it.

With option cudagraph_adopt_gradients (on by default since session 39) autograd adopts a backward's
parameter gradients as `.grad` where the graph wrote them, in pool memory, as PyTorch's Inductor
lets it. Unlike Inductor's, a `.grad` still held when the tree is about to write that memory again
(gradient accumulation, or a gradient the user kept) is then moved out (`move_out_of_pool`): the
tensor gets fresh memory with its values. The parameters are found through the edges of the backward
calls' autograd nodes (each call notes them: trees.py `note_gradient_source`); the output object
itself, when the caller holds it (`torch.autograd.grad`), moves too. Should the memory be held by
more than those (a `.grad` kept after the parameter's was set to None, a view of one), a scan of
Python's objects finds the others (`other_holders`: one scan for all of them, slow, with a warning when
it finds someone); one held only outside
Python reads an "overwritten" error, as any CUDA-graph output kept too long does. The usual loop,
which drops its gradients before the next step (`zero_grad(set_to_none=True)`), copies nothing.

Where adoption is off or unavailable, or for gradients the wrapper returns as views, the batched
copy below moves them out after every backward. Left in the pool, held (see nodes.py
`pin_gradient`), each would be copied by AccumulateGrad into a tensor of its own: an
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

import gc

import torch

from .utils import counters, perf_log

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


def current_backward_edges():
    """The edges (autograd nodes of its inputs) of the autograd node whose backward is running on this
    thread, a compiled backward's caller; None outside autograd's engine (compiled autograd, say).
    Read now: the node itself is gone once the backward is done."""
    fn = getattr(torch._C, "_current_autograd_node", None)
    node = fn() if fn is not None else None
    try:
        return node.next_functions if node is not None else None
    except RuntimeError:   # a node that keeps no edges for Python
        return None


def parameters_grads(sources: list) -> dict[int, list[torch.Tensor]]:
    """The `.grad` of each parameter the backward calls fed (`sources`: their edges), by the data
    pointer of its storage: the gradients autograd adopted."""
    found: dict[int, list[torch.Tensor]] = {}
    for edges in sources:
        for fn, _ in edges:
            p = getattr(fn, "variable", None)   # an AccumulateGrad node's parameter
            g = p.grad if isinstance(p, torch.Tensor) else None
            if g is not None and type(g) is torch.Tensor and g.is_cuda and g.layout == torch.strided:
                found.setdefault(g.untyped_storage().data_ptr(), []).append(g)
    return found


def other_holders(storages: dict[int, set[int]]) -> dict[int, list[torch.Tensor]]:
    """Every tensor object Python holds over each storage of `storages` (by its cdata) but those whose
    `id` it lists (the tree's own and the holders already known): a `.grad` kept after the parameter's
    was set to None, a view of one. One scan of the garbage collector's objects for all of them, tens
    to hundreds of milliseconds, so only where the cheap ways do not account for every use of a
    storage. A scan that finds someone is said once (until trees.reset)."""
    found: dict[int, list[torch.Tensor]] = {}
    for o in gc.get_objects():
        key = _storage_key(o)
        if key in storages and id(o) not in storages[key]:
            found.setdefault(key, []).append(o)
    if found and not warned_scan:
        warned_scan.append(True)
        perf_log.warning("a gradient autograd adopted in the CUDA-graph pool was still held when the pool was "
                         "about to be written again: it was moved out after a scan of Python's objects, which "
                         "costs time every step it happens. Drop such references (or clone them) before the "
                         "next step, or set option cudagraph_adopt_gradients=False to copy every gradient "
                         "out of the pool after each backward instead")
    return found


warned_scan: list[bool] = []


def _storage_key(o) -> int | None:
    """The cdata of the storage under `o` when it is a strided CUDA tensor, else None. The type is read
    with `type()`: `isinstance` would ask the object for its `__class__`, which a weak proxy whose
    referent is gone answers with an error and a deprecated module attribute with a warning."""
    if not issubclass(type(o), torch.Tensor):
        return None
    try:
        return o.untyped_storage()._cdata if o.is_cuda and o.layout == torch.strided else None
    except Exception:   # a tensor without a storage of its own (a fake, a wrapper subclass)
        return None


def move_out_of_pool(holders: list[torch.Tensor]) -> None:
    """Give each tensor object fresh memory with its values, in place (`.grad`, and every reference
    to the same object, follows): one buffer per device and one batched copy for all of them, each
    old storage's bytes at a multiple of ALIGN in it, so that tensors that shared a storage (a `.grad`
    and a view of it) still share one."""
    groups: dict[int, list[torch.Tensor]] = {}
    storages: dict[int, torch.UntypedStorage] = {}
    for t in holders:
        st = t.untyped_storage()
        groups.setdefault(st._cdata, []).append(t)
        storages.setdefault(st._cdata, st)
    by_device: dict[torch.device, list[int]] = {}
    for key, st in storages.items():
        by_device.setdefault(st.device, []).append(key)
    with torch.no_grad():
        for device, keys in by_device.items():
            offsets, total = [], 0
            for key in keys:
                offsets.append(total)
                total += -(-storages[key].nbytes() // ALIGN) * ALIGN
            buffer = torch.empty(total, dtype=torch.uint8, device=device)
            olds = [torch.empty(0, dtype=torch.uint8, device=device).set_(storages[key]) for key in keys]
            torch._foreach_copy_([buffer[o:o + old.numel()] for o, old in zip(offsets, olds)], olds)
            fresh = buffer.untyped_storage()
            for key, o in zip(keys, offsets):
                for t in groups[key]:
                    t.set_(fresh, o // t.element_size() + t.storage_offset(), t.size(), t.stride())
                    counters["gradients_moved_out"] += 1


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

"""The two kinds of node of a CUDA-graph tree: a warmup run in the pool, and a recorded graph.

    WarmupNode  runs the function once, eagerly, with allocations in the private pool, and tracks
                its outputs' storages (never a root or child: only the current node or a parent).
    GraphNode   records the function into a CUDA graph in the pool and replays it: dynamic inputs
                are copied into pool buffers, parameters and earlier pool outputs are used in place,
                outputs are rebuilt over the recorded memory on every replay.

Both keep `outputs_refs` (one StorageRef or None per output); `path_refs` holds the ancestors' lists
(the very same list objects) so liveness along the path is read without walking parents.

Adopted gradients (FunctionInfo.adoptable, gradients.py): a backward node adopts those of its
outputs that are parameters' gradients the module returns as they are, each in a storage of its own
(in a replay: each cached, `_cache_output`). They are not pinned (`pin_gradient`), and a replay
returns each as a new tensor object (a `detach` of the cached one) that nothing else holds: autograd's
AccumulateGrad takes it as `.grad` as it would eager's gradient, and copies it instead where a hook
kept it, as in eager. Before anything writes the pool again (the path's end, a checkpoint, the
tree's teardown: trees.py `_save_adopted`) each one still held moves out of the pool
(`save_adopted`): every tensor object over it that can be found (the output itself, parameters'
`.grad`, then others by a scan: gradients.py) gets fresh memory with its values, and a replay's
cached tensor is made again over the pool memory.
"""
from __future__ import annotations

import enum
import functools
import sys
import weakref
from typing import TYPE_CHECKING, Any

import torch

from .gradients import move_out_of_pool, other_holders
from .utils import (DEALLOC_MISMATCH, FunctionInfo, overwritten_message, StorageRef, aligned, allocating_in_pool,
                    capture_hygiene, capturing, check_pool, counters, empty_like_strided, expanded_dims,
                    first_of_expanded, is_live, liveness, preserved_rng, storage_at, storage_ptr,
                    tensor_metadata, tensor_on)

if TYPE_CHECKING:
    from .trees import TreeManager

_set_ptr_msg = getattr(torch._C, "_set_storage_data_ptr_access_error_msg", None)


class Check(enum.Enum):
    """Whether a recorded node may replay for these inputs, and if not, why."""

    SUCCESS = "success"
    MANAGED_MOVED = "cudagraph managed tensor data pointer changed"
    STATIC_MOVED = "static input data pointer changed"
    STABLE_MOVED = "address-stable input data pointer changed"
    DEAD_BEFORE_LIVE = "expected dead indices before graph are live"
    OTHER_SIZES = "a dynamic function called at sizes other than the recording's"


# output kinds, decided once at recording
_VALUE, _STATIC, _PRIOR, _SAME_GRAPH, _FRESH = range(5)


class WarmupNode:
    """One eager run of a function inside the pool (the first call, or any call on a warming path)."""

    def __init__(self, mgr: "TreeManager", info: FunctionInfo, fid: int, parent, node_id: int, already_warm: bool):
        self.mgr, self.info, self.fid, self.id = mgr, info, fid, node_id
        self.parent = parent           # strong: a warmup node lives only while it is on the current path
        self.already_warm = already_warm
        self.outputs_refs: list[StorageRef | None] = []
        self.tensor_refs: list[Any] = []
        self.path_refs = (parent.path_refs if parent is not None else []) + [self.outputs_refs]
        self.path_nodes = (parent.path_nodes if parent is not None else []) + [self]
        self.has_run = False
        self.adopted: frozenset[int] = frozenset()   # outputs autograd adopts (the module's docstring)

    def run(self, inputs: list) -> list:
        assert not self.has_run, "Wrapped function should never be run twice"
        self.has_run = True
        mgr = self.mgr
        live = self.path_live_refs()
        pool_ptrs = {r.ptr for r in live}
        # weak: holding the inputs' storages would keep memory the function frees early alive
        outside = [StorageRef(t.untyped_storage()) for t in list(inputs) + self.info.constants
                   if isinstance(t, torch.Tensor) and storage_ptr(t) not in pool_ptrs]
        if self.info.cfg.cudagraph_slow_asserts and not self.already_warm:
            check_pool(mgr.device, mgr.pool, live)
        with capture_hygiene(), allocating_in_pool(mgr.device, mgr.pool, mgr.stream):
            outs = self.info.fn(inputs)
        assert not inputs, "the compiled function must empty its input list"
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        outside_ptrs = {r.ptr for r in outside if r.alive()}   # an output aliasing these is not the pool's
        self.pinned: list[torch.Tensor] = []
        outs = [detached_if_empty(o) for o in outs]
        for o in outs:
            tracked = isinstance(o, torch.Tensor) and o.is_cuda and storage_ptr(o) != 0 and \
                storage_ptr(o) not in outside_ptrs
            self.outputs_refs.append(StorageRef(o.untyped_storage()) if tracked else None)
            self.tensor_refs.append(weakref.ref(o) if tracked else None)
        ptrs = [r.ptr if r is not None else None for r in self.outputs_refs]
        self.adopted = frozenset(i for i in self.info.adoptable if i < len(outs) and ptrs[i] is not None
                                 and ptrs.count(ptrs[i]) == 1)   # (not one storage with another output)
        for i, o in enumerate(outs):
            if ptrs[i] is not None and i not in self.adopted:
                pin_gradient(self, o)
        if self.info.cfg.cudagraph_slow_asserts and not self.already_warm:
            check_pool(mgr.device, mgr.pool, self.path_live_refs())
        return outs

    def path_live_refs(self) -> list[StorageRef]:
        return [r for level in self.path_refs for r in level if is_live(r)]

    def adopted_live(self, i: int) -> bool:
        return is_live(self.outputs_refs[i])

    def adopted_holders(self, i: int, grads) -> tuple[list, object]:
        return _recorded_holders(self, i, grads), None

    def adopted_moved(self, i: int) -> None:
        self.tensor_refs[i] = None   # not poisoned with the path: it holds its own memory now

    def all_outputs_dead(self) -> bool:
        return not self.path_live_refs()

    def is_pool_tensor(self, t: torch.Tensor) -> bool:
        ptr = storage_ptr(t)
        return any(r.ptr == ptr for r in self.path_live_refs())


def save_adopted(nodes, grads) -> None:
    """Before the pool is written again: the adopted gradients of `nodes` still held move out (the
    module's docstring), all in one batched copy. `grads()`: the parameters' `.grad` by storage
    pointer (gradients.parameters_grads). Where a storage has more uses than the tree's own
    (`ref.baseline`) and the holders known, one scan of Python's objects looks for the others (a view
    of `.grad`) for every such storage at once; they move with the known ones, so that tensors sharing
    a storage keep sharing one."""
    if not _any_adopted_held(nodes):
        return
    items, holders, unexplained = [], [], {}
    for node in nodes:
        for i in node.adopted:
            ref = node.outputs_refs[i]
            if not node.adopted_live(i):
                continue
            known, exclude = node.adopted_holders(i, grads)
            known = list({id(t): t for t in known}.values())
            items.append((node, i))
            holders += known
            if torch._C._storage_Use_Count(ref.ref.cdata) > ref.baseline + len(known):
                unexplained[ref.ref.cdata] = {id(t) for t in known} | {id(exclude)}
    if unexplained:
        for found in other_holders(unexplained).values():
            holders += found
    if holders:
        move_out_of_pool(list({id(t): t for t in holders}.values()))
    for node, i in items:
        node.adopted_moved(i)


def _any_adopted_held(nodes) -> bool:
    """Whether any adopted output of `nodes` may be live (`adopted_live`), in one loop: the usual
    step ends with none held, and the question is asked of every parameter's gradient. A False is
    exact; a True may not be (an output whose liveness also reads its `extra`: a rebuilt one)."""
    uses = torch._C._storage_Use_Count
    for node in nodes:
        refs = node.outputs_refs
        cached = getattr(node, "cached_outputs", None)   # (a warmup node has none)
        for i in node.adopted:
            ref = refs[i]
            if uses(ref.ref.cdata) > ref.baseline:
                return True
            if ref.extra is not None and not (cached and cached[i] is not None):
                return True
    return False


def _recorded_holders(node, i: int, grads) -> list:
    """The known holders of a warmup's or recording's adopted output i: the output object itself if
    the caller still holds it, and the parameters' `.grad` over it (one held outside Python keeps the
    block until the path's end frees and poisons it)."""
    tref = node.tensor_refs[i]
    out = tref() if tref is not None else None   # (None: moved out by an earlier save)
    return ([out] if out is not None else []) + grads().get(node.outputs_refs[i].ptr, [])


def detached_if_empty(o):
    """A zero-element output sliced from a pool buffer, as a tensor of its own: it holds no pool
    memory, so it is neither tracked as a live output nor keeps the buffer allocated."""
    if isinstance(o, torch.Tensor) and o.is_cuda and o.numel() == 0 and storage_ptr(o) != 0:
        return torch.empty_strided(o.size(), o.stride(), dtype=o.dtype, device=o.device)
    return o


def pin_gradient(node, t: torch.Tensor) -> None:
    """The tree holds a backward's warmup or recording outputs until its path ends.

    With that extra reference autograd's AccumulateGrad copies such an output into `.grad` instead of
    adopting it: a `.grad` living in pool memory would be freed at the next iteration and, with
    gradient accumulation, overwritten by the next backward (PyTorch's Inductor raises an error
    there and asks for preallocated grads; here accumulation just works). Replays pin their outputs
    too (GraphNode._pin_replay_outputs); their cached outputs stay out of torch's cached-tensor
    registry, which AccumulateGrad counts as a reference it may steal past.
    """
    if node.info.mode == "backward":
        node.pinned.append((t, t))   # two references: autograd discounts a Python object held only once


def unpin(node) -> None:
    node.pinned = []
    for i in getattr(node, "pinned_rebuilt", ()):   # their liveness is the storage's use count again
        ref = node.outputs_refs[i]
        ref.extra, ref.baseline = None, 0
    node.pinned_rebuilt = {}


class GraphNode:
    """One recording of a function under a given parent and input layout; replayed while it matches.

    Recording happens in the constructor; `first_outputs()` returns the recording's own outputs
    (allocator-owned tensors in the pool), later calls go through `check(inputs)` then `run(inputs)`.
    """

    def __init__(self, mgr: "TreeManager", info: FunctionInfo, fid: int, graph_id: int, parent: "GraphNode | None",
                 inputs: list, stable_idxs: set[int]):
        self.mgr, self.info, self.fid, self.id = mgr, info, fid, graph_id
        self._parent = weakref.ref(parent) if parent is not None else None
        self.children: dict[int, list[GraphNode]] = {}
        self.outputs_refs: list[StorageRef | None] = []
        self.tensor_refs: list[Any] = []
        self.path_refs = (parent.path_refs if parent is not None else []) + [self.outputs_refs]
        self.path_nodes_weak = (parent.path_nodes_weak if parent is not None else []) + [weakref.ref(self)]
        self.rerecord_on_static_move = info.cfg.cudagraph_rerecord_on_static_change
        self.cached_outputs: list[torch.Tensor | None] = []
        self.pinned: list[torch.Tensor] = []
        self.pinned_rebuilt: dict[int, torch.Tensor] = {}   # a backward replay's pinned rebuilt outputs
        self.adopted: frozenset[int] = frozenset()          # outputs autograd adopts (the module's docstring)
        self.handed: dict[int, weakref.ref] = {}             # the tensor each adopted output was last returned as
        self.sizes = info.sizes_key(inputs)   # a dynamic function's: the sizes this recording serves
        self._classify_inputs(inputs, stable_idxs)
        if parent is not None:
            now = liveness(parent.path_refs)
            self.dead_before = [(d, i) for d, level in enumerate(parent.liveness_after)
                                for i, was in enumerate(level) if was and not now[d][i]]
        else:
            self.dead_before = []
        self.graph = torch.cuda.CUDAGraph()
        self._outputs = self._record(self._recording_inputs(inputs))
        self.graph.replay()  # capture ran nothing: the first outputs hold values only after a replay

    # --- recording -------------------------------------------------------------------------------

    def _classify_inputs(self, inputs: list, stable_idxs: set[int]) -> None:
        recorded = {}
        for d, level in enumerate(self.path_refs[:-1]):
            for i, r in enumerate(level):
                if r is not None:
                    recorded[r.ptr] = (d, i)
        # a meta tensor holds no memory: it is passed through as it is, neither copied nor checked
        tensors = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.device.type != "meta"]
        self.managed_idxs = [i for i in tensors if storage_ptr(inputs[i]) in recorded]
        self.managed_sources = {i: recorded[storage_ptr(inputs[i])] for i in self.managed_idxs}
        self.preserved: set[int] = set()   # managed inputs an output aliases: the caller's reference is kept
        static = set(self.info.static_idxs) & set(tensors)
        static = {i for i in static if aligned(inputs[i])}       # a misaligned parameter is copied instead
        self.nonmanaged_static_idxs = sorted(static - set(self.managed_idxs))
        # which tensor each static input was: another tensor there (a different parameter passed in)
        # is a dispatch on identity, a re-record expected; the same one moved (`p.data = ...`) is not
        self.static_tensors = {i: weakref.ref(inputs[i]) for i in self.nonmanaged_static_idxs}
        # and which storage it had: the same storage at a new address was resized in place (freed and
        # allocated again, as FSDP2 does with its unsharded parameters every step)
        self.static_storages = {i: inputs[i].untyped_storage()._cdata for i in self.nonmanaged_static_idxs}
        self.stable_idxs = sorted(set(stable_idxs) & set(tensors) - static - set(self.managed_idxs))
        self.static_idxs = sorted(static | set(self.managed_idxs))
        self.copy_idxs = [i for i in tensors if i not in static and i not in self.managed_idxs
                          and i not in self.stable_idxs]
        self.ptrs: list[int | None] = [x.data_ptr() if isinstance(x, torch.Tensor) else None for x in inputs]
        self.expanded = {i: expanded_dims(inputs[i]) for i in self.copy_idxs if expanded_dims(inputs[i])}
        counters["recorded_non_static_inputs"] += len(self.copy_idxs)
        self.checked_idxs = self.static_idxs if self.rerecord_on_static_move else self.managed_idxs

    def _recording_inputs(self, inputs: list) -> list:
        mgr = self.mgr
        rec = list(inputs)
        with allocating_in_pool(mgr.device, mgr.pool, mgr.stream):
            for i in self.copy_idxs:
                buf = empty_like_strided(inputs[i])
                dims = self.expanded.get(i, [])
                first_of_expanded(buf, dims).copy_(first_of_expanded(inputs[i], dims))
                rec[i] = buf
        for i in range(len(inputs)):
            inputs[i] = None
        inputs.clear()
        # non-owning aliases of the recording buffers: replays copy new values into them; their memory
        # goes back to the pool once the recording inputs die, for the graph to reuse after last use
        self.copy_dsts = [first_of_expanded(tensor_on(m := dict(tensor_metadata(rec[i]), storage_offset=0),
                                                      storage_at(m)), self.expanded.get(i, []))
                          for i in self.copy_idxs]
        return rec

    def _record(self, rec: list) -> list:
        mgr, info = self.mgr, self.info
        persistent = {storage_ptr(rec[i]): StorageRef(rec[i].untyped_storage()) for i in self.nonmanaged_static_idxs}
        persistent.update({storage_ptr(c): StorageRef(c.untyped_storage()) for c in info.constants})
        persistent.update({storage_ptr(rec[i]): StorageRef(rec[i].untyped_storage()) for i in self.stable_idxs})
        if self.info.cfg.cudagraph_slow_asserts:
            parent = self.parent
            live = parent.path_live_refs() if parent is not None else []
            live = live + [StorageRef(rec[i].untyped_storage()) for i in self.copy_idxs]
            check_pool(mgr.device, mgr.pool, live)
        before = liveness(self.path_refs[:-1])
        torch.cuda.synchronize(mgr.device)
        with preserved_rng(mgr.device), capture_hygiene(), capturing(self.graph, mgr.device, mgr.pool, mgr.stream):
            outs = info.fn(rec)
        assert not rec, "the compiled function must empty its input list"
        outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        after = liveness(self.path_refs[:-1])
        self.dead_after = [(d, i) for d, level in enumerate(before) for i, was in enumerate(level)
                           if was and not after[d][i]]
        self._register_outputs(outs, persistent)
        self.liveness_after = liveness(self.path_refs)
        self.checkpoint = torch._C._cuda_getCheckpointState(mgr.device, mgr.pool)
        self.live_after = [(d, i) for d, level in enumerate(self.liveness_after) for i, v in enumerate(level) if v]
        if self.info.cfg.cudagraph_slow_asserts:
            check_pool(mgr.device, mgr.pool, self.path_live_refs())
        return outs

    def _register_outputs(self, outs: list, persistent: dict[int, StorageRef]) -> None:
        prior = {}
        for d, level in enumerate(self.path_refs[:-1]):
            for i, r in enumerate(level):
                if is_live(r):
                    prior[r.ptr] = (d, i)
        self.kinds: list[tuple] = []
        self.metas: list[dict | None] = []
        self.static_outputs: dict[int, torch.Tensor] = {}
        self.cacheable: list[bool] = []
        seen: dict[int, int] = {}
        outs[:] = [detached_if_empty(o) for o in outs]   # the first outputs too: `outs` is returned
        for i, o in enumerate(outs):
            self.cacheable.append(False)
            if not isinstance(o, torch.Tensor):
                if o is not None and not isinstance(o, (int, float, bool, torch.SymInt)):
                    raise AssertionError(f"unexpected output type {type(o).__name__} from {self.info.name}")
                self.kinds.append((_VALUE, o))
                self.metas.append(None)
                self.outputs_refs.append(None)
                self.tensor_refs.append(None)
                continue
            ptr = storage_ptr(o)
            if not o.is_cuda and ptr != 0:
                raise RuntimeError("Expected all cuda outputs in cuda graph recording. Non cuda output from "
                                   f"{self.info.trace_of(i) or '(unknown)'}")
            self.metas.append(tensor_metadata(o))
            if ptr == 0 or (ptr in persistent and persistent[ptr].alive()):
                self.kinds.append((_STATIC,))
                self.static_outputs[i] = o
                self.outputs_refs.append(None)
                self.tensor_refs.append(None)
                continue
            if ptr in prior:
                d, k = prior[ptr]
                self.kinds.append((_PRIOR, d, k))
                self.preserved |= {j for j, src in self.managed_sources.items() if src == (d, k)}
                self.mgr.mark_aliased(self.path_nodes_weak[d](), k)
            elif ptr in seen:
                self.kinds.append((_SAME_GRAPH, seen[ptr]))
                self.cacheable[seen[ptr]] = False
            else:
                self.kinds.append((_FRESH,))
                self.cacheable[i] = True
                seen[ptr] = i
            self.outputs_refs.append(StorageRef(o.untyped_storage()))
            self.tensor_refs.append(weakref.ref(o))
        self.adopted = frozenset(i for i in self.info.adoptable if i < len(outs) and self.cacheable[i])
        for i, o in enumerate(outs):
            if self.outputs_refs[i] is not None and i not in self.adopted:
                pin_gradient(self, o)

    def first_outputs(self) -> list:
        outs, self._outputs = self._outputs, None
        return outs

    # --- replay ----------------------------------------------------------------------------------

    def check(self, inputs: list, sizes: tuple | None = None) -> Check:
        """Can this recording replay for `inputs` (of sizes key `sizes`, if the caller has it) now?
        On success drops the caller's managed inputs."""
        ptrs_equal = torch._C._tensors_data_ptrs_at_indices_equal
        if self.sizes is not None and (sizes if sizes is not None else self.info.sizes_key(inputs)) != self.sizes:
            return Check.OTHER_SIZES
        if not ptrs_equal(inputs, self.ptrs, self.managed_idxs):
            return Check.MANAGED_MOVED
        path = self.path_refs
        if self.dead_before and _any_live(path, self.dead_before):
            return Check.DEAD_BEFORE_LIVE
        if not ptrs_equal(inputs, self.ptrs, self.nonmanaged_static_idxs):
            if not self.rerecord_on_static_move:
                raise RuntimeError(self.mismatch_text(Check.STATIC_MOVED, inputs))
            return Check.STATIC_MOVED
        if self.stable_idxs and not ptrs_equal(inputs, self.ptrs, self.stable_idxs):
            return Check.STABLE_MOVED
        for i in self.managed_idxs:
            if i not in self.preserved:   # kept alive until the aliasing output is rebuilt on it
                inputs[i] = None
        if self.dead_after and _any_live(path, self.dead_after):
            raise RuntimeError(DEALLOC_MISMATCH)
        return Check.SUCCESS

    def other_static_tensor(self, status: Check, inputs: list) -> bool:
        """A static input moved because it is another tensor than at recording (not the same one moved)."""
        if status is not Check.STATIC_MOVED:
            return False
        return any(inputs[i] is not self.static_tensors[i]() for i in self.nonmanaged_static_idxs
                   if isinstance(inputs[i], torch.Tensor) and inputs[i].data_ptr() != self.ptrs[i])

    def resized_static_storage(self, inputs: list) -> int | None:
        """A static input that moved because its own storage was resized in place (the same tensor on
        the same storage, at a new address), or None."""
        for i in self.nonmanaged_static_idxs:
            x = inputs[i]
            if isinstance(x, torch.Tensor) and x.data_ptr() != self.ptrs[i] and x is self.static_tensors[i]() \
                    and x.untyped_storage()._cdata == self.static_storages[i]:
                return i
        return None

    def mismatch_text(self, status: Check, inputs: list) -> str:
        idxs = {Check.MANAGED_MOVED: self.managed_idxs, Check.STATIC_MOVED: self.nonmanaged_static_idxs,
                Check.STABLE_MOVED: self.stable_idxs}.get(status, [])
        lines = [f"{status.value}."]
        for i in idxs:
            x = inputs[i]
            if isinstance(x, torch.Tensor) and x.data_ptr() != self.ptrs[i]:
                lines.append(f"input name: {self.info.input_name(i)}. data pointer changed from "
                             f"{self.ptrs[i]} to {x.data_ptr()}. input stack trace: {self.info.input_trace(i)}")
        return "\n".join(lines)

    def run(self, inputs: list) -> list:
        """Replay for inputs that passed `check`."""
        if self.copy_idxs:
            if self.expanded:
                srcs = [first_of_expanded(inputs[i], self.expanded.get(i, [])) for i in self.copy_idxs]
            else:
                srcs = [inputs[i] for i in self.copy_idxs]
            torch._foreach_copy_(self.copy_dsts, srcs)
            del srcs
        self.graph.replay()
        outs = self._rebuild_outputs()
        if self.info.mode == "backward":
            self._pin_replay_outputs(outs)
        inputs.clear()
        if self.info.cfg.cudagraph_force_sync:
            torch.cuda.synchronize(self.mgr.device)
        return outs

    def _rebuild_outputs(self) -> list:
        if not self.cached_outputs:
            self._build_cached_outputs()
        cached = self.cached_outputs
        refs = self.outputs_refs
        adopted, handed = self.adopted, self.handed
        pins = 2 if self.pinned else 0   # a backward's pins: two references to each cached output not adopted
        refcount, uses = sys.getrefcount, torch._C._storage_Use_Count
        outs: list = []
        storages: dict[int, torch.UntypedStorage] = {}
        # a cached output's liveness (StorageRef.alive with _only_tree_holds as its `extra`) written
        # out here, without two Python calls an output: a training step checks tens of them. The
        # references a cached output has when only the tree holds it: the cached list, `c`,
        # getrefcount's argument (`cached[i]`, a new reference on every Python: a local's may be
        # borrowed from 3.14), the pins, and the C++ side's when it holds one; anything more (the
        # caller kept the tensor, or a view of its storage) means this replay overwrites it.
        for i, kind in enumerate(self.kinds):
            c = cached[i]
            if c is not None:
                ref = refs[i]
                if i in adopted:   # a new tensor object each replay, that autograd may adopt
                    if refcount(cached[i]) != 3 + (c._use_count() > 1) or uses(ref.ref.cdata) > ref.baseline:
                        c = self._retire_cached(i)
                        pins = 2 if self.pinned else 0
                    c = c.detach()
                    handed[i] = weakref.ref(c)
                else:
                    if refcount(cached[i]) != 3 + pins + (c._use_count() > 1) or uses(ref.ref.cdata) > ref.baseline:
                        c = self._retire_cached(i)
                        pins = 2 if self.pinned else 0   # (a backward's retire pins every cached output)
                    if c.requires_grad or c._backward_hooks is not None or c.grad is not None \
                            or getattr(c, "_post_accumulate_grad_hooks", None):
                        _fresh_autograd_state(c)
                outs.append(c)
                continue
            k = kind[0]
            if k == _VALUE:
                outs.append(kind[1])
                continue
            if k == _STATIC:
                outs.append(self.static_outputs[i])
                continue
            meta = self.metas[i]
            if k == _FRESH:
                st = storage_at(meta)
            elif k == _SAME_GRAPH:
                st = storages[kind[1]]
            else:
                cdata = self.path_refs[kind[1]][kind[2]].cdata()
                st = torch.UntypedStorage._new_with_weak_ptr(cdata) if cdata is not None else storage_at(meta)
            storages[i] = st
            refs[i].swap(st)
            outs.append(tensor_on(meta, st))
        return outs

    def _build_cached_outputs(self) -> None:
        """Fresh, never-aliased outputs: one tensor object each, returned by every replay."""
        self.cached_outputs = [None] * len(self.kinds)
        for i, ok in enumerate(self.cacheable):
            if ok:
                self._cache_output(i)

    def _cache_output(self, i: int) -> torch.Tensor:
        """Output i's tensor object over its pool memory, registered as a cached tensor in a forward
        (the autocast cache skips it). It counts as dead when only the tree holds it: the storage uses
        it has now are the baseline. In a backward it is pinned instead (see pin_gradient)."""
        meta = self.metas[i]
        t = tensor_on(meta, storage_at(meta))
        if self.info.mode != "backward":
            # not a backward's: AccumulateGrad allows a registered tensor one more reference, so a
            # registered gradient would become `.grad` in pool memory whatever the pin (see pin_gradient)
            torch._C._set_cached_tensors_enabled(True)   # Dynamo's reset turns the registry off globally
            torch._C._add_cached_tensor(t)
        self.cached_outputs[i] = t
        ref = self.outputs_refs[i]
        ref.swap(t.untyped_storage())
        ref.baseline = 0
        ref.baseline = torch._C._storage_Use_Count(ref.ref.cdata)   # the tree's own holders
        ref.extra = functools.partial(_only_tree_holds, weakref.ref(self), i)
        if self.info.mode == "backward":   # at once: _only_tree_holds counts the pins of every cached output
            self._pin_cached()
        return t

    def _pin_cached(self) -> None:
        self.pinned = [(c, c) for i, c in enumerate(self.cached_outputs) if c is not None and i not in self.adopted]

    def _pin_replay_outputs(self, outs: list) -> None:
        """A backward replay's outputs are pinned until the next replay or the path's end (see
        pin_gradient): the cached ones, and those rebuilt over fresh storage objects on every replay
        (outputs sharing memory with another output). A rebuilt one counts as dead while only its pins
        hold it: its storage's uses now are the baseline, and `_only_pins_hold` watches the tensor itself.

        An output in an earlier node's memory (_PRIOR: say a gradient passed through unchanged from
        another graph's backward) is pinned too, and keeps that memory live until the pin goes: the
        earlier node's liveness is its own, and a copy instead would move an input that the next graph
        reads in place.
        """
        self._pin_cached()
        self.pinned_rebuilt = {i: outs[i] for i, kind in enumerate(self.kinds)
                               if kind[0] in (_FRESH, _SAME_GRAPH) and self.cached_outputs[i] is None}
        self.pinned += [(t, t) for t in self.pinned_rebuilt.values()]
        self.pinned += [(outs[i], outs[i]) for i, kind in enumerate(self.kinds) if kind[0] == _PRIOR]
        for i in self.pinned_rebuilt:   # after every pin: two outputs may share one storage
            ref = self.outputs_refs[i]
            ref.baseline = 0
            ref.baseline = torch._C._storage_Use_Count(ref.ref.cdata)
            ref.extra = functools.partial(_only_pins_hold, weakref.ref(self), i)

    def _retire_cached(self, i: int) -> torch.Tensor:
        """This replay overwrites the memory of an output the caller still holds from the last one.

        PyTorch's Inductor lets the held tensor silently show the new values. Here it is poisoned
        (reading it or a view of it raises the "overwritten" error with its source line), and this
        replay returns a new tensor object over the same memory.
        """
        old = self.cached_outputs[i]
        self._uncache(i)
        torch._C._set_storage_access_error_msg(old, overwritten_message(self.info.trace_of(i)))
        return self._cache_output(i)

    def _uncache(self, i: int) -> None:
        if self.info.mode != "backward":   # (a forward's cached tensor is in torch's registry)
            torch._C._set_cached_tensors_enabled(True)
            torch._C._remove_cached_tensor(self.cached_outputs[i])

    def _cached(self, i: int) -> bool:
        """Output i is a replay's cached tensor (not a recording's own output)."""
        return bool(self.cached_outputs) and self.cached_outputs[i] is not None

    def adopted_live(self, i: int) -> bool:
        """Adopted output i is held beyond the tree. A replay's cached tensor object never leaves the
        tree (each replay hands out a `detach` of it), so its storage's use count alone says so,
        without the object's reference count that `is_live` reads too: the path's end of every
        training step asks it of each parameter's gradient."""
        ref = self.outputs_refs[i]
        if self._cached(i):
            return torch._C._storage_Use_Count(ref.ref.cdata) > ref.baseline
        return is_live(ref)

    def adopted_holders(self, i: int, grads) -> tuple[list, object]:
        """The known holders of adopted output i (see save_adopted), and the tree's own tensor over it.
        A recording's output is the caller's alone; a replay's cached tensor is the tree's, and the
        caller may have kept the one it was handed (`torch.autograd.grad`)."""
        if not self._cached(i):
            return _recorded_holders(self, i, grads), None
        handed = self.handed.pop(i, None)
        last = handed() if handed is not None else None
        return ([last] if last is not None else []) + grads().get(self.outputs_refs[i].ptr, []), \
            self.cached_outputs[i]

    def adopted_moved(self, i: int) -> None:
        """After the move: a recording's output holds its own memory now (not poisoned with the path).
        A replay's cached tensor still held past its known holders is held outside Python: it is made
        again over a new storage, and the old one, the holders' alone, can no longer be read (the
        "overwritten" error)."""
        if not self._cached(i):
            self.tensor_refs[i] = None
            return
        ref = self.outputs_refs[i]
        if torch._C._storage_Use_Count(ref.ref.cdata) > ref.baseline:
            old, pins = ref.ref, self.pinned
            self._uncache(i)
            self._cache_output(i)
            self.pinned = pins      # (_cache_output pins the cached ones only; i is not pinned)
            if _set_ptr_msg is not None:
                _set_ptr_msg(old.cdata, overwritten_message(self.info.trace_of(i)))

    def remove_cached_outputs(self) -> None:
        registered = bool(self.cached_outputs) and self.info.mode != "backward"
        if registered:
            torch._C._set_cached_tensors_enabled(True)
        for i, t in enumerate(self.cached_outputs):
            if t is not None:
                if registered:
                    torch._C._remove_cached_tensor(t)
                ref = self.outputs_refs[i]
                ref.extra, ref.baseline = None, 0
        self.cached_outputs = []
        unpin(self)

    def mark_not_cacheable(self, i: int) -> None:
        """A later graph aliases output i: from now on it is rebuilt, not cached (an adopted one too:
        rebuilt, it is pinned, and moves out at the path's end should it be held)."""
        if self.cacheable[i]:
            self.cacheable[i] = False
            if self.cached_outputs:
                self.remove_cached_outputs()

    # --- liveness --------------------------------------------------------------------------------

    @property
    def path_nodes(self) -> list["GraphNode"]:
        return [r() for r in self.path_nodes_weak]

    @property
    def parent(self) -> "GraphNode | None":
        return self._parent() if self._parent is not None else None

    def path_live_refs(self) -> list[StorageRef]:
        path = self.path_refs
        return [path[d][i] for d, i in self.live_after if is_live(path[d][i])]

    def all_outputs_dead(self) -> bool:
        return not _any_live(self.path_refs, self.live_after)

    def dead_since_recording(self) -> list[int]:
        path = self.path_refs
        return [path[d][i].ptr for d, i in self.live_after if not is_live(path[d][i])]

    def is_pool_tensor(self, t: torch.Tensor) -> bool:
        ptr = storage_ptr(t)
        return any(r is not None and r.ptr == ptr for level in self.path_refs for r in level)

    def descendants(self) -> int:
        return sum(1 + c.descendants() for kids in self.children.values() for c in kids)

    def all_nodes(self):
        yield self
        for kids in self.children.values():
            for c in kids:
                yield from c.all_nodes()


def _any_live(path: list, pairs: list) -> bool:
    """Whether any output of the path at (level, index) `pairs` is live: `is_live` written out for the
    checks every call makes, the storage's use count (the cheaper question) asked first."""
    uses = torch._C._storage_Use_Count
    for d, i in pairs:
        r = path[d][i]
        if r is not None and (uses(r.ref.cdata) > r.baseline or (r.extra is not None and not r.extra())):
            return True
    return False


def _fresh_autograd_state(t: torch.Tensor) -> None:
    """A reused output object hands over no hooks, gradient or requires_grad the user gave the last
    iteration's output (autograd sets its own on the new result). Called where the output requires
    grad, has hooks or a gradient (`_rebuild_outputs` asks first: most outputs have none of them).
    A post-accumulate hook outlives requires_grad_(False), and would fire again once the output
    requires grad anew."""
    if t._backward_hooks is not None:
        t._backward_hooks = None   # register_hook makes a new OrderedDict (it keeps a weak reference to it)
    if t.is_leaf:
        hooks = getattr(t, "_post_accumulate_grad_hooks", None)
        if hooks:
            hooks.clear()   # in place: autograd's C++ hook reads this very dict
        if t.grad is not None:
            t.grad = None
        if t.requires_grad:
            t.requires_grad_(False)


def _only_pins_hold(node_ref, i: int) -> bool:
    """Nothing but the node's pins holds output i's tensor, nor any other pinned output over the same
    memory (outputs sharing a storage live and die together)."""
    node = node_ref()
    if node is None or i not in node.pinned_rebuilt:
        return True
    held, ptr = node.pinned_rebuilt, node.outputs_refs[i].ptr
    for j in held:
        if node.outputs_refs[j].ptr == ptr:
            # references: this dict, the pin (two), getrefcount's argument, and the C++ side when it
            # holds one more
            extra = 1 if held[j]._use_count() > 1 else 0
            if sys.getrefcount(held[j]) != 4 + extra:
                return False
    return True


def _only_tree_holds(node_ref, i: int) -> bool:
    node = node_ref()
    if node is None or not node.cached_outputs:
        return False
    # references: the cached list, getrefcount's argument, a backward node's pin (two), and the C++
    # side when it holds one more
    extra = (1 if node.cached_outputs[i]._use_count() > 1 else 0) + (2 if node.pinned and i not in node.adopted else 0)
    return sys.getrefcount(node.cached_outputs[i]) == 2 + extra

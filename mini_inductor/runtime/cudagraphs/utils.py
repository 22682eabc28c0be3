"""Pieces the CUDA-graph tree is built from: storage liveness, the private pool, output rebuilding,
skip reasons, counters and messages. See trees.py for the tree itself.

The CUDA allocator calls used here are private torch APIs; they exist in CUDA builds of torch (2.11
and 2.13 checked) and not in CPU builds, so nothing here is called unless a GPU is in use.
"""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import gc
import logging
import threading
import warnings
from typing import Any, Callable, Iterator

import torch
from torch.multiprocessing.reductions import StorageWeakRef

log = logging.getLogger("mini_inductor.cudagraphs")
perf_log = logging.getLogger("mini_inductor.perf_hints")

ALIGNMENT = 16

# Read by tests and the CLI: "skips" (functions or graphs run without CUDA graphs, with a logged reason),
# "recorded_non_static_inputs" (inputs copied into the pool, summed over recordings).
counters: collections.Counter = collections.Counter()
skip_reasons: list[str] = []

OVERWRITTEN = ("Error: accessing tensor output of CUDAGraphs that has been overwritten by a subsequent run. "
               "Stack trace: {trace}. To prevent overwriting, clone the tensor outside of torch.compile() or "
               "call torch.compiler.cudagraph_mark_step_begin() (or mini_inductor.mark_step()) before each "
               "model invocation.")
PENDING_BACKWARD = ("Unable to hit fast path of CUDAGraphs because of pending, uninvoked backwards. Consider "
                    "running with torch.no_grad() or using torch.compiler.cudagraph_mark_step_begin() (or "
                    "mini_inductor.mark_step()) before each model invocation")
DEALLOC_MISMATCH = ("TODO: graph recording observed an input tensor deallocate during graph recording that did "
                    "not occur during replay. Please file an issue.")


def overwritten_message(trace: str | None) -> str:
    return OVERWRITTEN.format(trace=trace.strip() if trace else "[Could not find stack trace]")


class CudaGraphSkipped(RuntimeError):
    """Raised instead of running without CUDA graphs when `cudagraph_or_error` is set."""


def log_skip(reason: str, trace: str | None = None, cfg=None) -> None:
    """A function or graph runs without CUDA graphs: say why once, where it came from, and count it
    (or raise CudaGraphSkipped, with the same text, under `cudagraph_or_error`)."""
    msg = f"skipping cudagraphs due to {reason}"
    if trace:
        msg += f". Found from : \n {trace}"
    if cfg is not None and getattr(cfg, "cudagraph_or_error", False):
        raise CudaGraphSkipped(msg)
    counters["skips"] += 1
    skip_reasons.append(msg)
    perf_log.warning(msg)


def have_cuda_graph_apis() -> bool:
    return hasattr(torch._C, "_cuda_getCheckpointState")


class StorageRef:
    """A weak handle on one storage: alive while anything holds the storage; keeps its data pointer.

    Liveness is the storage's use count, so it follows every tensor and view of the memory without a
    gc pass. Aliases are rebuilt on one storage object so that one handle covers them all.
    """

    __slots__ = ("ref", "ptr", "extra", "baseline")

    def __init__(self, storage: torch.UntypedStorage):
        self.ref = StorageWeakRef(storage)
        self.ptr = storage.data_ptr()
        self.extra: Callable[[], bool] | None = None   # for a cached output: "only the tree holds the tensor"
        self.baseline = 0                              # storage uses that belong to the tree itself

    def alive(self) -> bool:
        if self.extra is not None and not self.extra():
            return True
        return torch._C._storage_Use_Count(self.ref.cdata) > self.baseline

    def cdata(self):
        """The weak storage pointer if alive, else None (what the allocator calls take)."""
        return self.ref.cdata if self.alive() else None

    def swap(self, storage: torch.UntypedStorage) -> None:
        """Follow a new storage object over the same memory (replay builds new ones)."""
        self.ref = StorageWeakRef(storage)

    def __repr__(self) -> str:
        return f"StorageRef to {self.ptr:#x}; {'alive' if self.alive() else 'dead'}"


def is_live(ref: StorageRef | None) -> bool:
    return ref is not None and ref.alive()


def liveness(path_refs: list[list[StorageRef | None]]) -> list[list[bool]]:
    return [[is_live(r) for r in level] for level in path_refs]


def storage_ptr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


def tensor_metadata(t: torch.Tensor) -> dict[str, Any]:
    """What rebuilding `t` over its pool memory needs (the storage offset is kept: outputs may be views)."""
    s = t.untyped_storage()
    return {"nbytes": s.nbytes(), "data_ptr": s.data_ptr(), "size": t.shape, "stride": t.stride(),
            "dtype": t.dtype, "device": t.device, "storage_offset": t.storage_offset()}


def storage_at(meta: dict[str, Any]) -> torch.UntypedStorage:
    """A storage over pool memory that does not own it (no deleter): replay outputs and input aliases."""
    return torch._C._construct_storage_from_data_pointer(meta["data_ptr"], meta["device"], meta["nbytes"])


def tensor_on(meta: dict[str, Any], storage: torch.UntypedStorage) -> torch.Tensor:
    return torch._C._construct_CUDA_Tensor_From_Storage_And_Metadata(meta, storage)


def expanded_dims(t: torch.Tensor) -> list[int]:
    """Broadcast dimensions (stride 0, size > 1): copying along them would write one element many times."""
    return [d for d in range(t.dim()) if t.stride(d) == 0 and t.size(d) > 1]


def first_of_expanded(t: torch.Tensor, dims: list[int]) -> torch.Tensor:
    for d in dims:
        t = t.narrow(d, 0, 1)
    return t


def empty_like_strided(t: torch.Tensor) -> torch.Tensor:
    """A buffer with t's size and strides, just large enough for its strided extent."""
    return torch.empty_strided(t.size(), t.stride(), dtype=t.dtype, device=t.device)


def aligned(t: torch.Tensor) -> bool:
    return t.data_ptr() % ALIGNMENT == 0


def _begin_allocate(device: int, pool) -> None:
    begin = getattr(torch._C, "_cuda_beginAllocateCurrentThreadToPool", None)
    if begin is None:  # torch 2.11 names it after the stream
        begin = torch._C._cuda_beginAllocateCurrentStreamToPool
    begin(device, pool)


@contextlib.contextmanager
def allocating_in_pool(device: int, pool, stream: torch.cuda.Stream) -> Iterator[None]:
    """Run the body on `stream` with every allocation taken from the private `pool`.

    The caller keeps the pool alive (the manager's dummy graph does); the side stream first waits for
    the user's current stream, and the user's stream waits for the side stream afterwards.
    """
    torch.cuda.synchronize(device)
    stream.wait_stream(torch.cuda.current_stream(device))
    routes = _routing.__dict__.setdefault("stack", [])
    with torch.cuda.device(device), torch.cuda.stream(stream):
        _begin_allocate(device, pool)
        routes.append((device, pool, stream))
        try:
            yield
        finally:
            routes.pop()
            torch._C._cuda_endAllocateToPool(device, pool)
            torch._C._cuda_releasePool(device, pool)
    _caller_waits_for(device, stream)


_routing = threading.local()   # .stack: the (device, pool, stream) of each allocating_in_pool this thread is in


@contextlib.contextmanager
def outside_pool(device: int) -> Iterator[None]:
    """Allocate from the ordinary caching allocator in the body, even inside allocating_in_pool.

    For a tensor kept for the process's life (a cache) that is first made during a tree's warm-up run:
    in the pool it would be a live block the tree does not track, and be handed out again once the
    tree frees the pool. A side stream does not escape the routing (newer torch routes by thread).
    """
    routes = getattr(_routing, "stack", None)
    route = routes[-1] if routes else None
    if route is None or route[0] != device:
        yield
        return
    _, pool, stream = route
    torch._C._cuda_endAllocateToPool(device, pool)
    try:
        yield
    finally:
        with torch.cuda.device(device), torch.cuda.stream(stream):
            _begin_allocate(device, pool)


@contextlib.contextmanager
def capture_hygiene() -> Iterator[None]:
    """cuBLAS workspaces cleared around the body and cuDNN's benchmark kept from emptying the cache.

    A workspace created inside the pool would outlive the tensors the tree frees and be handed out
    twice; clearing it makes any workspace the body needs a tracked allocation.
    """
    torch._C._cuda_clearCublasWorkspaces()
    get_empty = getattr(torch._C, "_cuda_get_conv_benchmark_empty_cache", None)
    saved = get_empty() if get_empty else None
    if saved is not None:
        torch._C._cudnn_set_conv_benchmark_empty_cache(False)
    try:
        yield
    finally:
        if saved is not None:
            torch._C._cudnn_set_conv_benchmark_empty_cache(saved)
        torch._C._cuda_clearCublasWorkspaces()


@contextlib.contextmanager
def capturing(graph: torch.cuda.CUDAGraph, device: int, pool, stream: torch.cuda.Stream) -> Iterator[None]:
    """Capture the body into `graph` on `stream`, allocating from `pool` (as torch.cuda.graph does),
    and leave the process as it was when the capture fails.

    An op a capture does not permit (a device sync, a host read) invalidates it, and capture_end then
    raises before it stops routing the pool's allocations and takes the CUDA generator out of capture
    mode; torch.cuda.graph also leaves `stream` current. Every later random op on the device would
    fail ("Offset increment outside graph capture encountered unexpectedly"). Here the capture is
    ended, that state undone, and the body's own error raised.
    """
    torch.cuda.synchronize(device)
    torch.cuda.empty_cache()
    try:
        with torch.cuda.device(device), torch.cuda.stream(stream):
            graph.capture_begin(pool=pool, capture_error_mode="thread_local")
            try:
                yield
            except BaseException:
                _abandon_capture(graph, device, pool, ended=False)
                raise
            try:
                graph.capture_end()
            except BaseException:
                _abandon_capture(graph, device, pool, ended=True)
                raise
    except BaseException:
        try:
            _caller_waits_for(device, stream)
        except Exception as e:   # noqa: BLE001  (the capture's own error is the one to raise)
            log.warning("after a failed capture, the caller's stream could not wait for the capture stream: %s", e)
        raise
    _caller_waits_for(device, stream)


def _caller_waits_for(device: int, stream: torch.cuda.Stream) -> None:
    """Order the caller's stream after `stream`'s work. capture_begin writes the generator's seed and
    offset 0 into its device tensors on the capture stream, outside the capture; the first replay
    writes this call's offset into the same tensors on the caller's stream. Unordered, a late
    capture-stream write could land between the two, and the recording would draw the warm-up's
    random numbers again (seen in full GPU runs, 8 workers sharing the GPU, sessions 28 and 32)."""
    torch.cuda.current_stream(device).wait_stream(stream)


def _abandon_capture(graph: torch.cuda.CUDAGraph, device: int, pool, *, ended: bool) -> None:
    """Clean up after a capture that failed; runs on the capture's device and stream."""
    if not ended:
        try:
            graph.capture_end()   # a capture the body left valid (a Python error) ends cleanly
            return
        except Exception:
            pass                  # invalidated: cudaStreamEndCapture failed, which ends the capture
    log.warning("CUDA graph capture failed on device %d; ending it and restoring the allocator and RNG", device)
    try:
        # capture_end raised before it stopped routing allocations to the pool: a stale routing
        # entry would take the place of the next allocating_in_pool's when that one ends
        torch._C._cuda_endAllocateToPool(device, pool)
    except Exception:
        pass                      # capture_end got past that point: nothing to end
    try:
        graph.reset()             # newer torch drops the failed capture's generator state here
    except Exception:
        pass
    _end_rng_capture_mode()


def _end_rng_capture_mode() -> None:
    """Take the current device's CUDA generator out of the capture mode a failed capture left it in.

    A capture registers the default generator and puts it in capture mode at capture_begin; only a
    capture_end that succeeds takes it out. An empty capture does, seed and offset unchanged.
    """
    empty = torch.cuda.CUDAGraph()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # "The CUDA Graph is empty"
            empty.capture_begin(capture_error_mode="thread_local")
            empty.capture_end()
    except Exception as e:
        log.warning("could not take the CUDA generator out of capture mode after a failed capture "
                    "(random ops on this device may fail from now on): %s", e)


@contextlib.contextmanager
def preserved_rng(device: int) -> Iterator[None]:
    """Capturing must not advance the RNG streams the user sees."""
    cpu = torch.random.get_rng_state()
    with torch.cuda.device(device):
        cuda = torch.cuda.get_rng_state()
    try:
        yield
    finally:
        torch.random.set_rng_state(cpu)
        with torch.cuda.device(device):
            torch.cuda.set_rng_state(cuda)


def pool_blocks(pool, live_only: bool = True) -> list[int]:
    """Addresses of the pool's allocated blocks (from the allocator's snapshot)."""
    addrs = []
    for seg in torch.cuda.memory_snapshot():
        if tuple(seg.get("segment_pool_id", ())) != tuple(pool):
            continue
        addr = seg["address"]
        for block in seg["blocks"]:
            if not live_only or block["state"] == "active_allocated":
                addrs.append(addr)
            addr += block["size"]
    return addrs


def pool_segments(pool) -> int:
    return sum(1 for seg in torch.cuda.memory_snapshot() if tuple(seg.get("segment_pool_id", ())) == tuple(pool))


def check_pool(device: int, pool, live: list[StorageRef]) -> None:
    """The pool's allocated blocks are exactly the storages the tree tracks as live (slow path)."""
    ptrs = {r.ptr for r in live if r.alive()}
    if torch._C._cuda_checkPoolLiveAllocations(device, pool, ptrs):
        return
    # dead tensors in reference cycles look live until collected: the live set is taken again after
    # the pass (a cycle can hold a tracked output as well as untracked pool memory: BERT's backward
    # through a torch.func.vjp stand-in for flash attention left q, k, v and the mask in one, session 37)
    gc.collect()
    torch.cuda.synchronize(device)
    ptrs = {r.ptr for r in live if r.alive()}
    allocated = set(pool_blocks(pool))
    missing = ptrs - allocated
    if missing:
        raise RuntimeError(f"These storage data ptrs are not allocated in pool {pool} but should be "
                           f"{sorted(hex(p) for p in missing)}")
    extra = allocated - ptrs
    if extra:
        raise RuntimeError("These live storage data ptrs are in the cudagraph pool but not accounted for as an "
                           "output of cudagraph trees: " + ", ".join(hex(p) for p in sorted(extra)))


@dataclasses.dataclass
class FunctionInfo:
    """What the tree needs to know about one cudagraphable function (a compiled partition).

    `fn` is boxed: it takes one list and empties it. Static inputs (parameters, buffers, constants)
    have fixed addresses; mutated inputs are written in place by `fn`.
    """

    fn: Callable[[list], Any]
    name: str
    device: int
    mode: str                                    # "forward", "backward" or "inference"
    static_idxs: tuple[int, ...] = ()
    mutated_idxs: tuple[int, ...] = ()
    input_names: list[str] = dataclasses.field(default_factory=list)
    output_traces: list[str | None] | None = None
    input_traces: list[str | None] | None = None   # the user line of each input's first reader
    constants: list[torch.Tensor] = dataclasses.field(default_factory=list)
    cfg: Any = None                              # the compile's Config (its cudagraph_* options)
    # a dynamic graph's partition: its last inputs are size ints; a recording serves only the sizes
    # (those ints and its tensors' shapes) it was made with
    dynamic: bool = False
    # a backward partition's outputs that the module returns as parameters' gradients: autograd adopts
    # them as `.grad` in pool memory, moved out only if still held when the pool is written again
    # (nodes.py: adopted gradients)
    adoptable: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        self._static = frozenset(self.static_idxs)
        # the inputs sizes_key reads, for calls of n inputs: (n, positions), one tuple (threads share it)
        self._keyed: tuple[int, tuple[int, ...]] = (-1, ())

    def sizes_key(self, inputs: list) -> tuple | None:
        """What a recording of a dynamic function is specialized to: its ints and its tensors' shapes
        (but the static inputs', which never change: parameters are most of a partition's inputs, and
        the tree asks for the key on every call). A shape is its torch.Size, a tuple."""
        if not self.dynamic:
            return None
        n, keyed = self._keyed
        if n != len(inputs):
            keyed = tuple(i for i in range(len(inputs)) if i not in self._static)
            self._keyed = (len(inputs), keyed)
        return tuple(inputs[i].shape if isinstance(inputs[i], torch.Tensor) else inputs[i] for i in keyed)

    def trace_of(self, i: int) -> str | None:
        return self.output_traces[i] if self.output_traces and i < len(self.output_traces) else None

    def input_trace(self, i: int) -> str | None:
        return self.input_traces[i] if self.input_traces and i < len(self.input_traces) else None

    def input_name(self, i: int) -> str:
        return self.input_names[i] if i < len(self.input_names) else f"input {i}"


"""Launch compiled Triton kernels through torch's prebuilt C launcher: no launcher built with gcc.

Triton launches a `CompiledKernel` through a small C module generated for the kernel's signature and
built with the host compiler the first time that signature is seen (0.23-0.40 s a signature on the
H100 machine, on a cold Triton cache). torch ships one launcher, compiled into torch itself, that
takes the argument types as a string instead: `torch._C._StaticCudaLauncher` (in CUDA builds), with

    _load_kernel(cubin_path, kernel_name, shared_bytes, device)
        -> (function, n_regs, n_spills)          # the C source we could read
        -> (module, function, n_regs, n_spills)  # torch 2.13, which also has _unload_kernel(module)
    _launch_kernel(function, grid_x, grid_y, grid_z, num_warps, shared_bytes, arg_types, args, stream)

Both layouts are taken; any other makes every kernel go through Triton's launcher. Torch 2.11 gives
one of the two: the GPU tests on the H100 machine (torch 2.11) launch through it.

`arg_types` has one letter per argument the kernel binary takes: "O" a pointer (an int address, None
for null, or an object with data_ptr()), "b" "h" "i" "l" signed 8/16/32/64-bit ints, "B" "H" "I" "K"
unsigned ones, "f" a 32-bit float, "d" a 64-bit float. The function handle is an int.

What the binary takes (Triton 3.6, backends/nvidia/driver.py `make_launcher`): every argument whose
signature type is not "constexpr", in order, then two pointers Triton always appends: the global
scratch and the profiling scratch buffers. Triton passes null for a buffer whose size in the
metadata is 0 and allocates one otherwise; we take only kernels that need neither, and pass two
nulls. Also left to Triton's own launcher: tensor descriptors, num_ctas > 1 (clusters), cooperative
grids and programmatic dependent launch (attributes the static launcher does not set), more than
48 KiB of shared memory (not every version of the static loader raises the limit), fp16/bf16
scalars (Triton passes their 16 bits; the static launcher would write a 32-bit float), tuple
arguments, launch or load hooks (profilers), and any binary the loader refuses.

`for_kernel(kernel, device)` answers with a `StaticKernel` or None (and remembers the answer on the
CompiledKernel, per device); None means "launch it as before". Nothing here imports torch._inductor.
"""
from __future__ import annotations

import logging
import os
import tempfile

import torch

from ...config import interpreting

log = logging.getLogger("mini_inductor.schedule")

# Triton scalar type -> the static launcher's letter. i1 and u1 are a byte in Triton's launcher too.
# fp16/bf16 scalars are missing on purpose (see the module docstring).
_SCALAR_LETTERS = {
    "i1": "b", "i8": "b", "i16": "h", "i32": "i", "i64": "l",
    "u1": "B", "u8": "B", "u16": "H", "u32": "I", "u64": "K",
    "fp32": "f", "f32": "f", "fp64": "d",
}
# the global and profiling scratch pointers Triton 3.6 appends to every kernel's parameters
_SCRATCH_LETTERS = "OO"
_SCRATCH_NULLS = (None, None)
_MAX_THREAD_REGISTERS = 65536   # registers of one thread block on sm_70 to sm_90
_SHARED_STATIC_MAX = 49152      # shared memory a kernel gets without raising its limit


class Unsupported(Exception):
    """This kernel has to go through Triton's own launcher."""


def c_api():
    """torch's static CUDA launcher, or None when this torch build has none (CPU builds, older torch)
    or when its loader turned out to take or return something else than we expect."""
    launcher = getattr(torch._C, "_StaticCudaLauncher", None)
    if launcher is None or _unusable or not callable(getattr(launcher, "_load_kernel", None)) \
            or not callable(getattr(launcher, "_launch_kernel", None)):
        return None
    return launcher


# set, with the reason, the first time _load_kernel's arguments or result do not fit: from then on the
# process does as without the option (precompile builds Triton's launchers ahead again)
_unusable: list[str] = []


def _give_up(reason: str) -> None:
    if not _unusable:
        _unusable.append(reason)
        log.warning("mini_inductor: torch's static launcher is not used in this process (%s); kernels "
                    "launch through Triton's launchers", reason)


def arg_letters(signature: dict) -> tuple[str, tuple[bool, ...]]:
    """(the static launcher's type string for the kernel's own arguments, without the scratch
    pointers; for each signature entry, whether the binary takes it). Raises Unsupported."""
    letters = []
    passed = []
    for name, ty in signature.items():
        if not isinstance(ty, str):
            raise Unsupported(f"argument {name}: tuple type {ty!r}")
        if ty == "constexpr":
            passed.append(False)
            continue
        if ty.startswith("*"):
            letters.append("O")
        elif ty in _SCALAR_LETTERS:
            letters.append(_SCALAR_LETTERS[ty])
        else:
            raise Unsupported(f"argument {name}: type {ty!r}")
        passed.append(True)
    return "".join(letters), tuple(passed)


class StaticKernel:
    """One CompiledKernel loaded through torch's static launcher on one device."""

    __slots__ = ("name", "function", "module", "num_warps", "shared", "arg_types", "passed", "n_regs")

    def __init__(self, name, function, module, num_warps, shared, arg_types, passed, n_regs):
        self.name, self.function, self.module = name, function, module
        self.num_warps, self.shared, self.n_regs = num_warps, shared, n_regs
        self.arg_types = arg_types       # the kernel's arguments, then the two scratch pointers
        self.passed = passed             # per signature entry: does the binary take it

    def kept(self, n_args: int):
        """Which of a call site's `n_args` positional arguments (the first signature entries; the rest,
        its block sizes, are keywords) the binary takes: an int k for the first k (our kernels: the
        pointers, then constexpr sizes), else a tuple of positions. Raises Unsupported when a keyword
        entry is one the binary takes."""
        if n_args > len(self.passed) or any(self.passed[n_args:]):
            raise Unsupported(f"{self.name}: its call site passes {n_args} arguments positionally, "
                              f"the binary takes {self.passed}")
        positions = tuple(i for i, p in enumerate(self.passed[:n_args]) if p)
        return len(positions) if positions == tuple(range(len(positions))) else positions

    def launch(self, grid, stream: int, args) -> None:
        """Launch with `args` the binary's own arguments (constexpr ones left out; launch sites call the
        C function directly, this is for tests and one-off launches)."""
        grid = tuple(grid) + (1,) * (3 - len(grid))
        c_api()._launch_kernel(self.function, grid[0], grid[1], grid[2], self.num_warps, self.shared,
                               self.arg_types, (*args, *_SCRATCH_NULLS), stream)


def check(kernel) -> tuple[str, tuple[bool, ...]]:
    """Raise Unsupported unless `kernel` (a Triton 3.6 CompiledKernel) can go through the static
    launcher; else (its argument letters with the scratch pointers, which signature entries it takes)."""
    md = kernel.metadata
    target = getattr(md, "target", None)
    if getattr(target, "backend", None) != "cuda":
        raise Unsupported(f"backend {getattr(target, 'backend', None)!r}")
    if "cubin" not in getattr(kernel, "asm", {}):
        raise Unsupported("no cubin")
    if getattr(md, "num_ctas", 1) != 1:
        raise Unsupported(f"num_ctas={md.num_ctas}")
    cluster = getattr(md, "cluster_dims", None)
    if cluster is not None and tuple(cluster) not in ((), (1,), (1, 1), (1, 1, 1)):
        raise Unsupported(f"cluster_dims={cluster}")
    if getattr(md, "launch_cooperative_grid", False) or getattr(md, "launch_pdl", False):
        raise Unsupported("cooperative grid or programmatic dependent launch")
    if getattr(md, "tensordesc_meta", None):
        raise Unsupported("tensor descriptors")
    if not hasattr(md, "global_scratch_size") or not hasattr(md, "profile_scratch_size"):
        # another Triton: we do not know which scratch pointers its binaries take
        raise Unsupported("metadata without scratch sizes")
    if (md.global_scratch_size or 0) > 0 or (md.profile_scratch_size or 0) > 0:
        raise Unsupported(f"scratch memory ({md.global_scratch_size}, {md.profile_scratch_size} bytes)")
    if (md.shared or 0) > _SHARED_STATIC_MAX:
        # above 48 KiB a kernel needs its dynamic shared memory limit raised; the C source we read does
        # that, an early version refused such kernels, and we could not read torch 2.11's
        raise Unsupported(f"{md.shared} bytes of shared memory")
    if _hooks_set():
        raise Unsupported("Triton launch or load hooks are set")
    letters, passed = arg_letters(kernel.src.signature)
    return letters + _SCRATCH_LETTERS, passed


def _hooks_set() -> bool:
    try:
        from triton import knobs
    except ImportError:
        return True
    runtime = knobs.runtime
    for name in ("launch_enter_hook", "launch_exit_hook", "kernel_load_start_hook", "kernel_load_end_hook"):
        hook = getattr(runtime, name, None)
        if hook is not None and getattr(hook, "calls", True):   # a HookChain with no calls is unset
            return True
    return False


def _cubin_path(kernel) -> tuple[str, bool]:
    """(a file holding the kernel's cubin, whether it is a temporary file to delete after loading)."""
    for suffix, path in getattr(kernel, "metadata_group", {}).items():
        if suffix.endswith(".cubin") and os.path.exists(path):
            return path, False
    fd, path = tempfile.mkstemp(suffix=".cubin", prefix="mini_inductor_")
    with os.fdopen(fd, "wb") as f:
        f.write(kernel.asm["cubin"])
    return path, True


def load(kernel, device: int) -> StaticKernel:
    """Load `kernel`'s cubin through the static launcher on `device`; raises Unsupported."""
    api = c_api()
    if api is None:
        raise Unsupported("torch._C._StaticCudaLauncher is missing from this torch build")
    arg_types, passed = check(kernel)
    md = kernel.metadata
    path, temporary = _cubin_path(kernel)
    try:
        with torch.cuda.device(device):
            loaded = api._load_kernel(path, kernel.name, md.shared or 0, device)
    except TypeError as e:   # another signature than (path, name, shared bytes, device)
        _give_up(f"_load_kernel: {e}")
        raise Unsupported(f"_load_kernel: {e}") from None
    except Exception as e:  # noqa: BLE001  (too much shared memory, a driver error: Triton's path reports it)
        raise Unsupported(f"the static loader refused it: {type(e).__name__}: {e}") from None
    finally:
        if temporary:
            os.unlink(path)
    if isinstance(loaded, tuple) and len(loaded) == 4 and callable(getattr(api, "_unload_kernel", None)):
        module, function, n_regs = loaded[0], loaded[1], loaded[2]   # (module, function, n_regs, n_spills)
    elif isinstance(loaded, tuple) and len(loaded) == 3:
        module, function, n_regs = None, loaded[0], loaded[1]        # (function, n_regs, n_spills)
    else:   # a layout we have not seen: guessing which int is the function could crash the launch
        _give_up(f"_load_kernel returned {loaded!r}")
        raise Unsupported(f"_load_kernel returned {loaded!r}")
    if not function:
        raise Unsupported("_load_kernel returned a null function")
    if n_regs * 32 * md.num_warps > _MAX_THREAD_REGISTERS:
        # Triton raises OutOfResources for this; its path will
        raise Unsupported(f"{n_regs} registers x {md.num_warps} warps")
    return StaticKernel(kernel.name, function, module, md.num_warps, md.shared or 0, arg_types, passed, n_regs)


def for_kernel(kernel, device: int):
    """`kernel` loaded for the static launcher on `device`, or None (launch it through Triton).

    The answer is kept on the CompiledKernel, so every call site of a kernel shares one loaded module
    and a precompile thread can load it ahead of the first call.
    """
    if interpreting():
        return None
    known = getattr(kernel, "_mini_inductor_static", None)
    if known is None:
        known = {}
        try:
            kernel._mini_inductor_static = known
        except AttributeError:
            return None
    if device not in known:
        try:
            known[device] = load(kernel, device)
        except Unsupported as e:
            log.debug("%s launches through Triton's launcher: %s", getattr(kernel, "name", kernel), e)
            known[device] = None
    return known[device]


def signature_supported(signature: dict) -> bool:
    """Whether a kernel with this Triton signature can be launched statically, as far as its signature
    says (its metadata can still rule it out once compiled): used to skip building its C launcher."""
    if c_api() is None or interpreting():
        return False
    try:
        arg_letters(signature)
        return True
    except Unsupported:
        return False

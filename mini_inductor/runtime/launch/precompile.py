"""Compile a generated module's Triton kernels concurrently, before its first call.

Triton compiles a kernel at its first launch, so a graph of 40 kernels pays 40 compiles one after
another inside its first call. The generated module lists every launch's signature:

    KERNEL_LAUNCHES = [    # runtime/module_spec.py
        KernelLaunch(kernel='triton_poi_fused_add_0', dtypes=(torch.float32, torch.float32), sizes=(4096,),
                     meta={'XBLOCK': 1024}, num_warps=4),
    ]

and `precompile` hands them all to a thread pool through `JITFunction.warmup` (inside Triton's
AsyncCompileMode where this Triton has it). LLVM and ptxas run without the GIL, so the compiles
overlap. Each binary lands in the kernel's in-memory cache (and Triton's on-disk cache), where the
first launch finds it: warmup's stand-in tensors have 16-byte aligned addresses, as fresh CUDA
allocations do, so the specialization matches.

With the static_launch option, a kernel that torch's prebuilt launcher can take
(static_launch.py) is loaded for it in its compile thread, and Triton is never asked for the
kernel's C launcher (`CompiledKernel.run` would build it with gcc): no launcher build is queued for a
signature the static launcher takes, and the launch sites get the compiled kernels directly
(through caching/kernel_store.py's attach, as reloaded ones), not through Triton's launch.

A no-op under Triton's interpreter and when compile_threads is 0.
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import importlib
import importlib.util
import json
import logging
import os
import subprocess
import sys
import sysconfig
import tempfile
import threading
import time
from typing import Any, Sequence

import torch

from ...caching import kernel_store
from ...config import interpreting
from ..module_spec import KernelLaunch
from . import compile_pool, static_launch

log = logging.getLogger("mini_inductor.schedule")


def start_triton_key() -> None:
    """Set Triton up in a background thread, once per process, on CUDA machines.

    Two one-time costs sit in front of the first Triton compile of a process, and both can overlap
    Dynamo's tracing instead of delaying it:
    - Triton's CUDA driver builds its C helper module with the host compiler when Triton's cache
      does not have it yet (0.3 s on the H100 machine);
    - the first compile hashes Triton's package and its shared library (`triton_key`), which a child
      interpreter computes (`hash_triton`).
    The host compiler's run releases the GIL, so the tracing thread barely notices. Only compiling
    needs the hash: `wait_for_triton_setup(driver_only=True)` waits for the driver
    alone (enough to reload kernels and build launchers), `wait_for_triton_setup()` for both.
    """
    if interpreting() or _key_thread:
        return

    def work():
        try:
            if not torch.cuda.is_available():
                return
            from triton.runtime import driver
            _ = driver.active.utils   # creates the driver, which builds its helper module
            setup_times["driver"] = time.perf_counter()
            _driver_ready.set()
            hash_triton()
            setup_times["hash"] = time.perf_counter()
        except Exception as e:  # noqa: BLE001  (the real compile does it again and reports problems)
            log.debug("setting Triton up ahead failed: %s: %s", type(e).__name__, e)
        finally:
            _driver_ready.set()

    setup_times["started"] = time.perf_counter()

    thread = threading.Thread(target=work, name="mini_inductor_triton_setup", daemon=True)
    _key_thread.append(thread)
    thread.start()


# Triton's `triton_key()`: the hash of its package's files and its 400-500 MB shared library, part of
# every kernel's cache key, computed once per process at its first compile. It reads the library in
# 1 MiB chunks and takes the GIL back after each, so a thread of this process that hashes while the
# main thread traces waits for the GIL hundreds of times and makes that thread give it up as often. On
# the CPU machine (session 49, ViT-B/16 at batch 1: Dynamo's trace, AOT autograd and our stages; runs in
# benchmarks/results/2026-12-05_s49_cpu_compile.txt) the hash took 1.7-2.7 s in a thread against
# 0.3-0.8 s alone, and the first call to the backend's end 2.44-2.69 s against 1.98-2.16 s without a
# hash; with a child interpreter hashing, 2.26-2.55 s, what any process busy on the machine's other
# core cost (2.27-2.34 s): on a machine with cores to spare, nothing.
_KEY_CHILD = ("import json, os, sys\n"
              "sys.path.insert(0, sys.argv[1])\n"
              "import triton\n"
              "from triton.runtime.cache import triton_key\n"
              "print(json.dumps([os.path.realpath(triton.__file__), triton_key()]))\n")


def triton_key_from_a_child(root: str | None = None, timeout: float = 300.0) -> str | None:
    """`triton_key()` as a child interpreter computes it, importing Triton from `root` (by default the
    directory this process imports it from); None, with the reason logged, when there is no answer or
    the child's Triton is another package than this process's (the key hashes the package's files, so
    the same files give the same key)."""
    spec = importlib.util.find_spec("triton")
    if spec is None or not spec.origin:
        return None
    own = os.path.realpath(spec.origin)
    root = root or os.path.dirname(os.path.dirname(own))
    try:
        done = subprocess.run([sys.executable, "-c", _KEY_CHILD, root], capture_output=True, text=True,
                              timeout=timeout, stdin=subprocess.DEVNULL)
        lines = done.stdout.strip().splitlines()
        path, key = json.loads(lines[-1]) if done.returncode == 0 and lines else (None, None)
    except (OSError, subprocess.SubprocessError, ValueError) as e:
        log.debug("no child computed Triton's hash (%s: %s); hashing here", type(e).__name__, e)
        return None
    if path != own or not isinstance(key, str):
        log.debug("the child's Triton hash is not this process's (%s, exit %s: %s); hashing here",
                  path, done.returncode, done.stderr[-500:])
        return None
    return key


def hash_triton() -> str:
    """Triton's hash, ready for the first compile: computed by a child interpreter and handed to Triton
    (`cache.get_cache_key` reads `cache.triton_key` through the module's globals), or by Triton here
    when no child answers or MINI_INDUCTOR_TRITON_HASH=here asks for it (to compare the two)."""
    from triton.runtime import cache
    key = None if os.environ.get("MINI_INDUCTOR_TRITON_HASH", "child") == "here" else triton_key_from_a_child()
    if key is None:
        return cache.triton_key()

    def triton_key() -> str:
        return key
    # (Triton's own function, uncached, as functools.lru_cache keeps it: what a check computes afresh)
    triton_key.__wrapped__ = getattr(cache.triton_key, "__wrapped__", cache.triton_key)
    cache.triton_key = triton_key
    return key


def wait_for_triton_setup(timeout: float = 60.0, driver_only: bool = False) -> None:
    """Let the background setup finish, or with `driver_only` its first part (two threads creating
    Triton's driver would both build its helper; two hashing Triton would both read 500 MB)."""
    for thread in _key_thread:
        if driver_only:
            _driver_ready.wait(timeout)
        elif thread.is_alive():
            thread.join(timeout)


# Modules torch imports inside the first compiled call of a process, warm or cold. The first: torch
# 2.11-2.13 check each traced call for DTensor's local_map (higher_order_ops.should_wrap_in_hop),
# which imports torch.distributed.tensor.experimental and registers its custom ops; a cProfile of a
# warm launch_bound first call on the H100 machine had 0.14 s in that import and 0.22 s in the
# registration. The rest: what else a first call imported on the CPU machine (torch 2.13, sys.modules
# before and after, warm and cold), by the modules that pull the others in. A name this torch lacks
# is skipped.
LAZY_TORCH_IMPORTS = (
    "torch.distributed.tensor.experimental._func_map",
    "torch._dynamo.backends.common", "torch._dynamo.backends.debugging", "torch._dynamo.testing",
    "torch.fx.experimental.validator", "torch._inductor.sizevars", "torch.export._trace",
    "torch._dynamo.dce_extra_outputs", "torch._higher_order_ops.passes.inline_invoke_subgraph",
    # Dynamo's backend registry imports every backend module at the first lookup by name
    "torch._dynamo.backends.cudagraphs", "torch._dynamo.backends.distributed", "torch._dynamo.backends.inductor",
    "torch._dynamo.backends.onnxrt", "torch._dynamo.backends.tensorrt", "torch._dynamo.backends.torchxla",
    "torch._dynamo.backends.tvm",
    # a cold first call (AOT autograd, then our lowering) also imports these
    "torch._inductor.compiler_bisector", "torch._dynamo.repro.after_dynamo", "torch._subclasses.schema_check_mode",
    "torch._export.passes._node_metadata_hook", "torch._inductor.fx_passes.dedupe_symint_uses",
    "torch._functorch._activation_checkpointing.remat_using_tags_for_fwd_loss_bwd_graph_pass",
    "torch._functorch._aot_autograd.subclass_codegen", "sympy.tensor.tensor",
)
# modules of that list that a first call no longer imports from the given torch release on
_IMPORTED_BEFORE = {"torch._functorch._aot_autograd.subclass_codegen": (2, 15)}


def lazy_torch_imports() -> tuple[str, ...]:
    """LAZY_TORCH_IMPORTS less what this torch's first call does not import, and less the modules this
    torch does not have (torch 2.11 has neither torch._higher_order_ops.passes nor subclass_codegen)."""
    release = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    return tuple(n for n in LAZY_TORCH_IMPORTS if release < _IMPORTED_BEFORE.get(n, (999,)) and _has_module(n))


def _has_module(name: str) -> bool:
    """Whether the module's file is there, found without importing it or its parents (importing a
    parent is what the warm-up thread is for)."""
    top, *rest = name.split(".")
    spec = importlib.util.find_spec(top)
    if spec is None or not spec.submodule_search_locations:
        return spec is not None and not rest
    path = os.path.join(list(spec.submodule_search_locations)[0], *rest)
    return os.path.exists(path + ".py") or os.path.exists(os.path.join(path, "__init__.py"))


# torch sources Dynamo tokenizes at a first trace: it names the function of each line it makes a call
# node from (torch._dynamo.funcname_cache), for a debug log line, whether that log is on or not. The
# first file also compiles tokenize's patterns: 0.2 s of a 0.6 s trace of a small MLP on the CPU
TOKENIZED_TORCH_SOURCES = ("nn/modules/activation.py", "nn/modules/batchnorm.py", "nn/modules/container.py",
                           "nn/modules/conv.py", "nn/modules/dropout.py", "nn/modules/linear.py",
                           "nn/modules/normalization.py", "nn/modules/pooling.py", "nn/modules/sparse.py",
                           "nn/functional.py")
_import_thread: list = []


def start_torch_imports() -> None:
    """Import lazy_torch_imports(), then tokenize TOKENIZED_TORCH_SOURCES in a background thread, once
    per process, so that the first traced call finds them done (the same idea as start_triton_key;
    here the GIL is mostly held, so it overlaps whatever the main thread waits for: the GPU, files,
    sleep). The imports run here, on the importing thread (0.07 s on the CPU machine): a module
    registers its loggers in logging's dict, which other threads iterate in Python (pytest does at
    every test phase) and would find changing size. MINI_INDUCTOR_WARM_IMPORTS=0: neither."""
    if _import_thread or os.environ.get("MINI_INDUCTOR_WARM_IMPORTS", "1") == "0":
        return
    setup_times["imports_started"] = time.perf_counter()
    for name in lazy_torch_imports():
        try:
            if name.startswith("torch.distributed") and not torch.distributed.is_available():
                continue
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001  (Dynamo imports it itself when it needs it)
            log.debug("importing %s ahead failed: %s: %s", name, type(e).__name__, e)

    def work():
        try:
            from torch._dynamo import funcname_cache   # (imported with Dynamo already: no new logger)
            for source in TOKENIZED_TORCH_SOURCES:
                funcname_cache.get_funcname(os.path.join(os.path.dirname(torch.__file__), source), 0)
        except Exception as e:  # noqa: BLE001  (a private torch helper: Dynamo tokenizes them itself then)
            log.debug("tokenizing torch's sources ahead failed: %s: %s", type(e).__name__, e)
        setup_times["imports"] = time.perf_counter()

    thread = threading.Thread(target=work, name="mini_inductor_torch_imports", daemon=True)
    _import_thread.append(thread)
    thread.start()


_key_thread: list = []
_driver_ready = threading.Event()
# time.perf_counter() when the setup thread started, had the driver, had Triton's hash, and when the
# import thread started and ended (benchmarks report how much of each ran before a first call, where
# it cost that call nothing)
setup_times: dict[str, float] = {}


def precompile(module, threads: int, store_dir: str | None = None, static: bool | None = None,
               workers: bool = False) -> tuple[int, int]:
    """Make every kernel `module.KERNEL_LAUNCHES` names ready before the first call: (reloaded, compiled).

    A specialization `store_dir` remembers (caching/kernel_store.py) is rebuilt from Triton's cache
    files directly; the rest compile on `threads` threads (none when threads is 0: they compile at
    their first launch) and are remembered for the next process. Kernels with the same code (a second
    name in the module) and repeated launch specs are one job. `static`: the static_launch option (None:
    the global config's). `workers`: hand the kernels to the compile pool's processes where it runs
    (the compile_workers option; compile_pool.py).
    """
    launches = getattr(module, "KERNEL_LAUNCHES", None)
    if interpreting() or not launches or getattr(module, "_mini_inductor_precompiled", False):
        return 0, 0
    wait_for_triton_setup(driver_only=True)     # compile_all waits for the rest before compiling
    if static is None:
        from ... import config as config_module
        static = config_module.current().static_launch
    static = static and static_launch.c_api() is not None
    device = _device(module)
    reloaded = 0
    pending = []
    for job in compile_jobs(module, launches):
        kernel = kernel_store.load(store_dir, job.fn, job.key, device) if store_dir else None
        if kernel is not None:
            kernel_store.attach(job.fn, job.key, kernel)
            reloaded += 1
        else:
            pending.append(job)
    compiled = 0
    if pending and threads <= 0:
        wait_for_triton_setup()   # they compile at their first launch, which needs Triton's hash
    if pending and threads > 0:
        with torch.cuda.device(device):
            from triton import knobs   # (with always_compile, a worker's compile would be done again here)
            pool = compile_pool.running() if workers and not knobs.compilation.always_compile else None
            done = compile_all(pending, threads, static, getattr(module, "__file__", None), pool)
        for job, kernel in zip(pending, done):
            if kernel is not None:
                compiled += 1
                if static and static_launch.for_kernel(kernel, device) is not None:
                    kernel_store.attach(job.fn, job.key, kernel)   # its first launch skips Triton's launch
                if store_dir:
                    kernel_store.save(store_dir, job.fn, job.key, kernel, device)
    module._mini_inductor_precompiled = True
    return reloaded, compiled


def compile_jobs(module, launches: Sequence[KernelLaunch]) -> list[CompileJob]:
    """One job per distinct (kernel code, launch signature) among `launches` (the module's KERNEL_LAUNCHES)."""
    jobs: dict[tuple, CompileJob] = {}
    for launch in launches:
        fn = getattr(module, launch.kernel, None)
        if not hasattr(fn, "warmup"):   # a FastKernel (launcher.py) wraps the JITFunction; a JITFunction's
            fn = getattr(fn, "fn", None)  # own `.fn` is the plain Python function (unwrapping it dropped every job)
        if hasattr(fn, "warmup"):
            args = (*launch.dtypes, *launch.sizes)
            key = kernel_store.spec_key(args, launch.num_warps, launch.meta)
            jobs.setdefault((id(fn), key), CompileJob(fn, args, dict(launch.meta, num_warps=launch.num_warps), key))
    return list(jobs.values())


class CompileJob:
    """One specialization of a kernel: `fn.warmup(*args, **kwargs)` (args: tensors or torch dtypes).

    `launcher`: a Future of the job that builds this kernel's C launcher ahead (`launcher_source`),
    which the job waits for before it loads its binary, so that the launcher is not built twice.
    `static`: load the kernel for torch's static launcher where it can take it, and then leave Triton's
    launcher unbuilt.
    """

    __slots__ = ("fn", "args", "kwargs", "key", "launcher", "static")

    def __init__(self, fn, args: Sequence[Any], kwargs: dict[str, Any], key: tuple = ()):
        self.fn, self.args, self.kwargs, self.key = fn, tuple(args), kwargs, key
        self.launcher = None
        self.static = False

    def __call__(self):
        kernel = self.fn.warmup(*self.args, grid=(1,), **self.kwargs)
        if kernel is not None and not hasattr(kernel, "result"):
            self.load(kernel)
        return kernel

    def load(self, kernel) -> None:
        """Load a compiled kernel for its launches on the current device."""
        if self.static and static_launch.for_kernel(kernel, torch.cuda.current_device()) is not None:
            return   # loaded (module load, no compiler run); `kernel.run` would build Triton's launcher
        if self.launcher is not None:
            concurrent.futures.wait([self.launcher])
        triton_launcher(kernel)   # loads the binary and its C launcher (built here if not ahead)


# Triton loads every C launcher as an extension module named `__triton_launcher`. Python keeps one
# module object per name for such modules: loading an already-loaded launcher file again refills
# that shared object's `launch` from its own copy. Two threads doing it at once could each read the
# other's `launch`, and a kernel then got a launcher for another signature ("function takes exactly
# 28 arguments (19 given)", seen once on the H100 in a full GPU test run). Only one thread loads.
_launcher_lock = threading.Lock()


def triton_launcher(kernel):
    """`kernel.run`, Triton's launcher of a CompiledKernel, loaded (and built if needed) by one thread
    at a time."""
    launcher = getattr(kernel, "_run", None)
    if launcher is not None:
        return launcher
    with _launcher_lock:
        return kernel.run


def launcher_source(job: CompileJob, device: int):
    """(a key, the ASTSource Triton will compile, its options, its target) for `job`; None where this
    Triton's internals differ.

    Triton builds a kernel's C launcher with the host compiler (0.3 s on the H100 machine, on a cold
    cache) only after the kernel itself has compiled, from nothing but the kernel's signature and
    constants. Those come from Triton's own argument binding, done here the way `warmup` does it, so
    the launcher can build at the same time as the kernel, and kernels with one signature share a build.
    The same binding is what a compile worker needs (compile_pool.py).
    """
    try:
        from triton.runtime.jit import MockTensor
        from triton import knobs
        fn = job.fn
        _, _, target, backend, binder = fn.device_caches[device]
        kwargs = dict(getattr(fn, "run_defaults", {}), **job.kwargs)
        kwargs = dict(kwargs, debug=kwargs.get("debug", fn.debug) or knobs.runtime.debug,
                      instrumentation_mode=knobs.compilation.instrumentation_mode)
        bound, specialization, options = binder(*map(MockTensor.wrap_dtype, job.args), **kwargs)
        options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
        src = fn.ASTSource(fn, signature, constexprs, attrs)
        key = (tuple(src.signature.values()), tuple(sorted((k, repr(v)) for k, v in src.constants.items())))
        return key, src, options, target
    except Exception as e:  # noqa: BLE001  (the launcher then builds after the kernel, as Triton does)
        log.debug("no launcher ahead for %s: %s: %s", getattr(job.fn, "__name__", job.fn), type(e).__name__, e)
        return None


def _worker_request(job: CompileJob, found, module_file: str | None):
    """What a compile worker needs to compile `job` (compile_worker.py), or None where it cannot: a
    kernel not defined in the generated module's own file (the attention kernels of the package)."""
    if found is None or not module_file:
        return None
    code = getattr(getattr(job.fn, "fn", None), "__code__", None)
    if code is None or os.path.abspath(code.co_filename) != os.path.abspath(module_file):
        return None
    import triton
    _, src, options, target = found
    # triton_key is filled in when the job runs, after Triton's setup thread has computed it (two
    # threads would each hash Triton's files)
    return dict(path=module_file, name=job.fn.fn.__name__, target=target, signature=src.signature,
                constexprs=src.constants, attrs=src.attrs, options=options.__dict__,
                cache_dir=triton.knobs.cache.dir, triton_file=triton.__file__)


def _build_launcher(src) -> None:
    """Build into Triton's cache, without loading it, the launcher `CompiledKernel` will ask for.

    The C source, its cache key and the build are Triton's own (`make_launcher`, the key of
    `compile_module_from_src`, `_build`); only the load is left out, for the compile job to do under
    `_launcher_lock`. Should this Triton differ, nothing is built here and the kernel's first
    `kernel.run` builds its launcher itself, as without this."""
    try:
        from triton.backends.nvidia import driver as nvidia
        from triton.runtime import build
        from triton.runtime.cache import get_cache_manager
        names = src.fn.arg_names
        constants = {(names.index(k),) if isinstance(k, str) else k: v for k, v in src.constants.items()}
        code = nvidia.make_launcher(constants, dict(src.signature), None)
        cache = get_cache_manager(hashlib.sha256((code + build.platform_key()).encode("utf-8")).hexdigest())
        name, suffix = "__triton_launcher", sysconfig.get_config_var("EXT_SUFFIX")
        if cache.get_file(f"{name}{suffix}") is not None:
            return
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, f"{name}.c")
            with open(path, "w") as f:
                f.write(code)
            built = build._build(name, path, tmp, nvidia.library_dirs(), nvidia.include_dirs, nvidia.libraries, [])
            with open(built, "rb") as f:
                cache.put(f.read(), f"{name}{suffix}", binary=True)
    except Exception as e:  # noqa: BLE001
        log.debug("building a launcher ahead failed: %s: %s", type(e).__name__, e)


def compile_all(jobs: list[CompileJob], threads: int, static: bool = False, module_file: str | None = None,
                pool: compile_pool.Pool | None = None) -> list[Any]:
    """Compile `jobs` concurrently on the current CUDA device; the compiled kernels, None where one failed.

    `static`: jobs load their kernels for torch's static launcher where it takes them, and no C launcher
    is built ahead for a signature it takes (should a kernel's metadata rule it out after all, e.g.
    scratch memory, its job builds Triton's launcher after compiling, as without the option).
    With a `pool` (compile_pool.py), each kernel defined in `module_file` compiles in a worker process
    first; its job then finds it in Triton's cache.
    A failure is only logged: the kernel's real launch compiles it again and raises a proper error.
    """
    if not jobs:
        return []
    wait_for_triton_setup(driver_only=True)
    # Plain threads. (Triton's AsyncCompileMode returned futures that resolved to nothing on the H100:
    # no kernel was compiled ahead; calling warmup in our own threads compiles them.)
    device = torch.cuda.current_device()
    sources: dict[tuple, Any] = {}       # one launcher build per distinct launcher source
    requests, found_sources = [], []
    for job in jobs:
        caches = getattr(job.fn, "device_caches", None)
        if caches is not None:   # each kernel's per-device cache (a defaultdict): made here, not racing in the threads
            _ = caches[device]
        job.static = static
        found = launcher_source(job, device)
        requests.append(_worker_request(job, found, module_file) if pool is not None else None)
        found_sources.append(found[1] if found is not None else None)
        if found is not None and static and static_launch.signature_supported(found[1].signature):
            continue            # torch's launcher will launch it: no gcc build for Triton's
        if found is not None:
            sources.setdefault(found[0], found[1])
            job.launcher = found[0]
    with concurrent.futures.ThreadPoolExecutor(max(1, min(threads, len(jobs) + len(sources))),
                                               thread_name_prefix="mini_inductor_compile") as pool_threads:
        # Launcher builds go first in the queue: a compile job waits for its launcher only after its
        # own compile, by when the build it waits for has been taken by a thread.
        builds = {key: pool_threads.submit(_build_launcher, src) for key, src in sources.items()}
        for job in jobs:
            job.launcher = builds.get(job.launcher)
        wait_for_triton_setup()   # the compiles need Triton's hash; the launcher builds above do not

        def run(job, request, src):
            answer = kernel = None
            if request is not None:
                from triton.runtime.cache import triton_key
                answer = pool.compile(dict(request, triton_key=triton_key()))
            with torch.cuda.device(device):
                if answer is not None and src is not None:
                    kernel = _load_worker_kernel(job, src, answer)
                if kernel is None:
                    kernel = job()
            if answer is not None:
                _count(job, answer, kernel)
            return kernel
        futures = [pool_threads.submit(run, job, request, src)
                   for job, request, src in zip(jobs, requests, found_sources)]
        return [_result(f, job) for f, job in zip(futures, jobs)]


def worker_kernel(src, answer: tuple):
    """The CompiledKernel a compile worker answered with (compile_worker.py), built from the files it
    wrote into Triton's cache as Triton builds one on a cache hit, or None where the answer names none
    or its files do not make that kernel. `src`: the ASTSource this process would compile
    (`launcher_source`), whose signature and constants the worker compiled.

    The asking thread no longer compiles the specialization again to find it in Triton's cache: that
    lookup computes the kernel's cache key from its source (an AST walk over the kernel and the
    helpers it calls) and reads every file back, holding the GIL for most of it; under a profiler it
    was 1.2 s of ViT-B/16's 12 s first call on the H200 machine, for 11 kernels (session 47)."""
    if not (isinstance(answer, tuple) and len(answer) >= 4 and answer[0] and isinstance(answer[3], dict)):
        return None
    files = answer[3]
    try:
        from triton.compiler.compiler import CompiledKernel
        group = files["group"]
        if not (isinstance(group, dict) and all(isinstance(p, str) and os.path.exists(p) for p in group.values())):
            return None
        kernel = CompiledKernel(src, group, answer[1])
    except Exception as e:  # noqa: BLE001  (the kernel then compiles here, a hit in Triton's cache)
        log.debug("cannot build the worker's kernel %s: %s: %s", files.get("name"), type(e).__name__, e)
        return None
    return kernel if kernel.name == files.get("name") and kernel.hash == answer[1] else None


def _load_worker_kernel(job: CompileJob, src, answer: tuple):
    """`worker_kernel`, loaded for its launches and handed to the kernel's launch sites (which would
    otherwise go through Triton's JIT, whose own cache never saw it); None where it cannot be."""
    kernel = worker_kernel(src, answer)
    if kernel is None:
        return None
    try:
        job.load(kernel)
    except Exception as e:  # noqa: BLE001  (compiled here instead: Triton reports what is wrong)
        log.debug("cannot load the worker's kernel %s: %s: %s", job.fn.__name__, type(e).__name__, e)
        return None
    kernel_store.attach(job.fn, job.key, kernel)
    return kernel


def _count(job: CompileJob, answer: tuple, kernel) -> None:
    """compile_pool.stats after a job a worker compiled first."""
    done, detail = answer[:2]
    outcome = "failed" if not done else "served" if getattr(kernel, "hash", None) == detail else "recompiled"
    with _count_lock:
        compile_pool.stats[outcome] += 1
    if outcome == "failed":
        log.debug("compile worker failed on %s (compiled here instead): %s", job.fn.__name__, detail)
    elif outcome == "recompiled":
        log.debug("compile worker's %s had another cache key: compiled here again", job.fn.__name__)


_count_lock = threading.Lock()


_failures_reported = [0]


def _report_failure(job: CompileJob, e: Exception) -> None:
    """The first few failures are warnings (the kernel still compiles at its first launch), then debug."""
    level = logging.WARNING if _failures_reported[0] < 3 else logging.DEBUG
    _failures_reported[0] += 1
    log.log(level, "precompiling %s failed (it compiles at its first launch instead): %s: %s",
            getattr(job.fn, "__name__", job.fn), type(e).__name__, e)


def _guarded(job: CompileJob):
    try:
        return job()
    except Exception as e:  # noqa: BLE001
        _report_failure(job, e)
        return None


def _result(pending, job: CompileJob):
    """The compiled kernel behind a concurrent Future."""
    try:
        return pending.result()
    except Exception as e:  # noqa: BLE001
        _report_failure(job, e)
        return None


def _device(module) -> int:
    for spec in getattr(module, "INPUT_SPECS", ()):
        if spec.device is not None and spec.device.startswith("cuda"):
            return torch.device(spec.device).index or 0
    return torch.cuda.current_device()

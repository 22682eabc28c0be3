"""Fast Triton launches: after the first launch at a call site, call the compiled kernel directly.

`fn[grid](*args, XBLOCK=..., num_warps=...)` in Triton binds arguments, computes a specialization key
and looks the kernel up on every call (tens of µs of Python). Our kernels have static sizes, so a
call site always launches the same compiled kernel: `FastKernel` keeps it after the first launch and
from then on calls its launcher with the stream and the arguments only. Where the kernel needs no
global or profiling scratch memory (only TMA templates need any: runtime/scratch.py), that is the launcher's C
function itself, with the arguments that never change bound once: no Python frame of Triton's runs
per launch. The one specialization that can change between calls is pointer alignment (16 bytes):
a call with an unaligned tensor, or a site first compiled for unaligned ones, goes through Triton's
own path.

With the static_launch option (on by default), a kernel torch's prebuilt launcher can take
(static_launch.py) goes through that instead, from its first launch on: Triton then never
builds the kernel's C launcher with the host compiler (a cold Triton cache paid 0.23-0.40 s a
signature for those on the H100 machine). The first launch asks Triton for the compiled kernel
without launching it (`JITFunction.run(..., warmup=True)`), which compiles it if nothing did before.

Under mode="max-autotune" a site's first launch asks the Autotuner (autotune.py) for the
grid, block sizes and warps; every later launch reuses them.

Under Triton's interpreter (CPU) everything goes through the plain path.
"""
from __future__ import annotations

import logging
import os
import time

import torch

from ...caching import kernel_store
from ...caching.files import KERNELS
from ...config import interpreting
from ..scratch import scratch_allocator
from . import compile_pool, static_launch
from .autotune import Autotuner
from .precompile import precompile, triton_launcher

schedule_log = logging.getLogger("mini_inductor.schedule")


class _Site:
    __slots__ = ("fn", "grid", "kernel", "device", "tuner", "config", "constexprs", "launch", "fixed",
                 "static", "kept", "use_static")

    def __init__(self, fn, grid, tuner=None, use_static=True):
        self.fn = fn
        self.grid = tuple(grid) + (1,) * (3 - len(grid))
        self.kernel = None
        self.device = None
        self.tuner = tuner       # an Autotuner under mode="max-autotune": the first launch picks the config
        self.config = None       # (num_warps, meta) launched here, fixed at the first launch
        self.constexprs = ()     # the meta values, as the compiled kernel's launcher takes them
        self.launch = None       # the launcher's C entry, when the kernel needs no scratch memory
        self.fixed = ()          # its arguments between the stream and the kernel's own
        self.use_static = use_static   # the static_launch option
        # torch's static launcher, with what it takes besides the grid, arguments and stream (the two
        # Nones after the arguments are Triton's scratch pointers: static_launch.py)
        self.static = None
        self.kept = 0            # the site's arguments the binary takes: the first `kept`, or these positions

    def __call__(self, *args, num_warps=4, **meta):
        kernel = self.kernel
        if kernel is not None:
            for a in args:
                if isinstance(a, torch.Tensor) and a.data_ptr() % 16:
                    break
            else:
                g0, g1, g2 = self.grid
                stream = torch._C._cuda_getCurrentRawStream(self.device)
                static = self.static
                if static is not None:
                    c_launch, function, warps, shared, types = static
                    kept = self.kept
                    c_launch(function, g0, g1, g2, warps, shared, types,
                             (*args[:kept], None, None) if kept.__class__ is int else
                             (*[args[i] for i in kept], None, None), stream)
                elif self.launch is not None:
                    self.launch(g0, g1, g2, stream, *self.fixed, *args, *self.constexprs)
                else:   # Triton's own launcher: it allocates the global scratch a kernel takes (TMA descriptors)
                    scratch_allocator()
                    kernel.run(g0, g1, g2, stream, kernel.function, kernel.packed_metadata, None, None, None,
                               *args, *self.constexprs)
                return kernel
        if self.config is None and self.tuner is None and self._reloaded(args, num_warps, meta):
            return self(*args)
        if self.config is None:
            if self.tuner is not None:
                self.grid, num_warps, meta = self.tuner.tune(self.fn, self.grid, args, num_warps, meta)
            self.config, self.constexprs = (num_warps, meta), _constexprs(meta)
        num_warps, meta = self.config
        tensors = None
        if self.kernel is None and not interpreting():
            tensors = [a for a in args if isinstance(a, torch.Tensor)]
            if not (tensors and all(t.is_cuda and t.data_ptr() % 16 == 0 for t in tensors)):
                tensors = None
        if tensors is not None and self.use_static and static_launch.c_api() is not None:
            # compile (or find) the kernel without launching it: Triton's launch would build its C launcher
            kernel = self.fn.run(*args, grid=self.grid, warmup=True, num_warps=num_warps, **meta)
            kernel = kernel.result() if hasattr(kernel, "result") else kernel
            if kernel is not None:
                self._keep(kernel, tensors[0].device.index, len(args))
                if self.static is not None:
                    return self(*args)
        scratch_allocator()
        launched = self.fn[self.grid](*args, num_warps=num_warps, **meta)
        if tensors is not None and self.kernel is None:
            self._keep(launched.result() if hasattr(launched, "result") else launched, tensors[0].device.index,
                       len(args))
        return launched

    def _keep(self, kernel, device: int, n_args: int) -> None:
        """Launch `kernel` directly from now on: through torch's static launcher where it can take the
        kernel, else through the kernel's C launcher alone where that is safe."""
        self.kernel, self.device = kernel, device
        if self.use_static:
            static = static_launch.for_kernel(kernel, device)
            if static is not None:
                try:
                    self.kept = static.kept(n_args)
                    self.static = (static_launch.c_api()._launch_kernel, static.function, static.num_warps,
                                   static.shared, static.arg_types)
                    return
                except static_launch.Unsupported as e:
                    static_launch.log.debug("%s", e)
        launcher = triton_launcher(kernel)   # loads the binary and the launcher (built if need be)
        scratch = (getattr(launcher, "global_scratch_size", None), getattr(launcher, "profile_scratch_size", None))
        launch = getattr(launcher, "launch", None)
        if scratch == (0, 0) and callable(launch) and hasattr(launcher, "launch_cooperative_grid"):
            # CudaLauncher.__call__ does no more than this when there is no scratch to allocate:
            # launch(grid, stream, function, cooperative, pdl, global and profile scratch, then the
            # packed metadata, launch metadata, enter and exit hooks, then the kernel's arguments)
            self.launch = launch
            self.fixed = (kernel.function, launcher.launch_cooperative_grid, launcher.launch_pdl, None, None,
                          kernel.packed_metadata, None, None, None)

    def _reloaded(self, args, num_warps, meta) -> bool:
        """Take the kernel that caching/kernel_store.py rebuilt for this launch spec, if there is one and
        every pointer is a 16-byte aligned CUDA address (what it was compiled for)."""
        if not hasattr(self.fn, "_mini_inductor_compiled"):
            return False
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if not tensors or not all(t.is_cuda and t.data_ptr() % 16 == 0 for t in tensors):
            return False
        kernel = kernel_store.attached(self.fn, kernel_store.spec_key(args, num_warps, meta))
        if kernel is None:
            return False
        self._keep(kernel, tensors[0].device.index, len(args))
        self.config, self.constexprs = (num_warps, meta), _constexprs(meta)
        return True


def _constexprs(meta: dict) -> tuple:
    """The meta values a compiled kernel's launcher takes after the arguments: its constexpr
    parameters. num_stages (a matmul template's pipeline depth) is a compile option, not a parameter."""
    return tuple(v for k, v in meta.items() if k != "num_stages")


class FastKernel:
    """Stands in for a @triton.jit kernel in a generated module: `kernel[grid](...)` as before."""

    def __init__(self, fn, tuner=None, static: bool = True, tunable: bool = True):
        self.fn = fn
        self.tunable = tunable    # a matmul template is not: its config was chosen when it was generated
        self.tuner = tuner if tunable else None
        self.static = static      # the static_launch option, for sites created from now on
        self._sites: dict[tuple, _Site] = {}

    def __getitem__(self, grid) -> _Site:
        site = self._sites.get(grid)
        if site is None:
            site = self._sites[grid] = _Site(self.fn, grid, self.tuner, self.static)
        return site


def accelerate(module, tuner=None, static: bool | None = None) -> None:
    """Wrap every generated kernel of `module` (once); a no-op under the interpreter.

    `tuner` (mode="max-autotune"): each call site picks its config at its first launch. `static`: the
    static_launch option (None: the global config's). Given for a module already wrapped, they apply
    to the call sites that have not launched yet.
    """
    if interpreting():
        return
    if static is None:
        from ... import config as config_module
        static = config_module.current().static_launch
    if getattr(module, "_mini_inductor_fast", False):
        for value in vars(module).values():
            if isinstance(value, FastKernel):
                value.static = static
                if tuner is not None and value.tunable:
                    value.tuner = tuner
                for site in value._sites.values():
                    if site.config is None:
                        site.use_static = static
                        if tuner is not None and value.tunable:
                            site.tuner = tuner
        return
    from triton.runtime.jit import JITFunction

    for name, value in list(vars(module).items()):
        if name.startswith("triton_") and isinstance(value, JITFunction):
            # a matmul template (triton_tem_*) launches with the config it was generated for
            tunable = not name.startswith("triton_tem_")
            setattr(module, name, FastKernel(value, tuner, static, tunable))
    module._mini_inductor_fast = True


def prepare_kernels(module, name: str, cfg, record) -> None:
    """GPU only: compile every kernel of a freshly loaded module now, concurrently (precompile.py), the
    seconds into `record`; under max-autotune, tune each at its first launch (autotune.py)."""
    if interpreting():
        return
    began, served = time.perf_counter(), compile_pool.stats["served"]
    reloaded, compiled = precompile(module, cfg.compile_threads, os.path.join(cfg.cache_dir, KERNELS),
                                    static=cfg.static_launch, workers=cfg.compile_workers)
    took, served = time.perf_counter() - began, compile_pool.stats["served"] - served
    if compiled:
        record.stage_seconds["kernel compile"] = took
        schedule_log.info("%s: %d Triton kernels compiled on %d threads%s in %.2f s%s", name, compiled,
                          cfg.compile_threads, f" ({served} in worker processes)" if served else "", took,
                          f" ({reloaded} more reloaded)" if reloaded else "")
    elif reloaded:
        record.stage_seconds["kernel load"] = took
        schedule_log.info("%s: %d compiled Triton kernels reloaded from the cache in %.2f s", name, reloaded, took)
    if cfg.max_autotune:
        accelerate(module, tuner=Autotuner(cfg.cache_dir, cfg.compile_threads), static=cfg.static_launch)

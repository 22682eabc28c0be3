"""mini_inductor: a torch.compile backend that lowers ATen graphs to fused Triton kernels.

    model = torch.compile(model, backend="mini_inductor", options={"debug_dir": "dump"})

(an installed package needs no `import mini_inductor` first: torch finds the backend through its
`torch_dynamo_backends` entry point). Public API: `__version__`, `backend` (the backend function),
`config`, `metrics`, `reset()`, `mark_step()` (start a CUDA-graph iteration), `cudagraphs` (the trees'
read-only introspection: `cudagraphs.stats()`), `explain(fn, *args)` (the fusion report of one call).
Logs: MINI_INDUCTOR_LOGS=fusion,schedule,output_code,cudagraphs,perf_hints,autotuning (see debug/logs.py).
"""
from __future__ import annotations

import warnings as _warnings

import torch as _torch

from ._version import __version__
from ._version import check_torch as _check_torch

_untested = _check_torch(_torch.__version__)      # an ImportError for a torch older than supported
if _untested:
    _warnings.warn(_untested, stacklevel=2)

from . import config, metrics  # noqa: E402
from .caching import dynamo_cache  # noqa: E402
from .backend import mini_inductor as backend
from .backend import reset
from .runtime.cudagraphs import trees as cudagraphs
from .attention import flash as _flash_attention  # noqa: E402,F401  (registers torch.ops.mini_inductor.flash_attention*)
from .runtime.cudagraphs.trees import mark_step
from .debug.api import explain
from .debug.logs import configure as _configure_logs
from .runtime.launch.precompile import start_torch_imports as _start_torch_imports
from .runtime.launch.precompile import start_triton_key as _start_triton_key

__all__ = ["__version__", "backend", "config", "cudagraphs", "explain", "mark_step", "metrics", "reset"]


def _register() -> None:
    """Make backend="mini_inductor" name this backend, whether or not the user imported us first.

    setup.cfg also declares the name as a `torch_dynamo_backends` entry point. Once torch has found
    that entry point (any by-name lookup scans them), a lookup of "mini_inductor" loads it, which
    imports this package, and then registers what it loaded: registering here as well would make that
    a duplicate name (an AssertionError). So register only a name torch knows nothing about."""
    from torch._dynamo.backends import registry

    known = getattr(registry, "_COMPILER_FNS", {})
    entry_point = getattr(registry, "_BACKENDS", {}).get("mini_inductor")
    if "mini_inductor" in known or entry_point is not None:
        return
    registry.register_backend(backend, name="mini_inductor")


_register()
_configure_logs()
dynamo_cache.enable(config.current())
_start_triton_key()
_start_torch_imports()

"""mini_inductor: a torch.compile backend that lowers ATen graphs to fused Triton kernels.

    import mini_inductor
    model = torch.compile(model, backend="mini_inductor", options={"debug_dir": "dump"})

Public API: `backend` (the backend function), `config`, `metrics`, `reset()`, `mark_step()` (start a
CUDA-graph iteration), `cudagraphs` (the trees' read-only introspection: `cudagraphs.stats()`).
Logs: MINI_INDUCTOR_LOGS=fusion,schedule,output_code,cudagraphs,perf_hints,autotuning (see debug/logs.py).
"""
from __future__ import annotations

from . import config, dynamo_cache, metrics
from .backend import mini_inductor as backend
from .backend import reset
from .runtime import cudagraph_trees as cudagraphs
from .runtime.cudagraph_trees import mark_step
from .debug.api import explain
from .debug.logs import configure as _configure_logs
from .runtime.precompile import start_torch_imports as _start_torch_imports
from .runtime.precompile import start_triton_key as _start_triton_key

__all__ = ["backend", "config", "cudagraphs", "explain", "mark_step", "metrics", "reset"]


def _register() -> None:
    from torch._dynamo.backends import registry

    if "mini_inductor" not in getattr(registry, "_COMPILER_FNS", {}):
        registry.register_backend(backend, name="mini_inductor")


_register()
_configure_logs()
dynamo_cache.enable(config.current())
_start_triton_key()
_start_torch_imports()

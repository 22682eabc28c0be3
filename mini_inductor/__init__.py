"""mini_inductor: a torch.compile backend that lowers ATen graphs to fused Triton kernels.

    import mini_inductor
    model = torch.compile(model, backend="mini_inductor", options={"debug_dir": "dump"})

Public API: `backend` (the backend function), `config`, `metrics`, `reset()`.
"""
from __future__ import annotations

from . import config, metrics
from .backend import mini_inductor as backend
from .backend import reset

__all__ = ["backend", "config", "metrics", "reset"]


def _register() -> None:
    from torch._dynamo.backends import registry

    if "mini_inductor" not in getattr(registry, "_COMPILER_FNS", {}):
        registry.register_backend(backend, name="mini_inductor")


_register()

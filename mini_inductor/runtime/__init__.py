"""Running compiled graphs: the callable that aot_autograd receives."""
from __future__ import annotations

import types
from typing import Callable

import torch

from .launcher import accelerate


class CompiledGraph:
    """Calls the generated module's `call(args)` (boxed: the argument list is consumed).

    Key attributes: `name`, `source_path`, `module`. Inputs are checked against the recorded
    devices so a tensor on the wrong device fails with a clear message instead of a bad pointer.
    """

    _boxed_call = True

    def __init__(self, name: str, module: types.ModuleType, source_path: str, constants: dict[str, torch.Tensor]):
        self.name = name
        self.module = module
        self.source_path = source_path
        self.constants = dict(constants)
        accelerate(module)
        self._call: Callable = module.call

    def __call__(self, *args):
        # boxed (one list, consumed) or plain positional tensors
        args = args[0] if len(args) == 1 and isinstance(args[0], list) else list(args)
        return self._call(args, self.constants)


class EagerGraph:
    """A graph that runs as the FX module itself (no GPU and no interpreter, or an error fallback)."""

    _boxed_call = True

    def __init__(self, name: str, gm: torch.fx.GraphModule, reason: str):
        self.name = name
        self.gm = gm
        self.reason = reason

    def __call__(self, *args):
        args = list(args[0]) if len(args) == 1 and isinstance(args[0], list) else list(args)
        return self.gm(*args)

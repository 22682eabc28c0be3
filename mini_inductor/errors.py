"""Errors that name the stage, the graph and the op; where in the user's code a warning belongs."""
from __future__ import annotations

import os
import sys
import warnings


class MiniInductorError(RuntimeError):
    stage = "compile"

    def __init__(self, why: str, *, graph: str | None = None, op: str | None = None, node: str | None = None):
        self.why, self.graph, self.op, self.node = why, graph, op, node
        where = ""
        if op:
            where += f"{op}"
            if node:
                where += f" (node %{node})"
        if graph:
            where += f" in graph {graph}"
        located = f"[{self.stage}] {where + ': ' if where else ''}{why}."
        self.where = f"{type(self).__name__} {located}"   # for warnings and reports, which name no class
        # (a traceback and torch's BackendCompilerFailed print the class name before the message)
        super().__init__(located + ' Set options={"fallback_on_error": True} to run this graph eagerly.')


class LoweringError(MiniInductorError):
    stage = "lowering"


class SchedulingError(MiniInductorError):
    stage = "scheduling"


class CodegenError(MiniInductorError):
    stage = "codegen"


def user_frame() -> tuple[str, int]:
    """(file, line) of the innermost frame outside mini_inductor, torch and the import machinery: the
    user's call of the compiled code, where a warning about it belongs."""
    import torch

    skip = (os.path.dirname(__file__) + os.sep, os.path.dirname(torch.__file__) + os.sep, "<frozen ")
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(skip):
        frame = frame.f_back
    if frame is None:
        return "<unknown>", 0
    return frame.f_code.co_filename, frame.f_lineno


def warn_at_user_frame(message: str) -> None:
    """A UserWarning shown at the user's line (user_frame), each time (a fresh registry: the default
    filter's once-per-location would hide the next one)."""
    filename, lineno = user_frame()
    warnings.warn_explicit(message, UserWarning, filename, lineno, registry={})

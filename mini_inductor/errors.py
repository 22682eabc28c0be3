"""Errors that name the stage, the graph and the op."""
from __future__ import annotations


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

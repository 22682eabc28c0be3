"""Codegen: a Schedule → one Python module (wrapper + Triton kernels), as source text.

    generate(schedule, cfg) -> GeneratedModule(source, kernel_names, ...)

This file is the package's face: the entry point and what it returns. The writer is wrapper.py
(WrapperCodegen, over the line records of wrapper_ir.py and the memory plan of memory_plan.py); each
fused group's kernel is triton.py (TritonKernel), whose `ops` handler is triton_ops.py (TritonOps).
"""
from __future__ import annotations

import dataclasses

from ..config import Config
from ..scheduler import Schedule


@dataclasses.dataclass
class GeneratedModule:
    graph_name: str
    source: str
    kernel_names: list[str]
    kernel_sources: dict[str, str]
    extern_calls: list[str]
    removed_buffers: set[str]                    # stored and consumed inside one kernel: never allocated
    planned_peak_bytes: int = 0                  # most bytes the wrapper's own buffers hold at once
    estimated_bytes_moved: int = 0               # the scheduler's estimate, carried for the summary
    reused: list[tuple[str, str]] = dataclasses.field(default_factory=list)   # (dead buffer, new owner)
    inplace: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (kernel input, its output)
    partition_functions: list[str] = dataclasses.field(default_factory=list)


# after GeneratedModule: the writer imports it from here to build one
from .wrapper import WrapperCodegen  # noqa: E402


def generate(sched: Schedule, cfg: Config) -> GeneratedModule:
    return WrapperCodegen(sched, cfg).generate()

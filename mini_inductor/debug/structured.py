"""Generated code and graphs in torch's structured trace, which tlparse turns into a report.

    TORCH_TRACE=/tmp/trace python train.py      # torch writes /tmp/trace/dedicated_log_torch_trace_*.log
    tlparse /tmp/trace/dedicated_log_torch_trace_*.log -o tl_out   # tl_out/index.html

Per compiled graph, under its Dynamo compile id ([0/0], ...), the entries Inductor's users know (the
output code also goes to the `output_code` log: MINI_INDUCTOR_LOGS or TORCH_LOGS, see logs.py):

    inductor_output_code          the wrapper and its kernels (tlparse: inductor_output_code_<module>.html),
                                  also for a graph served from a cache: it is the code that runs
    mini_inductor_aten_graph      the ATen graph we lowered         (artifact, tlparse: <name>.txt)
    mini_inductor_ir_pre_fusion   the IR buffers before fusion       (artifact)
    mini_inductor_schedule        the fused groups and refused pairs (artifact)

torch decides whether anything is written (TORCH_TRACE; recent torch also writes the trace under
torch_compile_debug/tlparse/ for TORCH_COMPILE_DEBUG=1); the payloads are made only then. The ATen
graph is also in the trace as AOT autograd's own `aot_*_graph` entry.
"""
from __future__ import annotations

import logging
import os
from typing import Any, Callable

log = logging.getLogger("mini_inductor.debug")
output_code_log = logging.getLogger("mini_inductor.output_code")


def _trace_structured() -> Callable[..., None] | None:
    """torch._logging.trace_structured (public name since torch 2.2); None on a torch without it."""
    import torch._logging
    return getattr(torch._logging, "trace_structured", None)


def _emit(name: str, metadata: Callable[[], Any], payload: Callable[[], Any]) -> None:
    emit = _trace_structured()
    if emit is None:
        return
    try:
        emit(name, metadata_fn=metadata, payload_fn=payload)
    except Exception as e:  # noqa: BLE001  (a debug trace never fails a compile)
        log.warning("mini_inductor: cannot write %s to torch's structured trace (%s: %s)", name, type(e).__name__, e)


def output_code(graph: str, source: str, path: str | None, cached_as: str | None = None) -> None:
    """Graph `graph`'s generated module on the `output_code` log and in the trace; `path`: its file (tlparse
    names its page after the file); `cached_as`: the graph it was compiled as, for a cache hit (Inductor
    shows the output code on its cache hits too)."""
    hit = f" (a cache hit; compiled as {cached_as})" if cached_as else ""
    output_code_log.debug("%s: output code%s written to %s\n%s", graph, hit, path, source)

    def metadata() -> dict[str, Any]:
        return {"filename": path, "file_path": os.path.abspath(path)} if path else {}
    _emit("inductor_output_code", metadata, lambda: source)   # its header names the graph


def _artifact(name: str, graph: str, text: Callable[[], str]) -> None:
    _emit("artifact", lambda: {"name": name, "encoding": "string"},
          lambda: f"# mini_inductor graph {graph}\n{text()}")


def graph_artifacts(trace) -> None:
    """The ATen graph, the IR before fusion and the schedule of a freshly compiled graph (a debug.trace.GraphTrace)."""
    _artifact("mini_inductor_aten_graph", trace.name, lambda: trace.aten_graph)
    _artifact("mini_inductor_ir_pre_fusion", trace.name, lambda: trace.lowered.describe() + "\n")
    _artifact("mini_inductor_schedule", trace.name, lambda: trace.schedule.describe() + "\n")

"""Debug folders: per compiled graph, everything needed to see and rerun what was generated.

Each process writes to its own run folder, so runs never overwrite each other:

    options={"debug_dir": D} (or MINI_INDUCTOR_DEBUG_DIR=D)
        D/run_<YYYY_MM_DD_HH_MM_SS_ffffff>-pid_<pid>/<graph name>/
    TORCH_COMPILE_DEBUG=1 (torch's convention; the run folder is the one Dynamo and Inductor use)
        ./torch_compile_debug/run_<...>-pid_<pid>/mini_inductor/<graph name>/
        ($TORCH_COMPILE_DEBUG_DIR/torch_compile_debug/... when that is set)
    (with both, debug_dir is the one written)

    <graph name>/                    forward_0, backward_1, inference_2, ...
        aten_graph.txt               the ATen FX graph (readable, with source lines)
        ir_pre_fusion.txt            the IR buffers before fusion
        schedule.txt                 the fused groups, freeing points and refused pairs with reasons
        output_code.py               wrapper + kernels; `python output_code.py` runs it on random inputs
        kernels/<kernel>.py          each Triton kernel as a script that runs on its own
        fusion_graph.dot             the fused graph and the refused fusions (fusion_graph.svg too when
                                     Graphviz's `dot` is installed)

The first graph written tells the user, once per run folder, where it went (a warning on the
`mini_inductor.debug` logger). Both ways compile every graph for real: the caches hold no IR.
"""
from __future__ import annotations

import datetime
import functools
import logging
import os

log = logging.getLogger("mini_inductor.debug")
_announced: set[str] = set()


def torch_compile_debug() -> bool:
    """TORCH_COMPILE_DEBUG=1, read at each compile as Inductor reads it at import."""
    return os.environ.get("TORCH_COMPILE_DEBUG", "0") == "1"


def wants_debug_files(cfg) -> bool:
    """Whether this compile writes a debug folder (and so must compile for real, past every cache)."""
    return bool(cfg.debug_dir) or torch_compile_debug()


@functools.cache
def _run_folder(root: str) -> str:
    """`root/run_<time>-pid_<pid>`: one per process and root (the same names as torch's run folders)."""
    stamp = datetime.datetime.now().strftime("%Y_%m_%d_%H_%M_%S_%f")
    return os.path.join(root, f"run_{stamp}-pid_{os.getpid()}")


def _torch_run_folder() -> str:
    """The run folder TORCH_COMPILE_DEBUG=1 gives Dynamo and Inductor (torch._dynamo.utils.get_debug_dir)."""
    try:
        from torch._dynamo.utils import get_debug_dir
        return get_debug_dir()
    except (ImportError, AttributeError):   # a torch without it: the same layout, built here
        import torch._dynamo.config as dynamo_config
        root = getattr(dynamo_config, "debug_dir_root", None) or os.path.join(os.getcwd(), "torch_compile_debug")
        return _run_folder(root)


def debug_root(cfg) -> str | None:
    """Where this compile's graph folders go; None when no debug folder is wanted."""
    if cfg.debug_dir:
        return _run_folder(os.path.abspath(cfg.debug_dir))
    if torch_compile_debug():
        return os.path.join(_torch_run_folder(), "mini_inductor")
    return None


def dump_graph(root: str, trace) -> str:
    """Write the debug files of one compiled graph (a debug.trace.GraphTrace) to `root/<graph>/`; the folder."""
    folder = os.path.join(root, trace.name)
    os.makedirs(os.path.join(folder, "kernels"), exist_ok=True)
    files = {
        "aten_graph.txt": trace.aten_graph,
        "ir_pre_fusion.txt": trace.lowered.describe() + "\n",
        "schedule.txt": trace.schedule.describe() + "\n",
        "output_code.py": trace.generated.source,
    }
    try:
        files.update(_kernels_and_picture(trace))
    except Exception as e:  # noqa: BLE001  (the main files are still written; a debug folder never fails a compile)
        log.warning("mini_inductor: %s: kernel scripts and fusion picture not written to the debug folder (%s: %s)",
                    trace.name, type(e).__name__, e)
    for fname, text in files.items():
        with open(os.path.join(folder, fname), "w") as f:
            f.write(text)
    if root not in _announced:
        _announced.add(root)
        log.warning("mini_inductor: debug files of this run in %s (a folder per compiled graph)", root)
    log.info("%s: debug files in %s", trace.name, folder)
    return folder


def _kernels_and_picture(trace) -> dict[str, str]:
    """kernels/<kernel>.py and fusion_graph.dot (+ .svg): made by the explain report's code."""
    from .explain import kernel_scripts
    from .graphviz import render_svg, to_dot
    from .report import graph_report

    files = {os.path.join("kernels", name): text for name, text in kernel_scripts(trace).items()}
    dot = to_dot(graph_report(trace), trace)
    files["fusion_graph.dot"] = dot
    svg = render_svg(dot)
    if svg is not None:
        files["fusion_graph.svg"] = svg
    return files

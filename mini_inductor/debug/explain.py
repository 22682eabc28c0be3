"""What `mini-inductor explain` and `dump` do: run a workload under mini_inductor and keep its traces.

    traces, timings = run_example("softmax_chain")
    traces, timings, ending = run_script("train.py", ["--steps", "1"])   # ending: how the script stopped
    reports = build_reports(traces, timings)           # graph_report + node details + times; traces.eager
    write_reports(reports, traces, out_dir)               # report.json, <graph>.dot/.svg, report.html
    write_dump(traces, out_dir)                           # per graph: ATen graph, IR, kernels as scripts
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import runpy
import sys
import traceback
import warnings
from typing import Any, Sequence

import torch

from . import trace as debug_trace
from .graphviz import render_svg, to_dot
from .html import graph_section, html_page
from .report import graph_report
from .why import node_details


def _device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def run_example(name: str, dtype: torch.dtype = torch.float32, profile: bool = True):
    """Compile and run a built-in example once (no grad); returns (traces, kernel timings in ms or {})."""
    import mini_inductor  # noqa: F401  (registers the backend)
    from ..examples import EXAMPLES

    model, inputs = EXAMPLES[name](_device(), dtype)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="mini_inductor")
    with debug_trace.capture() as traces, torch.no_grad():
        compiled(*inputs)
    timings = {}
    if profile and _device() == "cuda":
        with torch.no_grad():
            timings = kernel_times_ms(lambda: compiled(*inputs))
    return traces, timings


@dataclasses.dataclass(frozen=True)
class ScriptEnding:
    """How a script run by explain / dump stopped, when not by reaching its end."""

    exit_code: int | str | None = None   # sys.exit's argument
    error: str = ""                      # 'ValueError: bad shape' for an exception
    where: str = ""                      # the user's line it was raised at, 'File "t.py", line 9, in main: code'
    traceback: str = ""                  # the exception's traceback from the script's frame on
    compile_error: str = ""              # a mini_inductor compile error in its chain: 'CodegenError in the
                                         # codegen stage of graph inference_0'

    @property
    def failed(self) -> bool:
        return bool(self.error) or self.exit_code not in (None, 0)

    def describe(self) -> str:
        if self.error:
            return f"the script raised {self.error}" + (f"\n  at {self.where}" if self.where else "")
        return f"the script called sys.exit({self.exit_code!r})"


def run_script(path: str, argv: Sequence[str] = (), force: bool = False):
    """Run a user script with mini_inductor as the backend of its torch.compile calls.

    Returns (traces, kernel times in ms per launch, measured on a GPU; {} on the CPU, ending): the
    traces of every graph compiled before the script ended, also when it called sys.exit or raised;
    `ending` is None when it ran to its end, else a ScriptEnding.
    Calls that name no backend (Inductor's default) get mini_inductor; with `force`, every call does.
    The script runs as `python path` runs it: as __main__, with sys.argv [path, *argv] and its folder
    first on sys.path (so that it imports the modules beside it).
    """
    import mini_inductor  # noqa: F401
    original = torch.compile

    def compile_with_mini_inductor(model=None, **kwargs):
        backend = kwargs.get("backend", "inductor")
        ours = backend == "mini_inductor" or backend is mini_inductor.backend   # its options are ours: kept
        if not ours and (force or backend == "inductor"):
            if kwargs.get("options"):
                name = backend if isinstance(backend, str) else getattr(backend, "__name__", repr(backend))
                warnings.warn(f"mini_inductor explain: dropping the options of backend {name!r}: "
                              f"{sorted(kwargs['options'])}", stacklevel=2)   # at the script's torch.compile
                kwargs.pop("options")
            kwargs["backend"] = "mini_inductor"
        return original(model, **kwargs)

    saved_argv, saved_path = sys.argv, list(sys.path)
    sys.argv = [path, *argv]
    sys.path.insert(0, os.path.dirname(os.path.realpath(path)))
    torch.compile = compile_with_mini_inductor
    timings: dict[str, float] = {}
    try:
        with debug_trace.capture() as traces:
            if torch.cuda.is_available():
                # kernel times over the whole run, per launch (the script's first calls compile)
                from torch.profiler import ProfilerActivity, profile
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    ending = _run_path(path)
                    torch.cuda.synchronize()
                timings = _per_launch_ms(prof)
            else:
                ending = _run_path(path)
    finally:
        torch.compile = original
        sys.argv = saved_argv
        sys.path[:] = saved_path
    return traces, timings, ending


def _run_path(path: str) -> ScriptEnding | None:
    """Run the script as __main__; a sys.exit or an exception ends it, not explain."""
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as e:
        return ScriptEnding(exit_code=e.code)
    except Exception as e:  # noqa: BLE001  (the user's error: reported with what was compiled before it)
        frames = traceback.extract_tb(e.__traceback__)
        first = next((i for i, f in enumerate(frames) if os.path.abspath(f.filename) == os.path.abspath(path)), 0)
        text = "".join(["Traceback (most recent call last):\n", *traceback.format_list(frames[first:]),
                        *traceback.format_exception_only(type(e), e)])
        return ScriptEnding(error=f"{type(e).__name__}: {e}", where=_user_line(e, path), traceback=text,
                            compile_error=_compile_error(e))
    return None


def _compile_error(error: BaseException | None) -> str:
    """The MiniInductorError that torch's BackendCompilerFailed (or any chain) wraps, in words, or ''."""
    from ..errors import MiniInductorError

    seen = set()
    while error is not None and id(error) not in seen:
        if isinstance(error, MiniInductorError):
            return f"{type(error).__name__} in the {error.stage} stage" + (f" of graph {error.graph}"
                                                                           if error.graph else "")
        seen.add(id(error))
        error = getattr(error, "inner_exception", None) or error.__cause__
    return ""


def _user_line(error: BaseException, script: str) -> str:
    """The innermost frame of the traceback in the script itself, else the innermost outside torch and us."""
    frames = traceback.extract_tb(error.__traceback__)
    ours = (os.path.dirname(os.path.dirname(__file__)), os.path.dirname(torch.__file__), "<frozen ")
    script = os.path.abspath(script)
    chosen = ([f for f in frames if os.path.abspath(f.filename) == script]
              or [f for f in frames if not f.filename.startswith(ours) and "runpy" not in f.filename])
    if not chosen:
        return ""
    f = chosen[-1]
    return f'File "{f.filename}", line {f.lineno}, in {f.name}: {(f.line or "").strip()}'


def _per_launch_ms(prof) -> dict[str, float]:
    times = {}
    for evt in prof.key_averages():
        if evt.key.startswith("triton_") and evt.count:
            total_us = getattr(evt, "device_time_total", None) or getattr(evt, "cuda_time_total", 0)
            times[evt.key] = total_us / evt.count / 1e3
    return times


def kernel_times_ms(fn, repeats: int = 10) -> dict[str, float]:
    """Mean GPU time per launch of each Triton kernel that `fn` launches (from torch.profiler)."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeats):
            fn()
        torch.cuda.synchronize()
    return _per_launch_ms(prof)


def build_reports(traces, timings: dict[str, float] | None = None) -> list[dict[str, Any]]:
    """One report per traced graph: graph_report (with each kernel's measured time and bandwidth when
    `timings` has them), plus `nodes` (node → ops, sources, reads; `why` reads them)."""
    reports = []
    for t in traces:
        report = graph_report(t, timings)
        report["nodes"] = node_details(t)
        reports.append(report)
    return reports


def write_reports(reports, traces, out_dir: str, title: str) -> dict[str, str]:
    """report.json, one .dot (and .svg with Graphviz) per graph, and report.html; returns their paths.

    report.json is a list: one report per compiled graph, then one {"graph", "ran_eagerly": {reason,
    source, hint}} per graph that ran eagerly (`traces.eager`), then one {"graph_break": {source, reason}}
    per place Dynamo split the code (`traces.graph_breaks`). The HTML draws its own pictures
    (picture.py); the .dot/.svg files are extras for Graphviz users."""
    os.makedirs(out_dir, exist_ok=True)
    paths = {"json": os.path.join(out_dir, "report.json"), "html": os.path.join(out_dir, "report.html")}
    eager = list(getattr(traces, "eager", []))
    breaks = [{"graph_break": b.as_dict()} for b in getattr(traces, "graph_breaks", [])]
    with open(paths["json"], "w") as f:
        json.dump(list(reports) + [eager_entry(e) for e in eager] + breaks, f, indent=1, default=str)
    with open(paths["html"], "w") as f:
        f.write(report_html(reports, traces, title, out_dir))
    return paths


def report_html(reports, traces, title: str, out_dir: str | None = None) -> str:
    """The HTML report page; with `out_dir`, each graph's .dot (and .svg) is written there too."""
    eager = list(getattr(traces, "eager", []))
    attention = list(getattr(traces, "attention", []))
    sections = [attention_section(attention)] if attention else []
    sections += [eager_section(eager)] if eager else []
    breaks = list(getattr(traces, "graph_breaks", []))
    sections += [graph_breaks_section(breaks)] if breaks else []
    for report, t in zip(reports, traces):
        dot = to_dot(report, t)
        dot_file = None
        if out_dir is not None:
            dot_file = f"{report['graph']}.dot"
            with open(os.path.join(out_dir, dot_file), "w") as f:
                f.write(dot)
            svg = render_svg(dot)
            if svg is not None:
                with open(os.path.join(out_dir, f"{report['graph']}.svg"), "w") as f:
                    f.write(svg)
        sections.append(graph_section(report, dot, None, t.generated.kernel_sources, dot_file=dot_file))
    return html_page(title, sections)


def eager_entry(note) -> dict[str, Any]:
    """A graph that ran eagerly, as report.json lists it."""
    return {"graph": note.name, "ran_eagerly": {"reason": note.reason, "source": note.source, "hint": note.hint}}


def eager_section(notes) -> str:
    """The HTML report's section on the graphs that ran eagerly: name, reason, the user's line, what to do."""
    from html import escape

    rows = "".join(f"<tr><td><code>{escape(n.name)}</code></td><td>{escape(n.reason)}</td>"
                   f"<td>{escape(n.source)}</td><td>{escape(n.hint)}</td></tr>" for n in notes)
    return ('<h2 id="ran-eagerly">Graphs run eagerly</h2><p>mini_inductor generated no code for these graphs: '
            'they ran as their ATen ops.</p><table class="eager"><tr><th>graph</th><th>reason</th>'
            f'<th>source</th><th>to compile it</th></tr>{rows}</table>')


def graph_breaks_section(breaks) -> str:
    """The HTML report's section on Dynamo's graph breaks: the user's line and Dynamo's reason."""
    from html import escape

    rows = "".join(f"<tr><td>{escape(b.source)}</td><td>{escape(b.reason)}</td></tr>" for b in breaks)
    return ('<h2 id="graph-breaks">Graph breaks</h2><p>Dynamo ended a graph at each of these lines and started '
            'another (<code>TORCH_LOGS=graph_breaks</code> adds its hints).</p><table class="eager"><tr>'
            f'<th>source</th><th>reason</th></tr>{rows}</table>')


def attention_section(records) -> str:
    """The HTML report's section on the attention found in Dynamo's graphs (attention/match.py)."""
    from html import escape

    from ..metrics import attention_summary

    rows = "".join(f"<tr><td><code>{escape(r.graph)}</code></td><td><code>{escape(r.node)}</code></td>"
                   f"<td>{escape(r.target or 'near miss')}</td>"
                   f"<td><code>{escape(r.mod if r.target else r.reason)}</code>"
                   + (f"<br>{escape(r.data)}" if r.target and r.data else "") + f"</td><td>{escape(r.shapes)}</td>"
                   f"<td>{escape(r.source)}</td></tr>" for r in records)
    return (f'<h2 id="attention">Attention</h2><p>{escape(attention_summary(records))}: each attention written '
            'out in the model became one call (SDPA, or the flash-attention op with the modification '
            'inlined), or stayed as it was, for the reason given.</p><table class="attention"><tr><th>graph</th>'
            '<th>node</th><th>call</th><th>modification, or why not replaced</th><th>shapes</th>'
            f'<th>source</th></tr>{rows}</table>')


def load_reports(path: str) -> list[dict[str, Any]]:
    """The compiled graphs' reports of an explain folder or report.json (graphs that ran eagerly and
    graph breaks left out)."""
    if os.path.isdir(path):
        path = os.path.join(path, "report.json")
    with open(path) as f:
        return [r for r in json.load(f) if "ran_eagerly" not in r and "graph_break" not in r]


# ─── dump ───────────────────────────────────────────────────────────────────────────────────────

_KERNEL_SCRIPT = '''\
# Kernel {name} of graph {graph}, on its own: `python {file}` runs it on random inputs and times it
# on a CUDA GPU. Without a GPU, run it in Triton's interpreter (slow): `TRITON_INTERPRET=1 python {file}`.
import os
import sys
import time

import torch

if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
    sys.exit("{file}: no CUDA GPU is visible. To run this kernel on the CPU in Triton's interpreter, "
             "set TRITON_INTERPRET=1: `TRITON_INTERPRET=1 python {file}`")
import triton
import triton.language as tl
from triton.language.extra import libdevice
from mini_inductor.runtime.interpreter import install as _install_interpreter_shims

_install_interpreter_shims()
from mini_inductor.runtime import triton_helpers  # noqa: E402
from mini_inductor.runtime.example_inputs import random_strided  # noqa: E402
from mini_inductor.runtime.scratch import scratch_allocator  # noqa: E402

scratch_allocator()   # (kernels that take global scratch memory: TMA descriptors)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

{source}

{sizes}ARGS = {specs}


def make_args(seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [random_strided(size, stride, dtype, DEVICE, gen) for size, stride, dtype in ARGS]


def run(args):
    {launch}


if __name__ == "__main__":
    args = make_args()
    run(args)
    sync = torch.cuda.synchronize if DEVICE == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    for _ in range(10):
        run(args)
    sync()
    print(f"{name}: {{(time.perf_counter() - start) / 10 * 1e3:.3f}} ms per launch")
'''


def _layouts(lowered) -> dict[str, tuple]:
    from ..lowering.symbolic import hint   # (a dynamic graph's layouts at its traced sizes)
    found = {}
    for b in list(lowered.buffers) + [i for i in lowered.inputs if i is not None]:
        lay = getattr(b, "layout", None)
        if lay is not None:
            found[b.name] = ([hint(s) for s in lay.size], [hint(s) for s in lay.stride], lay.dtype)
    for name, t in lowered.constants.items():
        found[name] = (list(t.shape), list(t.stride()), t.dtype)
    return found


def kernel_scripts(t) -> dict[str, str]:
    """Each kernel of a traced graph as a standalone script (file name → source); a dynamic graph's at
    its traced sizes, its size symbols set to them at the top."""
    from ..lowering import symbolic
    with symbolic.using(getattr(t, "shapes", None)):
        return _kernel_scripts(t)


def _kernel_scripts(t) -> dict[str, str]:
    from ..lowering import symbolic
    layouts = _layouts(t.lowered)
    shapes = symbolic.current()
    sizes = "".join(f"{s} = {int(v)}   # the traced size\n" for s, v in sorted(shapes.hints.items(), key=str)
                    if s in shapes.known())
    scripts = {}
    for m in re.finditer(r"^\s*(triton_\w+)(\[\(.*?\)\])\((.*)\)\s*$", t.generated.source, re.M):
        name, grid, arglist = m.group(1), m.group(2), m.group(3)
        if name not in t.generated.kernel_sources:   # a TMA template's pointer-load twin: not a kernel of its own
            continue
        parts = [a.strip() for a in arglist.split(",")]
        buffers = [p for p in parts if re.fullmatch(r"[A-Za-z_]\w*", p) and p in layouts]
        rest = [p for p in parts if p not in buffers]
        launch = f"{name}{grid}(*args, {', '.join(rest)})"
        specs = "[\n" + "".join(f"    ({layouts[b][0]}, {layouts[b][1]}, {layouts[b][2]}),  # {b}\n"
                                for b in buffers) + "]"
        fname = f"{name}.py"
        scripts[fname] = _KERNEL_SCRIPT.format(name=name, graph=t.name, file=fname, specs=specs, launch=launch,
                                               source=t.generated.kernel_sources[name].rstrip(), sizes=sizes)
    return scripts


def write_dump(traces, out_dir: str) -> list[str]:
    """Per graph: aten_graph.txt, ir_pre_fusion.txt, ir_post_fusion.txt, output_code.py, kernels/*.py."""
    folders = []
    for t in traces:
        folder = os.path.join(out_dir, t.name)
        os.makedirs(os.path.join(folder, "kernels"), exist_ok=True)
        files = {"aten_graph.txt": t.aten_graph, "ir_pre_fusion.txt": t.lowered.describe() + "\n",
                 "ir_post_fusion.txt": t.schedule.describe() + "\n", "output_code.py": t.generated.source}
        files.update({os.path.join("kernels", k): v for k, v in kernel_scripts(t).items()})
        for fname, text in files.items():
            with open(os.path.join(folder, fname), "w") as f:
                f.write(text)
        folders.append(folder)
    return folders

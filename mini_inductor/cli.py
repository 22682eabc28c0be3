"""`mini-inductor` / `python -m mini_inductor`: the command line.

    mini-inductor list                                   built-in examples
    mini-inductor demo [--example NAME] [--dtype D]     compile an example, check it, show the kernels
    mini-inductor explain (--example NAME | SCRIPT.py [-- ARGS])   what was fused, what not and why
    mini-inductor why GRAPH NODE_A NODE_B [--report DIR]            one pair's fusion decision
    mini-inductor dump (--example NAME | SCRIPT.py) --out DIR       graphs, IR and kernels as scripts
    mini-inductor --version

Each subcommand is a `Command` in COMMANDS: a name, one line of help, a function adding its
arguments and a function running it that returns the exit code. Add one by appending to COMMANDS.
This module imports neither torch nor the compiler at import time: the `mini-inductor` entry
(mini_inductor_cli.py) runs it without the package's __init__, so --help, --version, list and why
answer at once; a command that compiles runs the package's __init__ first (load_package).
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import os
import sys
import time
from typing import Callable, Sequence

DTYPES = ("float32", "float16", "bfloat16")
# The built-in examples (mini_inductor/examples.py, which imports torch), named here so that `list`
# and --help need no torch; tests/cli checks that the two agree.
EXAMPLES = {
    "transformer_block": "pre-norm GPT block: LayerNorm, causal SDPA attention, GELU MLP",
    "mlp": "stack of Linear → LayerNorm → GELU layers",
    "softmax_chain": "pointwise ops around a softmax; the smallest example",
}
DEFAULT_EXAMPLE = "transformer_block"


class CliError(Exception):
    """A user error the command reports in one line (no traceback), exiting with `code`."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


def load_package() -> None:
    """Run mini_inductor's __init__ (it registers the backend) where the light entry left it undone."""
    package = sys.modules.get("mini_inductor")
    if package is not None and getattr(package, "_init_deferred", False):
        del package._init_deferred
        package.__spec__.loader.exec_module(package)
    import mini_inductor  # noqa: F401
# (atol, rtol) for comparing compiled output with eager: Triton computes fp16/bf16 in fp32 and
# rounds once, eager rounds after every op, so low precision needs room for a few ulps.
TOLERANCES = {"float32": (1e-3, 1e-3), "float16": (1e-2, 1e-2), "bfloat16": (5e-2, 5e-2)}


class Output:
    """Lines, headings and tables: rich when stdout is a terminal, plain aligned text otherwise."""

    def __init__(self, rich_console=None, file=None):
        self.console = rich_console
        self.file = file     # plain output goes here (None: stdout)

    @classmethod
    def for_stdout(cls) -> "Output":
        if sys.stdout.isatty():
            try:
                from rich.console import Console
            except ImportError:
                return cls()
            return cls(Console())
        return cls()

    def line(self, text: str = "") -> None:
        if self.console is None:
            print(text, file=self.file or sys.stdout, flush=True)
        else:
            self.console.print(text, markup=False, highlight=False, soft_wrap=True)

    def heading(self, text: str) -> None:
        if self.console is None:
            print(f"\n{text}\n{'-' * len(text)}", file=self.file or sys.stdout, flush=True)
        else:
            self.console.rule(text)

    def table(self, title: str, columns: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
        """Never cuts a cell: the first column (a kernel's or node's name, which users copy) keeps its
        full width on one line; narrow terminals wrap the other columns, or the table grows wider."""
        rows = [[str(cell) for cell in row] for row in rows]
        if self.console is not None:
            from rich.table import Table

            table = Table(title=title, title_justify="left")
            for i, column in enumerate(columns):
                if i == 0:
                    width = max([len(column), *(len(r[0]) for r in rows)])
                    table.add_column(column, no_wrap=True, min_width=width, overflow="ignore")
                else:
                    table.add_column(column, overflow="fold")
            for row in rows:
                table.add_row(*row)
            self.console.print(table, crop=False)
            return
        widths = [max(len(c), *(len(r[i]) for r in rows)) if rows else len(c)
                  for i, c in enumerate(columns)]
        out = self.file or sys.stdout
        print(f"\n{title}", file=out, flush=True)
        for row in [list(columns), ["-" * w for w in widths], *rows]:
            print("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip(), file=out, flush=True)


@dataclasses.dataclass(frozen=True)
class Command:
    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# ---------------------------------------------------------------------------------------- list

def _add_list_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run_list(args: argparse.Namespace) -> int:
    Output.for_stdout().table("Built-in examples", ["name", "description"], [list(e) for e in EXAMPLES.items()])
    return 0


# ---------------------------------------------------------------------------------------- demo

def _add_demo_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--example", default=DEFAULT_EXAMPLE, choices=sorted(EXAMPLES),
                        help=f"which built-in example to compile (default: {DEFAULT_EXAMPLE})")
    parser.add_argument("--dtype", default="float32", choices=DTYPES,
                        help="dtype of the weights and inputs (default: float32)")
    parser.add_argument("--report", default="mini_inductor_report",
                        help="folder for the fusion report (default: %(default)s)")


def run_demo(args: argparse.Namespace) -> int:
    load_package()
    import torch
    from mini_inductor.examples import EXAMPLES as BUILDERS

    out = Output.for_stdout()
    example = BUILDERS[args.example]
    dtype = getattr(torch, args.dtype)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    out.line(f"mini_inductor demo: {example.name} on {device}, {args.dtype} — {example.description}")
    model, inputs = example(device, dtype)
    out.line("inputs: " + ", ".join(f"{tuple(t.shape)}" for t in inputs))

    if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        out.line("mini_inductor generates Triton code for CUDA GPUs. No GPU is visible; to run the "
                 "generated kernels on the CPU in Triton's interpreter, set TRITON_INTERPRET=1 "
                 "(`make demo` does). Running the example eagerly instead.")
        with torch.no_grad():
            result = model(*inputs)
        out.line(f"eager output: {_describe(result)}")
        return 0
    if device == "cpu":
        out.line("no GPU visible: the Triton kernels run in Triton's interpreter (TRITON_INTERPRET=1), "
                 "slow but faithful")

    import torch._dynamo

    import mini_inductor  # noqa: F401  (registers the "mini_inductor" backend)
    from mini_inductor import metrics

    from mini_inductor.debug import explain, trace

    torch._dynamo.reset()
    metrics.reset()
    compiled = torch.compile(model, backend="mini_inductor")
    with torch.no_grad(), trace.capture() as traces:
        expected = model(*inputs)
        start = time.perf_counter()
        actual = compiled(*inputs)
        if device == "cuda":
            torch.cuda.synchronize()
        first_call = time.perf_counter() - start
    out.line(f"first call (compile + run): {first_call:.2f} s")

    graphs = list(metrics.compiled_graphs)
    _print_fusion_summary(out, graphs)
    _print_kernels(out, graphs)

    ok = _report_accuracy(out, actual, expected, args.dtype)
    timings = {}
    if device == "cuda":
        _report_speedup(out, model, compiled, inputs)
        _print_cudagraphs(out)
        with torch.no_grad():
            timings = explain.kernel_times_ms(lambda: compiled(*inputs))
    paths = explain.write_reports(explain.build_reports(traces, timings), traces, args.report,
                                  f"mini_inductor demo: {example.name} ({args.dtype})")
    out.line(f"\nfusion report (what was fused, what not and why): {paths['html']}")
    return 0 if ok else 1


def _print_cudagraphs(out: Output) -> None:
    """What the CUDA-graph trees did during the demo's calls (mini_inductor.cudagraphs.stats())."""
    from mini_inductor import cudagraphs

    s = cudagraphs.stats()
    if "replays" not in s:
        out.line("\nCUDA graphs: not used" + (f" ({'; '.join(s['skip_reasons'])})" if s["skip_reasons"] else ""))
        return
    out.line(f"\nCUDA graphs: {s['warmups']} warmup runs, {s['recordings']} recordings, {s['replays']} replays, "
             f"{s['recorded_non_static_inputs']} inputs copied per replay, {s['skips']} skips; tree: {s['tree']}")
    for reason in s["skip_reasons"]:
        out.line(f"  {reason}")


def _describe(result) -> str:
    import torch

    if isinstance(result, torch.Tensor):
        return f"shape {tuple(result.shape)}, {result.dtype}"
    return type(result).__name__


def _print_fusion_summary(out: Output, graphs) -> None:
    out.heading("Fusion summary")
    if not graphs:
        out.line("no graph reached mini_inductor")
    for rec in graphs:
        out.line(rec.summary())
        if rec.extern_calls:
            counts = collections.Counter(rec.extern_calls)
            out.line("  extern calls: " + ", ".join(f"{op} x{n}" for op, n in counts.items()))
        if rec.fallback_ops:
            out.line("  fallback ops: " + ", ".join(f"{op} x{n}" for op, n in rec.fallback_ops.items()))
        if rec.source_path:
            out.line(f"  code: {rec.source_path}")


def _print_kernels(out: Output, graphs) -> None:
    rows = [[name, rec.name, i] for rec in graphs for i, name in enumerate(rec.kernel_names)]
    if rows:
        out.table("Generated Triton kernels", ["kernel", "graph", "#"], rows)
    else:
        out.line("\nno Triton kernels were generated")


def _report_accuracy(out: Output, actual, expected, dtype_name: str) -> bool:
    import torch
    from torch.utils._pytree import tree_leaves

    atol, rtol = TOLERANCES[dtype_name]
    actual_leaves, expected_leaves = tree_leaves(actual), tree_leaves(expected)
    ok = len(actual_leaves) == len(expected_leaves)
    max_err = 0.0
    for a, e in zip(actual_leaves, expected_leaves):
        if not isinstance(e, torch.Tensor):
            ok = ok and a == e
            continue
        if a.shape != e.shape or a.dtype != e.dtype:
            out.line(f"output mismatch: compiled {tuple(a.shape)} {a.dtype}, eager {tuple(e.shape)} {e.dtype}")
            ok = False
            continue
        if e.numel():
            max_err = max(max_err, (a.double() - e.double()).abs().max().item())
        ok = ok and torch.allclose(a, e, atol=atol, rtol=rtol, equal_nan=True)
    out.line(f"\nmax abs error vs eager: {max_err:.3g} (atol={atol:g}, rtol={rtol:g}): "
             + ("PASS" if ok else "FAIL"))
    return ok


def _report_speedup(out: Output, model, compiled, inputs) -> None:
    import torch

    from .timing import bench

    def gpu_ms(fn: Callable[[], object]) -> float:
        return bench(fn, warmup=10, samples=50, flush_l2=True, device="cuda").gpu_ms

    with torch.no_grad():
        eager_ms = gpu_ms(lambda: model(*inputs))
        compiled_ms = gpu_ms(lambda: compiled(*inputs))
    out.line(f"speedup over eager: {eager_ms / compiled_ms:.2f}x (eager {eager_ms:.3f} ms, mini_inductor "
             f"{compiled_ms:.3f} ms; GPU time, median of 50 calls after warmup, L2 flushed before each)")



# ------------------------------------------------------------------------------ explain / dump

def _add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("script", nargs="?", help="a Python script that calls torch.compile")
    parser.add_argument("--example", choices=sorted(EXAMPLES), help="a built-in example instead of a script")
    parser.add_argument("--list", action="store_true", help="list the built-in examples")
    parser.add_argument("--force", action="store_true",
                        help="use mini_inductor even where the script names another backend")
    parser.add_argument("--dtype", default="float32", choices=DTYPES, help="dtype for --example")


def _add_explain_arguments(parser: argparse.ArgumentParser) -> None:
    _add_workload_arguments(parser)
    parser.add_argument("--out", default="mini_inductor_report",
                        help="folder for report.json, the pictures and report.html (default: %(default)s)")


def _add_dump_arguments(parser: argparse.ArgumentParser) -> None:
    _add_workload_arguments(parser)
    parser.add_argument("--out", required=True, help="folder to write the dump to")


def _ensure_codegen_can_run(args: argparse.Namespace, out: Output) -> None:
    """Without a GPU, generated kernels need Triton's interpreter, which must be on before triton is
    imported (importing mini_inductor imports it): so start this command again with it on."""
    import torch

    if not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1":
        out.line("no GPU visible: running the generated kernels in Triton's interpreter (TRITON_INTERPRET=1)")
        sys.stdout.flush()
        env = dict(os.environ, TRITON_INTERPRET="1")
        os.execve(sys.executable, [sys.executable, "-m", "mini_inductor", *args.argv], env)


def _run_workload(args: argparse.Namespace, out: Output):
    """(traces, timings, title, ending) of the script or example; ending says how a script stopped early."""
    if args.list:
        run_list(args)
        return None
    if bool(args.example) == bool(args.script):
        raise CliError("give either a SCRIPT.py or --example NAME (see --list)")
    if args.script and not os.path.isfile(args.script):
        raise CliError(f"no such script: {args.script}")
    load_package()
    _ensure_codegen_can_run(args, out)
    import torch

    from mini_inductor.debug import explain

    if args.example:
        traces, timings = explain.run_example(args.example, getattr(torch, args.dtype))
        return traces, timings, f"{args.example} ({args.dtype})", None
    traces, timings, ending = explain.run_script(args.script, args.script_args, force=args.force)
    return traces, timings, os.path.basename(args.script), ending


NOTHING_COMPILED = ("no graph was compiled by mini_inductor: does the script call torch.compile (with no backend, "
                    "or backend=\"mini_inductor\"; --force takes any other backend) and then the compiled function?")


def nothing_compiled(ending) -> str:
    """Why no graph is in the report: the first compile failed (the script's error says where), or none ran."""
    if ending is not None and ending.compile_error:
        return (f"no graph was compiled: mini_inductor raised {ending.compile_error} "
                "(the script's error, below, names the op and why)")
    return NOTHING_COMPILED


def _say_how_it_ended(out: Output, ending, covered: str | None = "the report") -> int:
    """Report a script's sys.exit or exception (and that `covered`, what was written, holds the graphs
    compiled before it); explain's exit code: the script's failure, or 0."""
    if ending is None:
        return 0
    if ending.traceback:
        print(ending.traceback, file=sys.stderr, end="", flush=True)
    out.line(f"\n{ending.describe()}" + (f"; {covered} covers the graphs compiled before that." if covered else ""))
    if not ending.failed:
        return 0
    return ending.exit_code if isinstance(ending.exit_code, int) else 1


def run_explain(args: argparse.Namespace) -> int:
    from mini_inductor.debug import explain

    out = Output.for_stdout()
    ran = _run_workload(args, out)
    if ran is None:
        return 0
    traces, timings, title, ending = ran
    eager = list(getattr(traces, "eager", []))
    per_size = list(getattr(traces, "per_size", []))
    if not traces and not eager:
        out.line(nothing_compiled(ending))
        _say_how_it_ended(out, ending, covered=None)
        return 1
    reports = explain.build_reports(traces, timings)
    print_explain(out, reports, eager, per_size, list(getattr(traces, "attention", [])),
                  list(getattr(traces, "graph_breaks", [])))
    paths = explain.write_reports(reports, traces, args.out, f"mini_inductor explain: {title}")
    from mini_inductor.debug.graphviz import GRAPHVIZ_HINT, render_svg

    if traces and render_svg("digraph { a }") is None:
        out.line(GRAPHVIZ_HINT)
    out.line(f"\nreport: {paths['html']}  (data: {paths['json']})")
    return _say_how_it_ended(out, ending)


def print_explain(out: Output, reports, eager, per_size=(), attention=(), graph_breaks=()) -> None:
    """What explain prints: the attention found in Dynamo's graphs, each compiled graph's report, then
    Dynamo's graph breaks, the dynamic graphs compiled per size (the symbolic compile failed: why), then
    the graphs that ran eagerly."""
    if attention:
        _print_attention(out, attention)
    for report in reports:
        _print_report(out, report)
    if graph_breaks:
        from mini_inductor.debug.why import short_source

        out.table("Graph breaks (Dynamo ended a graph here and started another; TORCH_LOGS=graph_breaks "
                  "shows the hints)", ["source", "reason"], [[short_source(b.source), b.reason] for b in graph_breaks])
    if per_size:
        from mini_inductor.debug.why import short_source

        out.table("Dynamic graphs compiled per size (not once for every size)", ["graph", "reason", "source"],
                  [[e.name, e.reason, short_source(e.source)] for e in per_size])
    if eager:
        from mini_inductor.debug.why import short_source

        out.table("Graphs run eagerly (no generated code)", ["graph", "reason", "source", "to compile it"],
                  [[e.name, e.reason, short_source(e.source), e.hint] for e in eager])


def _print_attention(out: Output, records) -> None:
    from mini_inductor.debug.why import short_source
    from mini_inductor.metrics import attention_summary

    out.heading(attention_summary(records))
    out.table("Attention in Dynamo's graphs (attention/match.py, flex.py)",
              ["graph", "node", "call", "modification, or why not replaced", "source"],
              [[r.graph, r.node, r.target or "near miss",
                (r.mod + (f" ({r.data})" if r.data else "")) if r.target else r.reason, short_source(r.source)]
               for r in records])


def _print_report(out: Output, report) -> None:
    from mini_inductor.debug.boundaries import boundary_rows, never_fuse_line, plural
    from mini_inductor.debug.why import short_source

    out.heading(f"Graph {report['graph']}" + (" (cache hit: decisions of the original compile)"
                                              if report["cache_hit"] else ""))
    # (a MultiOutput picks a result of the call before it: no call of its own)
    calls = sum(1 for e in report["externs"] if e["op"] != "MultiOutput") + \
        sum(1 for k in report["kernels"] if k.get("cublas"))   # cuBLAS + its epilogue
    picks = sum(1 for e in report["externs"] if e["op"] == "MultiOutput")
    out.line(f"{plural(report['nodes_before_fusion'], 'node')} → {plural(report['groups'], 'group')}: "
             f"{plural(len(report['kernels']), 'Triton kernel')}, {plural(calls, 'extern call')}"
             + (f", {plural(picks, 'pick')} of a call's results (no code)" if picks else ""))
    if report.get("stage_seconds"):
        out.line("compile time: " + ", ".join(f"{k} {v:.2f} s" for k, v in report["stage_seconds"].items()))
    if report.get("dynamic_sizes"):
        out.line("dynamic: one compile for every size; " + ", ".join(report["dynamic_sizes"]))
    if report.get("layout"):
        out.line(f"layout: {report['layout']}")
    for line in report.get("matmuls", []):
        out.line(f"matmul {line}")

    def timing(k):
        if not k.get("time_ms"):
            return "", ""
        return f"{k['time_ms'] * 1e3:.1f}", f"{k['gb_per_s']:.0f}"
    timed = any(k.get("time_ms") for k in report["kernels"])   # (kernels are timed on a GPU only)
    out.table("Kernels", ["kernel", "fused nodes", "ATen ops", "source", "bytes r/w",
                          *(["µs", "GB/s"] if timed else [])],
              [[k["name"], " ".join(k["nodes"]), ", ".join(k["ops"]),
                (short_source(k["sources"][0]) if k["sources"] else ""),
                f"{k['bytes_read']}/{k['bytes_written']}", *(timing(k) if timed else ())] for k in report["kernels"]])

    rows = boundary_rows(report)
    if rows:
        out.table("Kernel boundaries (two generated kernels that could have been one)",
                  ["#", "producer", "consumer", "why not one kernel", "bytes written + read back", "time"], rows)
    else:
        out.line("\nKernel boundaries: none (no two generated kernels could have been one)")
    if report["never_fuse"].get("refused"):
        out.line(never_fuse_line(report["never_fuse"]))
    if rows:
        out.line(f"time: the bytes at {report['bandwidth']['note']}")
    if report["externs"]:
        out.table("Extern calls", ["buffer", "op"], [[e["name"], e["op"]] for e in report["externs"]
                                                     if e["op"] != "MultiOutput"])
    if report["fallbacks"]:
        out.table("Fallback ops", ["op", "count", "why"], [[f["op"], f["count"], f["why"]] for f in report["fallbacks"]])
    mem = report["memory"]
    if any(v is not None for v in mem.values()):
        out.line("memory: " + ", ".join(f"{k} = {v}" for k, v in mem.items() if v is not None))
    if report["partitions"]:
        on_cpu = (report.get("device") or "").startswith("cpu")
        out.table("Partitions" + (" (what CUDA graphs would capture; on the CPU none run, and a CPU call such as "
                                  "a matmul ends a partition where its CUDA call would not)" if on_cpu else ""),
                  ["partition", "cudagraph-safe", "reason"],
                  [[p.get("name"), p.get("safe"), p.get("reason") or ""] for p in report["partitions"]])
    overlap = report.get("overlap") or {}
    if overlap.get("collectives"):
        out.table("Collectives (issued early, waited for late)", ["collective", "op", "issued at", "waited at",
                                                                  "nodes that run meanwhile"],
                  [[c["collective"], c["op"], c["issued_at"], c["waited_at"], " ".join(c["overlapped"]) or "none"]
                   for c in overlap["collectives"]])


def run_dump(args: argparse.Namespace) -> int:
    from mini_inductor.debug import explain

    out = Output.for_stdout()
    ran = _run_workload(args, out)
    if ran is None:
        return 0
    traces, _, _, ending = ran
    for folder in explain.write_dump(traces, args.out):
        out.line(f"wrote {folder}")
    for e in getattr(traces, "eager", []):
        out.line(f"graph {e.name} ran eagerly (nothing to dump): {e.reason}")
    if not traces and not getattr(traces, "eager", []):
        print(f"mini-inductor dump: {nothing_compiled(ending)}", file=sys.stderr, flush=True)
    code = _say_how_it_ended(out, ending, covered="the dump" if traces else None)
    return code if traces else (code or 1)


def _add_why_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("graph", help="graph name, e.g. inference_0")
    parser.add_argument("node_a")
    parser.add_argument("node_b")
    parser.add_argument("--report", default="mini_inductor_report", help="an `explain --out` folder or report.json")


def run_why(args: argparse.Namespace) -> int:
    import json

    from mini_inductor.debug.why import UnknownNode, why

    path = os.path.join(args.report, "report.json") if os.path.isdir(args.report) else args.report
    if not os.path.isfile(path):
        raise CliError(f"no explain report at {path}: run `mini-inductor explain SCRIPT.py --out {args.report}` "
                       "first (or give its folder with --report)")
    try:
        with open(path) as f:
            reports = {r["graph"]: r for r in json.load(f) if "graph_break" not in r}
    except (ValueError, KeyError, TypeError) as e:
        raise CliError(f"{path} is not an explain report ({type(e).__name__}: {e})") from None
    report = reports.get(args.graph)
    if report is None or "kernels" not in report:
        compiled = [g for g, r in reports.items() if "kernels" in r]
        ran_eagerly = f" ran eagerly ({report['ran_eagerly']['reason']}): no fusion" if report else " is not"
        raise CliError(f"graph {args.graph}{ran_eagerly} in {path}; compiled graphs: {', '.join(compiled) or 'none'}",
                       code=1)
    try:
        print(why(report, args.node_a, args.node_b))
    except UnknownNode as e:
        raise CliError(str(e), code=1) from None
    return 0


def _add_cache_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", default=None, help="the cache dir (default: the configured one, "
                                                     "MINI_INDUCTOR_CACHE_DIR or ~/.cache/mini_inductor)")


def run_cache(args: argparse.Namespace) -> int:
    from mini_inductor.caching import describe

    if args.dir is not None and not os.path.isdir(args.dir):
        raise CliError(f"no cache dir at {args.dir}")
    print(describe(args.dir, process=False))
    return 0


# ---------------------------------------------------------------------------------------- main

COMMANDS: list[Command] = [
    Command("demo", "compile a built-in example, check it against eager, show its kernels",
            _add_demo_arguments, run_demo),
    Command("list", "list the built-in examples", _add_list_arguments, run_list),
    Command("explain", "run a script or example under mini_inductor and report what was fused and why",
            _add_explain_arguments, run_explain),
    Command("why", "why two nodes of a graph were or were not fused (from an explain report)",
            _add_why_arguments, run_why),
    Command("dump", "write each graph's ATen graph, IR, output code and kernels as standalone scripts",
            _add_dump_arguments, run_dump),
    Command("cache", "what the on-disk cache holds, kind by kind (compiled graphs, modules, kernels, ...)",
            _add_cache_arguments, run_cache),
]


def _version() -> str:
    from mini_inductor._version import __version__

    return __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mini-inductor",
        description="mini_inductor: a torch.compile backend that lowers ATen graphs to Triton kernels.")
    parser.add_argument("--version", action="version", version=f"mini-inductor {_version()}")
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        sub = subparsers.add_parser(command.name, help=command.help, description=command.help)
        command.add_arguments(sub)
        sub.set_defaults(command_spec=command)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    # everything after "--" belongs to the user's script (explain / dump)
    ours, script_args = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    args = build_parser().parse_args(ours)
    args.argv = argv
    args.script_args = script_args
    command: Command = args.command_spec
    try:
        return command.run(args)
    except CliError as e:
        print(f"mini-inductor {command.name}: error: {e}", file=sys.stderr)
        return e.code

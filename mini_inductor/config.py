"""Every option of mini_inductor in one place.

Each field has a one-line comment and can be overridden by an environment variable
``MINI_INDUCTOR_<FIELD NAME IN CAPITALS>`` read when the process starts, or per compile with
``torch.compile(m, backend="mini_inductor", options={...})``, or for a block with ``config.patch(...)``,
or from then on by assignment, as with Inductor's config: ``mini_inductor.config.max_fusion_size = 8``
(reading ``mini_inductor.config.max_fusion_size`` gives the current value). All of them go through one check (`check_option`): a value is read as the option's type (booleans also
from 1/0, true/false, yes/no, on/off), and anything else is an OptionError naming the option, the value
(and the variable) and what is valid. A bad variable stops `import mini_inductor` with that error; a
MINI_INDUCTOR_* variable that is no option's (nor in OTHER_VARIABLES) gets a warning at the first compile.

| option               | env var                          | default                          |
|----------------------|----------------------------------|----------------------------------|
| debug_dir            | MINI_INDUCTOR_DEBUG_DIR          | None (no dump)                   |
| cache_dir            | MINI_INDUCTOR_CACHE_DIR          | ~/.cache/mini_inductor           |
| fallback_on_error    | MINI_INDUCTOR_FALLBACK_ON_ERROR  | False                            |
| max_fusion_size      | MINI_INDUCTOR_MAX_FUSION_SIZE    | 64                               |
| realize_reads_threshold | MINI_INDUCTOR_REALIZE_READS_THRESHOLD | 4                      |
| realize_opcount_threshold | MINI_INDUCTOR_REALIZE_OPCOUNT_THRESHOLD | 30                 |
| persistent_reduction_limit | MINI_INDUCTOR_PERSISTENT_REDUCTION_LIMIT | 32768            |
| online_softmax       | MINI_INDUCTOR_ONLINE_SOFTMAX     | True                             |
| fusion_window        | MINI_INDUCTOR_FUSION_WINDOW      | 64                               |
| cudagraphs           | MINI_INDUCTOR_CUDAGRAPHS         | True (on CUDA)                   |
| cudagraph_skip_warmup / cudagraph_force_warmup | MINI_INDUCTOR_CUDAGRAPH_...  | False / False |
| cudagraph_rerecord_limit | MINI_INDUCTOR_CUDAGRAPH_RERECORD_LIMIT | 128                      |
| cudagraph_rerecord_on_static_change | ..._RERECORD_ON_STATIC_CHANGE | True                 |
| cudagraph_stable_inputs | MINI_INDUCTOR_CUDAGRAPH_STABLE_INPUTS | True                       |
| cudagraph_adopt_gradients | MINI_INDUCTOR_CUDAGRAPH_ADOPT_GRADIENTS | True                   |
| cudagraph_force_sync / cudagraph_slow_asserts | MINI_INDUCTOR_CUDAGRAPH_... | False / True   |
| cudagraph_dynamic_shape_warn_limit | ..._DYNAMIC_SHAPE_WARN_LIMIT | 8 (0: never)           |
| cudagraph_capture_sizes | ..._CAPTURE_SIZES ("2,5,7" or "(2,3),(4,8)") | None (every size)  |
| cudagraph_partition  | MINI_INDUCTOR_CUDAGRAPH_PARTITION | True (False: skip graphs with unsafe ops) |
| reorder_for_partitions | MINI_INDUCTOR_REORDER_FOR_PARTITIONS | True                      |
| overlap_memory_budget | MINI_INDUCTOR_OVERLAP_MEMORY_BUDGET | 2 GiB of collective results in flight (bytes; None: no limit) |
| split_reductions     | MINI_INDUCTOR_SPLIT_REDUCTIONS   | True                             |
| verify_memory_plan   | MINI_INDUCTOR_VERIFY_MEMORY_PLAN | False (the test suite turns it on) |
| graph_cache          | MINI_INDUCTOR_GRAPH_CACHE        | True                             |
| front_cache          | MINI_INDUCTOR_FRONT_CACHE        | True (read only when graph_cache is on) |
| compile_threads      | MINI_INDUCTOR_COMPILE_THREADS    | CPUs, at most 32 (0: off)        |
| compile_workers      | MINI_INDUCTOR_COMPILE_WORKERS    | True (False: kernels compile in this process's threads only) |
| max_autotune         | MINI_INDUCTOR_MAX_AUTOTUNE       | False (True under mode="max-autotune") |
| dynamo_cache         | MINI_INDUCTOR_DYNAMO_CACHE       | False (read at import: torch's caching precompile, process-wide) |
| static_launch        | MINI_INDUCTOR_STATIC_LAUNCH      | True (False: Triton's own C launchers, built with gcc) |
| conv_layout          | MINI_INDUCTOR_CONV_LAYOUT        | "auto" (CUDA fp16/bf16; other CUDA dtypes if measured faster; "channels_last"; "measure"; "off") |
| dynamic_shapes       | MINI_INDUCTOR_DYNAMIC_SHAPES     | "symbolic" ("per_size": a compile for each size; "eager") |
| attention_fusion     | MINI_INDUCTOR_ATTENTION_FUSION   | "auto" (attention written out → one call; "off") |
| attention_data_masks | MINI_INDUCTOR_ATTENTION_DATA_MASKS | True (an input holding ones(...).tril() is read as causal, under a guard; False: data) |
| matmul_templates     | MINI_INDUCTOR_MATMUL_TEMPLATES   | "auto" (CUDA: a Triton template where an epilogue fuses and the cost model prefers it; "always"; "off") |
| cublaslt_activations | MINI_INDUCTOR_CUBLASLT_ACTIVATIONS | True (relu/tanh-GELU after an addmm in cuBLASLt's epilogue; False: the addmm and a kernel, or a template) |
| matmul_tma           | MINI_INDUCTOR_MATMUL_TMA         | False (templates load 2-byte operands through TMA descriptors where their layouts allow; slower on an H200, session 31) |
"""
from __future__ import annotations

import ast
import contextlib
import dataclasses
import difflib
import operator
import os
import re
import sys
import types
import warnings
from typing import Any, Iterator

from .errors import warn_at_user_frame


def _default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mini_inductor")


def _default_compile_threads() -> int:
    return max(1, min(32, os.cpu_count() or 1))


@dataclasses.dataclass
class Config:
    # folder for per-graph dumps (ATen graph, IR, schedule, output_code.py); None: no dump
    debug_dir: str | None = None
    # where generated modules are written, keyed by a hash of their source
    cache_dir: str = dataclasses.field(default_factory=_default_cache_dir)
    # on a lowering or codegen error, run the graph eagerly with one warning instead of raising
    fallback_on_error: bool = False
    # most scheduler nodes fused into one kernel
    max_fusion_size: int = 64
    # a pointwise value read by more than this many consumers is realized into a buffer
    realize_reads_threshold: int = 4
    # a pointwise body with more ops than this is realized rather than inlined into several users
    realize_opcount_threshold: int = 30
    # reductions with at most this many elements per row keep the whole row in registers (up to 32
    # warps, at most 32 values a thread). On the H100 (benchmarks/roofline.py, fp32): a 32768-wide
    # softmax ran at 96% of copy bandwidth persistent against 70% looped; 4096-wide norm-heavy rows
    # ran 3.5x faster persistent than looped
    persistent_reduction_limit: int = 32768
    # a looped softmax computes its row max and sum(exp(x - max)) in one pass over the row
    # (codegen/online_softmax.py) instead of two
    online_softmax: bool = True
    # fusion candidates are looked for among this many neighbours of a node in the schedule order
    fusion_window: int = 64
    # CUDA-graph trees (runtime/cudagraphs/trees.py): every cudagraph-safe partition runs from a recorded
    # graph on CUDA; mode="max-autotune-no-cudagraphs" or cudagraphs=False turns them off
    cudagraphs: bool = True
    # record on the very first call (no warmup run)
    cudagraph_skip_warmup: bool = False
    # never record: every call runs eagerly inside the pool (debugging)
    cudagraph_force_warmup: bool = False
    # re-records of one function under one parent caused by moved addresses before it runs without graphs
    cudagraph_rerecord_limit: int = 128
    # a moved parameter/buffer address re-records (True) or raises "static input data pointer changed"
    cudagraph_rerecord_on_static_change: bool = True
    # inputs that arrive at the same address call after call are read in place instead of copied
    cudagraph_stable_inputs: bool = True
    # a backward's parameter gradients become `.grad` in pool memory, moved out only if still held
    # when the pool is written again (False: one batched copy out of the pool after every backward)
    cudagraph_adopt_gradients: bool = True
    # synchronize the device after every replay
    cudagraph_force_sync: bool = False
    # after each warmup, recording and checkpoint, check the pool holds exactly the tracked live outputs
    cudagraph_slow_asserts: bool = True
    # ATen ops to keep out of CUDA graphs, comma-separated (or a list): "aten.mm" (every overload) or
    # "aten.mm.default"; custom ops also as "mylib::baz" or "mylib::baz.default"
    cudagraph_unsafe_ops: str = ""
    # split a graph around its cudagraph-unsafe runs and graph the rest (True), or run the whole graph
    # without CUDA graphs, with a logged skip naming the first unsafe op (False)
    cudagraph_partition: bool = True
    # move independent cudagraph-safe work across unsafe nodes (CPU ops, syncs) so it forms fewer
    # partitions, hence fewer CUDA graphs; the moves are in the schedule and the `schedule` log
    reorder_for_partitions: bool = True
    # the overlap pass (distributed/overlap.py) moves a collective's issue earlier and its wait later
    # only while the collective results in flight across every node stay within this many bytes
    # (None: no limit)
    overlap_memory_budget: int | None = 2 * 2**30
    # raise instead of running a function without CUDA graphs (mutated inputs, re-record limit, devices)
    cudagraph_or_error: bool = False
    # warn once when one graph family has been compiled for more than this many shapes (0: never)
    cudagraph_dynamic_shape_warn_limit: int = 8
    # graph only these sizes of a graph's dynamic dims: ints (one dynamic dim) or tuples of ints (several,
    # in the order the graph takes them); other sizes, and graphs without dynamic dims, run ungraphed.
    # A graph with dynamic dims is compiled statically per listed size (runtime/cudagraphs/capture_sizes.py).
    # None: every size is graphed (and graphs with dynamic dims run eagerly, as without the option)
    cudagraph_capture_sizes: tuple | None = None
    # a reduction with few, long rows (x.sum() of a big tensor) runs as two kernels: partial results
    # over chunks of each row, then their combination (lowering/split_reduction.py)
    split_reductions: bool = True
    # check every generated wrapper's buffer lifecycles (allocated before use, freed once, outputs
    # kept) and raise a CodegenError on a flaw; tests turn it on, it costs a pass over the lines
    verify_memory_plan: bool = False
    # compiled graphs are kept under cache_dir/graphs and reused by later processes (no lowering,
    # scheduling or codegen on a warm start)
    graph_cache: bool = True
    # with graph_cache: graphs are also kept under cache_dir/front, keyed by the Dynamo graph,
    # so that a warm start skips AOT autograd too (front_cache.py); False keeps only the ATen-graph level
    front_cache: bool = True
    # threads compiling a graph's Triton kernels ahead of its first call (GPU only); 0: each kernel
    # compiles at its first launch
    compile_threads: int = dataclasses.field(default_factory=_default_compile_threads)
    # with compile_threads: those threads hand each kernel to one of as many worker processes, which
    # compile side by side (a Triton compile holds the GIL for most of its time); GPU only
    compile_workers: bool = True
    # benchmark a few block sizes / num_warps per kernel at its first call and keep the fastest
    # (on disk, under cache_dir/autotune); mode="max-autotune" turns it on; GPU only
    max_autotune: bool = False
    # keep inference graphs in Dynamo's own cache too, so that a warm start skips Dynamo's tracing
    # (dynamo_cache.py). The env var, read when mini_inductor is imported, turns on torch's process-wide
    # torch._dynamo.config.caching_precompile, whose entries are keyed on the function only (not the
    # backend or its options); options={"dynamo_cache": False} keeps one compile's graphs out of it
    dynamo_cache: bool = False
    # launch Triton kernels through torch's prebuilt launcher (torch._C._StaticCudaLauncher) where it can
    # take them (runtime/launch/static_launch.py), so that Triton builds no C launcher with gcc for them (a
    # cold start paid 0.23-0.40 s a signature); False: Triton's own launchers, as before. GPU only
    static_launch: bool = True
    # inference graphs with 2-D convolutions: give them channels-last inputs, so that cuDNN skips its
    # NCHW<->NHWC conversions (lowering/layout_opt.py). "auto": CUDA fp16/bf16 convolutions always; a
    # graph of other CUDA dtypes (fp32: TF32 by default) when its convolutions, timed at compile time in
    # both layouts with channels-last's copies, are at least 3% faster (lowering/layout_timing.py; the
    # timings are kept under cache_dir/autotune); "channels_last": every one (any device or dtype);
    # "measure": every one when measured faster (any device or dtype: the CPU tests use it); "off": none.
    # Outputs keep eager's strides. H100, ResNet-18 at batch 32, fp16, with CUDA graphs: 0.67 ms a call
    # with "auto", 1.01 ms "off"
    conv_layout: str = "auto"
    # graphs Dynamo traced with symbolic sizes, and graphs with sizes read from data (.item(), nonzero).
    # "symbolic": one compile for every size, sizes as kernel arguments (a graph it cannot take is
    # compiled per size, with a warning); "per_size": a static compile for each new size; both run in
    # CUDA-graph trees, one recording per size. "eager": run them eagerly. H100
    # (benchmarks/dynamic_shapes.py, session 21), ms per round of a 2-layer decoder over six sequence
    # lengths: symbolic 1.025, per size 1.024, Inductor reduce-overhead 1.524, eager 3.842
    dynamic_shapes: str = "symbolic"
    # attention written out in the model (matmul, score modification, softmax, matmul) becomes one call:
    # SDPA where it computes the modification exactly, else the flash-attention op (attention/match.py).
    # "auto": on; "off": the graph is left as Dynamo traced it
    attention_fusion: str = "auto"
    # an input (a registered buffer) whose data is a lower triangle of ones when the graph is compiled is
    # read as a causal mask, under a guard on the tensor (attention/match.py DataGuard). Writes that
    # bypass its version counter (`t.data[...] = `, numpy, DLPack) are not seen: False reads it as data
    attention_data_masks: bool = True
    # mm, addmm and bmm as Triton matmul templates (codegen/matmul_template.py) into which the scheduler
    # fuses pointwise epilogues (bias, activation, residual add, scale, cast), instead of cuBLAS calls
    # followed by a kernel that reads their output back. "auto": on CUDA, a template where an epilogue
    # fuses and the cost model (scheduler/matmul_choice.py `prefer_template`) says the saved memory
    # traffic outweighs cuBLAS's faster main loop; under max_autotune, templates and cuBLAS are timed at
    # compile time instead (kept under cache_dir/autotune); on the CPU (Triton's interpreter) never.
    # "always": every eligible matmul (CUDA, or CPU under the interpreter: the tests), under max_autotune
    # with its block sizes timed. "off": cuBLAS
    matmul_templates: str = "auto"
    # an addmm whose only reader is a ReLU or a tanh-GELU: one aten._addmm_activation call (cuBLASLt
    # applies the activation before it stores; scheduler/matmul_activation.py) instead of the addmm and
    # an epilogue kernel, or a template. Timed on an H200 (session 29, fp16, 28 lines): 1.187x eager
    # in geomean against 1.057x without it, no line slower; NaN and inf products come out as eager's
    cublaslt_activations: bool = True
    # matmul templates load their 2-byte operands through tensor-memory-accelerator descriptors
    # (tl.make_tensor_descriptor: Hopper's TMA) where the layouts allow (codegen/matmul_template.py
    # `tma_layouts`): the default config does, and under max_autotune each config is timed with and
    # without. Off until a GPU has run and timed it (built in session 30 on the CPU: numerics in Triton's
    # interpreter, compiled for sm_90)
    matmul_tma: bool = False

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, check_option(f.name, getattr(self, f.name)))

    def unsafe_op_names(self) -> frozenset[str]:
        """`cudagraph_unsafe_ops` as op names ("mylib::baz" is the op str() calls "mylib.baz")."""
        return frozenset(op.strip().replace("::", ".") for op in self.cudagraph_unsafe_ops.split(",") if op.strip())

    def replace(self, **changes: Any) -> "Config":
        """A copy with `changes` (options=, config.patch): unknown names and bad values raise OptionError."""
        for name in changes:
            check_option_name(name)
        return dataclasses.replace(self, **changes)


# ── checking option values: one check for options=, config.patch and MINI_INDUCTOR_* variables ────────
class OptionError(ValueError):
    """An unknown option, or a value an option cannot take; the message names the option (and the
    environment variable it came from), the value and what is valid."""


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
_CHOICES = {"conv_layout": ("auto", "channels_last", "off", "measure"), "dynamic_shapes": ("per_size", "symbolic", "eager"),
            "attention_fusion": ("auto", "off"), "matmul_templates": ("auto", "always", "off")}
_PATHS = ("cache_dir", "debug_dir")      # a pathlib.Path is taken as its string


# Inductor's names for options (torch._inductor.config) that users bring along: ours where there is one,
# None where mini_inductor has no such knob. Inductor names that are also ours (max_autotune,
# max_fusion_size, split_reductions, ...) are simply valid.
_INDUCTOR_NAMES: dict[str, str | None] = {
    "triton.cudagraphs": "cudagraphs",
    "triton.cudagraph_trees": "cudagraphs",
    "triton.cudagraph_capture_sizes": "cudagraph_capture_sizes",
    "triton.cudagraph_dynamic_shape_warn_limit": "cudagraph_dynamic_shape_warn_limit",
    "triton.cudagraph_unexpected_rerecord_limit": "cudagraph_rerecord_limit",
    "triton.cudagraph_or_error": "cudagraph_or_error",
    "triton.skip_cudagraph_warmup": "cudagraph_skip_warmup",
    "triton.force_cudagraphs_warmup": "cudagraph_force_warmup",
    "triton.force_cudagraph_sync": "cudagraph_force_sync",
    "triton.slow_path_cudagraph_asserts": "cudagraph_slow_asserts",
    "triton.persistent_reductions": "persistent_reduction_limit",
    "graph_partition": "cudagraph_partition",
    "debug": "debug_dir",
    "trace.enabled": "debug_dir",
    "trace.debug_dir": "debug_dir",
    "fx_graph_cache": "graph_cache",
    "force_disable_caches": "graph_cache",
    "layout_optimization": "conv_layout",
    "max_autotune_pointwise": "max_autotune",
    "max_autotune_gemm": "max_autotune",
    "use_static_cuda_launcher": "static_launch",
    "coordinate_descent_tuning": None,
    "epilogue_fusion": None,
    "aggressive_fusion": None,
    "benchmark_kernel": None,
    "freezing": None,
    "cpp_wrapper": None,
    "shape_padding": None,
    "comprehensive_padding": None,
    "fallback_random": None,
    "size_asserts": None,
    "triton.unique_kernel_names": None,
    "triton.multi_kernel": None,
    "triton.max_block": None,
}


def _inductor_hint(name: str) -> str | None:
    """What to say about an Inductor option name, or None when `name` does not look like one."""
    if name in _INDUCTOR_NAMES:
        ours = _INDUCTOR_NAMES[name]
    elif "." in name and name.rsplit(".", 1)[1] in _FIELD_TYPES:    # "triton.max_fusion_size": a nested spelling
        ours = name.rsplit(".", 1)[1]
    elif "." in name:
        return (f"{name!r} looks like an Inductor option (torch._inductor.config); mini_inductor's options are "
                f"flat names")
    else:
        return None
    if ours is None:
        return f"{name!r} is an Inductor option (torch._inductor.config) with no equivalent in mini_inductor"
    return f"{name!r} is an Inductor option (torch._inductor.config); mini_inductor's option for it is {ours!r}"


def check_option_name(name: str) -> None:
    if name not in _FIELD_TYPES:
        inductor = _inductor_hint(name)
        if inductor:
            raise OptionError(f"unknown mini_inductor option: {inductor}. All valid options: {sorted(valid_options())}")
        close = difflib.get_close_matches(name, valid_options(), n=3)
        hint = f"; did you mean {' or '.join(repr(c) for c in close)}?" if close else "."
        raise OptionError(f"unknown mini_inductor option {name!r}{hint} All valid options: {sorted(valid_options())}")


def check_option(name: str, value: Any, env_var: str | None = None) -> Any:
    """`value` as option `name` holds it: strings (from the environment, or given so) are read as the option's
    type; booleans also from 1/0, true/false, yes/no, on/off. An OptionError otherwise. `env_var`: the
    variable the string came from (named in the error)."""
    check_option_name(name)
    where = (f"environment variable {env_var}={value!r} (mini_inductor option {name})" if env_var
             else f"mini_inductor option {name}={value!r}")
    kind = _FIELD_TYPES[name]
    optional = kind.endswith("| None")
    kind = kind.split("|")[0].strip()
    if optional and (value is None or (isinstance(value, str) and value.strip().lower() == "none")):
        return None
    if name == "cudagraph_capture_sizes":
        try:
            return normalize_capture_sizes(value)
        except ValueError as e:
            raise OptionError(f"{where}: {e}" if env_var else str(e)) from None
    if name == "cudagraph_unsafe_ops" and isinstance(value, (str, list, tuple)):
        try:
            return normalize_op_names(value)
        except ValueError as e:
            raise OptionError(f"{where} is not valid: {e}") from None
    if kind == "bool":
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        spelled = value.strip().lower() if isinstance(value, str) else None
        if spelled in _TRUE or spelled in _FALSE:
            return spelled in _TRUE
        raise OptionError(f"{where} is not a boolean: use True or False (or, as text, one of "
                          f"{'/'.join(_TRUE)} or {'/'.join(_FALSE)})")
    if kind == "int":
        number = None
        try:
            if isinstance(value, str):
                number = int(value.strip(), 10)
            elif not isinstance(value, bool):
                number = operator.index(value)      # an int, or a NumPy integer; not a float
        except (TypeError, ValueError):
            pass
        if number is None or number < 0:
            raise OptionError(f"{where} is not valid: expected an integer >= 0")
        return number
    if name in _PATHS and isinstance(value, os.PathLike):
        value = os.fspath(value)
    if name in _PATHS and isinstance(value, str) and not value.strip():
        # (an empty path is the current folder: an empty MINI_INDUCTOR_CACHE_DIR= wrote the cache there)
        raise OptionError(f"{where} is not valid: an empty path (unset it for the default{', or use None' if optional else ''})")
    if not isinstance(value, str):
        raise OptionError(f"{where} is not valid: expected a string{' or None' if optional else ''}, "
                          f"not {type(value).__name__}")
    if name in _CHOICES and value not in _CHOICES[name]:
        raise OptionError(f"{where} is not valid: expected one of {', '.join(repr(c) for c in _CHOICES[name])}")
    return value


def normalize_capture_sizes(value: Any) -> tuple | None:
    """The option as a tuple of ints (one dynamic dim) and tuples of ints (several), or None.

    Accepts a list or tuple, or a string such as "2, 5, 7", "[2, 5, 7]" or "(2, 3), (4, 8)" (the
    environment variable). A one-element tuple is the int itself, since a one-dim key is an int.
    """
    if value is None:
        return None
    raw = value
    if isinstance(value, str):
        try:
            value = ast.literal_eval(f"({value},)" if value.strip() else "()")
        except (ValueError, SyntaxError):
            raise ValueError(f"cudagraph_capture_sizes: cannot read {raw!r}; write ints or tuples of ints, "
                             f"e.g. '2, 5, 7' or '(2, 3), (4, 8)'") from None
        if len(value) == 1 and isinstance(value[0], list):   # "[2, 5, 7]"
            value = value[0]
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,)
    if not isinstance(value, (list, tuple, set, frozenset)):
        raise ValueError(f"cudagraph_capture_sizes must be a list of ints or of tuples of ints, got {raw!r}")
    out = []
    for item in value:
        if isinstance(item, (list, tuple)) and item and all(_is_int(s) for s in item):
            out.append(int(item[0]) if len(item) == 1 else tuple(int(s) for s in item))
        elif _is_int(item):
            out.append(int(item))
        else:
            raise ValueError(f"cudagraph_capture_sizes: entry {item!r} of {raw!r} is not an int or a tuple of ints")
    return tuple(out)


_OP_NAME = re.compile(r"[A-Za-z_]\w*\.[A-Za-z_]\w*(\.[A-Za-z_]\w*)?")   # ns.op or ns.op.overload


def normalize_op_names(value: str | list | tuple) -> str:
    """`cudagraph_unsafe_ops` as its comma-separated string, every name checked: "aten.mm" (every
    overload), "aten.mm.default", "mylib::baz" or "mylib::baz.default". A list or tuple of names (or of
    ops: torch.ops.aten.mm prints as "aten.mm") is joined. Anything else (a bare "mm",
    "torch.ops.aten.mm", a ";" between names) would match no op."""
    if isinstance(value, (list, tuple)):
        value = ", ".join(map(str, value))
    for entry in filter(None, (e.strip() for e in value.split(","))):
        if not _OP_NAME.fullmatch(entry.replace("::", ".", 1)):
            raise ValueError(f"{entry!r} is not an op name: write an ATen op as 'aten.mm' (every overload) or "
                             f"'aten.mm.default', a custom op as 'mylib::baz' or 'mylib::baz.default', "
                             f"several separated by commas")
        _check_aten_op(entry)
    return value


def _check_aten_op(entry: str) -> None:
    """An ATen name must name an ATen op (and overload): a misspelt one would silently match nothing.
    Custom ops are not checked: their library may register them after the option is set."""
    namespace, op, *overload = entry.replace("::", ".", 1).split(".")
    if namespace != "aten":
        return
    import torch

    try:
        packet = getattr(torch.ops.aten, op)
    except AttributeError:
        raise ValueError(f"{entry!r}: there is no ATen op {op!r}") from None
    if overload and overload[0] not in packet.overloads():
        raise ValueError(f"{entry!r}: aten.{op} has no overload {overload[0]!r}; it has "
                         f"{', '.join(sorted(packet.overloads()))}")


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def valid_options() -> list[str]:
    return [f.name for f in dataclasses.fields(Config)]


_FIELD_TYPES = {f.name: str(f.type) for f in dataclasses.fields(Config)}   # "bool", "int", "str | None", ...


def env_var(name: str) -> str:
    return f"MINI_INDUCTOR_{name.upper()}"


# The MINI_INDUCTOR_* variables read outside this module, that are not options: the logs
# (debug/logs.py), the import-time warm-up thread and where Triton's hash is computed
# (runtime/launch/precompile.py)
OTHER_VARIABLES = ("MINI_INDUCTOR_LOGS", "MINI_INDUCTOR_WARM_IMPORTS", "MINI_INDUCTOR_TRITON_HASH")
_variables_checked = False


def warn_unknown_variables(environ=os.environ) -> list[str]:
    """Warn about each MINI_INDUCTOR_* variable that nothing reads, naming the close valid ones: most are
    misspelt (one letter short of MINI_INDUCTOR_CUDAGRAPHS, a variable turns nothing off). A warning, not
    an error: another tool may use the prefix. Returns the warnings' texts."""
    known = {env_var(name): name for name in valid_options()}
    known.update({var: var.removeprefix("MINI_INDUCTOR_").lower() for var in OTHER_VARIABLES})
    messages = []
    for var in sorted(v for v in environ if v.startswith("MINI_INDUCTOR_") and v not in known):
        close = difflib.get_close_matches(var.removeprefix("MINI_INDUCTOR_").lower(), list(known.values()), n=3)
        hint = (f"did you mean {' or '.join(env_var(c) for c in close)}?" if close
                else "mini_inductor reads MINI_INDUCTOR_<OPTION> for the options of mini_inductor/config.py, "
                     f"and {' and '.join(OTHER_VARIABLES)}")
        messages.append(f"mini_inductor: environment variable {var} is not one mini_inductor reads, and is "
                        f"ignored: {hint}")
        warn_at_user_frame(messages[-1])   # at the user's line that compiled, not inside the package
    return messages


def _from_env() -> Config:
    """The options with MINI_INDUCTOR_<OPTION> variables applied; one OptionError naming every bad variable."""
    values, errors = {}, []
    for name in valid_options():
        raw = os.environ.get(env_var(name))
        if raw is None:
            continue
        try:
            values[name] = check_option(name, raw, env_var(name))
        except OptionError as e:
            errors.append(str(e))
    if errors:
        raise OptionError("mini_inductor cannot start: " + "; ".join(errors))
    return Config(**values)


config: Config = _from_env()


@contextlib.contextmanager
def patch(options: dict[str, Any] | None = None, /, **changes: Any) -> Iterator[Config]:
    """Temporarily change options of the global config: ``with config.patch(max_fusion_size=8): ...``,
    or with a dict, as Inductor's takes one: ``config.patch({"max_fusion_size": 8})``.

    On exit the patched options get their old values back; options assigned inside the block
    (``config.fusion_window = 8``) keep theirs, as with Inductor's config.patch."""
    global config
    if options is not None and not isinstance(options, dict):
        raise TypeError(f"config.patch takes a dict of options or keyword arguments, not {type(options).__name__}")
    changes = {**(options or {}), **changes}
    saved = config
    config = config.replace(**changes)
    try:
        yield config
    finally:
        config = dataclasses.replace(config, **{name: getattr(saved, name) for name in changes})


def current() -> Config:
    return config


MODES = (None, "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def for_compile(mode: str | None, options: dict | None) -> Config:
    """The options of one torch.compile: the global config, then what `mode` implies, then `options`."""
    if mode not in MODES:
        raise ValueError(f"mini_inductor: unknown mode {mode!r}; valid modes: {[m for m in MODES if m]}")
    global _variables_checked
    if not _variables_checked:      # once a process, at its first compile (not at import: the CLI imports
        _variables_checked = True   # us, then starts itself again under Triton's interpreter)
        warn_unknown_variables()
    changes = {"max_autotune": True} if mode in ("max-autotune", "max-autotune-no-cudagraphs") else {}
    changes.update(options or {})
    cfg = current().replace(**changes)
    if mode == "max-autotune-no-cudagraphs":
        cfg = cfg.replace(cudagraphs=False)
    return cfg


def interpreting() -> bool:
    """True when Triton kernels run in Triton's CPU interpreter (TRITON_INTERPRET=1)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


class _ConfigModule(types.ModuleType):
    """This module, with its options as attributes: ``mini_inductor.config.max_fusion_size = 8`` checks
    the value (an OptionError for a bad one, or for an unknown name) and sets it for later compiles;
    reading one gives the current value. Module attributes keep working as usual."""

    def __getattr__(self, name: str) -> Any:
        if name in _FIELD_TYPES:
            return getattr(current(), name)
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FIELD_TYPES:
            global config
            config = config.replace(**{name: value})
        elif name.startswith("_") or name in self.__dict__:
            super().__setattr__(name, value)
        else:
            check_option_name(name)         # raises: an unknown option, maybe misspelt


sys.modules[__name__].__class__ = _ConfigModule

"""One Triton kernel per fused group.

    pointwise      xindex = pid * XBLOCK + arange(XBLOCK)              1-D tile, masked at the edge
    tiled          yindex [YBLOCK, 1] × xindex [1, XBLOCK]              2-D tile where an access is
                                                                        transposed (codegen/tiling.py)
    persistent     xindex [XBLOCK, 1] × rindex [1, RBLOCK], whole row in registers
    looped         for roffset in range(0, rnumel, RBLOCK): accumulate, reduce after the loop

In a looped kernel, a node that needs a reduction's result starts a new loop after it:

    prelude (row values needing no reduction)
    loop 1:  body … accumulators        → after loop 1: reduce; row values using them
    loop 2:  body reading loop-1 results → after loop 2: …

Node bodies run under `TritonOps`, which emits one CSE'd line per op. Loads of a value this kernel
stored at the same index reuse the register; stores of buffers nobody outside the kernel reads are
dropped, and those buffers are never allocated.
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

import sympy
import torch

from ..errors import CodegenError
from ..lowering.sizevars import FloorDiv, ModularIndexing, index_range, product, static_int, upper_bound
from ..lowering.virtualized import set_ops_handler
from ..scheduler.dependencies import MemoryDep, canonical_vars, simplify
from ..scheduler.nodes import SchedulerNode
from .heuristics import TILE_XBLOCK_MAX, KernelConfig, multipass_looped_config, pick_config, pick_tile_config
from .online_softmax import OnlineSoftmax, OnlineSoftmaxOps, find_online_softmax
from .recompute import recomputable_nodes, recompute_load
from .tiling import Tiling, choose_tiling, is_outer_reduction

XINDEX = sympy.Symbol("xindex", integer=True, nonnegative=True)
YINDEX = sympy.Symbol("yindex", integer=True, nonnegative=True)
RINDEX = sympy.Symbol("rindex", integer=True, nonnegative=True)

INT32_MIN, INT32_MAX = -2**31, 2**31 - 1

TL_DTYPES = {
    torch.float32: "tl.float32", torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16",
    torch.float64: "tl.float64", torch.int64: "tl.int64", torch.int32: "tl.int32", torch.int16: "tl.int16",
    torch.int8: "tl.int8", torch.uint8: "tl.uint8", torch.bool: "tl.int1",
}


def tl_dtype(dtype: torch.dtype) -> str:
    try:
        return TL_DTYPES[dtype]
    except KeyError:
        raise NotImplementedError(f"dtype {dtype} in a Triton kernel") from None


def texpr(expr: sympy.Expr) -> str:
    """Print an index expression as Triton (integer) code."""
    if isinstance(expr, sympy.Integer):
        return str(int(expr))
    if isinstance(expr, sympy.Symbol):
        return expr.name
    if isinstance(expr, FloorDiv):
        return f"({_operand(expr.args[0])} // {texpr(expr.args[1])})"
    if isinstance(expr, ModularIndexing):
        base, div, mod = expr.args
        inner = _operand(base) if div == 1 else f"({_operand(base)} // {texpr(div)})"
        return f"({inner} % {texpr(mod)})"
    if isinstance(expr, sympy.Add):
        return " + ".join(texpr(a) for a in sorted(expr.args, key=sympy.default_sort_key))
    if isinstance(expr, sympy.Mul):
        return "*".join(f"({texpr(a)})" if isinstance(a, sympy.Add) else texpr(a) for a in expr.args)
    raise NotImplementedError(f"index expression {expr}")


def _operand(expr: sympy.Expr) -> str:
    """`expr` as the left operand of // or %: parenthesized unless it is one symbol, number or div/mod."""
    if isinstance(expr, (sympy.Symbol, sympy.Integer, FloorDiv, ModularIndexing)):
        return texpr(expr)
    return f"({texpr(expr)})"


@dataclasses.dataclass(frozen=True)
class CSEVar:
    name: str
    dtype: torch.dtype

    def __str__(self):
        return self.name


@dataclasses.dataclass
class StoreLine:
    buffer: str
    text: str


@dataclasses.dataclass
class Section:
    """A block of code lines at one place of the kernel (prelude, a loop's body, after a loop)."""

    index: int                   # even: row level (outside loops); odd: inside a reduction loop
    lines: list = dataclasses.field(default_factory=list)
    init: list[str] = dataclasses.field(default_factory=list)       # accumulators, before the loop
    finalize: list = dataclasses.field(default_factory=list)        # reductions, after the loop
    cse: dict[str, CSEVar] = dataclasses.field(default_factory=dict)


def _float_literal(v: float) -> str:
    if math.isnan(v):
        return 'float("nan")'
    if math.isinf(v):
        return 'float("inf")' if v > 0 else 'float("-inf")'
    return repr(float(v))


class TritonKernel:
    """Builds the source of one kernel from an ordered list of SchedulerNodes."""

    def __init__(self, nodes: list[SchedulerNode], numel: int, rnumel: int,
                 kernel_local: set[str], buffer_dtypes: dict[str, torch.dtype], persistent_limit: int,
                 online_softmax: bool = True, buffer_spans: dict[str, int] | None = None):
        self.nodes = nodes
        self.name = "triton_kernel"  # the wrapper names it once the kind (poi/per/red) is known
        self.numel = numel
        self.rnumel = rnumel
        self.is_reduction = rnumel > 1 or any(n.is_reduction() for n in nodes)
        outer = self.is_reduction and is_outer_reduction(nodes)
        self.outer = outer
        self.config: KernelConfig = pick_config(numel, rnumel if self.is_reduction else 1, persistent_limit, outer)
        self.tiling: Tiling | None = None if self.is_reduction else choose_tiling(nodes, TILE_XBLOCK_MAX)
        if self.tiling is not None:
            self.config = pick_tile_config(self.tiling.ynumel, self.tiling.xnumel)
        # the mask of a whole row (1-D, reduction) or tile (2-D) of the kernel's elements
        self.row_mask = "xmask" if self.tiling is None else "ymask & xmask"
        self.looped = self.is_reduction and not self.config.persistent
        self.kernel_local = set(kernel_local)
        self.buffer_dtypes = buffer_dtypes
        # elements of storage each buffer a load may read spans from its pointer (static layouts only)
        self.buffer_spans: dict[str, int] = buffer_spans or {}
        self.sections: dict[int, Section] = {}
        self.section: Section = self._section(0 if not self.is_reduction or self.looped else 1)
        self.counter = 0
        self.loads: list[str] = []           # buffers read from outside, in first-use order
        self.stores: list[str] = []          # buffers stored, in order
        self.store_cache: dict[tuple[str, sympy.Expr], tuple[CSEVar, int]] = {}
        self.load_misses: set[str] = set()   # buffers stored here but read back from memory
        self.reduction_cache: dict[tuple, Any] = {}
        # 64-bit index math where a loop variable passes int32 (blocks are powers of 2, so the masked
        # lanes of a loop of at most 2**31 elements still fit), or an offset the kernel forms may
        # (`wide_index`); 32-bit is kept where every offset provably fits, as it is faster
        sizes = [numel, rnumel] + ([self.tiling.ynumel, self.tiling.xnumel] if self.tiling is not None else [])
        self.int64 = max(sizes) > INT32_MAX
        self.indirect: dict[sympy.Symbol, tuple[int, torch.dtype]] = {}   # indirect index → (size, dtype)
        self.device_asserts = True
        self.broadcast_reads: set[str] = set()          # of the node being generated (eviction hints)
        self.loaded_in: dict[str, set[int]] = {}       # buffer → sections that load it from memory
        # pointwise members recomputed where they are read, never stored (codegen/recompute.py)
        self.recomputed: dict[str, SchedulerNode] = {}
        # looped max → sum(exp(v - max)) pairs computed in one loop (codegen/online_softmax.py)
        self.online: dict[str, OnlineSoftmax] = {}
        if self.looped:
            self.recomputed = recomputable_nodes(nodes, self.kernel_local, self._inside_loop)
        if self.looped and online_softmax:
            ranges = {XINDEX: sympy.Integer(numel), RINDEX: sympy.Integer(rnumel)}
            self.online = find_online_softmax(self, nodes, ranges)

    # ── sections ──────────────────────────────────────────────────────────────────────────────
    def _section(self, index: int) -> Section:
        if index not in self.sections:
            self.sections[index] = Section(index)
        return self.sections[index]

    def newvar(self, dtype: torch.dtype) -> CSEVar:
        var = CSEVar(f"tmp{self.counter}", dtype)
        self.counter += 1
        return var

    def emit(self, expr: str, dtype: torch.dtype) -> CSEVar:
        cached = self.section.cse.get(expr)
        if cached is not None:
            return cached
        var = self.newvar(dtype)
        self.section.lines.append(f"{var} = {expr}")
        self.section.cse[expr] = var
        return var

    def wide_index(self, index: sympy.Expr, after_loop: bool = False) -> sympy.Expr:
        """`index` as it is to be printed. Where the values it takes (each loop variable over its range,
        each indirect index over the size of the dimension it indexes) may leave int32, the kernel
        computes its indices in int64 and the 32-bit indirect indices in it are widened before any
        multiplication: a loaded int32 index times a stride would wrap around."""
        ranges = {**self.var_ranges, **{s: sympy.Integer(size) for s, (size, _) in self.indirect.items()}}
        if _fits_int32(index, ranges):
            return index
        self.int64 = True
        narrow = [s for s in index.free_symbols if s in self.indirect and self.indirect[s][1] != torch.int64]
        repl = {}
        for s in sorted(narrow, key=lambda s: s.name):
            code = f"{s.name}.to(tl.int64)"
            if after_loop:   # where the after-loop code (finalize) can see it
                var = self.newvar(torch.int64)
                self.section.finalize.append(f"{var} = {code}")
            else:
                var = self.emit(code, torch.int64)
            repl[s] = sympy.Symbol(var.name, integer=True, nonnegative=True)
        return index.xreplace(repl)

    # ── codegen of the nodes ──────────────────────────────────────────────────────────────────
    def generate(self) -> str:
        positions: dict[str, int] = {}
        ready: dict[str, int] = {}
        names = {n.name for n in self.nodes}
        for node in self.nodes:
            pair = self.online.get(node.name)
            if pair is not None and pair.sum_node == node.name:   # computed with its max
                positions[node.name], ready[node.name] = positions[pair.max_node], ready[pair.max_node]
                continue
            inside = self._inside_loop(node)
            need = max([ready[d.name] for d in node.unmet_dependencies if d.name in names] + [0])
            if not self.is_reduction:
                pos = 0
            elif not self.looped:
                pos = 1
            else:
                pos = need if (need % 2 == 1) == inside else need + 1
                if inside and pos < 1:
                    pos = 1
            positions[node.name] = pos
            ready[node.name] = pos + 1 if (node.is_reduction() and self.looped) else pos
            if node.name in self.recomputed:
                continue
            self.section = self._section(pos)
            self._codegen_node(node, inside, pair)
        if self.looped and not self.outer and sum(i % 2 for i in self.sections) > 1:
            self.config = multipass_looped_config(self.rnumel)
        return self._render()

    def _inside_loop(self, node: SchedulerNode) -> bool:
        if not self.is_reduction:
            return False
        if node.is_reduction():
            return True
        numel = static_int(product(node.body.sizes))
        return numel == self.numel * self.rnumel and self.rnumel > 1

    def _node_vars(self, node: SchedulerNode, inside: bool):
        """Index expressions of the node's (simplified) loop variables, in kernel terms."""
        sizes, rsizes = node.body.sizes, node.body.reduction_sizes
        if self.tiling is not None:
            t = self.tiling
            out: list[sympy.Expr] = [sympy.Integer(0)] * len(sizes)
            for d, v in zip(t.ydims, _split(YINDEX, [t.sizes[d] for d in t.ydims])):
                out[d] = v
            out[t.xdim] = XINDEX
            return out, []
        if node.is_reduction():
            return _split(XINDEX, sizes), _split(RINDEX, rsizes)
        flat = XINDEX * self.rnumel + RINDEX if inside else XINDEX
        return _split(flat, sizes), []

    def _codegen_node(self, node: SchedulerNode, inside: bool, online: OnlineSoftmax | None = None) -> None:
        xvars, rvars = self._node_vars(node, inside)
        if self.tiling is not None:
            self.var_ranges = {YINDEX: sympy.Integer(self.tiling.ynumel), XINDEX: sympy.Integer(self.tiling.xnumel)}
        else:
            self.var_ranges = {XINDEX: sympy.Integer(self.numel), RINDEX: sympy.Integer(self.rnumel)}
        handler: Any = TritonOps(self, inside)
        if online is not None:
            handler = OnlineSoftmaxOps(handler, online)
        self.broadcast_reads = _broadcast_reads(node)
        index, rindex = node.body.reindex(xvars, rvars)
        try:
            with set_ops_handler(handler):
                node.node.store_body(index, rindex)
                if online is not None:
                    handler.store_sum()
        except NotImplementedError as e:
            raise CodegenError(str(e), op=", ".join(sorted({o.op for o in node.node.origins})), node=node.name) from e

    # ── rendering ─────────────────────────────────────────────────────────────────────────────
    def signature(self) -> list[str]:
        """Pointer arguments in order: buffers read from outside, then buffers stored (kept ones)."""
        kept_stores = [b for b in self.stores if b not in self.removed_buffers()]
        return [b for b in self.loads if b not in kept_stores] + kept_stores

    def removed_buffers(self) -> set[str]:
        stored_here = {b for b in self.stores if b in self.kernel_local and b not in self.load_misses}
        return stored_here | set(self.recomputed)

    def _render(self) -> str:
        args = self.signature()
        loads = [b for b in args if b not in self.stores]
        stores = [b for b in args if b in self.stores]
        argnames = {**{b: f"in_ptr{i}" for i, b in enumerate(loads)}, **{b: f"out_ptr{i}" for i, b in enumerate(stores)}}
        self.argnames = argnames
        # sizes are static: constexpr lets Triton fold them (and its interpreter loop over them)
        params = [argnames[b] for b in args] + ["xnumel: tl.constexpr"]
        if self.tiling is not None:
            params = [argnames[b] for b in args] + ["ynumel: tl.constexpr", "xnumel: tl.constexpr",
                                                    "YBLOCK: tl.constexpr"]
        if self.is_reduction:
            params.append("rnumel: tl.constexpr")
        params.append("XBLOCK: tl.constexpr")
        if self.is_reduction:
            params.append("RBLOCK: tl.constexpr")
        idx = ".to(tl.int64)" if self.int64 else ""
        out = ["@triton.jit", f"def {self.name}({', '.join(params)}):"]
        body = [f"xoffset = tl.program_id(0){idx} * XBLOCK"]
        if self.tiling is not None:
            # Y blocks on grid axis 0 (no 65535 limit), X blocks on axis 1
            body = [f"yoffset = tl.program_id(0){idx} * YBLOCK", "yindex = yoffset + tl.arange(0, YBLOCK)[:, None]",
                    "ymask = yindex < ynumel", f"xoffset = tl.program_id(1){idx} * XBLOCK",
                    "xindex = xoffset + tl.arange(0, XBLOCK)[None, :]", "xmask = xindex < xnumel"]
        elif not self.is_reduction:
            body += ["xindex = xoffset + tl.arange(0, XBLOCK)[:]", "xmask = xindex < xnumel"]
        else:
            body += ["xindex = xoffset + tl.arange(0, XBLOCK)[:, None]", "xmask = xindex < xnumel",
                     f"rbase = tl.arange(0, RBLOCK)[None, :]{idx}"]
            if not self.looped:
                body += ["rindex = rbase", "rmask = rindex < rnumel"]
        for i in sorted(self.sections):
            sec = self.sections[i]
            if i % 2 == 1 and self.looped:
                body += sec.init
                body.append("for roffset in range(0, rnumel, RBLOCK):")
                loop = ["rindex = roffset + rbase", "rmask = rindex < rnumel"] + self._lines(sec.lines, argnames, i)
                body += ["    " + ln for ln in loop]
                body += self._lines(sec.finalize, argnames, i)
            else:
                body += self._lines(sec.lines, argnames, i) + self._lines(sec.finalize, argnames, i)
        out += ["    " + ln for ln in body]
        return "\n".join(out) + "\n"

    def _lines(self, lines, argnames, section: int) -> list[str]:
        rendered = []
        removed = self.removed_buffers()
        for ln in lines:
            if isinstance(ln, StoreLine):
                if ln.buffer in removed:
                    continue
                ln = ln.text
            ln = _EVICT.sub(lambda m: self._eviction(m.group(1), m.group(2), section), ln)
            for b, a in argnames.items():
                ln = ln.replace(f"@{b}@", a)
            rendered.append(ln)
        return rendered


    def _eviction(self, name: str, kind: str, section: int) -> str:
        """The load's eviction hint, now that every load of the kernel is known.

        broadcast (each element reused by many rows/programs): keep it in L2 (evict_last);
        a looped reduction's load: evict_last when a later loop loads the buffer again, else the
        data streams through once (evict_first); anything else: no hint.
        """
        if kind == "bcast":
            return ", eviction_policy='evict_last'"
        if kind == "loop":
            later = any(j > section for j in self.loaded_in.get(name, ()))
            return f", eviction_policy='{'evict_last' if later else 'evict_first'}'"
        return ""


_EVICT = re.compile(r"@evict:(\w+):(\w*)@")


def _both_bool(a, b) -> bool:
    return getattr(a, "dtype", None) == torch.bool and getattr(b, "dtype", None) == torch.bool


def _fits_int32(index: sympy.Expr, ranges: dict) -> bool:
    """Whether every value the printed `index` computes on the way, not only its result, fits int32:
    each subexpression's range (a product inside a floor division, say), and each sum's terms added
    in any order (a flip's `C - 70000*x` fits while `-70000*x` alone may not)."""
    for sub in sympy.preorder_traversal(index):
        span = index_range(sub, ranges)
        if span is None or span[0] < INT32_MIN or span[1] > INT32_MAX:
            return False
        if isinstance(sub, sympy.Add):
            terms = [index_range(a, ranges) for a in sub.args]
            if sum(max(abs(lo), abs(hi)) for lo, hi in terms) > INT32_MAX:
                return False
    return True


def _broadcast_reads(node: SchedulerNode) -> set[str]:
    """Buffers `node` reads only at indices that leave out one of its loops: each element is read
    again and again (a bias over rows, a norm's weight, a row's statistic)."""
    partial, full = set(), set()
    for dep in node.reads:
        if not isinstance(dep, MemoryDep) or dep.is_indirect():
            continue
        used = dep.index.free_symbols
        missing = any(v not in used and s != 1 for v, s in zip(canonical_vars(len(dep.sizes)), dep.sizes))
        (partial if missing else full).add(dep.name)
    return partial - full


def _split(flat: sympy.Expr, sizes) -> list[sympy.Expr]:
    """The variables of loops `sizes` (row-major) from one flat index."""
    out: list[sympy.Expr] = []
    inner = sympy.Integer(1)
    for i, s in reversed(list(enumerate(sizes))):
        out.append(FloorDiv(flat, inner) if i == 0 else ModularIndexing(flat, inner, s))
        inner = inner * s
    return list(reversed(out))


class TritonOps:
    """The `ops` handler that writes Triton code into the kernel's current section."""

    def __init__(self, kernel: TritonKernel, inside: bool):
        self.k = kernel
        self.inside = inside
        self.masks: list[str] = []   # masks of the `masked` bodies being evaluated, outermost first

    # memory
    def _index(self, index: sympy.Expr) -> sympy.Expr:
        return simplify(index, self.k.var_ranges)

    def _mask(self, index: sympy.Expr, name: str | None = None) -> str:
        mask = self.k.row_mask
        # an indirect index (a tmp symbol) may come from a load along the reduction: mask it like one
        indirect = any(s.name.startswith("tmp") for s in index.free_symbols)
        if self.k.is_reduction and (RINDEX in index.free_symbols or (indirect and self.inside)):
            mask = "xmask & rmask"
        if name is not None and self.masks and self._in_bounds(name, index):
            # the body's masks only keep addresses in range, and these are: the value a false mask
            # discards is read but never used, and the loads of one index CSE across the bodies
            return mask
        return " & ".join([mask] + self.masks)

    def _in_bounds(self, name: str, index: sympy.Expr) -> bool:
        """Every element of the kernel reads `name` inside its storage at `index` (a linear index of
        the kernel's own variables, no negative terms, an upper bound within the buffer's span)."""
        span = self.k.buffer_spans.get(name)
        ranges = self.k.var_ranges
        if span is None or not all(s in ranges for s in index.free_symbols):
            return False
        bound = upper_bound(index, ranges)
        return bound is not None and bound <= span

    def load(self, name: str, index):
        k = self.k
        index = self._index(index)
        hit = k.store_cache.get((name, index))
        if hit is not None:
            value, sec = hit
            if sec == k.section.index or (sec % 2 == 0 and sec < k.section.index):
                return value
        if name in k.recomputed:
            value = recompute_load(k.recomputed[name], index, k.var_ranges, k.buffer_dtypes[name])
            if value is None:
                raise CodegenError(f"{name} is read at {index}, which names no single element of it",
                                   node=name)
            return value
        if name in k.stores:
            k.load_misses.add(name)
        elif name not in k.loads:
            k.loads.append(name)
        dtype = k.buffer_dtypes[name]
        kind = "bcast" if name in k.broadcast_reads else ("loop" if k.looped and self.inside else "")
        k.loaded_in.setdefault(name, set()).add(k.section.index)
        return k.emit(f"tl.load({self._pointer(name, index)}, {self._mask(index, name)}@evict:{name}:{kind}@)", dtype)

    def _pointer(self, name: str, index, after_loop: bool = False) -> str:
        # an index without xindex (or yindex) still needs a block of pointers to match the mask
        if self.k.tiling is not None:
            pad = "" if {XINDEX, YINDEX} <= index.free_symbols else " + tl.zeros([YBLOCK, XBLOCK], tl.int32)"
        else:
            pad = "" if XINDEX in index.free_symbols else " + tl.zeros_like(xindex)"
        return f"@{name}@ + {_operand(self.k.wide_index(index, after_loop))}{pad}"

    def store(self, name: str, index, value, mode: str | None = None, after_loop: bool = False):
        k = self.k
        index = self._index(index)
        dtype = k.buffer_dtypes[name]
        if name not in k.stores:
            k.stores.append(name)
        if mode == "atomic_add":
            # other programs add to the same elements: nothing to cache, and no plain store
            if value.dtype != dtype:
                value = self.to_dtype(value, dtype)
            k.load_misses.add(name)
            k.section.lines.append(StoreLine(name, f"tl.atomic_add({self._pointer(name, index)}, {value}, "
                                                   f"{self._mask(index)}, sem='relaxed')"))
            return
        if mode is not None:
            raise NotImplementedError(f"store mode {mode!r}")
        if after_loop:
            # a looped reduction's result exists only after its loop: store it there
            if value.dtype != dtype:
                cast = k.newvar(dtype)
                k.section.finalize.append(f"{cast} = {value}.to({tl_dtype(dtype)})")
                value = cast
            k.store_cache[(name, index)] = (value, k.section.index + 1)
            k.section.finalize.append(StoreLine(name, f"tl.store({self._pointer(name, index, True)}, {value}, xmask)"))
            return
        if value.dtype != dtype:
            value = self.to_dtype(value, dtype)
        k.store_cache[(name, index)] = (value, k.section.index)
        k.section.lines.append(StoreLine(name, f"tl.store({self._pointer(name, index)}, {value}, {self._mask(index)})"))

    def store_reduction(self, name: str, index, value):
        self.store(name, index, value, after_loop=self.k.looped)

    # values
    def constant(self, value, dtype: torch.dtype):
        if dtype == torch.bool:
            lit = "1" if value else "0"
        elif dtype.is_floating_point:
            lit = _float_literal(float(value))
        else:
            lit = str(int(value))
        return self.k.emit(f"tl.full([1], {lit}, {tl_dtype(dtype)})", dtype)

    def index_expr(self, expr, dtype: torch.dtype):
        expr = self._index(expr)
        if not expr.free_symbols:
            return self.constant(int(expr), dtype)
        return self.k.emit(f"({texpr(self.k.wide_index(expr))}).to({tl_dtype(dtype)})", dtype)

    def to_dtype(self, x: CSEVar, dtype: torch.dtype, src_dtype=None):
        if x.dtype == dtype:
            return x
        if dtype == torch.bool:
            return self.k.emit(f"({x} != 0)", torch.bool)
        if dtype == torch.uint8 and x.dtype.is_floating_point:
            # eager wraps a float into uint8 through a wider integer (-1.5 → 255); Triton's direct cast saturates
            return self.k.emit(f"{x}.to(tl.int32).to(tl.uint8)", dtype)
        return self.k.emit(f"{x}.to({tl_dtype(dtype)})", dtype)

    def where(self, c, a, b):
        return self.k.emit(f"tl.where({c}, {a}, {b})", a.dtype)

    def masked(self, mask, body, other):
        """`body()` where `mask` holds (its loads masked, so out-of-range addresses are never read), else `other`."""
        self.masks.append(str(mask))
        try:
            value = body()
        finally:
            self.masks.pop()
        if isinstance(other, CSEVar):
            return self.k.emit(f"tl.where({mask}, {value}, {other})", value.dtype)
        if value.dtype == torch.bool:
            lit = "1" if other else "0"
        elif value.dtype.is_floating_point:
            lit = _float_literal(float(other))
        else:
            lit = str(int(other))
        return self.k.emit(f"tl.where({mask}, {value}, {lit})", value.dtype)

    def indirect_indexing(self, value, size, check: bool = True):
        """A loaded integer as an index symbol (named like its variable, so deps see it as indirect).

        Negative indices wrap around as in eager; an out-of-range index is a device-side assert.
        """
        size = int(size)
        wrapped = self.k.emit(f"tl.where({value} < 0, {value} + {size}, {value})", value.dtype)
        if check and self.k.device_asserts:
            row = "xmask & rmask" if self.k.is_reduction and self.inside else self.k.row_mask
            mask = " & ".join([row] + self.masks)
            line = (f"tl.device_assert((({wrapped} >= 0) & ({wrapped} < {size})) | ~({mask}), "
                    f"\"index out of bounds: 0 <= {wrapped} < {size}\")")
            if line not in self.k.section.lines:
                self.k.section.lines.append(line)
        symbol = sympy.Symbol(wrapped.name, integer=True, nonnegative=True)
        self.k.indirect[symbol] = (size, wrapped.dtype)
        return symbol

    def _binary(self, fmt: str, a, b, dtype=None):
        return self.k.emit(fmt.format(a=a, b=b), dtype or a.dtype)

    def _unary(self, fmt: str, a, dtype=None):
        return self.k.emit(fmt.format(a=a), dtype or a.dtype)

    # bool sums and products are eager's `or` and `and`; Triton's 1-bit `+` wraps (True + True is False)
    def add(self, a, b): return self._binary("{a} | {b}" if _both_bool(a, b) else "{a} + {b}", a, b)
    def sub(self, a, b): return self._binary("{a} - {b}", a, b)
    def mul(self, a, b): return self._binary("{a} & {b}" if _both_bool(a, b) else "{a} * {b}", a, b)
    def truediv(self, a, b): return self._binary("{a} / {b}", a, b)
    def truncdiv(self, a, b): return self._binary("{a} // {b}", a, b)

    def floordiv(self, a, b):
        if a.dtype.is_floating_point:
            return self._binary("triton_helpers.div_floor_float({a}, {b})", a, b)
        return self._binary("triton_helpers.div_floor_integer({a}, {b})", a, b)

    def remainder(self, a, b):
        if a.dtype.is_floating_point:
            return self._binary("triton_helpers.remainder_float({a}, {b})", a, b)
        return self._binary("triton_helpers.remainder_integer({a}, {b})", a, b)

    def fmod(self, a, b):
        if a.dtype.is_floating_point:
            return self._binary("libdevice.fmod({a}, {b})", a, b)
        return self._binary("{a} % {b}", a, b)

    def maximum(self, a, b): return self._binary("triton_helpers.maximum({a}, {b})", a, b)
    def minimum(self, a, b): return self._binary("triton_helpers.minimum({a}, {b})", a, b)
    def pow(self, a, b):
        if not a.dtype.is_floating_point:
            raise NotImplementedError("integer pow")
        return self._binary("libdevice.pow({a}, {b})", a, b)
    def atan2(self, a, b): return self._binary("libdevice.atan2({a}, {b})", a, b)
    def copysign(self, a, b): return self._binary("libdevice.copysign({a}, {b})", a, b)
    def hypot(self, a, b): return self._binary("libdevice.hypot({a}, {b})", a, b)
    def nextafter(self, a, b): return self._binary("libdevice.nextafter({a}, {b})", a, b)

    def fmax(self, a, b):  # NaN only where both are NaN
        if not a.dtype.is_floating_point:
            return self.maximum(a, b)
        return self._binary("tl.where({a} != {a}, {b}, tl.where({b} != {b}, {a}, triton_helpers.maximum({a}, {b})))",
                            a, b)

    def fmin(self, a, b):
        if not a.dtype.is_floating_point:
            return self.minimum(a, b)
        return self._binary("tl.where({a} != {a}, {b}, tl.where({b} != {b}, {a}, triton_helpers.minimum({a}, {b})))",
                            a, b)

    def neg(self, a): return self._unary("-{a}", a)
    def abs(self, a): return self._unary("tl.abs({a})", a)
    def reciprocal(self, a): return self._unary("1 / {a}", a)
    def square(self, a): return self._unary("{a} * {a}", a)
    def relu(self, a): return self._unary("tl.where({a} < 0, 0, {a})", a)
    def exp(self, a): return self._unary("tl.exp({a})", a)
    def exp2(self, a): return self._unary("tl.exp2({a})", a)
    def log(self, a): return self._unary("tl.log({a})", a)
    def log2(self, a): return self._unary("tl.log2({a})", a)
    def sqrt(self, a): return self._unary("tl.sqrt({a})", a)
    def rsqrt(self, a): return self._unary("tl.rsqrt({a})", a)
    def sin(self, a): return self._unary("tl.sin({a})", a)
    def cos(self, a): return self._unary("tl.cos({a})", a)
    def sigmoid(self, a): return self._unary("tl.sigmoid({a})", a)
    def erf(self, a): return self._unary("tl.erf({a})", a)
    def floor(self, a): return self._unary("tl.floor({a})", a) if a.dtype.is_floating_point else a
    def ceil(self, a): return self._unary("tl.ceil({a})", a) if a.dtype.is_floating_point else a
    def trunc(self, a): return self._unary("libdevice.trunc({a})", a) if a.dtype.is_floating_point else a
    def round(self, a): return self._unary("libdevice.nearbyint({a})", a) if a.dtype.is_floating_point else a

    def sign(self, a):
        t = tl_dtype(a.dtype)
        return self._unary(f"(0 < {{a}}).to({t}) - ({{a}} < 0).to({t})", a)

    def isnan(self, a): return self._unary("{a} != {a}", a, torch.bool)
    def isinf(self, a): return self._unary("libdevice.isinf({a}).to(tl.int1)", a, torch.bool)
    def signbit(self, a): return self._unary("libdevice.signbit({a}).to(tl.int1)", a, torch.bool)

    def eq(self, a, b): return self._binary("{a} == {b}", a, b, torch.bool)
    def ne(self, a, b): return self._binary("{a} != {b}", a, b, torch.bool)
    def lt(self, a, b): return self._binary("{a} < {b}", a, b, torch.bool)
    def le(self, a, b): return self._binary("{a} <= {b}", a, b, torch.bool)
    def gt(self, a, b): return self._binary("{a} > {b}", a, b, torch.bool)
    def ge(self, a, b): return self._binary("{a} >= {b}", a, b, torch.bool)

    def _bool(self, a):
        return a if a.dtype == torch.bool else self.to_dtype(a, torch.bool)

    def logical_and(self, a, b): return self._binary("{a} & {b}", self._bool(a), self._bool(b), torch.bool)
    def logical_or(self, a, b): return self._binary("{a} | {b}", self._bool(a), self._bool(b), torch.bool)
    def logical_xor(self, a, b): return self._binary("{a} ^ {b}", self._bool(a), self._bool(b), torch.bool)
    def logical_not(self, a): return self._unary("{a} == 0", self._bool(a), torch.bool)
    def bitwise_and(self, a, b): return self._binary("{a} & {b}", a, b)
    def bitwise_or(self, a, b): return self._binary("{a} | {b}", a, b)
    def bitwise_xor(self, a, b): return self._binary("{a} ^ {b}", a, b)
    def bitwise_not(self, a):
        return self._unary("{a} == 0", a) if a.dtype == torch.bool else self._unary("~{a}", a)
    def bitwise_left_shift(self, a, b): return self._binary("{a} << {b}", a, b)
    def bitwise_right_shift(self, a, b): return self._binary("{a} >> {b}", a, b)
    def rand(self, seed, offset): return self._binary("tl.rand({a}, {b})", seed, offset, torch.float32)
    def randn(self, seed, offset): return self._binary("tl.randn({a}, {b})", seed, offset, torch.float32)

    def __getattr__(self, name):
        # the rest of the math library through libdevice (one source on GPU and interpreter)
        if name in _LIBDEVICE_UNARY:
            return lambda a: self._unary(f"libdevice.{name}({{a}})", a)
        if name in _LIBDEVICE_RENAMED:
            return lambda a: self._unary(f"libdevice.{_LIBDEVICE_RENAMED[name]}({{a}})", a)
        raise NotImplementedError(f"ops.{name} has no Triton translation")

    # reductions
    def reduction(self, dtype: torch.dtype, src_dtype: torch.dtype, reduction_type: str, value):
        k = self.k
        key = (reduction_type, tuple(v.name for v in value) if isinstance(value, tuple) else value.name, dtype)
        if key in k.reduction_cache:
            return k.reduction_cache[key]
        result = (self._looped_reduction if k.looped else self._persistent_reduction)(dtype, reduction_type, value)
        k.reduction_cache[key] = result
        return result

    def _persistent_reduction(self, dtype, rtype, value):
        k = self.k
        mask = "xmask & rmask"
        if rtype == "welford_reduce":
            n = _float_literal(float(k.rnumel))
            total = k.emit(f"tl.sum(tl.where({mask}, {value}, 0), 1)[:, None]", dtype)
            mean = k.emit(f"{total} / {n}", dtype)
            dev = k.emit(f"tl.where({mask}, {value} - {mean}, 0)", dtype)
            m2 = k.emit(f"tl.sum({dev} * {dev}, 1)[:, None]", dtype)
            weight = k.emit(f"tl.full([1], {n}, {tl_dtype(dtype)})", dtype)
            return mean, m2, weight
        if rtype == "welford_combine":
            parts = [k.emit(f"tl.where({mask}, {v}, 0)", dtype) for v in value]
            out = [k.newvar(dtype) for _ in range(3)]
            k.section.lines.append(f"{out[0]}, {out[1]}, {out[2]} = triton_helpers.welford({', '.join(map(str, parts))}, 1)")
            k.section.lines += [f"{v} = {v}[:, None]" for v in out]
            return tuple(out)
        if rtype in ("argmax", "argmin"):
            # the masked value is [XBLOCK, RBLOCK] even where `value` does not vary along r (an expanded dim)
            masked = k.emit(f"tl.where({mask}, {value}, {self._identity(rtype, value.dtype)})", value.dtype)
            idx = k.emit(f"tl.broadcast_to(rindex, {masked}.shape)", torch.int32)
            # the index reduces as int32 (rindex's type); the result is cast, since it is typed int64 for
            # what the kernel does with it next (int64 constants, an int64 reduction's identity)
            out = k.emit(f"triton_helpers.{rtype}({masked}, {idx}, 1)[:, None]", torch.int32)
            return self.to_dtype(out, torch.int64)
        ident = self._identity(rtype, dtype)
        masked = k.emit(f"tl.where({mask}, {value}, {ident})", dtype)
        return k.emit(_REDUCE[rtype].format(v=masked, t=tl_dtype(dtype)), dtype)

    def _looped_reduction(self, dtype, rtype, value):
        k = self.k
        sec = k.section
        mask = "xmask & rmask"
        shape = "[XBLOCK, RBLOCK]"
        if rtype in ("welford_reduce", "welford_combine"):
            mean, m2, w = k.newvar(dtype), k.newvar(dtype), k.newvar(dtype)
            sec.init += [f"{v} = tl.zeros({shape}, {tl_dtype(dtype)})" for v in (mean, m2, w)]
            nm, n2, nw = k.newvar(dtype), k.newvar(dtype), k.newvar(dtype)
            if rtype == "welford_reduce":
                sec.lines.append(f"{nm}, {n2}, {nw} = triton_helpers.welford_update({mean}, {m2}, {w}, {value})")
            else:
                sec.lines.append(f"{nm}, {n2}, {nw} = triton_helpers.welford_combine({mean}, {m2}, {w}, "
                                 f"{', '.join(map(str, value))})")
            sec.lines += [f"{mean} = tl.where({mask}, {nm}, {mean})", f"{m2} = tl.where({mask}, {n2}, {m2})",
                          f"{w} = tl.where({mask}, {nw}, {w})"]
            om, o2, ow = k.newvar(dtype), k.newvar(dtype), k.newvar(dtype)
            sec.finalize.append(f"{om}, {o2}, {ow} = triton_helpers.welford({mean}, {m2}, {w}, 1)")
            sec.finalize += [f"{v} = {v}[:, None]" for v in (om, o2, ow)]
            return om, o2, ow
        if rtype in ("argmax", "argmin"):
            acc, acc_i = k.newvar(value.dtype), k.newvar(torch.int64)
            ident = self._identity(rtype, value.dtype)
            sec.init += [f"{acc} = tl.full({shape}, {ident}, {tl_dtype(value.dtype)})",
                         f"{acc_i} = tl.full({shape}, 2147483647, tl.int64)"]
            nv, ni = k.newvar(value.dtype), k.newvar(torch.int64)
            sec.lines.append(f"{nv}, {ni} = triton_helpers.{rtype}_update({acc}, {acc_i}, {value}, "
                             f"tl.broadcast_to(rindex, {acc}.shape).to(tl.int64))")
            sec.lines += [f"{acc} = tl.where({mask}, {nv}, {acc})", f"{acc_i} = tl.where({mask}, {ni}, {acc_i})"]
            out = k.newvar(torch.int64)
            sec.finalize.append(f"{out} = triton_helpers.{rtype}({acc}, {acc_i}, 1)[:, None]")
            return out
        acc = k.newvar(dtype)
        ident = self._identity(rtype, dtype)
        sec.init.append(f"{acc} = tl.full({shape}, {ident}, {tl_dtype(dtype)})")
        combine = {"sum": "{a} + {v}", "prod": "{a} * {v}", "max": "triton_helpers.maximum({a}, {v})",
                   "min": "triton_helpers.minimum({a}, {v})", "any": "{a} | {v}"}[rtype]
        sec.lines.append(f"{acc} = tl.where({mask}, {combine.format(a=acc, v=value)}, {acc})")
        out = k.newvar(dtype)
        sec.finalize.append(f"{out} = " + _REDUCE[rtype].format(v=acc, t=tl_dtype(dtype)))
        return out

    @staticmethod
    def _identity(rtype: str, dtype: torch.dtype) -> str:
        if rtype in ("sum", "welford_reduce"):
            return "0"
        if rtype == "prod":
            return "1"
        if rtype == "any":
            return "0"
        largest = rtype in ("min", "argmin")
        if dtype.is_floating_point:
            return 'float("inf")' if largest else 'float("-inf")'
        if dtype == torch.bool:
            return "1" if largest else "0"
        info = torch.iinfo(dtype)
        return str(info.max if largest else info.min)


_REDUCE = {
    "sum": "tl.sum({v}, 1)[:, None]",
    "prod": "triton_helpers.prod({v}, 1)[:, None]",
    "max": "triton_helpers.max2({v}, 1)[:, None]",
    "min": "triton_helpers.min2({v}, 1)[:, None]",
    "any": "(tl.max({v}.to(tl.int8), 1) != 0)[:, None]",
}

_LIBDEVICE_UNARY = {"tanh", "expm1", "log1p", "log10", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh",
                    "acosh", "atanh", "erfc", "erfinv", "lgamma"}
# ops named otherwise in libdevice (CUDA's math library)
_LIBDEVICE_RENAMED = {"i0": "cyl_bessel_i0", "i1": "cyl_bessel_i1", "ndtri": "normcdfinv", "erfcx": "erfcx",
                      "bessel_j0": "j0", "bessel_j1": "j1", "bessel_y0": "y0", "bessel_y1": "y1"}

"""One Triton kernel per fused group.

    pointwise      xindex = pid * XBLOCK + arange(XBLOCK)              1-D tile, masked at the edge
    tiled          yindex [YBLOCK, 1] × xindex [1, XBLOCK]              2-D tile where an access is
                                                                        transposed (codegen/tiling.py)
    persistent     xindex [XBLOCK, 1] × rindex [1, RBLOCK], whole row in registers
    looped         for roffset in range(0, rnumel, RBLOCK): accumulate, reduce after the loop

A scan (cumsum, cumprod) is a reduction whose result is stored element by element: persistent, one
tl.cumsum over the row; looped, the block's tl.cumsum plus a carry of the previous blocks, in the loop.
A sort (ir.Sort) is a scan that is always persistent: the whole row in one block, never outer.

In a looped kernel, a node that needs a reduction's result starts a new loop after it:

    prelude (row values needing no reduction)
    loop 1:  body … accumulators        → after loop 1: reduce; row values using them
    loop 2:  body reading loop-1 results → after loop 2: …

Node bodies run under `TritonOps` (triton_ops.py), which emits one CSE'd line per op. Loads of a
value this kernel stored at the same index reuse the register; stores of buffers nobody outside the
kernel reads are dropped, and those buffers are never allocated.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

import sympy
import torch

from ..errors import CodegenError
from ..lowering import symbolic
from ..lowering.ir import Sort
from ..lowering.sizevars import FloorDiv, ModularIndexing, canonical_vars, index_range, product
from ..lowering.symbolic import hint, size_value
from ..lowering.virtualized import set_ops_handler
from ..scheduler.dependencies import MemoryDep
from ..scheduler.nodes import SchedulerNode
from .heuristics import TILE_XBLOCK_MAX, KernelConfig, multipass_looped_config, pick_config, pick_tile_config
from .online_softmax import OnlineSoftmax, OnlineSoftmaxOps, find_online_softmax
from .recompute import recomputable_nodes
from .tiling import Tiling, choose_tiling, is_outer_reduction
from .triton_ops import RINDEX, XINDEX, YINDEX, CSEVar, StoreLine, TritonOps

INT32_MIN, INT32_MAX = -2**31, 2**31 - 1


@dataclasses.dataclass
class Section:
    """A block of code lines at one place of the kernel (prelude, a loop's body, after a loop)."""

    index: int                   # even: row level (outside loops); odd: inside a reduction loop
    lines: list = dataclasses.field(default_factory=list)
    init: list[str] = dataclasses.field(default_factory=list)       # accumulators, before the loop
    finalize: list = dataclasses.field(default_factory=list)        # reductions, after the loop
    cse: dict[str, CSEVar] = dataclasses.field(default_factory=dict)


def always_multiple_of_16(expr) -> bool:
    """A size expression of positive integer symbols that is a multiple of 16 whatever their values:
    a polynomial whose every coefficient is (no floor division or modulo in it)."""
    if expr is None or isinstance(expr, int) or not isinstance(expr, sympy.Expr) or not expr.free_symbols:
        return False
    expr = sympy.expand(expr)
    if any(not isinstance(a, (sympy.Symbol, sympy.Integer, sympy.Add, sympy.Mul, sympy.Pow))
           for a in sympy.preorder_traversal(expr)):
        return False
    try:
        coeffs = sympy.Poly(expr, *sorted(expr.free_symbols, key=str)).coeffs()
    except sympy.PolynomialError:
        return False
    return all(c.is_Integer and int(c) % 16 == 0 for c in coeffs)


class TritonKernel:
    """Builds the source of one kernel from an ordered list of SchedulerNodes."""

    def __init__(self, nodes: list[SchedulerNode], numel: int, rnumel: int,
                 kernel_local: set[str], buffer_dtypes: dict[str, torch.dtype], persistent_limit: int,
                 online_softmax: bool = True, buffer_spans: dict[str, int] | None = None):
        self.nodes = nodes
        self.name = "triton_kernel"  # the wrapper names it once the kind (poi/per/red) is known
        self.numel = numel
        self.rnumel = rnumel
        # a dynamic graph's sizes are sympy expressions of its size symbols: kernel arguments, not
        # constants; heuristics read their values at the traced sizes, and choose what is right at any
        self.dynamic = not (isinstance(numel, int) and isinstance(rnumel, int))
        self.is_reduction = hint(rnumel) > 1 or any(n.is_reduction() for n in nodes)
        # a sort holds its whole row in one block, whatever the limit (its lowering bounds the length)
        sorts = any(isinstance(getattr(n.node, "data", None), Sort) for n in nodes)
        outer = self.is_reduction and not sorts and is_outer_reduction(nodes)
        self.outer = outer
        # a dynamic graph's symbols by their greatest values + 1, where the ShapeEnv bounds them
        # (mark_dynamic(max=...), torch._check): 32-bit indices and persistent rows need them
        self.size_bounds = {s: sympy.Integer(b + 1) for s, b in symbolic.current().bounds.items()}
        # a persistent reduction's block holds the whole row: for a row length known here, or bounded
        # (then its block is the bound's)
        rows = hint(rnumel) if self.is_reduction else 1
        if sorts:
            persistent_limit = max(persistent_limit, _greatest(rnumel, self.size_bounds) or 0)
        if not isinstance(rnumel, int):
            longest = _greatest(rnumel, self.size_bounds)
            if longest is not None and longest <= persistent_limit:
                rows = longest
            else:
                persistent_limit = 0
        widest = max((buffer_dtypes[name].itemsize for n in nodes for name in n.used_buffer_names()
                      if name not in kernel_local and name in buffer_dtypes), default=4)
        self.config: KernelConfig = pick_config(hint(numel), rows, persistent_limit, outer, widest)
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
        # the sizes by their greatest values; None where a symbol in one is unbounded: then int64
        greatest = [_greatest(s, self.size_bounds) for s in sizes]
        self.int64 = any(g is None or g > INT32_MAX for g in greatest)
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
            ranges = {XINDEX: sympy.sympify(numel), RINDEX: sympy.sympify(rnumel)}
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
        ranges = {**self.var_ranges, **{s: sympy.sympify(size) for s, (size, _) in self.indirect.items()}}
        if self.dynamic:   # each loop's length, and each size symbol, by its greatest value (a bound)
            ranges = {**{v: sympy.Integer(g + 1) for v, r in ranges.items()
                         if (g := _greatest(r - 1, self.size_bounds)) is not None}, **self.size_bounds}
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
            # a looped reduction's result exists after its loop; a scan's, element by element in it
            ready[node.name] = pos + 1 if (node.is_reduction() and self.looped and not node.node.is_scan) else pos
            if node.name in self.recomputed:
                continue
            self.section = self._section(pos)
            self._codegen_node(node, inside, pair)
        if self.looped and not self.outer and sum(i % 2 for i in self.sections) > 1:
            self.config = multipass_looped_config(hint(self.rnumel))
        return self._render()

    def _inside_loop(self, node: SchedulerNode) -> bool:
        if not self.is_reduction:
            return False
        if node.is_reduction():
            return True
        numel = size_value(product(node.body.sizes))
        return numel == size_value(self.numel * self.rnumel) and hint(self.rnumel) > 1

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
            self.var_ranges = {XINDEX: sympy.sympify(self.numel), RINDEX: sympy.sympify(self.rnumel)}
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
        # static sizes are constexpr: Triton folds them (and its interpreter loops over them); a dynamic
        # graph's sizes, and the size symbols its index expressions use, are int arguments
        # (a static size of a dynamic graph's kernel stays constexpr: a runtime row length hides its
        # divisibility from Triton, whose masked loads then go one element at a time)
        # An int argument that may pass int32 is declared int64: Triton would type it by the first
        # launch's value (int32 below 2**31), and a launch site keeps its first binary, so a later
        # call past 2**31 would hand that binary a value it cannot hold.
        def size(n) -> str:
            if isinstance(n, int):
                return ": tl.constexpr"
            return "" if _fits_int32_argument(n, self.size_bounds) else ": tl.int64"
        symbols = {str(s): s for s in (*symbolic.current().sources, *symbolic.current().unbacked)}
        sym_params = [f"{n}{size(symbols[n])}" for n in self.size_symbols()]
        params = [argnames[b] for b in args] + sym_params + [f"xnumel{size(self.numel)}"]
        if self.tiling is not None:
            params = [argnames[b] for b in args] + sym_params + [f"ynumel{size(self.tiling.ynumel)}",
                                                    f"xnumel{size(self.tiling.xnumel)}", "YBLOCK: tl.constexpr"]
        if self.is_reduction:
            params.append(f"rnumel{size(self.rnumel)}")
        params.append("XBLOCK: tl.constexpr")
        if self.is_reduction:
            params.append("RBLOCK: tl.constexpr")
        idx = ".to(tl.int64)" if self.int64 else ""
        jit = "@triton.jit"
        if self.dynamic or self.size_symbols():
            # one binary for every size: Triton would otherwise specialize an int argument on its value
            # (== 1, divisible by 16), and a launch site keeps the binary of its first launch. So for
            # a kernel of static sizes that reads a symbol too (`x * (k // 3)`, k an int input: a
            # binary first launched at k = 1 takes k as the constant 1)
            # A numel that is a multiple of 16 at every size (768*s0) is left to Triton, which then
            # knows it divisible and keeps masked loads vectorized: every size gets the same binary.
            sizes = {"xnumel": self.numel, "rnumel": self.rnumel}
            if self.tiling is not None:
                sizes = {"ynumel": self.tiling.ynumel, "xnumel": self.tiling.xnumel, "rnumel": self.rnumel}
            ints = [p.split(":")[0] for p in params if "constexpr" not in p and not p.startswith(("in_ptr", "out_ptr"))
                    and not always_multiple_of_16(sizes.get(p.split(":")[0]))]
            jit = f"@triton.jit(do_not_specialize={ints!r})"
        if any(isinstance(line, str) and "tl.device_assert(" in line
               for sec in self.sections.values() for line in sec.lines):
            jit = jit.replace("@triton.jit", "@triton_helpers.checked_jit")   # its asserts compiled in
        out = [jit, f"def {self.name}({', '.join(params)}):"]
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

    def size_symbols(self) -> list[str]:
        """The size symbols of a dynamic graph that the kernel's code reads (its index expressions), in
        the graph's order: arguments after the pointers, bound by the wrapper from the graph's inputs."""
        names = [str(s) for s in (*symbolic.current().sources, *symbolic.current().unbacked)]
        if not names:
            return []
        text = "\n".join(ln.text if isinstance(ln, StoreLine) else ln for sec in self.sections.values()
                         for ln in (*sec.init, *sec.lines, *sec.finalize))
        return [n for n in names if re.search(rf"\b{n}\b", text)]

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


def _greatest(size, bounds: dict) -> int | None:
    """The greatest value of a size (an int, or an expression of symbols bounded by `bounds`: symbol →
    its greatest value + 1), or None."""
    if isinstance(size, int) or getattr(size, "is_Integer", False):
        return int(size)
    span = index_range(sympy.sympify(size), bounds)
    return None if span is None else span[1]


def _fits_int32_argument(size, bounds: dict) -> bool:
    """Whether an int argument (a size, or a symbol an index reads) stays within int32 at every value
    its symbols may take (`bounds` holds only symbols that are never negative)."""
    span = index_range(sympy.sympify(size), bounds)
    return span is not None and span[0] >= INT32_MIN and span[1] <= INT32_MAX


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

"""The loop-level IR that lowering produces and the scheduler consumes.

    value a lowering returns            what it is
    ─────────────────────────────────   ──────────────────────────────────────────────
    StorageBox(Pointwise)               an unrealized elementwise body, inlined into readers
    StorageBox(ComputedBuffer)          a realized buffer: Pointwise, Reduction or Scan body + layout
    ScatterBuffer                       atomic adds (index_put, accumulate) or stores (scatter) into a realized buffer
    StorageBox(InputBuffer)             a graph input
    StorageBox(ExternKernel)            an ATen call (mm, conv, attention, fallbacks)
    StorageBox(MatmulTemplate)          mm / addmm / bmm as a Triton template that takes epilogues
    View(StorageBox, size, reindex)     an index remap over any of the above (no copy)
    ReinterpretView(Buffer, layout)     a strided view of a realized buffer (what extern calls take)

Sizes, strides and indices are sympy expressions. A body is a function of index expressions
that calls the `ops` handler (see virtualized.py); `make_loader()` returns such a function for
any value, so lowerings compose by calling loaders inside new bodies.
"""
from __future__ import annotations

import contextvars
import dataclasses
import types
from typing import Any, Callable, Sequence

import sympy
import torch

from .sizevars import (Expr, FloorDiv, ModularIndexing, SignedFloorDiv, SignedMod, contiguous_strides, index_vars,
                       merge_divmod, product, static_int, strided_index, sympify_seq)
from .virtualized import CountingHandler, ops, set_ops_handler
from . import layout_opt
from .symbolic import stride_exprs

Loader = Callable[[Sequence[Expr]], Any]

# The GraphLowering being run, so that realizing a value deep inside a lowering can name and
# register its buffer. Set only by GraphLowering.run().
_current_graph: contextvars.ContextVar[Any] = contextvars.ContextVar("mini_inductor_graph")


def current_graph() -> Any:
    return _current_graph.get()


@dataclasses.dataclass(frozen=True)
class Origin:
    """Where an IR node came from: the FX node, its ATen op and the user's source line."""

    node: str
    op: str
    source: str = ""


@dataclasses.dataclass(frozen=True)
class Layout:
    """Device, dtype, size and stride of a realized buffer; the index of an element is linear."""

    device: torch.device
    dtype: torch.dtype
    size: tuple[Expr, ...]
    stride: tuple[Expr, ...]
    offset: Expr = sympy.Integer(0)

    @staticmethod
    def contiguous(device, dtype, size) -> "Layout":
        size = tuple(sympify_seq(size))
        return Layout(device, dtype, size, tuple(contiguous_strides(size)))

    def index(self, idx: Sequence[Expr]) -> Expr:
        return strided_index(idx, self.stride, self.offset)

    def storage_size(self) -> Expr:
        """Elements of storage the layout spans (offset included)."""
        if any(s == 0 for s in self.size):
            return sympy.Integer(0)
        return self.offset + 1 + sum((s - 1) * st for s, st in zip(self.size, self.stride))

    def numel(self) -> Expr:
        return product(self.size)

    def is_contiguous(self) -> bool:
        return all(st == c for s, st, c in zip(self.size, self.stride, contiguous_strides(self.size)) if s != 1)


class IRNode:
    origins: tuple[Origin, ...] = ()

    def get_size(self) -> list[Expr]:
        raise NotImplementedError

    def get_dtype(self) -> torch.dtype:
        raise NotImplementedError

    def get_device(self) -> torch.device:
        raise NotImplementedError

    def make_loader(self) -> Loader:
        raise NotImplementedError

    def get_numel(self) -> Expr:
        return product(self.get_size())

    def realize(self) -> "Buffer | None":
        """Make this value live in a buffer; return the buffer (views return None if not strided)."""
        return None


# ─── Loop bodies ────────────────────────────────────────────────────────────────────────────────

@dataclasses.dataclass
class Loops(IRNode):
    device: torch.device
    dtype: torch.dtype
    inner_fn: Callable
    ranges: list[Expr]
    origins: tuple[Origin, ...] = ()

    def get_size(self):
        return list(self.ranges)

    def get_dtype(self):
        return self.dtype

    def get_device(self):
        return self.device


@dataclasses.dataclass
class Pointwise(Loops):
    def make_loader(self) -> Loader:
        return self.inner_fn

    def body_cost(self) -> tuple[int, int]:
        """(loads, ops) of one evaluation of the body."""
        counter = CountingHandler()
        with set_ops_handler(counter):
            self.inner_fn(index_vars("c", len(self.ranges)))
        return counter.loads, counter.ops

    @staticmethod
    def create(device, dtype, inner_fn, ranges, origins=()) -> "StorageBox":
        return StorageBox(Pointwise(device, dtype, inner_fn, sympify_seq(ranges), tuple(origins)))


# Reduction types; "welford_reduce" gives (mean, m2, weight) and `output_index` picks one;
# "welford_combine" reduces (mean, m2, weight) triples (a split Welford's second pass) to one.
REDUCTION_TYPES = ("sum", "prod", "max", "min", "argmax", "argmin", "any", "welford_reduce", "welford_combine")


@dataclasses.dataclass
class Reduction(Loops):
    """inner_fn(index, rindex) -> value, reduced over `reduction_ranges` with `reduction_type`."""

    reduction_ranges: list[Expr] = dataclasses.field(default_factory=list)
    reduction_type: str = "sum"
    src_dtype: torch.dtype = torch.float32
    output_index: int = 0

    def reduced_value(self, index, rindex):
        value = self.inner_fn(index, rindex)
        result = ops.reduction(self.dtype, self.src_dtype, self.reduction_type, value)
        if self.reduction_type in ("welford_reduce", "welford_combine"):
            result = result[self.output_index]
        return result


@dataclasses.dataclass
class Scan(Loops):
    """A cumulative op along one dim: element j of a row combines (`scan_type`) the row's values 0..j.
    `ranges` are the other dims (the rows), `scan_ranges` the scanned one; the result has the full
    size, the scanned dim at `dim`. inner_fn(index, rindex) -> value in `compute_dtype` (float32 for
    16-bit floats, int64 for integer sums), stored in `dtype`.

        scan_type   combine of an earlier part a and a later b            eager op
        sum, prod   a + b, a * b                                          cumsum, cumprod
        logsumexp   log(exp(a) + exp(b))                                  logcumsumexp
        max, min    (value, index) pairs: b's where b >= a (<= a) or NaN  cummax, cummin

    max and min give two results, the values and their int64 indices: `output_index` picks one (two
    Scans of one input, one per result, share one scan in a kernel that holds both).

        kernel (codegen/triton_ops.py TritonOps.scan), rows on xindex, the scanned dim on rindex:
        persistent   out = scan(v, 1)                               the whole row in one block
        looped       out = combine(carry, scan(v, 1)); carry = out's last column, per RBLOCK step

    To the scheduler it is a reduction (rows × scanned length) whose store uses every loop.
    """

    scan_ranges: list[Expr] = dataclasses.field(default_factory=list)
    scan_type: str = "sum"
    compute_dtype: torch.dtype = torch.float32
    dim: int = 0
    output_index: int = 0

    def get_size(self):
        size = list(self.ranges)
        size.insert(self.dim, self.scan_ranges[0])
        return size

    def full_index(self, index, rindex) -> list[Expr]:
        full = list(index)
        full.insert(self.dim, rindex[0])
        return full

    def scanned_value(self, index, rindex):
        result = ops.scan(self.compute_dtype, self.scan_type, self.inner_fn(index, rindex))
        # (handlers that only count or record give one placeholder for a pair's scan too)
        return result[self.output_index] if isinstance(result, tuple) else result

    def store(self, name: str, at: Expr, value, rindex) -> None:
        """Store one element's result at `at` of buffer `name`."""
        ops.store(name, at, value)


@dataclasses.dataclass
class Sort(Scan):
    """A row sorted whole (lowering/sort_lowerings.py): element j of a row is the row's j-th smallest
    value (largest where `descending`), with its int64 index in the row as the second result
    (`output_index` picks one; the two Sorts of one input share one sort in a kernel that holds both).
    Equal values keep their input order, as eager's stable=True. `scan_type` is "sort". `kept`: a
    topk's k, the leading columns stored (its buffer has k columns; the rest are masked off), else
    None (the whole row).

        kernel (codegen/triton_ops.py TritonOps.sort): always persistent, the row in one block padded
        to a power of 2; a bitonic network over (value, index) pairs (runtime/triton_helpers.py
        sort_with_index)

    To the scheduler it is a scan: consumers that read an element where it is stored fuse after it.
    """

    descending: bool = False
    kept: Expr | None = None

    def scanned_value(self, index, rindex):
        result = ops.sort(self.compute_dtype, self.descending, self.inner_fn(index, rindex))
        return result[self.output_index] if isinstance(result, tuple) else result

    def store(self, name: str, at: Expr, value, rindex) -> None:
        if self.kept is None:
            ops.store(name, at, value)
            return
        column = ops.index_expr(rindex[0], torch.int64)
        kept = ops.lt(column, ops.index_expr(self.kept, torch.int64) if self.kept.free_symbols
                      else ops.constant(int(self.kept), torch.int64))

        def store():
            ops.store(name, at, value)
            return value
        ops.masked(kept, store, 0)   # (its value, unused)


# ─── Buffers ────────────────────────────────────────────────────────────────────────────────────

class Buffer(IRNode):
    def __init__(self, name: str, layout: Layout, origins: Sequence[Origin] = ()):
        self.name = name
        self.layout = layout
        self.origins = tuple(origins)

    def get_size(self):
        return list(self.layout.size)

    def get_stride(self):
        return list(self.layout.stride)

    def get_dtype(self):
        return self.layout.dtype

    def get_device(self):
        return self.layout.device

    def make_loader(self) -> Loader:
        name, layout = self.name, self.layout
        return lambda idx: ops.load(name, layout.index(idx))

    def realize(self):
        return self

    def __repr__(self):
        size = [str(s) for s in self.layout.size]
        stride = [str(s) for s in self.layout.stride]
        return f"{type(self).__name__}({self.name}, {self.layout.dtype}, size={size}, stride={stride})"


class InputBuffer(Buffer):
    """A graph input (placeholder). `index` is its position in the call's argument list."""

    def __init__(self, name, layout, index: int, storage_offset: int = 0):
        super().__init__(name, layout)
        self.index = index
        self.storage_offset = storage_offset  # the tensor's own offset; our layout offsets are relative to it


class ConstantBuffer(Buffer):
    """A tensor the FX graph holds as an attribute (get_attr); the wrapper receives it at load time."""

    def __init__(self, name, layout, value: torch.Tensor):
        super().__init__(name, layout)
        self.value = value


class ComputedBuffer(Buffer):
    """A realized Pointwise, Reduction or Scan: the unit the scheduler works with."""

    def __init__(self, name, layout, data: Loops, order: Sequence[int] | None = None):
        super().__init__(name, layout, data.origins)
        self.data = data
        # a Pointwise's dims in the order its loops run, outermost first (None: their own order);
        # a permuted layout written in memory order writes (and reads alike layouts) coalesced
        self.order = tuple(order) if order is not None else None

    @property
    def is_reduction(self) -> bool:
        """A kernel with a loop over rows (`get_ranges`' second list): a Reduction or a Scan."""
        return isinstance(self.data, (Reduction, Scan))

    @property
    def is_scan(self) -> bool:
        return isinstance(self.data, Scan)

    def get_ranges(self) -> tuple[list[Expr], list[Expr]]:
        rr = (self.data.reduction_ranges if isinstance(self.data, Reduction)
              else self.data.scan_ranges if isinstance(self.data, Scan) else [])
        ranges = list(self.data.ranges)
        return ([ranges[d] for d in self.order] if self.order is not None else ranges), list(rr)

    def _logical(self, index: Sequence[Expr]) -> list[Expr]:
        if self.order is None:
            return list(index)
        logical: list[Any] = [None] * len(index)
        for position, dim in enumerate(self.order):
            logical[dim] = index[position]
        return logical

    def get_mutation_names(self) -> list[str]:
        """Buffers this kernel writes besides its own (none, except for a ScatterBuffer)."""
        return []

    def store_body(self, index: Sequence[Expr], rindex: Sequence[Expr]) -> None:
        """Run the body for one element: compute the value and store it (the scheduler's and codegen's view)."""
        if isinstance(self.data, Reduction):
            ops.store_reduction(self.name, self.layout.index(index), self.data.reduced_value(index, rindex))
        elif isinstance(self.data, Scan):   # one value per element, stored where it is computed
            self.data.store(self.name, self.layout.index(self.data.full_index(index, rindex)),
                            self.data.scanned_value(index, rindex), rindex)
        else:
            index = self._logical(index)
            ops.store(self.name, self.layout.index(index), self.data.inner_fn(index))

    def __repr__(self):
        kind = "Scan" if self.is_scan else "Reduction" if self.is_reduction else "Pointwise"
        ranges, rranges = self.get_ranges()
        extra = ""
        if self.is_reduction:
            rtype = self.data.scan_type if self.is_scan else self.data.reduction_type
            extra = f", {kind.lower()}={rtype} over {[str(r) for r in rranges]}"
        return (f"ComputedBuffer({self.name}, {kind}, {self.layout.dtype}, ranges={[str(r) for r in ranges]}"
                f"{extra}, stride={[str(s) for s in self.layout.stride]})")


class ScatterBuffer(ComputedBuffer):
    """Adds a Pointwise's values into `target` at computed positions with atomics (mode `atomic_add`),
    so values landing on the same element all count (index_put with accumulate=True); or stores them
    there (mode `scatter`: of values landing on one element any one is kept, scatter without reduce).

        target  = ComputedBuffer(copy of the input)          an ordinary kernel, fusable
        scatter = ScatterBuffer(target, values, indexer)     target[indexer(i)] += values[i]  (or =)
        readers load `target`, after the scatter              (the scatter mutates target)

    `output_indexer(index)` gives the element of `target` for iteration `index` (it may call
    ops.indirect_indexing). The scatter allocates nothing: its name only orders the kernels. It runs
    in a kernel of its own: every element of `target` must be written before any program adds to
    (or stores into) it, and every add or store done before anyone reads it.
    """

    def __init__(self, name, target: ComputedBuffer, data: Pointwise, output_indexer: Callable, mode: str = "atomic_add"):
        super().__init__(name, target.layout, data)
        self.target = target
        self.output_indexer = output_indexer
        self.mode = mode

    def get_mutation_names(self) -> list[str]:
        return [self.target.name]

    def store_body(self, index, rindex) -> None:
        position = self.target.layout.index(self.output_indexer(index))
        ops.store(self.target.name, position, self.data.inner_fn(index), self.mode)

    def __repr__(self):
        return (f"ScatterBuffer({self.name}, {self.mode} into {self.target.name}, {self.layout.dtype}, "
                f"ranges={[str(r) for r in self.data.ranges]})")


class ExternKernel(Buffer):
    """A call of an ATen op on real tensors: library calls (mm, conv, attention) and fallbacks.

    `args`/`kwargs` hold IR buffers (passed by name) and plain Python values. The output layout is
    the FakeTensor's; `layout is None` means several outputs, taken apart by MultiOutput nodes.
    """

    def __init__(self, name, layout: Layout | None, op, args, kwargs, *, fallback: bool, origins=(),
                 device: torch.device | None = None, cudagraph_unsafe: bool = False):
        super().__init__(name, layout, origins)  # type: ignore[arg-type]
        self.op = op
        self.args = args
        self.kwargs = kwargs
        self.fallback = fallback
        self.device = device if device is not None else (layout.device if layout else torch.device("cpu"))
        self.cudagraph_unsafe = cudagraph_unsafe
        self.defines_symbols: tuple[str, ...] = ()   # unbacked size symbols `call` reads from its result

    def get_device(self):
        return self.device

    def inputs(self) -> list[Buffer]:
        """Buffers the call reads (views resolved to the buffer they view)."""
        found: list[Buffer] = []

        def visit(x):
            if isinstance(x, ReinterpretView):
                found.append(x.data)
            elif isinstance(x, Buffer):
                found.append(x)
            elif isinstance(x, (list, tuple)):
                for y in x:
                    visit(y)
        visit(self.args)
        visit(list(self.kwargs.values()))
        return found

    @property
    def op_name(self) -> str:
        if isinstance(self.op, types.FunctionType):   # a runtime function (its str holds an address)
            return f"{self.op.__module__}.{self.op.__qualname__}"
        return str(self.op)

    def __repr__(self):
        kind = "FallbackKernel" if self.fallback else "ExternKernel"
        out = "multiple outputs" if self.layout is None else f"{self.layout.dtype}, size={[str(s) for s in self.layout.size]}"
        return f"{kind}({self.name}, {self.op_name}, {out})"


class MatmulTemplate(Buffer):
    """mm, addmm (bias added to the accumulator) or bmm generated as a Triton template
    (codegen/matmul_template.py), into which the scheduler fuses pointwise epilogues.

        out[b, m, n] = sum_k a[b, m, k] * b[b, k, n]  (+ bias[m, n] broadcast)      b: bmm only

    `a`, `b` (and `bias`) are realized tensors with any strides. `op` is the ATen op that computes the
    same: the scheduler may still choose cuBLAS (scheduler/matmul_choice.py), then `as_extern()` is the
    call. `choice` and `choice_reason` are the scheduler's ("template", "cublas" or "measure").
    """

    def __init__(self, name, layout: Layout, op, a: IRNode, b: IRNode, bias: IRNode | None = None, origins=()):
        super().__init__(name, layout, origins)
        self.op = op
        self.a, self.b, self.bias = a, b, bias
        self.choice = "template"
        self.choice_reason = ""

    @property
    def batched(self) -> bool:
        return len(self.layout.size) == 3

    def sizes(self) -> tuple[int, int, int, int]:
        """(B, M, N, K) as ints (B is 1 for mm and addmm)."""
        *batch, m, k = [static_int(s) for s in self.a.get_size()]
        n = static_int(self.b.get_size()[-1])
        return (batch[0] if batch else 1), m, n, k

    def inputs(self) -> list[Buffer]:
        return [x.data if isinstance(x, ReinterpretView) else x for x in (self.a, self.b, self.bias) if x is not None]

    def get_mutation_names(self) -> list[str]:
        return []   # it writes its own output only

    def as_extern(self) -> "ExternKernel":
        """The ATen call computing the same buffer (cuBLAS on CUDA), under the same name."""
        args = (self.a, self.b) if self.bias is None else (self.bias, self.a, self.b)
        return ExternKernel(self.name, self.layout, self.op, args, {}, fallback=False, origins=self.origins)

    def __repr__(self):
        return (f"MatmulTemplate({self.name}, {self.op}, {self.layout.dtype}, "
                f"size={[str(s) for s in self.layout.size]}, choice={self.choice})")


class MultiOutput(Buffer):
    """Output `path` (a tuple of indices) of a multi-output ExternKernel."""

    def __init__(self, name, layout, parent: ExternKernel, path: tuple[int, ...]):
        super().__init__(name, layout, parent.origins)
        self.parent = parent
        self.path = path


# ─── Storage and views ──────────────────────────────────────────────────────────────────────────

class StorageBox(IRNode):
    """Holds a Pointwise until something forces it into a buffer (several readers, an extern call, an output)."""

    def __init__(self, data: IRNode):
        self.data = data
        self.preferred_stride: tuple | None = None   # the stride `realize()` gives it (None: contiguous)

    @property
    def origins(self):  # type: ignore[override]
        return self.data.origins

    def get_size(self):
        return self.data.get_size()

    def get_dtype(self):
        return self.data.get_dtype()

    def get_device(self):
        return self.data.get_device()

    def make_loader(self) -> Loader:
        return self.data.make_loader()

    def is_realized(self) -> bool:
        return isinstance(self.data, Buffer)

    def realize(self, stride: Sequence[Expr] | None = None) -> Buffer:
        if isinstance(self.data, Buffer):
            return self.data
        assert isinstance(self.data, Pointwise), self.data
        size = sympify_seq(self.data.ranges)
        stride = stride if stride is not None else self.preferred_stride
        layout = Layout(self.data.device, self.data.dtype, tuple(size),
                        tuple(sympify_seq(stride)) if stride is not None else tuple(contiguous_strides(size)))
        graph = current_graph()
        order = None
        if stride is not None and getattr(getattr(graph, "gm", None), "meta", {}).get(layout_opt.MARK):
            # NHWC buffers of the channels-last pass (layout_opt.py) are written in memory order
            order = sorted(range(len(size)), key=lambda d: (-int(stride[d]), d))
            order = None if order == list(range(len(size))) else order
        buf = ComputedBuffer(graph.new_buffer_name(), layout, self.data, order)
        graph.register_buffer(buf)
        self.data = buf
        return buf

    def mark_reuse(self, uses: int, *, reads_threshold: int, opcount_threshold: int) -> None:
        """Realize a body that several readers would otherwise each recompute, or that grew too big."""
        if not isinstance(self.data, Pointwise):
            return
        loads, nops = self.data.body_cost()
        if uses > 1 and (nops > 1 or loads > 1) or uses > reads_threshold or nops > opcount_threshold:
            self.realize()

    def __repr__(self):
        return f"StorageBox({self.data!r})"


class View(IRNode):
    """An index remap: element `idx` of the view is element `reindex(idx)` of `data`."""

    def __init__(self, data: IRNode, size: Sequence[Expr], reindex: Callable[[Sequence[Expr]], Sequence[Expr]]):
        self.data = data
        self.size = sympify_seq(size)
        self.reindex = reindex

    @property
    def origins(self):  # type: ignore[override]
        return self.data.origins

    def get_size(self):
        return list(self.size)

    def get_dtype(self):
        return self.data.get_dtype()

    def get_device(self):
        return self.data.get_device()

    def make_loader(self) -> Loader:
        inner, reindex = self.data.make_loader(), self.reindex
        return lambda idx: inner(reindex(idx))

    def unwrap(self) -> tuple[IRNode, Callable]:
        """The innermost non-view value and the composed reindex to reach it."""
        reindex = self.reindex
        data = self.data
        while isinstance(data, View):
            outer, inner_reindex = reindex, data.reindex
            reindex = (lambda o, i: (lambda idx: i(o(idx))))(outer, inner_reindex)
            data = data.data
        return data, reindex

    def as_strided_layout(self) -> "ReinterpretView | None":
        """This view as a strided layout over a realized buffer, if it is one (linear index, no div/mod)."""
        base, reindex = self.unwrap()
        if isinstance(base, StorageBox):
            base = base.data
        if isinstance(base, ReinterpretView):
            inner_layout, base_buf = base.layout, base.data
        elif isinstance(base, Buffer) and base.layout is not None:
            inner_layout, base_buf = base.layout, base
        else:
            return None
        idx = index_vars("v", len(self.size))
        flat = merge_divmod(sympy.expand(inner_layout.index(reindex(idx))))
        # a division of the index is no stride; one of sizes only (a dynamic buffer's stride
        # 6*((s0 + 2)//3)) is a coefficient like any other (fuzz seed 236 prog 243: the expand of such
        # a buffer, returned, was copied dense where eager returns a view with stride 0)
        divisions = flat.atoms(FloorDiv, ModularIndexing, SignedFloorDiv, SignedMod)
        if any(a.free_symbols & set(idx) for a in divisions):
            return None
        if flat.free_symbols <= set(idx):
            # static sizes: the terms of the expanded index are its strides and offset, read at once
            # (coeff, subs and a second expand were most of a ViT compile's view handling)
            terms = dict(flat.as_coefficients_dict())
            stride = [terms.pop(v, sympy.Integer(0)) for v in idx]
            offset = terms.pop(sympy.Integer(1), sympy.Integer(0))
            if terms:
                return None  # not linear in the index
        else:
            stride = [flat.coeff(v) for v in idx]
            offset = flat.subs({v: 0 for v in idx})
            if sympy.expand(offset + sum(st * v for st, v in zip(stride, idx)) - flat) != 0:
                return None  # not linear in the index
        # non-negative integers, or (a dynamic graph's) products and sums of its positive size symbols,
        # or differences its ShapeEnv shows non-negative (s0 - 2, the rows of a split's last chunk)
        if any(not _nonnegative(st) for st in stride) or not _nonnegative(offset):
            return None
        layout = Layout(inner_layout.device, inner_layout.dtype, tuple(self.size), tuple(stride), offset)
        return ReinterpretView(base_buf, layout)

    def realize(self):
        self.data.realize()
        return None

    def __repr__(self):
        return f"View({self.data!r}, size={[str(s) for s in self.size]})"


def _nonnegative(e: Expr) -> bool:
    if not e.is_integer:
        return False
    if e.is_nonnegative:
        return True
    from .symbolic import decide
    if decide(e >= 0) is True:
        return True
    # a product, expanded, of factors the ShapeEnv bounds one by one: s0*(2*k + 1), the row stride of a
    # pad by an int argument k, whose guards hold 2*k + 1 >= 0 but no range of k (fuzz seed 2432 prog 22)
    factored = sympy.factor_terms(e)
    return isinstance(factored, sympy.Mul) and all(_nonnegative(f) for f in factored.args)


class ReinterpretView(IRNode):
    """A buffer seen through another strided layout (what `as_strided` on its storage gives)."""

    def __init__(self, data: Buffer, layout: Layout, view_of_input: bool = False):
        self.data = data
        self.layout = layout
        # an output AOT autograd regenerates from a graph input (graph.py _input_alias): made by a view
        # op where one gives this layout, for its backward (wrapper.py aliased_view)
        self.view_of_input = view_of_input
        # an output that must be a tensor object of its own though its layout is its buffer's (another
        # output is that buffer: eager's y and y.view(y.shape) are two objects)
        self.own_object = False

    def is_its_buffer(self) -> bool:
        """The view is its buffer as it is: same size, stride and dtype, no offset (the buffer's tensor
        has its IR layout at run time: extern results are restrided to it, reuses take it). A view of
        a graph input that AOT autograd regenerates stays a view (aliased_view), and so does an output
        that must be an object of its own."""
        lay, data = self.layout, getattr(self.data, "layout", None)
        return (not self.view_of_input and not self.own_object and isinstance(data, Layout) and lay.offset == 0
                and data.offset == 0 and lay.dtype == data.dtype and tuple(lay.size) == tuple(data.size)
                and tuple(lay.stride) == tuple(data.stride))

    @property
    def origins(self):  # type: ignore[override]
        return self.data.origins

    def get_size(self):
        return list(self.layout.size)

    def get_dtype(self):
        return self.layout.dtype

    def get_device(self):
        return self.layout.device

    def make_loader(self) -> Loader:
        name, layout = self.data.name, self.layout
        return lambda idx: ops.load(name, layout.index(idx))

    def __repr__(self):
        return f"ReinterpretView({self.data.name}, size={[str(s) for s in self.layout.size]}, stride={[str(s) for s in self.layout.stride]}, offset={self.layout.offset})"


def realize_as_tensor(x: IRNode) -> Buffer | ReinterpretView:
    """What an extern call receives: a buffer or a strided view of one, copying into a buffer if needed."""
    if isinstance(x, StorageBox):
        return x.realize()
    if isinstance(x, ReinterpretView):
        return x
    if isinstance(x, Buffer):
        return x
    if isinstance(x, View):
        base, _ = x.unwrap()
        base.realize()
        strided = x.as_strided_layout()
        if strided is not None:
            return strided
    # not expressible as strides (or a body): copy into a contiguous buffer
    box = Pointwise.create(x.get_device(), x.get_dtype(), x.make_loader(), x.get_size(), x.origins)
    return box.realize()


@dataclasses.dataclass(frozen=True)
class OpaqueInput:
    """A graph argument that is an object, not a tensor or a literal (a process group or device mesh
    that DTensor code passes, a script object): the generated code hands the caller's object on."""

    index: int   # its position in the call's arguments


def fixed_layout_from_tensor(t: torch.Tensor) -> Layout:
    return Layout(t.device, t.dtype, tuple(sympify_seq(t.shape)), tuple(stride_exprs(t)),
                  sympy.Integer(t.storage_offset()))


def static_sizes(x: IRNode) -> list[int]:
    return [static_int(s) for s in x.get_size()]


def buffer_names(value) -> list[str]:
    """Names of the IR buffers in a (nested) argument value, in order; a view names the buffer it views."""
    if isinstance(value, ReinterpretView):
        return [value.data.name]
    if isinstance(value, Buffer):
        return [value.name]
    if isinstance(value, (list, tuple)):
        return [n for v in value for n in buffer_names(v)]
    if isinstance(value, dict):
        return buffer_names(list(value.values()))
    return []

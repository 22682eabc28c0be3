"""The wrapper IR: the typed lines that WrapperCodegen builds, printed to a Python module at the end.

Each line carries structured data (names, sizes, the kernel's signature); only `emit` formats text,
so another printer could consume the same lines.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import sympy
import torch

from ..lowering.ir import Buffer, Layout, OpaqueInput, ReinterpretView, buffer_names
from ..lowering.subgraphs import Subgraph
from ..lowering.symbolic import hint, nonzero, size_value, to_expr
from .triton_ops import texpr


def size_source(x) -> str:
    """A size as Python source: its int, or (in a dynamic graph) an expression of the size symbols
    that `call` binds from its inputs."""
    x = size_value(x)
    return str(x) if isinstance(x, int) else texpr(x, python=True)


def float_source(x: sympy.Expr) -> str:
    """A float made of sizes as Python source. A quotient whose divisor may be 0 (autograd's
    2 / (n - correction) of var's backward) divides as eager's C++ does, inf or NaN there: through a
    float64 tensor, where Python's `/` raises ZeroDivisionError."""
    num, den = sympy.fraction(sympy.together(x))
    if den.free_symbols and not nonzero(den):
        return f"float(torch.tensor({sympy.pycode(num)}, dtype=torch.float64) / ({sympy.pycode(den)}))"
    return f"({sympy.pycode(x)})"


def _ints(xs) -> str:
    vals = [size_source(x) for x in xs]
    return "(" + ", ".join(vals) + ("," if len(vals) == 1 else "") + ")"


def storage_elements(size, stride):
    """Elements of storage a (size, stride) layout at offset 0 spans: an int, or a sympy expression of
    the size symbols (sizes of a dynamic graph are at least 2, so none of them is 0)."""
    size, stride = [size_value(s) for s in size], [size_value(s) for s in stride]
    if any(isinstance(s, int) and s == 0 for s in size):
        return 0
    return size_value(1 + sum((s - 1) * st for s, st in zip(size, stride)))


@dataclasses.dataclass
class AllocateLine:
    """A fresh buffer; the memory plan may turn it into a ReuseLine of a dead buffer with the same key."""

    name: str
    size: tuple
    stride: tuple
    dtype: torch.dtype
    device: torch.device

    def reuse_key(self) -> tuple:
        """(device, dtype, storage elements): buffers with equal keys can share one storage."""
        return (str(self.device), self.dtype, storage_elements(self.size, self.stride))

    def nbytes(self) -> int:
        return hint(storage_elements(self.size, self.stride)) * self.dtype.itemsize

    def emit(self) -> str:
        return (f"{self.name} = empty_strided({_ints(self.size)}, {_ints(self.stride)}, "
                f"device='{self.device}', dtype={self.dtype})")


@dataclasses.dataclass
class ReuseLine:
    """`new` takes over the storage of `old` (dead, same reuse key); `old`'s name is dropped.

    `inplace`: `old` is an input of the kernel about to write `new`, read at the same index it writes.
    """

    old: str
    new: AllocateLine
    old_size: tuple
    old_stride: tuple
    inplace: bool = False

    @property
    def name(self) -> str:
        return self.new.name

    def emit(self) -> str:
        why = "in-place" if self.inplace else "reuse"
        same = ([size_value(s) for s in self.old_size] == [size_value(s) for s in self.new.size]
                and [size_value(s) for s in self.old_stride] == [size_value(s) for s in self.new.stride])
        if same:
            return f"{self.new.name} = {self.old}; del {self.old}  # {why}"
        return (f"{self.new.name} = torch.as_strided({self.old}, {_ints(self.new.size)}, "
                f"{_ints(self.new.stride)}); del {self.old}  # {why}")


@dataclasses.dataclass
class FreeLine:
    """Buffers dead after this point. Those the memory plan hands to a later allocation emit nothing."""

    names: list[str]
    reused: set[str] = dataclasses.field(default_factory=set)
    at_return: bool = False      # right before `return`: the frame's end frees them, no line needed

    def emit(self) -> str:
        names = [n for n in self.names if n not in self.reused]
        return "del " + ", ".join(names) if names and not self.at_return else ""


@dataclasses.dataclass
class KernelCallLine:
    kernel: str
    args: list[str]
    numel: int
    rnumel: int | None
    meta: dict[str, int]
    num_warps: int
    comment: str
    ynumel: int | None = None    # a 2-D tiled kernel: its Y size (then `numel` is its X size)
    device_guard: int | None = None   # launch under this GPU's device guard (graphs on several GPUs)
    size_symbols: list[str] = dataclasses.field(default_factory=list)   # a dynamic graph's, after the pointers

    def grid(self) -> tuple:
        """Programs per grid axis: ints, or (a dynamic graph) Python expressions of the size symbols."""
        xblocks = _blocks(self.numel, self.meta["XBLOCK"])
        if self.ynumel is None:
            return (xblocks,)
        return (_blocks(self.ynumel, self.meta["YBLOCK"]), xblocks)

    def size_args(self) -> list[int]:
        """The size arguments after the pointers (what KERNEL_LAUNCHES records for precompiling)."""
        sizes = [self.numel] + ([self.rnumel] if self.rnumel is not None else [])
        return ([self.ynumel] if self.ynumel is not None else []) + sizes

    def emit(self) -> str:
        grid = "(" + ", ".join(map(str, self.grid())) + ("," if self.ynumel is None else "") + ")"
        sizes = [size_source(s) for s in self.size_args()]
        meta = ", ".join(f"{k}={v}" for k, v in self.meta.items())
        args = ", ".join(self.args + self.size_symbols + sizes)
        launch = f"{self.kernel}[{grid}]({args}, {meta}, num_warps={self.num_warps})"
        if self.device_guard is not None:
            launch = f"with torch.cuda._DeviceGuard({self.device_guard}):\n    {launch}"
        return f"# {self.comment}\n{launch}"


@dataclasses.dataclass
class TemplateCallLine(KernelCallLine):
    """A matmul template's launch (codegen/matmul_template.py): its own grid (tiles, and the batch),
    block sizes as constexpr arguments and its pipeline depth (a compile option of the launch)."""

    launch_grid: tuple = ()
    num_stages: int = 3
    # a template loading through TMA descriptors: (its pointer-load twin, the buffers whose addresses
    # must be 16-byte aligned for the descriptors); the twin runs where one is not
    unaligned: tuple[str, tuple[str, ...]] | None = None

    def grid(self) -> tuple:
        return self.launch_grid

    def size_args(self) -> list[int]:
        return []

    def emit(self) -> str:
        grid = "(" + ", ".join(map(str, self.launch_grid)) + ("," if len(self.launch_grid) == 1 else "") + ")"
        meta = ", ".join(f"{k}={v}" for k, v in self.meta.items())

        def launch_of(kernel: str) -> str:
            return (f"{kernel}[{grid}]({', '.join(self.args)}, {meta}, num_warps={self.num_warps}, "
                    f"num_stages={self.num_stages})")
        launch = launch_of(self.kernel)
        if self.unaligned is not None:
            twin, buffers = self.unaligned
            aligned = " and ".join(f"{b}.data_ptr() % 16 == 0" for b in buffers)
            launch = (f"if {aligned}:\n    {launch}\nelse:   # TMA needs 16-byte aligned addresses\n"
                      f"    {launch_of(twin)}")
        if self.device_guard is not None:
            launch = f"with torch.cuda._DeviceGuard({self.device_guard}):\n" + "\n".join(
                "    " + ln for ln in launch.splitlines())
        return f"# {self.comment}\n{launch}"


def _blocks(numel, block: int):
    numel = size_value(numel)
    if isinstance(numel, int):
        return -(-numel // block)
    return f"({size_source(numel)} + {block - 1}) // {block}"


def strides_guard(fresh: "AllocateLine | None") -> str:
    """The line after an ATen call that gives its output `fresh` the strides the kernels reading it
    were generated for: ATen may pick other strides than its FakeTensor said (batch norm's statistics
    path on a permuted input does), and a kernel indexing with the predicted ones reads wrong elements.
    Each call compares the strides; only a mismatch calls `restrided` (a copy where observable)."""
    if fresh is None:   # a view or an in-place result: its strides follow from its input's
        return ""
    return f"\nif {fresh.name}.stride() != {_ints(fresh.stride)}: {fresh.name} = restrided({fresh.name}, " \
           f"{_ints(fresh.size)}, {_ints(fresh.stride)})"


@dataclasses.dataclass
class ExternCallLine:
    name: str
    op: Any
    args: Any
    kwargs: dict
    comment: str
    fresh: AllocateLine | None = None   # the layout ATen allocates `name` with; None: it may alias an input
    binds: tuple[tuple[str, str], ...] = ()   # (unbacked symbol, path in the result) read right after the call

    def buffer_args(self) -> list[str]:
        """Names of the buffers the call reads (views resolved to the buffer they view)."""
        return buffer_names([self.args, list(self.kwargs.values())])

    def emit(self) -> str:
        args = ", ".join(render_arg(a) for a in self.args)
        kwargs = "".join(f", {k}={render_arg(v)}" for k, v in self.kwargs.items())
        if kwargs and not args:
            kwargs = kwargs[2:]
        binds = "".join(f"\n{sym} = {self.name}{path}" for sym, path in self.binds)
        return f"# {self.comment}\n{self.name} = {render_op(self.op)}({args}{kwargs})" + binds + strides_guard(self.fresh)


@dataclasses.dataclass
class MultiOutputLine:
    name: str
    parent: str
    path: tuple[int, ...]
    fresh: AllocateLine | None = None   # as ExternCallLine.fresh, for this output of the call

    def emit(self) -> str:
        return f"{self.name} = {self.parent}" + "".join(f"[{i}]" for i in self.path) + strides_guard(self.fresh)


@dataclasses.dataclass
class ReturnLine:
    values: list[Any]            # IR values (graph outputs) or, in a partition, buffer names

    def emit(self) -> str:
        items = [v if isinstance(v, str) else render_arg(v) for v in self.values]
        return "return (" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


@dataclasses.dataclass
class PartitionCallLine:
    """`call` runs a cudagraph-safe partition function; names it frees inside are dropped here first."""

    function: str
    inputs: list[str]
    outputs: list[str]
    freed_inside: list[str]      # inputs whose last use is inside: the caller lets go of them
    symbols: list[str] = dataclasses.field(default_factory=list)   # a dynamic graph's sizes, after them

    def emit(self) -> str:
        args = f"{self.function}_args"
        lines = [f"{args} = [{', '.join(self.inputs + self.symbols)}]"]
        if self.freed_inside:
            lines.append("del " + ", ".join(self.freed_inside))
        call = f"{self.function}({args})"
        if self.outputs:
            call = ", ".join(self.outputs) + ("," if len(self.outputs) == 1 else "") + " = " + call
        return "\n".join(lines + [call])


WrapperLine = (AllocateLine | ReuseLine | FreeLine | KernelCallLine | TemplateCallLine | ExternCallLine | MultiOutputLine | ReturnLine
               | PartitionCallLine)


def render_op(op) -> str:
    if isinstance(op, torch._ops.OpOverload):
        return f"torch.ops.{op.namespace}.{op._opname}.{op._overloadname}"
    if isinstance(op, torch._ops.HigherOrderOperator):   # called with its functions (lowering/subgraphs.py)
        return f"torch.ops.higher_order.{op.name()}"
    if op.__module__ == "_operator":   # size arithmetic of a dynamic graph (n / (n - 1) of a batch norm)
        return f"operator.{op.__name__}"
    return f"{op.__module__}.{op.__qualname__}"


def render_arg(a) -> str:
    if isinstance(a, OpaqueInput):   # the argument, by the name `call` unpacks it as (wrapper.py)
        return f"_unused_arg{a.index}"
    if isinstance(a, Subgraph):   # a higher-order op's function, defined in the module
        return a.name
    if isinstance(a, ReinterpretView):
        lay = a.layout
        if a.is_its_buffer():   # as_strided to the layout the tensor has: an op a call for nothing
            return a.data.name
        helper = "aliased_view" if getattr(a, "view_of_input", False) else "reinterpret"
        return (f"{helper}({a.data.name}, {_ints(lay.size)}, {_ints(lay.stride)}, "
                f"{size_source(lay.offset)})")
    if isinstance(a, Buffer):
        return a.name
    if isinstance(a, (list, tuple)):
        inner = ", ".join(render_arg(x) for x in a)
        return f"[{inner}]" if isinstance(a, list) else f"({inner}{',' if len(a) == 1 else ''})"
    if isinstance(a, torch.dtype):
        return str(a)
    if isinstance(a, torch.device):
        return f"torch.device('{a}')"
    if isinstance(a, torch.memory_format):
        return str(a)
    if isinstance(a, torch.layout):
        return str(a)
    if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):   # a FakeTensor's size, given as is
        a = a.node.expr
    if isinstance(a, sympy.Basic):   # a dynamic graph's size (an int output, an argument of an ATen call)
        a = to_expr(a)   # (torch's own functions of sizes, in a float made of them, become ours)
        if isinstance(a, sympy.core.relational.Relational) and a.lhs.is_integer and a.rhs.is_integer:
            return f"({size_source(a.lhs)} {a.rel_op} {size_source(a.rhs)})"   # a comparison of sizes
        return size_source(a) if a.is_integer else float_source(a)   # or a float made of sizes
    if isinstance(a, float):
        return repr(a) if a == a and a not in (float("inf"), float("-inf")) else f"float('{a}')"
    return repr(a)

"""The wrapper: a list of typed lines, printed to a Python module at the end.

Each line carries structured data (names, sizes, the kernel's signature); only `emit` formats text,
so another printer could consume the same lines.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import torch

from ..lowering.ir import Buffer, ReinterpretView
from ..lowering.sizevars import static_int


def _ints(xs) -> str:
    vals = [static_int(x) for x in xs]
    return "(" + ", ".join(map(str, vals)) + ("," if len(vals) == 1 else "") + ")"


@dataclasses.dataclass
class AllocateLine:
    name: str
    size: tuple
    stride: tuple
    dtype: torch.dtype
    device: torch.device

    def emit(self) -> str:
        return (f"{self.name} = empty_strided({_ints(self.size)}, {_ints(self.stride)}, "
                f"device='{self.device}', dtype={self.dtype})")


@dataclasses.dataclass
class FreeLine:
    names: list[str]

    def emit(self) -> str:
        return "del " + ", ".join(self.names)


@dataclasses.dataclass
class KernelCallLine:
    kernel: str
    args: list[str]
    numel: int
    rnumel: int | None
    meta: dict[str, int]
    num_warps: int
    comment: str

    def emit(self) -> str:
        xblock = self.meta["XBLOCK"]
        grid = f"({-(-self.numel // xblock)},)"
        sizes = [str(self.numel)] + ([str(self.rnumel)] if self.rnumel is not None else [])
        meta = ", ".join(f"{k}={v}" for k, v in self.meta.items())
        return (f"# {self.comment}\n"
                f"{self.kernel}[{grid}]({', '.join(self.args + sizes)}, {meta}, num_warps={self.num_warps})")


@dataclasses.dataclass
class ExternCallLine:
    name: str
    op: Any
    args: Any
    kwargs: dict
    comment: str

    def emit(self) -> str:
        args = ", ".join(render_arg(a) for a in self.args)
        kwargs = "".join(f", {k}={render_arg(v)}" for k, v in self.kwargs.items())
        if kwargs and not args:
            kwargs = kwargs[2:]
        return f"# {self.comment}\n{self.name} = {render_op(self.op)}({args}{kwargs})"


@dataclasses.dataclass
class MultiOutputLine:
    name: str
    parent: str
    path: tuple[int, ...]

    def emit(self) -> str:
        return f"{self.name} = {self.parent}" + "".join(f"[{i}]" for i in self.path)


@dataclasses.dataclass
class ReturnLine:
    values: list[Any]

    def emit(self) -> str:
        items = [render_arg(v) for v in self.values]
        return "return (" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


WrapperLine = AllocateLine | FreeLine | KernelCallLine | ExternCallLine | MultiOutputLine | ReturnLine


def render_op(op) -> str:
    if isinstance(op, torch._ops.OpOverload):
        return f"torch.ops.{op.namespace}.{op._opname}.{op._overloadname}"
    return f"{op.__module__}.{op.__qualname__}"


def render_arg(a) -> str:
    if isinstance(a, ReinterpretView):
        lay = a.layout
        return (f"reinterpret({a.data.name}, {_ints(lay.size)}, {_ints(lay.stride)}, "
                f"{static_int(lay.offset)})")
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
    if isinstance(a, float):
        return repr(a) if a == a and a not in (float("inf"), float("-inf")) else f"float('{a}')"
    return repr(a)

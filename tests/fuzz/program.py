"""A fuzz program: inputs (how to build them) and straight-line statements, as data and as source.

    Program.to_source() -> "def make_inputs(device): ...\\ndef f(x0, x1): ..."
    Program.to_source() -> "def make_inputs(device, sizes=0): ..."   # with other size sets (--dynamic)
    Program.to_dict() / Program.from_dict(d)   # what travels to and from a worker process

An argument is a tensor or a Python number (dtype "int" or "float": `x3 = 4`), as user code passes a
step count or a scale: Dynamo makes an int a SymInt input under dynamic shapes and a float a 0-d tensor
input or a constant it guards on. Under --dynamic a number also takes other values at the other size
sets (`other_values`, sizes.py).

A program is plain Python text once rendered, so the thing that runs in a worker, the thing the
shrinker edits and the repro script that gets written are the same code.
"""
from __future__ import annotations

import dataclasses
import re

# Input layouts: how the tensor handed to the function is made from a dense base tensor.
# "channels_last" (4-D only; the pooling family asks for it): dense with the channels innermost.
LAYOUTS = ("contiguous", "transposed", "strided", "expanded", "offset", "channels_last")

VAR = re.compile(r"\b[xv]\d+\b")
SCALARS = ("int", "float")    # dtypes of Python-number arguments
LOW_FLOAT = re.compile(r"torch\.(float32|float16|bfloat16)\b")


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """One argument of the program: `shape` is what the function sees; `layout` says how it is made."""
    name: str
    shape: tuple
    dtype: str                      # a torch dtype's name: "float32", "int64", "bool", ...
    layout: str = "contiguous"
    requires_grad: bool = False
    values: tuple | None = None     # fixed contents (index tensors), flattened; None: random
    low: float = -2.0               # random values are drawn from [low, high)
    high: float = 2.0
    # --dynamic: its shape at each other size set the compiled function is also called at (sizes.py);
    # () where there are none
    other_shapes: tuple = ()
    # a Python number (dtype "int" or "float"): its value, its values at the other size sets, and
    # whether 0 is out of its domain (a divisor: sizes.py gives 0 only where eager raises for it)
    value: int | float | None = None
    other_values: tuple = ()
    nonzero: bool = False

    @property
    def is_scalar(self) -> bool:
        return self.dtype in SCALARS

    def at(self, sizes: int) -> "InputSpec":
        """This input as size set `sizes` builds it (0: the traced call's sizes)."""
        if sizes == 0:
            return self
        if self.is_scalar:
            return dataclasses.replace(self, value=self.other_values[sizes - 1], other_shapes=(), other_values=())
        return dataclasses.replace(self, shape=tuple(self.other_shapes[sizes - 1]), other_shapes=())

    def describe(self) -> str:
        """"x0 (5, 7)" for a tensor, "x3=4" for a number (messages)."""
        return f"{self.name}={self.value!r}" if self.is_scalar else f"{self.name} {tuple(self.shape)}"

    def base_shape(self) -> tuple:
        """The dense tensor the input is a view of."""
        s = list(self.shape)
        if self.layout == "transposed":
            s[-1], s[-2] = s[-2], s[-1]
        elif self.layout == "strided":
            s[-1] = 2 * s[-1]
        elif self.layout == "expanded":
            s = [1 if i % 2 == 0 else n for i, n in enumerate(s)]
        elif self.layout == "offset":
            n = 1
            for d in s:
                n *= d
            s = [n + 1]
        return tuple(s)

    def view_suffix(self) -> str:
        return {"contiguous": "", "transposed": ".transpose(-2, -1)", "strided": "[..., ::2]",
                "expanded": f".expand{self.shape}", "offset": f"[1:].view{tuple(self.shape)}",
                "channels_last": ".contiguous(memory_format=torch.channels_last)"}[self.layout]

    def source(self) -> str:
        """A line building this input from the generator `g` on `device`."""
        if self.is_scalar:
            return f"{self.name} = {self.value!r}"
        dt = f"torch.{self.dtype}"
        base = self.base_shape()
        if self.values is not None:
            make = f"torch.tensor({list(self.values)}, dtype={dt}).view({tuple(self.shape)})"
        elif self.dtype == "bool":
            make = f"(torch.rand({base}, generator=g) < 0.5)"
        elif self.dtype.startswith(("int", "uint")):
            make = f"torch.randint({int(self.low)}, {int(self.high)}, {base}, generator=g, dtype={dt})"
        else:
            make = f"torch.empty({base}).uniform_({self.low}, {self.high}, generator=g).to({dt})"
        view = "" if self.values is not None else self.view_suffix()
        line = f"{self.name} = {make}.to(device){view}"
        if self.requires_grad:
            line += ".detach().requires_grad_()"
        return line


@dataclasses.dataclass(frozen=True)
class Stmt:
    """`out = expr`; `mutates` names the value an in-place op writes (its storage), if any."""
    out: str
    expr: str
    op: str
    family: str
    mutates: str | None = None

    def reads(self) -> list[str]:
        return VAR.findall(self.expr)


@dataclasses.dataclass(frozen=True)
class Program:
    seed: int
    index: int
    inputs: tuple
    stmts: tuple
    outputs: tuple
    autograd: bool = False
    input_seed: int = 0

    @property
    def name(self) -> str:
        return f"seed{self.seed}_prog{self.index}"

    def families(self) -> list[str]:
        return sorted({s.family for s in self.stmts})

    def ops(self) -> list[str]:
        return sorted({s.op for s in self.stmts})

    @property
    def size_sets(self) -> int:
        """How many other size sets the compiled function is called at besides the traced one (sizes.py)."""
        return len(self.inputs[0].other_shapes) if self.inputs else 0

    def scalars(self) -> list:
        """The Python-number arguments."""
        return [spec for spec in self.inputs if spec.is_scalar]

    def shapes(self, sizes: int) -> str:
        """The inputs' shapes (and numbers) at size set `sizes`, for messages: "x0 (5, 7), x1 (7,), x2=-3"."""
        return ", ".join(spec.at(sizes).describe() for spec in self.inputs)

    def to_source(self) -> str:
        seed = f"g = torch.Generator().manual_seed({self.input_seed})"
        if not self.size_sets:
            lines = ["def make_inputs(device='cpu'):", f"    {seed}"]
            lines += [f"    {spec.source()}" for spec in self.inputs]
        else:
            # size set 0 is the traced call's; the others are the sizes --dynamic also calls at
            lines = ["def make_inputs(device='cpu', sizes=0):", f"    {seed}"]
            for k in range(1 + self.size_sets):
                lines.append(f"    {'if' if k == 0 else 'elif'} sizes == {k}:")
                lines += [f"        {spec.at(k).source()}" for spec in self.inputs]
            lines += ["    else:", "        raise ValueError(f'no size set {sizes}')"]
        lines.append(f"    return [{', '.join(i.name for i in self.inputs)}]")
        lines += ["", "", f"def f({', '.join(i.name for i in self.inputs)}):"]
        lines += [f"    {s.out} = {s.expr}" for s in self.stmts]
        lines.append(f"    return ({''.join(o + ', ' for o in self.outputs)})")
        return "\n".join(lines) + "\n"

    def live(self) -> "Program":
        """The program without the statements no output needs (an in-place write on an input is always
        needed): what a compiler may not leave out."""
        needed = set(self.outputs)
        kept: list[Stmt] = []
        for s in reversed(self.stmts):
            if s.out in needed or (s.mutates and (s.mutates in needed or s.mutates.startswith("x"))):
                kept.append(s)
                needed |= set(s.reads())
        return dataclasses.replace(self, stmts=tuple(kept[::-1]))

    def in_float64(self) -> "Program":
        """The same program computing every float in float64 (the reference that settles a low-
        precision disagreement): explicit float dtypes in its statements become float64."""
        stmts = tuple(dataclasses.replace(s, expr=LOW_FLOAT.sub("torch.float64", s.expr)
                                          .replace(".float()", ".double()")) for s in self.stmts)
        return dataclasses.replace(self, stmts=stmts)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @staticmethod
    def from_dict(d: dict) -> "Program":
        inputs = tuple(InputSpec(**{**i, "shape": tuple(i["shape"]),
                                    "values": None if i["values"] is None else tuple(i["values"]),
                                    "other_shapes": tuple(tuple(s) for s in i.get("other_shapes", ())),
                                    "other_values": tuple(i.get("other_values", ()))})
                       for i in d["inputs"])
        stmts = tuple(Stmt(**s) for s in d["stmts"])
        return Program(d["seed"], d["index"], inputs, stmts, tuple(d["outputs"]), d["autograd"],
                       d["input_seed"])


def load(program: Program) -> tuple:
    """(make_inputs, f) from the program's source."""
    import torch
    import torch.nn.functional as F

    scope = {"torch": torch, "F": F}
    exec(compile(program.to_source(), f"<fuzz {program.name}>", "exec"), scope)
    return scope["make_inputs"], scope["f"]

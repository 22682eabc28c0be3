"""Random straight-line tensor programs, deterministic per (seed, index).

    generate(seed, index, autograd=False, max_size=6) -> Program

Statements are drawn from the op table (ops.py) and run eagerly on the real inputs as they are
drawn: an expression that raises is dropped, and each op sees its operands' actual shapes, dtypes
and storage. Values are tracked as "exact" when eager and a fused kernel must agree on them bit for
bit (inputs, views, integers, data movement): ops that are discontinuous in their operand (floor,
comparisons, casts to int, argmax, sort indices) only take exact operands, so a last-bit difference
in a float computation cannot turn into a different integer or mask.
"""
from __future__ import annotations

import contextlib
import dataclasses
import random
import warnings
import zlib

import torch
import torch.nn.functional as F

from .program import VAR, InputSpec, Program, Stmt

DTYPES = {"float32": 40, "float16": 12, "bfloat16": 12, "int64": 8, "int32": 8, "bool": 6, "float64": 3}
FLOATS = ("float32", "float16", "bfloat16", "float64")
MAX_INPUTS = 6      # tensor arguments
MAX_SCALARS = 3     # Python-number arguments (the scalar family, ops_scalar.py)


class Ctx:
    """The generator's state: live values by name, which are exact, and the inputs made so far.
    `env` holds tensors only (what ops pick from); Python-number arguments are in `scalars`."""

    def __init__(self, rng: random.Random, autograd: bool, max_size: int, input_seed: int):
        self.rng = rng
        self.autograd = autograd
        self.max_size = max_size
        self.inputs: list[InputSpec] = []
        self.env: dict[str, torch.Tensor] = {}
        self.exact: dict[str, bool] = {}
        self.scalars: dict[str, int | float] = {}
        self.gen = torch.Generator().manual_seed(input_seed)

    # --- values ---------------------------------------------------------------------------
    def t(self, name: str) -> torch.Tensor:
        return self.env[name]

    def pick(self, pred=None, exact: bool | None = None, float_only: bool = False) -> str | None:
        """A random live value satisfying `pred` (and exact, and floating, when asked)."""
        names = [n for n, v in self.env.items()
                 if (pred is None or pred(v)) and (not float_only or v.is_floating_point())
                 and (not exact or self.exact[n] or not v.is_floating_point())]
        return self.rng.choice(names) if names else None

    def dim(self, name: str) -> int | None:
        """A random dim of the value (negative half the time), None for a 0-d value."""
        n = self.t(name).dim()
        if n == 0:
            return None
        d = self.rng.randrange(n)
        return d - n if self.rng.random() < 0.3 else d

    def size(self) -> int:
        return 0 if self.rng.random() < 0.04 else self.rng.randint(1, self.max_size)

    def shape(self, rank: int | None = None) -> tuple:
        if rank is None:
            rank = self.rng.choice([0, 1, 2, 2, 3, 3, 4])
        return tuple(self.size() for _ in range(rank))

    def dtype(self, like: str | None = None) -> str:
        if like is not None and self.rng.random() < 0.6:
            return like
        return self.rng.choices(list(DTYPES), weights=list(DTYPES.values()))[0]

    # --- inputs ---------------------------------------------------------------------------
    def new_input(self, shape, dtype: str, values=None, layout: str | None = None,
                  low: float = -2.0, high: float = 2.0) -> str:
        """A fresh argument of the program; its tensor is built now, as make_inputs will build it."""
        if layout is None:
            choices = ["contiguous"] * 5
            if len(shape) >= 2:
                choices += ["transposed", "transposed"]
            if len(shape) >= 1:
                choices += ["strided", "offset"]
            if len(shape) >= 2 and any(n != 1 for i, n in enumerate(shape) if i % 2 == 0):
                choices += ["expanded"]
            layout = "contiguous" if values is not None else self.rng.choice(choices)
        if dtype in ("int64", "int32") and values is None:
            low, high = -4, 5
        elif dtype == "uint8" and values is None:   # (randint from -2 failed the whole program)
            low, high = 0, 9
        grad = self.autograd and dtype in FLOATS and values is None and self.rng.random() < 0.8
        spec = InputSpec(f"x{len(self.inputs)}", tuple(shape), dtype, layout, grad,
                         None if values is None else tuple(values), low, high)
        scope = {"torch": torch, "g": self.gen, "device": "cpu"}
        exec(spec.source(), scope)
        self.inputs.append(spec)
        self.env[spec.name] = scope[spec.name]
        self.exact[spec.name] = True
        return spec.name

    def tensor_inputs(self) -> int:
        return sum(1 for spec in self.inputs if not spec.is_scalar)

    def scalar(self, kind: str, nonzero: bool = False, value=None, reuse: float = 0.35) -> str | None:
        """A Python-number argument of `kind` ("int" or "float"): an existing one now and then (one
        number used in several places), else a new one with `value` (drawn when None; an int is never
        0 or 1, which Dynamo specializes). nonzero: 0 is outside its domain (a divisor)."""
        have = [spec for spec in self.inputs if spec.dtype == kind and (not nonzero or spec.value != 0)]
        if have and (self.rng.random() < reuse or len(self.scalars) >= MAX_SCALARS):
            spec = self.rng.choice(have)
            if nonzero and not spec.nonzero:
                self.inputs[self.inputs.index(spec)] = dataclasses.replace(spec, nonzero=True)
            return spec.name
        if len(self.scalars) >= MAX_SCALARS:
            return None
        if value is None:
            value = self.rng.choice([-3, -2, 2, 3, 4, 5, 7]) if kind == "int" else \
                self.rng.choice([-1.5, -0.25, 0.5, 0.75, 1.25, 2.5, round(self.rng.uniform(-3, 3), 2) or 0.5])
        spec = InputSpec(f"x{len(self.inputs)}", (), kind, value=value, nonzero=nonzero)
        self.inputs.append(spec)
        self.scalars[spec.name] = value
        return spec.name

    def index_input(self, bound: int, shape, unique_along: int | None = None) -> str | None:
        """An int64 input of `shape` with values in [0, bound); distinct along one dim if asked."""
        if bound <= 0:
            return None
        t = torch.empty(shape, dtype=torch.int64)
        if unique_along is not None and t.dim() > 0:
            if t.shape[unique_along] > bound:
                return None
            # rows of distinct values along the last dim, moved to `unique_along` (writing through
            # reshape of the moved view wrote into a copy where that dim was not the last: the
            # tensor kept torch.empty's garbage, which the fuzzer then passed as index values)
            moved = list(t.movedim(unique_along, -1).shape)
            count = 1
            for n in moved[:-1]:
                count *= n
            rows = torch.empty(count, moved[-1], dtype=torch.int64)
            for idx in range(rows.shape[0]):
                rows[idx] = torch.tensor(self.rng.sample(range(bound), moved[-1]), dtype=torch.int64)
            t = rows.view(moved).movedim(-1, unique_along)
        else:
            t = torch.tensor([self.rng.randrange(bound) for _ in range(t.numel())],
                             dtype=torch.int64).view(shape)
        return self.new_input(tuple(shape), "int64", values=t.flatten().tolist())

    def partner(self, name: str, to_shape_of: bool = False) -> str:
        """A value broadcastable with `name` (an existing one or a new input, often of another dtype).
        to_shape_of: the partner must broadcast *to* name's shape (the operand of an in-place op)."""
        a = self.t(name)
        rng = self.rng
        if rng.random() < 0.5:
            def fits(v):
                try:
                    out = torch.broadcast_shapes(a.shape, v.shape)
                except RuntimeError:
                    return False
                return not to_shape_of or out == a.shape
            found = self.pick(fits)
            if found is not None and found != name:
                return found
            if rng.random() < 0.2:  # now and then the value with itself
                return found or name
        if rng.random() < 0.15 or self.tensor_inputs() >= MAX_INPUTS:
            return self.new_input((), self.dtype(str(a.dtype).split(".")[-1])) \
                if self.tensor_inputs() < MAX_INPUTS else name
        keep = rng.randint(0, a.dim())
        shape = [1 if rng.random() < 0.3 else n for n in a.shape[a.dim() - keep:]]
        return self.new_input(tuple(shape), self.dtype(str(a.dtype).split(".")[-1]))


def _derive_seed(seed: int, index: int, attempt: int) -> int:
    return zlib.crc32(f"{seed}:{index}:{attempt}".encode())


def generate(seed: int, index: int, autograd: bool = False, max_size: int = 6,
             n_stmts: tuple = (3, 10), other_sizes: int = 0) -> Program:
    """Program `index` of `seed`: the same on every machine. A draw that eager itself cannot run
    (checked here, with the backward pass in autograd mode) is redrawn from the next sub-seed.
    other_sizes: how many other input size sets to give it (--dynamic; sizes.py), the same statements.
    Without them, a program with number arguments gets other values of its numbers (sizes as traced)."""
    from .ops import pick_op
    from .sizes import with_other_sizes

    for attempt in range(20):
        s = _derive_seed(seed, index, attempt)
        rng = random.Random(s)
        ctx = Ctx(rng, autograd, max_size, input_seed=s % (2 ** 31))
        for _ in range(rng.randint(1, 3)):
            ctx.new_input(ctx.shape(), ctx.dtype())
        stmts: list[Stmt] = []
        want = rng.randint(*n_stmts)
        tries = 0
        while len(stmts) < want and tries < want * 12:
            tries += 1
            spec = pick_op(rng)
            stmt = _try_stmt(ctx, spec, f"v{len(stmts)}")
            if stmt is not None:
                stmts.append(stmt)
        if not stmts:
            continue
        program = Program(seed, index, tuple(ctx.inputs), tuple(stmts), _outputs(rng, stmts, ctx),
                          autograd, input_seed=s % (2 ** 31))
        if _eager_runs(program):
            if other_sizes:
                return with_other_sizes(program, other_sizes)
            # without --dynamic, the numbers alone take other values (sizes.py): Dynamo recompiles there
            return with_other_sizes(program, numbers_only=True) if program.scalars() else program
    raise RuntimeError(f"no valid program for seed {seed} index {index} in 20 attempts")


def _try_stmt(ctx: Ctx, spec, out: str) -> Stmt | None:
    try:
        expr = spec.make(ctx)
    except (ValueError, IndexError):
        return None
    if expr is None:
        return None
    scope = {"torch": torch, "F": F, **ctx.scalars, **ctx.env}
    try:
        with _quiet():
            value = eval(expr, scope)
    except Exception:
        return None
    if not isinstance(value, torch.Tensor) or value.numel() > 4096:
        return None
    names = VAR.findall(expr)
    stmt = Stmt(out, expr, spec.name, spec.family, mutates=names[0] if spec.inplace and names else None)
    reads = stmt.reads()
    exact = all(ctx.exact.get(r, True) for r in reads) and (spec.keeps_exact or not value.is_floating_point())
    ctx.env[out] = value
    ctx.exact[out] = exact
    if spec.inplace:
        # every value sharing the written storage has changed
        ptr = value.untyped_storage().data_ptr()
        for n, v in ctx.env.items():
            if v.numel() and v.untyped_storage().data_ptr() == ptr:
                ctx.exact[n] = ctx.exact[n] and exact
    return stmt


def _outputs(rng: random.Random, stmts: list[Stmt], ctx: Ctx) -> tuple:
    read = {r for s in stmts for r in s.reads()}
    outs = [s.out for s in stmts if s.out not in read or rng.random() < 0.2]
    if rng.random() < 0.1:   # an input returned as it is (a tensor: a number returned is no finding)
        outs.append(rng.choice([spec for spec in ctx.inputs if not spec.is_scalar]).name)
    return tuple(dict.fromkeys(outs[-6:]))


def _eager_runs(program: Program) -> bool:
    from .program import load

    try:
        make_inputs, f = load(program)
    except Exception:
        return False
    return runs(f, make_inputs, program.autograd)


def runs(f, make_inputs, autograd: bool) -> bool:
    """Whether `f` (the program's function, or a compiled one) runs on the CPU inputs, with the
    backward of its loss in autograd mode."""
    try:
        with _quiet():
            outs = f(*make_inputs("cpu"))
            if autograd:
                backward(outs)
    except Exception:
        return False
    return True


def backward(outputs) -> None:
    """The backward of `outputs`' loss (`backward_loss`), where they have one."""
    loss = backward_loss(outputs)
    if loss is not None:
        loss.backward()


def backward_loss(outputs, seed: int = 1):
    """Sum of every float output that requires grad, each weighted by fixed random numbers (so a
    gradient routed to the wrong element does not cancel out); None when no output needs grad."""
    gen = torch.Generator().manual_seed(seed)
    loss = None
    for out in outputs:
        if isinstance(out, torch.Tensor) and out.requires_grad and out.is_floating_point():
            w = torch.empty(out.shape).uniform_(0.5, 1.5, generator=gen).to(out.device, out.dtype)
            term = (out * w).sum()
            loss = term if loss is None else loss + term
    return loss


@contextlib.contextmanager
def _quiet():
    """Silence warnings while eager runs a draw (deprecations and the like are not findings)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield

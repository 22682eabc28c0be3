"""The score modification of a flash-attention call: one small expression, compiled three ways.

The matcher hands `flash_attention` its modification as text ("where(j <= i, s * 0.125, -inf)"), so
one kernel source can be generated per distinct text and cached. The text is parsed with `ast` and
checked against the contract's names, operators and functions (a ValueError names the piece that is
not allowed); nothing is ever `eval`ed. From the checked tree:

    triton_source(tree, names, kinds)   the expression in Triton, inlined into the generated kernels
    gradient(tree)                      d loss / d s as an expression of the upstream gradient `g`,
                                        built the way autograd runs the eager graph backwards (so a
                                        `where` selects its gradient rather than multiplying by 0:
                                        a NaN gradient of a masked entry becomes 0 as in eager)
    evaluate(tree, env)                 the expression on torch tensors (the reference and fallback)
    log2_scaled(tree)                   mod(s) * log2(e), the constant folded into the expression's
                                        own scale where that is exact enough (the kernels use exp2)
    dead_mask(tree, env)                where the result is -inf whatever s is (block skipping)
    assume_live(tree)                   the expression where nothing is dead (a block's interior)

An extra tensor is read at [b, h, i, j] through its broadcast strides (`t0`), or at an index computed
from b, h, i, j, L and S (`t0[i - j + 63]`, `t0[h, j - i + S - 1]`: one index per dim of the tensor).
A computed index must be affine, with integer coefficients: the op then reads the tensor through
strides too (`Gather.layout`: along i and j they may be negative), so every kernel reads it as it
reads a broadcast tensor, and the op checks once per call that the index stays inside the tensor.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import math
import re

import torch

LOG2E = 1.4426950408889634

INDEX_NAMES = ("b", "h", "i", "j")
SIZE_NAMES = ("L", "S")
FUNCTIONS = {"where": 3, "tanh": 1, "exp": 1, "log": 1, "log1p": 1, "sigmoid": 1, "abs": 1, "sqrt": 1,
             "minimum": 2, "maximum": 2, "f16": 1, "bf16": 1}
ROUNDINGS = {"f16": torch.float16, "bf16": torch.bfloat16}   # x rounded to that type (kept in float32)
_BINARY = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div", ast.FloorDiv: "floordiv",
           ast.Mod: "mod", ast.BitAnd: "and", ast.BitOr: "or"}
_COMPARE = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}
_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "and": "&", "or": "|",
           "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "eq": "==", "ne": "!="}
_TENSOR_NAME = re.compile(r"t(0|[1-9][0-9]*)$")


@dataclasses.dataclass(frozen=True)
class Node:
    """One node of a modification: op "num" (value), "var" (value: the name), or an operator or
    function applied to `args`."""

    op: str
    args: tuple["Node", ...] = ()
    value: object = None

    def __str__(self) -> str:
        if self.op == "num":
            return repr(self.value) if math.isfinite(self.value) else ("inf" if self.value > 0 else "-inf")
        if self.op == "var":
            return self.value
        if self.op in _SYMBOL:
            return f"({self.args[0]} {_SYMBOL[self.op]} {self.args[1]})"
        if self.op in ("floordiv", "mod"):
            return f"({self.args[0]} {'//' if self.op == 'floordiv' else '%'} {self.args[1]})"
        if self.op in ("neg", "not"):
            return f"({'-' if self.op == 'neg' else '~'}{self.args[0]})"
        if self.op == "index":
            return f"{self.args[0]}[{', '.join(map(str, self.args[1:]))}]"
        return f"{self.op}({', '.join(map(str, self.args))})"


def num(value) -> Node:
    return Node("num", value=value)


def var(name: str) -> Node:
    return Node("var", value=name)


@dataclasses.dataclass(frozen=True)
class ScoreMod:
    """A checked modification: its text, its tree, how many extra tensors it reads (t0 … t{n-1}), the
    names it uses, and whether it skips blocks: whether whole blocks of scores can be -inf (or a fill
    at or below DEAD_FILL) for every s, decided by i, j, L, S and the extra tensors' values (then a
    table says which key blocks each query block must visit: computed once from i, j, L and S, or on
    every call from the tensors)."""

    text: str
    tree: Node
    tensors: int
    names: frozenset[str]
    skips_blocks: bool
    dead_reads_tensors: bool = False   # which scores are dead depends on the extra tensors' values
    finite_fill: bool = False          # a dead score may be a finite fill (finfo.min), not -inf
    gathers: tuple["Gather", ...] = ()  # the extra tensors read at a computed index


AFFINE_NAMES = ("b", "h", "i", "j", "L", "S")


@dataclasses.dataclass(frozen=True)
class Gather:
    """Extra tensor t<n> read at a computed index (`t0[i - j + 63]`): per dim of the tensor, the
    index's integer coefficients of AFFINE_NAMES and its constant."""

    n: int
    dims: tuple[tuple[tuple[int, ...], int], ...]

    def _parts(self, d: int, L: int, S: int) -> tuple[dict, int]:
        coefs, const = self.dims[d]
        c = dict(zip(AFFINE_NAMES, coefs))
        return c, const + c["L"] * L + c["S"] * S

    def index_range(self, d: int, B: int, H: int, L: int, S: int) -> tuple[int, int]:
        """The least and greatest index of dim d over the score grid [B, H, L, S] (not empty)."""
        coefs, const = self.dims[d]
        return affine_range({**dict(zip(AFFINE_NAMES, coefs)), "1": const}, B, H, L, S)

    def check(self, t: torch.Tensor, B: int, H: int, L: int, S: int, text: str) -> None:
        """An IndexError where the index leaves `t` somewhere on the grid (eager's indexing raises)."""
        if t.dim() != len(self.dims):
            raise IndexError(f"flash_attention mod {text!r}: t{self.n} has {t.dim()} dims but is indexed by "
                             f"{len(self.dims)}")
        if B * H * L * S == 0:
            return
        for d in range(t.dim()):
            lo, hi = self.index_range(d, B, H, L, S)
            if lo < 0 or hi >= t.shape[d]:
                raise IndexError(f"flash_attention mod {text!r}: t{self.n}'s index {d} runs from {lo} to {hi} "
                                 f"over the scores [B, Hq, L, S] = {[B, H, L, S]}, outside its size "
                                 f"{t.shape[d]}")

    def layout(self, t: torch.Tensor, L: int, S: int) -> tuple[int, list[int]]:
        """(offset, strides along b, h, i, j) in elements of `t`: t[index] is at
        t's data + offset + b * strides[0] + h * strides[1] + i * strides[2] + j * strides[3]."""
        offset, strides = 0, [0, 0, 0, 0]
        for d in range(len(self.dims)):
            c, const = self._parts(d, L, S)
            offset += const * t.stride(d)
            for a, name in enumerate("bhij"):
                strides[a] += c[name] * t.stride(d)
        return offset, strides


def affine(node: Node) -> dict[str, int] | None:
    """`node` as integer coefficients of AFFINE_NAMES and "1" (the constant), or None where it is not
    an affine integer expression of them."""
    if node.op == "num":
        v = node.value
        return {"1": v} if isinstance(v, int) and not isinstance(v, bool) else None
    if node.op == "var":
        return {node.value: 1} if node.value in AFFINE_NAMES else None
    parts = [affine(a) for a in node.args]
    if any(p is None for p in parts):
        return None
    if node.op == "neg":
        return {k: -v for k, v in parts[0].items()}
    if node.op in ("add", "sub"):
        sign = 1 if node.op == "add" else -1
        out = dict(parts[0])
        for k, v in parts[1].items():
            out[k] = out.get(k, 0) + sign * v
        return out
    if node.op == "mul":
        for a, b in (parts, parts[::-1]):
            if set(a) <= {"1"}:
                return {k: v * a.get("1", 0) for k, v in b.items()}
    return None


def affine_range(coefs: dict[str, int], B, H, L, S) -> tuple:
    """The least and greatest value of an affine index (`affine`'s coefficients) over the score grid
    [B, H, L, S] (not empty; sizes may be symbolic: a span's sign is its coefficient's, so no size is
    compared and no guard is added)."""
    lo = hi = coefs.get("1", 0) + coefs.get("L", 0) * L + coefs.get("S", 0) * S
    for name, extent in zip("bhij", (B, H, L, S)):
        c = coefs.get(name, 0)
        span = c * (extent - 1)
        lo, hi = (lo + span, hi) if c < 0 else (lo, hi + span)
    return lo, hi


def affine_text(text: str) -> dict[str, int] | None:
    """The affine coefficients (`affine`) of an index expression written as text, or None."""
    try:
        return affine(_Reader(text).read(ast.parse(text.strip(), mode="eval").body))
    except (SyntaxError, ModError):
        return None


def _gathers(tree: Node, text: str) -> tuple[Gather, ...]:
    """The extra tensors `tree` reads at a computed index; a ModError where a tensor is also read
    plainly or at another index (each extra tensor has one layout)."""
    found: dict[int, Gather] = {}
    plain: set[str] = set()

    def walk(node: Node) -> None:
        if node.op == "var" and _TENSOR_NAME.match(node.value):
            plain.add(node.value)
        if node.op != "index":
            for a in node.args:
                walk(a)
            return
        n = int(node.args[0].value[1:])
        dims = []
        for e in node.args[1:]:
            walk(e)
            c = affine(e)
            dims.append((tuple(c.get(name, 0) for name in AFFINE_NAMES), c.get("1", 0)))
        g = Gather(n, tuple(dims))
        if found.setdefault(n, g) != g:
            raise ModError(f"flash_attention mod {text!r}: t{n} is read at two different indices")
    walk(tree)
    clash = plain & {f"t{n}" for n in found}
    if clash:
        raise ModError(f"flash_attention mod {text!r}: {sorted(clash)[0]} is read both with and without an index")
    return tuple(found[n] for n in sorted(found))


class ModError(ValueError):
    """A modification outside the contract; the message names the offending piece."""


@functools.lru_cache(maxsize=512)
def parse(text: str) -> ScoreMod:
    """The checked tree of `text`; a ModError (a ValueError) naming what is not allowed."""
    if not isinstance(text, str):
        raise ModError(f"flash_attention: mod must be a str, not {type(text).__name__}")
    try:
        body = ast.parse(text.strip(), mode="eval").body
    except SyntaxError as e:
        raise ModError(f"flash_attention mod {text!r}: not a Python expression ({e.msg})") from None
    tree = _Reader(text).read(body)
    if kind(tree, {}) == "bool":
        raise ModError(f"flash_attention mod {text!r}: the result is a bool, not a score")
    names = frozenset(variables(tree))
    used = [int(n[1:]) for n in names if _TENSOR_NAME.match(n)]
    decides = dead_names(tree)
    tensors = {n for n in decides if _TENSOR_NAME.match(n)}
    skips = contains_dead_fill(tree) and decides <= {"i", "j", "L", "S"} | tensors
    return ScoreMod(text, tree, max(used) + 1 if used else 0, names, skips, skips and bool(tensors),
                    skips and contains_dead_fill(tree, finite_only=True), _gathers(tree, text))


class _Reader:
    def __init__(self, text: str):
        self.text = text

    def fail(self, node: ast.AST, why: str) -> ModError:
        piece = ast.get_source_segment(self.text.strip(), node) or type(node).__name__
        return ModError(f"flash_attention mod {self.text!r}: {piece!r} {why}")

    def read(self, node: ast.AST) -> Node:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
                raise self.fail(node, "is not allowed: literals are int or float numbers")
            return num(node.value)
        if isinstance(node, ast.Name):
            name = node.id
            if name == "inf":
                return num(math.inf)
            if name == "s" or name in INDEX_NAMES or name in SIZE_NAMES or _TENSOR_NAME.match(name):
                return var(name)
            raise self.fail(node, "is not a known name (s, b, h, i, j, L, S, t0, t1, ..., inf)")
        if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
            return fold(Node(_BINARY[type(node.op)], (self.read(node.left), self.read(node.right))))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd, ast.Invert)):
            operand = self.read(node.operand)
            if isinstance(node.op, ast.UAdd):
                return operand
            return fold(Node("neg" if isinstance(node.op, ast.USub) else "not", (operand,)))
        if isinstance(node, ast.Compare):
            terms = [self.read(node.left)] + [self.read(c) for c in node.comparators]
            pairs = []
            for op, left, right in zip(node.ops, terms, terms[1:]):
                if type(op) not in _COMPARE:
                    raise self.fail(node, f"uses the comparison {type(op).__name__}, which is not allowed")
                pairs.append(fold(Node(_COMPARE[type(op)], (left, right))))
            return functools.reduce(lambda a, c: fold(Node("and", (a, c))), pairs)
        if isinstance(node, ast.Subscript):
            if not (isinstance(node.value, ast.Name) and _TENSOR_NAME.match(node.value.id)):
                raise self.fail(node, "indexes something other than an extra tensor (t0, t1, ...)")
            items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            index = [self.read(item) for item in items]
            for item, e in zip(items, index):
                if affine(e) is None:
                    raise self.fail(item, "is not an index: an index is an affine integer expression of "
                                          "b, h, i, j, L and S")
            return Node("index", (var(node.value.id), *index))
        if isinstance(node, ast.Call):
            name = node.func.id if isinstance(node.func, ast.Name) else None
            if name not in FUNCTIONS:
                raise self.fail(node.func, f"is not an allowed function ({', '.join(sorted(FUNCTIONS))})")
            if node.keywords or len(node.args) != FUNCTIONS[name]:
                raise self.fail(node, f"must call {name} with {FUNCTIONS[name]} positional argument(s)")
            return fold(Node(name, tuple(self.read(a) for a in node.args)))
        hint = {ast.BoolOp: " (write & and | instead of and/or)", ast.IfExp: " (write where(c, x, y))"}
        raise self.fail(node, f"is not allowed: a {type(node).__name__}{hint.get(type(node), '')}")


def fold(node: Node) -> Node:
    """`node` computed now when every argument is a number (so "-inf" is the number -inf); a where
    whose condition is a constant is its branch (a causal mask of one row, 0 <= 0, is no mask)."""
    if node.op == "where" and node.args[0].op == "num" and isinstance(node.args[0].value, bool):
        return node.args[1] if node.args[0].value else node.args[2]
    if node.op in ("and", "or"):   # a constant side decides or drops out: (1 < 0) | (j <= i) is j <= i
        for side, other in ((node.args[0], node.args[1]), (node.args[1], node.args[0])):
            if side.op == "num" and isinstance(side.value, bool):
                if side.value == (node.op == "or"):
                    return side
                return other
    if not node.args or any(a.op != "num" for a in node.args):
        return node
    values = [torch.tensor(a.value, dtype=torch.bool if isinstance(a.value, bool) else
                           torch.float64 if isinstance(a.value, float) else torch.int64) for a in node.args]
    try:
        out = _TORCH[node.op](*values)
    except (RuntimeError, ZeroDivisionError):
        return node
    if out.dtype == torch.bool:
        return num(bool(out.item()))   # a constant condition (the where above takes its branch)
    return num(out.item())


def variables(node: Node) -> set[str]:
    if node.op == "var":
        return {node.value}
    return set().union(*(variables(a) for a in node.args)) if node.args else set()


def loaded_names(node: Node) -> set[str]:
    """The names whose values the generated code reads: `variables`, but a tensor read at a computed
    index reads only the tensor (the index is in its strides: Gather.layout), not i or j."""
    if node.op == "var":
        return {node.value}
    if node.op == "index":
        return {node.args[0].value}
    return set().union(*(loaded_names(a) for a in node.args)) if node.args else set()


def contains_minus_inf(node: Node) -> bool:
    if node.op == "num":
        return node.value == -math.inf
    return any(contains_minus_inf(a) for a in node.args)


# A fill at or below this masks a score as -inf does, for block skipping: float16's finfo.min and the
# finfo.min of float32 and bfloat16, which models (HuggingFace's among them) write as their mask value.
# A block of such scores adds exp2(fill - m) = 0 to its row, in float32, whenever the row's max m is
# more than ~150 above the fill, i.e. for any row holding a score above -65000. A row of fills only is
# eager's uniform average, not -inf's NaN: the forward then visits every block (flash.py).
DEAD_FILL = -65504.0


def dead_value(value) -> bool:
    """-inf, or a finite fill at or below DEAD_FILL."""
    return isinstance(value, float) and value <= DEAD_FILL


def contains_dead_fill(node: Node, finite_only: bool = False) -> bool:
    """Whether `node` holds a constant that masks (dead_value); finite_only: a finite one."""
    if node.op == "num":
        return dead_value(node.value) and (math.isfinite(node.value) or not finite_only)
    return any(contains_dead_fill(a, finite_only) for a in node.args)


def kind(node: Node, tensor_kinds: dict[str, str]) -> str:
    """"bool", "int" or "float": the kind of value `node` computes (extra tensors as `tensor_kinds` says;
    "any" when not given, before the tensors are known). A ModError for a float where a bool must be."""
    if node.op == "num":
        return "float" if isinstance(node.value, float) else "int"
    if node.op == "var":
        name = node.value
        if name == "s":
            return "float"
        if name in INDEX_NAMES or name in SIZE_NAMES:
            return "int"
        return tensor_kinds.get(name, "any")
    if node.op == "index":
        return tensor_kinds.get(node.args[0].value, "any")
    kinds = [kind(a, tensor_kinds) for a in node.args]
    if node.op in _COMPARE.values():
        return "bool"
    if node.op in ("and", "or", "not"):
        if "float" in kinds:
            raise ModError(f"flash_attention mod: {node} applies {node.op} to a float")
        return "bool" if all(k in ("bool", "any") for k in kinds) else "int"
    if node.op == "where":
        if kinds[0] not in ("bool", "any"):
            raise ModError(f"flash_attention mod: the condition of {node} is not a bool")
        kinds = kinds[1:]
    if node.op in ("tanh", "exp", "log", "log1p", "sigmoid", "sqrt", "div", *ROUNDINGS):
        return "float"
    return "float" if "float" in kinds or "any" in kinds else "int"


# ---------------------------------------------------------------------------------------------------
# torch

def _minimum(a, b):
    return torch.minimum(torch.as_tensor(a), torch.as_tensor(b))


def _maximum(a, b):
    return torch.maximum(torch.as_tensor(a), torch.as_tensor(b))


def _float_fn(fn):
    return lambda x: fn(x.float() if not torch.is_floating_point(x) else x)


def _tensor_fn(fn):
    return lambda x: fn(torch.as_tensor(x, dtype=torch.float32) if not isinstance(x, torch.Tensor) else x)


_TORCH = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "mul": lambda a, b: a * b, "div": lambda a, b: a / b,
    "floordiv": lambda a, b: a // b, "mod": lambda a, b: a % b, "neg": lambda a: -a,
    "and": lambda a, b: a & b, "or": lambda a, b: a | b,
    "not": lambda a: ~a if isinstance(a, torch.Tensor) else not a,   # (~True is -2 in Python)
    "lt": lambda a, b: a < b, "le": lambda a, b: a <= b, "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
    "eq": lambda a, b: a == b, "ne": lambda a, b: a != b,
    "where": torch.where, "minimum": _minimum, "maximum": _maximum,
    "tanh": _tensor_fn(_float_fn(torch.tanh)), "exp": _tensor_fn(_float_fn(torch.exp)),
    "log": _tensor_fn(_float_fn(torch.log)), "log1p": _tensor_fn(_float_fn(torch.log1p)),
    "sigmoid": _tensor_fn(_float_fn(torch.sigmoid)),
    "sqrt": _tensor_fn(_float_fn(torch.sqrt)), "abs": _tensor_fn(torch.abs),
    **{name: _tensor_fn(_float_fn(lambda x, to=to: x.to(to).to(x.dtype))) for name, to in ROUNDINGS.items()},
}


def evaluate(node: Node, env: dict):
    """`node` on torch values: env maps each name to a tensor or a Python number."""
    if node.op == "num":
        return node.value
    if node.op == "var":
        return env[node.value]
    if node.op == "index":   # (clamped: the grid's padding past L and S may reach outside the tensor)
        t = env[node.args[0].value]
        index = tuple(torch.as_tensor(evaluate(e, env), device=t.device).long().clamp(0, max(t.shape[d] - 1, 0))
                      for d, e in enumerate(node.args[1:]))
        return t[index]
    return _TORCH[node.op](*(evaluate(a, env) for a in node.args))


# ---------------------------------------------------------------------------------------------------
# Triton

def triton_source(node: Node, names: dict[str, str], tensor_kinds: dict[str, str]) -> str:
    """`node` as a Triton expression; `names` maps each modification name to the kernel's variable."""
    def emit(n: Node) -> str:
        if n.op == "num":
            v = n.value
            if isinstance(v, float) and not math.isfinite(v):
                return 'float("nan")' if v != v else ('float("inf")' if v > 0 else 'float("-inf")')
            return repr(v)
        if n.op == "var":
            return names[n.value]
        if n.op == "index":   # loaded through the strides of its Gather.layout, as a broadcast tensor is
            return emit(n.args[0])
        kinds = [kind(a, tensor_kinds) for a in n.args]
        args = [emit(a) for a in n.args]
        if n.op in ("add", "sub", "mul", "div", "floordiv", "mod", "neg", "minimum", "maximum", "abs"):
            args = [f"{a}.to(tl.int32)" if k == "bool" else a for a, k in zip(args, kinds)]
        floats = [(repr(float(arg.value)) if arg.op == "num" else f"({a}).to(tl.float32)") if k != "float" else a
                  for a, k, arg in zip(args, kinds, n.args)]
        if n.op in _SYMBOL:
            return f"({args[0]} {_SYMBOL[n.op]} {args[1]})"
        if n.op in ("floordiv", "mod"):
            helper = {"floordiv": "div_floor", "mod": "remainder"}[n.op]
            if "float" in kinds:
                return f"triton_helpers.{helper}_float({floats[0]}, {floats[1]})"
            return f"triton_helpers.{helper}_integer({args[0]}, {args[1]})"
        if n.op == "neg":
            return f"(-{args[0]})"
        if n.op == "not":
            return f"(~{args[0]})"
        if n.op == "where":
            return f"tl.where({args[0]}, {args[1]}, {args[2]})"
        if n.op in ("minimum", "maximum"):
            if n.args[0].op == "num":   # the helper reads its first argument's dtype: a tensor goes first
                args = args[::-1]
            return f"triton_helpers.{n.op}({args[0]}, {args[1]})"
        if n.op == "abs":
            return f"tl.abs({args[0]})"
        if n.op in ("tanh", "log1p"):
            return f"libdevice.{n.op}({floats[0]})"
        if n.op in ROUNDINGS:
            return f"({floats[0]}).to(tl.{str(ROUNDINGS[n.op]).split('.')[-1]}).to(tl.float32)"
        return f"tl.{n.op}({floats[0]})"   # exp, log, sigmoid, sqrt
    return emit(node)


# ---------------------------------------------------------------------------------------------------
# gradient

def _add(a: Node | None, b: Node | None) -> Node | None:
    if a is None or b is None:
        return a if b is None else b
    return Node("add", (a, b))


def _mul(a: Node, b: Node) -> Node:
    if b.op == "num" and b.value == 1:
        return a
    return fold(Node("mul", (a, b)))


def gradient(node: Node, upstream: Node = var("g"), wrt: str = "s") -> Node | None:
    """d loss / d `wrt` (the score s, or an extra tensor t0, t1, ...) as an expression of `upstream`
    (d loss / d node) and the names of `node`; None when `node` does not depend on it. Each rule is
    the formula autograd uses for that op in eager."""
    if node.op in ("var", "index"):   # (an index is an integer: it has no gradient)
        name = node.value if node.op == "var" else node.args[0].value
        return upstream if name == wrt else None
    if wrt not in variables(node):
        return None

    def d(x: Node | None, up: Node) -> Node | None:
        return gradient(x, up, wrt) if x is not None else None
    a = node.args[0]
    b = node.args[1] if len(node.args) > 1 else None
    g = upstream
    zero = num(0.0)
    if node.op == "add":
        return _add(d(a, g), d(b, g))
    if node.op == "sub":
        return _add(d(a, g), d(b, Node("neg", (g,))))
    if node.op == "neg":
        return d(a, Node("neg", (g,)))
    if node.op == "mul":
        return _add(d(a, _mul(g, b)), d(b, _mul(g, a)))
    if node.op == "div":
        return _add(d(a, Node("div", (g, b))),
                    d(b, Node("div", (Node("mul", (Node("neg", (g,)), a)), Node("mul", (b, b))))))
    if node.op == "floordiv":
        return None   # piecewise constant: autograd gives zeros
    if node.op == "mod":
        return _add(d(a, g), d(b, Node("mul", (Node("neg", (g,)), Node("floordiv", (a, b))))))
    if node.op == "where":
        return _add(d(node.args[1], Node("where", (a, g, zero))),
                    d(node.args[2], Node("where", (a, zero, g))))
    if node.op in ROUNDINGS:   # a cast: its gradient is the upstream gradient, cast back
        return d(a, g)
    if node.op == "tanh":
        return d(a, Node("mul", (g, Node("sub", (num(1.0), Node("mul", (node, node)))))))
    if node.op == "exp":
        return d(a, Node("mul", (g, node)))
    if node.op == "log":
        return d(a, Node("div", (g, a)))
    if node.op == "log1p":
        return d(a, Node("div", (g, Node("add", (num(1.0), a)))))
    if node.op == "sigmoid":
        return d(a, Node("mul", (Node("mul", (g, Node("sub", (num(1.0), node)))), node)))
    if node.op == "sqrt":
        return d(a, Node("div", (g, Node("mul", (num(2.0), node)))))
    if node.op == "abs":
        sign = Node("where", (Node("gt", (a, num(0))), num(1.0),
                              Node("where", (Node("lt", (a, num(0))), num(-1.0), zero))))
        return d(a, Node("mul", (g, sign)))
    if node.op in ("minimum", "maximum"):
        # the tie splits the gradient in halves; the losing side gets 0 (NaN counts as winning)
        half = Node("mul", (g, num(0.5)))
        a_loses = Node("gt" if node.op == "minimum" else "lt", (a, b))
        b_loses = Node("lt" if node.op == "minimum" else "gt", (a, b))
        tie = Node("eq", (a, b))
        return _add(d(a, Node("where", (tie, half, Node("where", (a_loses, zero, g))))),
                    d(b, Node("where", (tie, half, Node("where", (b_loses, zero, g))))))
    return None   # comparisons and bool operators: no gradient flows through them


# ---------------------------------------------------------------------------------------------------
# exp2 and block skipping

FLOAT32_MAX = 3.4028234663852886e38


def log2_scaled(node: Node, factor: float = LOG2E) -> Node:
    """`node * factor`, the factor folded into a constant scale (s * 0.125 → s * 0.18033…) and into
    both branches of a where, so the common modifications cost no extra multiply.

    A finite value stays finite: finfo(float32).min times log2(e) would be -inf in float32, and a row
    filled with it would give NaN where eager's finite fill gives uniform weights. A folded constant
    is clamped to float32's range; a computed value times the factor is, unless it was -inf."""
    return _log2_scaled(node, factor, [])


def log2_clamps(node: Node, factor: float = LOG2E) -> bool:
    """Whether log2_scaled(node, factor) clamps a computed value (one not shown to stay within float32
    times the factor)."""
    clamped: list = []
    _log2_scaled(node, factor, clamped)
    return bool(clamped)


def _log2_scaled(node: Node, factor: float, clamped: list) -> Node:
    """log2_scaled, appending to `clamped` each computed value it clamps."""
    if node.op == "num":
        value = float(node.value) * factor
        if abs(value) > FLOAT32_MAX and math.isfinite(float(node.value)):   # (a double here: no inf yet)
            value = math.copysign(FLOAT32_MAX, value)
        return num(value)
    if node.op == "where":
        return Node("where", (node.args[0], _log2_scaled(node.args[1], factor, clamped),
                              _log2_scaled(node.args[2], factor, clamped)))
    if node.op == "mul" and node.args[1].op == "num" and isinstance(node.args[1].value, (int, float)):
        return Node("mul", (node.args[0], num(float(node.args[1].value) * factor)))
    if node.op == "mul" and node.args[0].op == "num":
        return Node("mul", (node.args[1], num(float(node.args[0].value) * factor)))
    if node.op == "div" and node.args[1].op == "num" and node.args[1].value not in (0, 0.0):
        return Node("mul", (node.args[0], num(factor / float(node.args[1].value))))
    if node.op == "neg":
        return _log2_scaled(node.args[0], -factor, clamped)
    if in_range(node) or abs(factor) <= 1.0:   # (a score times log2(e) stays within float32)
        return Node("mul", (node, num(factor)))
    # a data tensor (an additive mask of finfo.min): -inf only where the value itself gives -inf
    clamped.append(node)
    saturated = Node("maximum", (Node("mul", (node, num(factor))), num(-FLOAT32_MAX)))
    infinite = num(-math.inf if factor > 0 else math.inf)
    return Node("where", (Node("eq", (node, infinite)), num(-math.inf), saturated))


_FINITE_OPS = {"add", "sub", "mul", "neg", "abs", "tanh", "sigmoid", "minimum", "maximum", "where",
               "lt", "le", "gt", "ge", "eq", "ne", "and", "or", "not", "floordiv", "mod"}


def finite(node: Node) -> bool:
    """Whether `node` is finite wherever s is (no division by a variable, no exp, log or sqrt)."""
    if node.op == "num":
        return math.isfinite(node.value)
    if node.op == "var":
        return node.value == "s" or node.value in INDEX_NAMES or node.value in SIZE_NAMES
    if node.op == "div":
        d = node.args[1]
        return finite(node.args[0]) and d.op == "num" and d.value != 0 and math.isfinite(d.value)
    if node.op in ("floordiv", "mod"):
        return False   # a division by zero can make inf and NaN
    return node.op in _FINITE_OPS and all(finite(a) for a in node.args)


def in_range(node: Node) -> bool:
    """Whether no finite value of `node` can come near float32's limit, as for s (finite values only
    where `finite` says so): then node * log2(e) needs no clamp. A rounding to float16 has finite values
    within ±65504 whatever it rounds (ALiBi's bias written `(slope * (j - i)).to(q.dtype)`); infinities
    and NaN pass through a multiply as through the clamp's where."""
    if node.op == "f16":
        return True
    if node.op == "num":
        return not (math.isfinite(node.value) and abs(node.value) * LOG2E > FLOAT32_MAX)
    if node.op in ("add", "sub", "mul", "neg", "abs", "minimum", "maximum"):
        return all(in_range(a) for a in node.args)
    if node.op == "where":
        return in_range(node.args[1]) and in_range(node.args[2])
    if node.op == "div":
        d = node.args[1]
        return in_range(node.args[0]) and d.op == "num" and math.isfinite(d.value) and abs(d.value) >= 1
    return finite(node)


def assume_live(node: Node) -> Node:
    """`node` simplified for a block where dead_mask is False everywhere: each `where` that dead_mask
    reads as making -inf must there pick its other branch ("where(j <= i, s, -inf)" → "s"). It walks
    exactly the positions dead_mask does, so nothing it drops could have been live."""
    if node.op == "where" and "s" not in variables(node.args[0]):
        cond, x, y = node.args
        if y.op == "num" and dead_value(y.value):
            return assume_live(x)
        if x.op == "num" and dead_value(x.value):
            return assume_live(y)
        return Node("where", (cond, assume_live(x), assume_live(y)))
    if node.op in ("add", "sub", "minimum"):
        a, b = node.args
        left = assume_live(a) if finite(b) else a
        right = assume_live(b) if finite(a) and node.op != "sub" else b
        return Node(node.op, (left, right))
    if node.op in ("mul", "div") and node.args[1].op == "num" and node.args[1].value > 0 \
            and math.isfinite(node.args[1].value):
        return Node(node.op, (assume_live(node.args[0]), node.args[1]))
    if node.op == "mul" and node.args[0].op == "num" and node.args[0].value > 0 and math.isfinite(node.args[0].value):
        return Node("mul", (node.args[0], assume_live(node.args[1])))
    return node


def dead_names(node: Node) -> set[str]:
    """The names dead_mask(node, env) reads from env: the variables of the conditions it evaluates."""
    if node.op == "where":
        cond, x, y = node.args
        own = set() if "s" in variables(cond) else variables(cond)
        return own | dead_names(x) | dead_names(y)
    if node.op in ("add", "sub", "minimum"):
        a, b = node.args
        return (dead_names(a) if finite(b) else set()) | \
            (dead_names(b) if finite(a) and node.op != "sub" else set())
    if node.op in ("mul", "div") and node.args[1].op == "num" and node.args[1].value > 0 \
            and math.isfinite(node.args[1].value):
        return dead_names(node.args[0])
    if node.op == "mul" and node.args[0].op == "num" and node.args[0].value > 0 and math.isfinite(node.args[0].value):
        return dead_names(node.args[1])
    return set()


def dead_tree(node: Node):
    """dead_mask as an expression: a bool Node over the names dead_names gives, True where every score
    is dead, or None where none is (for generated code: flash.py's block-table kernel)."""
    if node.op == "num":
        return True if dead_value(node.value) else None
    if node.op == "where":
        cond, x, y = node.args
        dx, dy = dead_tree(x), dead_tree(y)
        if "s" in variables(cond):
            return _tree_and(dx, dy)
        if dx is None and dy is None:
            return None
        if dx is not None and dy is not None:
            if dx is True and dy is True:
                return True
            return Node("where", (cond, _as_node(dx), _as_node(dy)))
        if dy is None:
            return cond if dx is True else Node("and", (cond, dx))
        negated = Node("not", (cond,))
        return negated if dy is True else Node("and", (negated, dy))
    if node.op in ("add", "sub", "minimum"):
        a, b = node.args
        left = dead_tree(a) if finite(b) else None
        right = dead_tree(b) if finite(a) and node.op != "sub" else None
        if left is True or right is True:
            return True
        if left is None or right is None:
            return left if right is None else right
        return Node("or", (left, right))
    if node.op in ("mul", "div") and node.args[1].op == "num" and node.args[1].value > 0 \
            and math.isfinite(node.args[1].value):
        return dead_tree(node.args[0])
    if node.op == "mul" and node.args[0].op == "num" and node.args[0].value > 0 and math.isfinite(node.args[0].value):
        return dead_tree(node.args[1])
    return None


def _tree_and(a, b):
    if a is None or b is None:
        return None
    if a is True or b is True:
        return b if a is True else a
    return Node("and", (a, b))


def _as_node(value) -> Node:
    """A dead_tree value as a bool expression (True and None as comparisons Triton and torch agree on)."""
    if value is True:
        return Node("eq", (num(0), num(0)))
    if value is None:
        return Node("ne", (num(0), num(0)))
    return value


def dead_mask(node: Node, env: dict):
    """Where `node` is -inf (or a fill at or below DEAD_FILL) whatever the (finite) score s is: a bool
    tensor (or a Python bool) over the grid of `env` (i, j, L, S, and the extra tensors dead_names
    says it reads). Conservative: False where it cannot tell."""
    if node.op == "num":
        return dead_value(node.value)
    if node.op == "where":
        cond, x, y = node.args
        dx, dy = dead_mask(x, env), dead_mask(y, env)
        if "s" in variables(cond):
            return _and(dx, dy)
        c = torch.as_tensor(evaluate(cond, env))
        return torch.where(c, torch.as_tensor(dx, device=c.device), torch.as_tensor(dy, device=c.device))
    if node.op in ("add", "sub", "minimum"):
        a, b = node.args
        left = dead_mask(a, env) if finite(b) else False
        right = dead_mask(b, env) if finite(a) and node.op != "sub" else False
        return _or(left, right)
    if node.op in ("mul", "div") and node.args[1].op == "num" and node.args[1].value > 0 \
            and math.isfinite(node.args[1].value):
        return dead_mask(node.args[0], env)
    if node.op == "mul" and node.args[0].op == "num" and node.args[0].value > 0 and math.isfinite(node.args[0].value):
        return dead_mask(node.args[1], env)
    return False


def _and(a, b):
    if a is False or b is False:
        return False
    return torch.as_tensor(a) & torch.as_tensor(b)


def _or(a, b):
    if a is False:
        return b
    if b is False:
        return a
    return torch.as_tensor(a) | torch.as_tensor(b)

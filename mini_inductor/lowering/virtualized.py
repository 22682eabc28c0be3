"""The `ops` handler that loop bodies call.

A loop body is a plain Python function of index expressions that calls ``ops.load``,
``ops.add``, ``ops.reduction``, ``ops.scan``... The same body runs under different handlers: the scheduler's
recording handler collects reads and writes, the Triton handler emits code, the counting handler
sizes a body for the realization heuristic. The handler in force is held in a context variable and
swapped with ``set_ops_handler``; it is never reached from outside a ``with`` block.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
from typing import Any, Iterator

import sympy

_handler: contextvars.ContextVar[Any] = contextvars.ContextVar("mini_inductor_ops_handler")


def default_indirect_indexing(handler: Any, value: Any, size: Any, check: bool = True) -> sympy.Symbol:
    """For handlers that only analyse a body: a fresh index symbol per call, numbered per handler.

    Its name starts with "tmp", which is how dependency analysis recognises an indirect access.
    """
    n = getattr(handler, "_indirect_symbols", 0)
    handler._indirect_symbols = n + 1
    return sympy.Symbol(f"tmp_indirect{n}", integer=True, nonnegative=True)


# Ops a handler may leave out; the proxy supplies these (handler first).
_DEFAULT_OPS = {"indirect_indexing": default_indirect_indexing}


class _OpsProxy:
    def __getattr__(self, name: str) -> Any:
        try:
            handler = _handler.get()
        except LookupError:
            raise RuntimeError(f"ops.{name} called outside of a loop-body evaluation") from None
        try:
            return getattr(handler, name)
        except AttributeError:
            if name in _DEFAULT_OPS:
                return functools.partial(_DEFAULT_OPS[name], handler)
            raise


ops = _OpsProxy()


@contextlib.contextmanager
def set_ops_handler(handler: Any) -> Iterator[Any]:
    token = _handler.set(handler)
    try:
        yield handler
    finally:
        _handler.reset(token)


# Every op a loop body may call besides load/store/reduction/scan/constant/index_expr/to_dtype/where/masked.
# Handlers implement these; `CountingHandler` and the scheduler's recorder accept all of them.
POINTWISE_OPS = frozenset("""
add sub mul truediv truncdiv floordiv remainder fmod neg abs reciprocal square
exp exp2 expm1 log log2 log10 log1p sqrt rsqrt sin cos tan asin acos atan sinh cosh tanh asinh acosh atanh
sigmoid relu erf erfc erfinv lgamma pow atan2 hypot copysign fmax fmin nextafter
i0 i1 erfcx ndtri bessel_j0 bessel_j1 bessel_y0 bessel_y1
maximum minimum floor ceil trunc round sign signbit isnan isinf
eq ne lt le gt ge logical_and logical_or logical_xor logical_not
bitwise_and bitwise_or bitwise_xor bitwise_not bitwise_left_shift bitwise_right_shift
rand randn
""".split())


class CountingHandler:
    """Counts loads and compute ops of a body: the realization heuristic's view of its cost."""

    def __init__(self) -> None:
        self.loads = 0
        self.ops = 0

    def load(self, name, index):
        self.loads += 1
        return None

    def constant(self, value, dtype):
        return None

    def index_expr(self, expr, dtype):
        return None

    def to_dtype(self, x, dtype, src_dtype=None):
        self.ops += 1
        return None

    def where(self, c, a, b):
        self.ops += 1
        return None

    def masked(self, mask, body, other):
        self.ops += 1
        return body()

    def reduction(self, dtype, src_dtype, reduction_type, value):
        self.ops += 1
        return None

    def scan(self, dtype, scan_type, value):
        self.ops += 1
        return None

    def sort(self, dtype, descending, value):
        self.ops += 1
        return None

    def __getattr__(self, name):
        if name in POINTWISE_OPS:
            def count(*args, **kwargs):
                self.ops += 1
                return None
            return count
        raise AttributeError(name)

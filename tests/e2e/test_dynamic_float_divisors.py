"""Float quotients of sizes whose divisor may be 0, in a dynamic graph (issue 23).

Autograd's formulas divide sizes as C++ doubles: var's backward multiplies by 2 / (n - correction),
inf at n == correction, where eager's gradient is inf or NaN with no error. Such a backward compiles
once with symbols (the quotient in float64 in the kernel); it was sent to per-size compiles, whose
graph ran the division in Python and raised ZeroDivisionError at that size. A division in the
user's own Python code raises there in eager, and still does compiled.
"""
import warnings

import pytest
import torch
from torch._dynamo.source import ConstantSource
from torch.fx.experimental.symbolic_shapes import DimDynamic, ShapeEnv
from common import assert_same_tensor

import mini_inductor  # noqa: F401  registers the backend
from mini_inductor import metrics
from mini_inductor.codegen.wrapper_ir import render_arg
from mini_inductor.lowering import symbolic

SYMBOLIC = {"dynamic_shapes": "symbolic"}


@pytest.fixture(autouse=True)
def on_device(device):
    torch.set_default_device(device)
    yield
    torch.set_default_device(None)


def train_at_sizes(fn, sizes, rows=3):
    """fn compiled once (dynamic=True) against eager at each length: outputs and the input's gradient
    under a random weighting; returns the graph records after checking that the first length's
    compile served the others, with symbols (nothing compiled per size, nothing run eagerly)."""
    compiled = torch.compile(fn, backend="mini_inductor", dynamic=True, fullgraph=True, options=SYMBOLIC)
    after_first = None
    for n in sizes:
        x = torch.randn(rows, n)
        ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # eager's "degrees of freedom is <= 0"
            actual, expected = compiled(ours), fn(theirs)
            actual = actual if isinstance(actual, tuple) else (actual,)
            expected = expected if isinstance(expected, tuple) else (expected,)
            for i, (a, e) in enumerate(zip(actual, expected, strict=True)):
                assert_same_tensor(a, e, f"length {n} output {i}")
            weights = [torch.randn(e.shape) for e in expected]
            sum((a * w).sum() for a, w in zip(actual, weights)).backward()
            sum((e * w).sum() for e, w in zip(expected, weights)).backward()
        assert_same_tensor(ours.grad, theirs.grad, f"length {n} grad")
        if after_first is None:
            after_first = len(metrics.compiled_graphs)
    records = list(metrics.compiled_graphs)
    assert len(records) == after_first, f"lengths after the first compiled again: {[r.name for r in records]}"
    for r in records:
        assert r.dynamic_symbols and r.dynamic_fallback is None and r.ran_eagerly is None, r.summary()
        assert not r.fallback_ops, r.summary()
    return records


def _lengths(correction: int) -> tuple:
    # a length equal to the correction (inf or NaN), and one below it (a negative divisor), where it can
    # be: Dynamo specializes lengths 0 and 1. (A first call at n == correction fails in AOT autograd's
    # own tracing, aot_eager too: its SymFloat hint divides by 0 in Python.)
    return (5, 2, 7) if correction < 3 else (5, correction, 2, 7)


OPS = {
    "var": lambda c: lambda x: x.var(dim=1, correction=c),
    "std": lambda c: lambda x: x.std(dim=1, correction=c, keepdim=True),
    "var_mean": lambda c: lambda x: torch.var_mean(x, dim=1, correction=c),
    "std_mean": lambda c: lambda x: torch.std_mean(x, dim=(0, 1), correction=c),
}


@pytest.mark.parametrize("correction", (0, 1, 2, 3))
@pytest.mark.parametrize("op", list(OPS))
def test_variance_trains_as_eager_at_every_length_from_one_symbolic_compile(op, correction):
    records = train_at_sizes(OPS[op](correction), _lengths(correction), rows=3 if op != "std_mean" else 1)
    assert [r.name.split("_")[0] for r in records] == ["forward", "backward"], [r.summary() for r in records]


def test_the_backward_at_the_correction_is_inf_and_nan_as_eagers():
    # the quotient 2 / (n - 2) is inf at n = 2: each gradient is ±inf, NaN where x equals the row's mean
    f = lambda x: x.var(dim=1, correction=2)  # noqa: E731
    train_at_sizes(f, (6, 4))
    compiled = torch.compile(f, backend="mini_inductor", dynamic=True, fullgraph=True, options=SYMBOLIC)
    x = torch.tensor([[1.0, 3.0], [2.0, 2.0]], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled(x).sum().backward()
    assert x.grad[0].tolist() == [float("-inf"), float("inf")]
    assert x.grad[1].isnan().all()
    assert all(r.dynamic_fallback is None for r in metrics.compiled_graphs)


@pytest.mark.parametrize("unbiased", (True, False))
def test_the_unbiased_spellings_train_as_eager_from_one_symbolic_compile(unbiased):
    fns = [lambda x: x.var(1, unbiased=unbiased), lambda x: torch.std(x, 1, unbiased, True),
           lambda x: torch.var_mean(x, 1, unbiased=unbiased), lambda x: torch.std_mean(x, [1], unbiased=unbiased)]
    for fn in fns:
        torch._dynamo.reset()
        metrics.reset()
        assert len(train_at_sizes(fn, (5, 2, 7))) == 2


def test_a_variance_of_every_element_with_correction_two_trains_as_eager():
    # autograd's formula without dims branches on n - correction <= 0, a guard: Dynamo compiles the
    # length 2 again (aot_eager too), with symbols; nothing is compiled per size
    f = lambda x: x.var(correction=2)  # noqa: E731
    compiled = torch.compile(f, backend="mini_inductor", dynamic=True, fullgraph=True, options=SYMBOLIC)
    for n in (5, 7, 2):
        x = torch.randn(1, n)
        ours, theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            out, ref = compiled(ours), f(theirs)
            out.backward()
            ref.backward()
        assert_same_tensor(out, ref, f"length {n}")
        assert_same_tensor(ours.grad, theirs.grad, f"length {n} grad")
    records = metrics.compiled_graphs
    assert all(r.dynamic_symbols and r.dynamic_fallback is None for r in records), [r.summary() for r in records]


def test_a_division_by_a_size_in_the_users_code_still_raises_where_eager_does():
    # Python's float division raises at 0; the forward's quotient is not autograd's, and stays refused
    def f(x):
        return torch.full((3,), 1.0 / (x.shape[1] - 2)) + x.sum()
    compiled = torch.compile(f, backend="mini_inductor", dynamic=True, options=SYMBOLIC)
    with pytest.warns(UserWarning, match="may be 0"):
        for n in (5, 7):
            x = torch.randn(3, n)
            assert_same_tensor(compiled(x), f(x), f"length {n}")
    with pytest.raises(ZeroDivisionError):
        f(torch.randn(3, 2))
    with pytest.raises(ZeroDivisionError):
        compiled(torch.randn(3, 2))


def test_the_wrapper_divides_autograds_quotient_as_ieee_doubles():
    # an ATen call's float argument the wrapper computes: inf at 0, where Python's `/` raises
    env = ShapeEnv()
    n = env.create_symintnode(env.create_symbol(5, ConstantSource("n"), dynamic_dim=DimDynamic.DYNAMIC), hint=5)
    quotient = 2.0 / (torch.sym_float(n) - 2.0)
    shapes = symbolic.GraphShapes(shape_env=env, ieee_quotients=frozenset({quotient.node.expr}))
    with symbolic.using(shapes):
        source = render_arg(quotient)
        name = next(iter(symbolic.to_expr(quotient).free_symbols)).name
    assert eval(source, {"torch": torch, name: 5}) == pytest.approx(2 / 3)
    assert eval(source, {"torch": torch, name: 2}) == float("inf")
    assert eval(source, {"torch": torch, name: 1}) == -2.0
    with symbolic.using(symbolic.GraphShapes(shape_env=env)), pytest.raises(symbolic.SymbolicUnsupported,
                                                                              match="may be 0"):
        symbolic.to_expr(quotient)   # a quotient that is not autograd's: refused

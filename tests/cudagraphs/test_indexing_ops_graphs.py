"""Indexing ops under CUDA graphs (cudagraph-tests.md §5 #40, TestCudagraphIndexingOps): every
OpInfo sample (up to MAX_SAMPLES per op) of index_put, index_add, index_copy, index_fill and scatter
in float32, with deterministic algorithms off and on, equals eager after three calls (warmup,
recording, replay). Samples that eager rejects in a setting are left out, as upstream does."""
import sys
import types
import unittest

import pytest
import torch

import mini_inductor  # noqa: F401  registers the backend

try:
    import expecttest  # noqa: F401  torch.testing._internal needs it  # pyflakes: ignore
except ImportError:  # the GPU machine has no network to install it: its TestCase base is enough
    sys.modules["expecttest"] = types.SimpleNamespace(TestCase=unittest.TestCase, ACCEPT=False)  # type: ignore

from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

pytestmark = pytest.mark.gpu

OPS = ("index_put", "index_add", "index_copy", "index_fill", "scatter")
MAX_SAMPLES = 4


def _samples(name):
    ops = [op for op in op_db if op.name == name]
    assert ops, f"OpInfo has no {name}"
    out = []
    for op in ops:
        for i, sample in enumerate(op.sample_inputs("cuda", torch.float32, requires_grad=False)):
            if i >= MAX_SAMPLES:
                break
            out.append((op, sample))
    return out


def _clone(x):
    return x.clone() if isinstance(x, torch.Tensor) else x


def _run(op, sample, compile_it):
    inp = _clone(sample.input)
    args = [_clone(a) for a in sample.args]
    kwargs = {k: _clone(v) for k, v in sample.kwargs.items()}

    def fn(inp, *args):
        return op.op(inp, *args, **kwargs)
    if compile_it:
        fn = torch.compile(fn, backend="mini_inductor", mode="reduce-overhead", dynamic=False)
    # each replay writes the same pool buffer, so keep a copy of every call's result
    return [fn(_clone(inp), *[_clone(a) for a in args]).clone() for _ in range(3)]


@pytest.mark.parametrize("deterministic", [False, True], ids=["nondeterministic", "deterministic"])
@pytest.mark.parametrize("name", OPS)
def test_indexing_op_samples_under_cuda_graphs_equal_eager(name, deterministic):
    checked = 0
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(deterministic)
    try:
        for op, sample in _samples(name):
            try:
                want = _run(op, sample, compile_it=False)
            except Exception:   # noqa: BLE001  eager rejects the sample in this setting
                continue
            torch._dynamo.reset()
            got = _run(op, sample, compile_it=True)
            for g, w in zip(got, want):
                torch.testing.assert_close(g, w, msg=lambda m: f"{name} {sample}: {m}")
            checked += 1
    finally:
        torch.use_deterministic_algorithms(was)
        torch._dynamo.reset()
    assert checked > 0, f"no {name} sample ran in eager"

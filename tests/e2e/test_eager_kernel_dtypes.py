"""Ops whose eager kernels refuse an input dtype raise as eager does when compiled.

Eager has no integer or bool kernel for most activations ('"silu_cpu" not implemented for 'Long'')
and refuses bool in relu, threshold, abs, negation and subtraction. Their decompositions and our
lowerings computed a value anyway (gelu of an int tensor gave ints, `1 - mask` gave a number).
Such an input now keeps the op whole: it runs in ATen, which raises eager's own error at the call,
or computes where the device's kernel takes the dtype (lowering/decompositions.py `_KERNEL_DTYPES`).
"""
import re

import pytest
import torch
import torch.nn.functional as F

from common import assert_no_fallbacks, check, compile_fn, reset_metrics

OPS = {
    "threshold": lambda x: F.threshold(x, 0, 2),
    "relu": torch.relu,
    "gelu": F.gelu,
    "silu": F.silu,
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
    "mish": F.mish,
    "celu": F.celu,
    "softplus": F.softplus,
    "logsigmoid": F.logsigmoid,
    "abs": torch.abs,
    "neg": torch.neg,
    "sub": lambda x: x - 1,
    "rsub": lambda x: 1 - x,
    "softsign": F.softsign,      # x / (1 + |x|): abs of a bool
    "tanhshrink": F.tanhshrink,  # x - tanh(x): a bool subtraction
}


def _inputs(device):
    return {"int64": torch.tensor([1, -2, 3, 0], device=device),
            "bool": torch.tensor([True, False, True, False], device=device)}


# (logsigmoid of a bool: Dynamo's own FakeTensor pass raises first, another error than eager's)
CASES = [(name, kind) for name in sorted(OPS) for kind in ("int64", "bool") if (name, kind) != ("logsigmoid", "bool")]


@pytest.mark.parametrize("name,kind", CASES)
def test_compiled_raises_or_computes_as_eager(name, kind, device):
    fn, x = OPS[name], _inputs(device)[kind]
    try:
        fn(x)
    except (RuntimeError, NotImplementedError) as e:
        message = str(e).splitlines()[0]
        with pytest.raises(type(e), match=re.escape(message)):
            compile_fn(fn)(x)
        return
    check(fn, x)


@pytest.mark.parametrize("fn", [lambda x: x - True, lambda x: True - x, lambda x: x.sub(True, alpha=2)],
                         ids=["sub", "rsub", "sub_alpha"])
def test_a_subtraction_with_a_python_bool_raises_as_eager(fn, device):
    x = torch.randn(4, device=device)
    with pytest.raises(RuntimeError) as eager:
        fn(x)
    with pytest.raises(RuntimeError, match=re.escape(str(eager.value).splitlines()[0])):
        compile_fn(fn)(x)


def test_floating_inputs_are_still_generated(device):
    x = torch.randn(64, device=device)
    for name in ("gelu", "silu", "relu", "threshold", "abs", "sub", "softplus"):
        check(OPS[name], x)
    reset_metrics()
    check(lambda x: F.silu(x) - x.abs(), x)
    assert_no_fallbacks()

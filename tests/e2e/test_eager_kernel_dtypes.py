"""Ops whose eager kernels refuse an input dtype raise as eager does when compiled.

Eager has no integer or bool kernel for most activations ('"silu_cpu" not implemented for 'Long''),
softmax, frac, glu, prelu, hypot, nextafter, lerp, logaddexp, max_pool1d and the nearest
upsamplings (which take uint8), and refuses bool in relu, threshold, abs, negation, subtraction,
rounding, trace, clamp, addcmul and addcdiv. Their decompositions and our lowerings computed a value
anyway (gelu of an int tensor gave ints, `1 - mask` gave a number). Such an input now keeps the op
whole: it runs in ATen, which raises eager's own error at the call, or computes where the device's
kernel takes the dtype (lowering/decompositions.py `_KERNEL_DTYPES`). hardshrink, the upsamplings
and max_pool1d are taken apart before that table sees them; lowering/early_decompositions.py keeps
them whole first.
"""
import re

import pytest
import torch
import torch.nn.functional as F

from common import BACKEND, COUNTS_KERNELS, assert_fallback, assert_no_fallbacks, check, compile_fn, reset_metrics

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
    "hardshrink": F.hardshrink,  # (torch's Python kernel takes it apart at the autograd key)
    "softshrink": F.softshrink,
    "softmax": lambda x: torch.softmax(x, -1),
    "log_softmax": lambda x: torch.log_softmax(x, -1),
    "softmin": lambda x: F.softmin(x, -1),
    "frac": torch.frac,
    "logaddexp": lambda x: torch.logaddexp(x, x.flip(0)),
    "logaddexp2": lambda x: torch.logaddexp2(x, x.flip(0)),
    "glu": F.glu,
    "prelu": lambda x: F.prelu(x, torch.ones(1, dtype=x.dtype, device=x.device)),
    "hypot": lambda x: torch.hypot(x, x.flip(0)),
    "nextafter": lambda x: torch.nextafter(x, x.flip(0)),
    "lerp": lambda x: torch.lerp(x, x.flip(0), 0.5),
    "lerp_tensor_weight": lambda x: torch.lerp(x, x.flip(0), x),
    "round": torch.round,        # (identity for an integer, as floor, ceil and trunc)
    "floor": torch.floor,
    "ceil": torch.ceil,
    "trunc": torch.trunc,
    "trace": lambda x: torch.trace(x.reshape(2, 2)),
    "clamp_tensors": lambda x: torch.clamp(x, x.flip(0), x),
    "clamp_numbers": lambda x: torch.clamp(x, True, False),   # (an int tensor computes: ints)
    "clamp_min": lambda x: torch.clamp_min(x, True),
    "addcmul": lambda x: torch.addcmul(x, x, x),
    "addcdiv": lambda x: torch.addcdiv(x, x, x),
    "max_pool1d": lambda x: F.max_pool1d(x.reshape(1, 1, 4), 2),   # (CPU's kernel, not max_pool2d's)
    "upsample_nearest1d": lambda x: F.interpolate(x.reshape(1, 1, 4), scale_factor=2, mode="nearest"),
    "upsample_nearest2d": lambda x: F.interpolate(x.reshape(1, 1, 2, 2), scale_factor=2, mode="nearest"),
    "upsample_nearest_exact2d": lambda x: F.interpolate(x.reshape(1, 1, 2, 2), size=(3, 3), mode="nearest-exact"),
}


def compiled_graphs():
    from mini_inductor import metrics
    return metrics.compiled_graphs


def _inputs(device):
    return {"int64": torch.tensor([1, -2, 3, 0], device=device),
            "bool": torch.tensor([True, False, True, False], device=device)}


# Dynamo's own FakeTensor pass raises first (before any backend: backend="eager" too), a
# TorchRuntimeError rather than eager's error: the refs of these check the dtype where eager's kernel
# dispatch raises; addcdiv's meta refuses integers (not bools) before eager's check; softshrink's
# ref asks torch.finfo of the dtype.
DYNAMO_RAISES_FIRST = {("logsigmoid", "bool"), ("log_softmax", "bool"), ("softmin", "bool"), ("frac", "bool"),
                       ("logaddexp", "bool"), ("logaddexp2", "bool"), ("addcdiv", "int64"), ("softshrink", "int64"),
                       ("softshrink", "bool")}
CASES = [(name, kind) for name in sorted(OPS) for kind in ("int64", "bool") if (name, kind) not in DYNAMO_RAISES_FIRST]


def raises_or_computes_as_eager(fn, x, compiled=None) -> bool:
    """`compiled` (fn compiled) raises eager's error, its type and first line, where eager raises on this
    device; else computes eager's values and dtype (then True)."""
    try:
        fn(x)
    except (RuntimeError, NotImplementedError) as e:
        with pytest.raises(type(e), match=re.escape(str(e).splitlines()[0])):
            (compiled or compile_fn(fn))(x)
        return False
    if compiled is None:
        check(fn, x)
    else:
        torch.testing.assert_close(compiled(x), fn(x), rtol=0, atol=0)
    return True


@pytest.mark.parametrize("name,kind", CASES)
def test_compiled_raises_or_computes_as_eager(name, kind, device):
    raises_or_computes_as_eager(OPS[name], _inputs(device)[kind])


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("name", sorted(OPS))
def test_floating_inputs_of_every_op_are_generated(name, dtype, device):
    x = torch.tensor([1.5, -2.25, 3.0, 0.5], device=device, dtype=dtype)
    check(OPS[name], x)
    assert_no_fallbacks()


@pytest.mark.parametrize("name", ["hardshrink", "softmax", "lerp", "max_pool1d", "upsample_nearest2d", "glu"])
def test_floating_training_graphs_keep_torch_decompositions(name, device):
    check(OPS[name], torch.tensor([1.5, -2.25, 3.0, 0.5], device=device), grad=True)
    assert_no_fallbacks()


@pytest.mark.parametrize("name,op", [("hardshrink", "aten.hardshrink"), ("softmax", "aten._softmax"),
                                     ("max_pool1d", "mini_inductor.max_pool1d"),
                                     ("upsample_nearest2d", "aten.upsample_nearest2d"), ("round", "aten.round")])
def test_a_refused_dtype_is_a_counted_fallback(name, op, device):
    """On every device: the CPU's kernel raises, a device whose kernel takes the dtype computes."""
    reset_metrics()
    try:
        compile_fn(OPS[name])(_inputs(device)["bool"])
    except (RuntimeError, NotImplementedError):
        pass
    assert_fallback(op)


@pytest.mark.parametrize("name", ["upsample_nearest1d", "upsample_nearest2d", "upsample_nearest_exact2d",
                                  "max_pool1d", "hardshrink", "clamp_numbers", "trace"])
def test_uint8_raises_or_computes_as_eager(name, device):
    """Eager's nearest upsamplings take uint8 (images) where they refuse the other integers."""
    if raises_or_computes_as_eager(OPS[name], torch.tensor([1, 200, 3, 0], dtype=torch.uint8, device=device)):
        assert_no_fallbacks()


DYNAMIC_CASES = {   # name: (fn, whether Dynamo's graph keeps a symbolic size: max_pool1d's specializes)
    "upsample_nearest1d_size": (lambda x: F.interpolate(x, size=x.shape[-1] * 2, mode="nearest"), True),
    "upsample_nearest_exact1d": (lambda x: F.interpolate(x, scale_factor=2, mode="nearest-exact"), True),
    "max_pool1d": (lambda x: F.max_pool1d(x, 2), False),
    "hardshrink": (F.hardshrink, True),
    "softmax": (lambda x: x.softmax(-1), True),
}


@pytest.mark.parametrize("name", sorted(DYNAMIC_CASES))
def test_refused_dtypes_raise_in_dynamic_graphs(name, device):
    """Symbolic sizes: upsample_nearest1d.vec's C++ composite takes concrete sizes only, so a call kept
    whole computes the size in Python first (as torch's Python kernel does)."""
    fn, symbolic = DYNAMIC_CASES[name]
    compiled = torch.compile(fn, backend=BACKEND, dynamic=True, fullgraph=True)
    for n in (6, 10):
        reset_metrics()
        raises_or_computes_as_eager(fn, torch.arange(n, device=device).reshape(1, 1, n), compiled)
        if COUNTS_KERNELS and symbolic and n == 6:
            assert all(g.dynamic_symbols for g in compiled_graphs()), "expected a graph of symbolic sizes"
    check(fn, torch.randn(1, 1, 6, device=device))
    assert_no_fallbacks()


def test_hardshrink_of_a_lambd_out_of_float16_raises_as_eager(device):
    """hardshrink takes its lambd through eager's checked conversion; torch's Python kernel, which takes
    the op apart before the decomposition table, baked 1e6 into a where (inf in float16)."""
    fn, x = (lambda x: F.hardshrink(x, 1e6)), torch.randn(8, device=device, dtype=torch.float16)
    raises_or_computes_as_eager(fn, x)
    if device == "cpu":
        with pytest.raises(RuntimeError, match="value cannot be converted to type c10::Half without overflow"):
            fn(x)
    check(fn, x.float())

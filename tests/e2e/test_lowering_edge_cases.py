"""Lowerings of corner cases compute eager's values, or fall back to ATen (counted); none crashes compile.

Each test here crashed compile (or the generated kernel) before: a scalar scaled by alpha, integer
powers, argmax over an expanded dim, integer scalars out of a small dtype's range, the sign of a bool,
~ of a uint8, any() of a uint8, and a lowering that raises.
"""
import logging
import re

import pytest
import torch

from common import assert_fallback, assert_no_fallbacks, assert_same_tensor, check, compile_fn
from mini_inductor import metrics
from mini_inductor.lowering.lowerings import LOWERINGS

aten = torch.ops.aten
INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]


def _ints(dtype, device, low=-20, high=20, n=12):
    if dtype == torch.uint8:
        low = 0
    return torch.randint(low, high, (2, n), device=device).to(dtype)


def test_add_and_sub_scale_a_scalar_or_tensor_by_alpha(device):
    x, y = torch.randn(3, 8, device=device), torch.randn(3, 8, device=device)
    check(lambda x, y: (torch.add(x, 3, alpha=2), torch.sub(x, 2.5, alpha=3), torch.rsub(x, 2, alpha=3),
                        torch.add(x, y, alpha=2), torch.sub(x, y, alpha=-0.5)), x, y)
    assert_no_fallbacks()


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_integer_add_with_alpha_wraps_like_eager(device, dtype):
    x, y = _ints(dtype, device), _ints(dtype, device)
    check(lambda x, y: (torch.add(x, 7, alpha=3), torch.sub(x, y, alpha=5)), x, y)
    assert_no_fallbacks()


@pytest.mark.parametrize("dtype", INTS + [torch.bool], ids=str)
def test_integer_power_by_a_scalar_is_exact_and_wraps_like_eager(device, dtype):
    x = _ints(dtype, device) if dtype != torch.bool else torch.rand(2, 12, device=device) > 0.5
    check(lambda x: (x ** 0, x ** 1, x ** 2, x ** 3, x ** 7, x ** 13), x, kernels=1)
    assert_no_fallbacks()


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8], ids=str)
def test_integer_power_by_a_tensor_exponent_runs_in_aten(device, dtype):
    x = _ints(dtype, device, -4, 5)
    e = torch.randint(-2, 6, (2, 12), device=device).to(dtype) if dtype != torch.uint8 else _ints(dtype, device, 0, 6)
    check(lambda x, e: (x ** e, 2 ** e), x, e)
    assert_fallback("pow")


def test_integer_power_by_a_negative_scalar_raises_as_eager_does(device):
    x = torch.arange(1, 5, device=device)
    with pytest.raises(Exception, match="negative integer powers"):
        x ** -1
    with pytest.raises(Exception, match="negative integer powers"):
        compile_fn(lambda x: x ** -1)(x)


@pytest.mark.parametrize("keepdim", [False, True])
def test_argmax_and_argmin_over_an_expanded_dim(device, keepdim):
    x = torch.randn(5, device=device)
    check(lambda x: (x.expand(4, 5).argmax(0, keepdim=keepdim), x.expand(4, 5).argmin(0, keepdim=keepdim),
                     x[:, None].expand(5, 7).argmax(1, keepdim=keepdim), x.expand(3, 5).max(0)), x)


def test_argmax_over_an_expanded_dim_in_a_looped_reduction(device):
    x = torch.randn(6, device=device)

    def fn(x):
        return x.expand(40, 6).argmax(0), x[:, None].expand(6, 40).argmin(1), x.expand(40, 6).argmax()
    out = torch.compile(fn, backend="mini_inductor", options={"persistent_reduction_limit": 8})(x)
    for got, want in zip(out, fn(x)):
        assert torch.equal(got, want), (got, want)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16], ids=str)
def test_out_of_range_integer_scalars_wrap_like_eager(device, dtype):
    x = _ints(dtype, device, -100, 100)
    check(lambda x: (x + 300, x * -1, x - 70000, x * 1000, torch.add(x, 300, alpha=3)), x, kernels=1)
    assert_no_fallbacks()


def test_full_of_minus_one_in_uint8_is_255(device):
    x = torch.zeros(4, dtype=torch.uint8, device=device)
    check(lambda x: torch.full((4,), -1, dtype=torch.uint8, device=x.device) + x, x)


def test_sign_of_bool_is_itself(device):
    x = torch.rand(2, 8, device=device) > 0.5
    check(lambda x: torch.sign(x), x)


def test_bitwise_not_of_uint8(device):
    x = torch.randint(0, 256, (2, 8), device=device).to(torch.uint8)
    check(lambda x: ~x, x)


def test_any_of_uint8_keeps_uint8_like_eager(device):
    x = torch.randint(0, 2, (3, 8), device=device).to(torch.uint8)
    check(lambda x: (x.any(-1), x.any()), x)


def test_a_lowering_that_raises_makes_its_node_a_counted_fallback(device, monkeypatch, caplog):
    def broken(*args, **kwargs):
        raise ValueError("boom")
    monkeypatch.setitem(LOWERINGS, aten.relu.default, broken)
    x = torch.randn(4, 8, device=device)
    with caplog.at_level(logging.WARNING, logger="mini_inductor"):
        check(lambda x: torch.relu(x * 2 + 1).sum(-1), x)
    assert_fallback("relu")
    assert any("aten.relu.default" in r.getMessage() and "ValueError: boom" in r.getMessage()
               for r in caplog.records), [r.getMessage() for r in caplog.records]
    assert metrics.compiled_graphs[-1].fallback_ops == {"aten.relu.default": 1}


def test_a_pointwise_op_of_scalars_only_runs_in_aten(device):
    """aten.add.Tensor(2.0, 3) has no tensor to take a device from: ATen computes it (a 0-d CPU
    tensor, as eager's wrapped scalars give) and the rest of the graph is generated."""
    from mini_inductor import config
    from mini_inductor.codegen import generate
    from mini_inductor.caching.modules import load_module
    from mini_inductor.lowering import lower_graph
    from mini_inductor.runtime.interpreter import install
    from mini_inductor.scheduler import schedule

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    x.meta["val"] = torch.empty(4, device=device)
    total = graph.call_function(aten.add.Tensor, (2.0, 3))
    total.meta["val"] = torch.empty(())
    out = graph.call_function(aten.mul.Tensor, (x, total))
    out.meta["val"] = torch.empty(4, device=device)
    graph.output((out,))
    cfg = config.current()
    lowered = lower_graph(torch.fx.GraphModule({}, graph), [torch.empty(4, device=device)], "scalars_0", cfg)
    assert lowered.fallback_ops == {"aten.add.Tensor": 1}
    if device == "cpu":   # in a CUDA graph a CPU op is never lowered: it runs in ATen, with no reason to give
        assert "scalars only" in lowered.fallback_reasons["aten.add.Tensor"]
    install()
    module, _ = load_module(generate(schedule(lowered, cfg), cfg).source, cfg.cache_dir)
    x = torch.arange(4.0, device=device)
    (result,) = module.call([x], dict(lowered.constants))
    assert torch.equal(result, x * 5)


@pytest.mark.parametrize("dtype", INTS, ids=str)
def test_shift_by_a_scalar_is_generated(device, dtype):
    x = _ints(dtype, device, -100, 100)
    check(lambda x: (x << 3, x >> 2, x << 0), x, kernels=1)
    assert_no_fallbacks()



@pytest.mark.parametrize("fn", [
    lambda x: torch.where(x > 1, 300, x),
    lambda x: x.clamp(max=300),
    lambda x: torch.full((4,), 256, dtype=torch.uint8, device=x.device) + x,
    lambda x: torch.add(x.to(torch.int8), 3, alpha=300),
], ids=["where", "clamp", "full", "alpha"])
def test_a_scalar_eager_cannot_convert_raises_as_in_eager(device, fn):
    x = torch.arange(4, device=device).to(torch.uint8)
    try:
        expected = fn(x)
    except RuntimeError as e:
        assert re.search("cannot be converted to type u?int8_t without overflow", str(e))
        with pytest.raises(Exception, match="cannot be converted to type u?int8_t without overflow"):
            compile_fn(fn)(x)
    else:   # torch 2.15's eager clamps a uint8 to an out-of-range bound without raising
        assert_same_tensor(compile_fn(fn)(x), expected, "output")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_negative_and_large_floats_cast_to_uint8_wrap_like_eager(device, dtype):
    # eager converts through a wider integer (-1.5 → 255, 300.5 → 44); a direct cast saturates on the GPU
    x = torch.tensor([-1.5, -0.5, 0.5, 200.7, 300.5, -129.0], device=device, dtype=dtype)
    check(lambda x: (x * 1).to(torch.uint8), x)

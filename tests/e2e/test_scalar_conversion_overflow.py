"""A number an op converts to its tensor's dtype behaves as in eager when it is out of the dtype's range.

Eager converts a fill value, a clamp bound, an alpha, an exponent, an activation's parameter with a
check and raises "value cannot be converted to type c10::Half without overflow" (conversions.py has
the rule); the compiled code gave inf, or a wrapped integer, without a word. Now such a number is never
baked into a kernel: its node runs in ATen, which raises with eager's error (a RuntimeError, at the
call) or computes eager's value where eager's own conversion is unchecked (a one-element CPU fill of a
half type, a where's number on the CPU). A number a decomposition makes into a fill (nan_to_num's
posinf) is converted as the op it came from converts it.
"""
import itertools
import re

import pytest
import torch
import torch.nn.functional as F

from common import assert_fallback, assert_no_fallbacks, check, compile_fn, reset_metrics
from mini_inductor import metrics
from mini_inductor.conversions import always_converts, converts

f16, bf16, f32 = torch.float16, torch.bfloat16, torch.float32
INF = float("inf")


def behaves_as_eager(fn, *args):
    """fn compiled against eager on `args`: eager's RuntimeError for an out-of-range number (the same
    message, at the call), else eager's values, dtypes and strides (common.check)."""
    try:
        fn(*args)
    except RuntimeError as e:
        message = str(e).splitlines()[0]
        assert "without overflow" in message, f"eager raised for another reason: {message}"
        with pytest.raises(RuntimeError, match=re.escape(message)):
            compile_fn(fn)(*args)
        return
    check(fn, *args)


def _x(dtype, device):
    return torch.tensor([-1, 0, 2, 3], device=device).to(dtype)


def _fn(op, value):
    return lambda x, i: op(x, i, value)


# ── fills: the number converts to the filled tensor's dtype ──────────────────────────────────────
FILLS = {
    "fill_": lambda x, i, v: x.clone().fill_(v),
    "full": lambda x, i, v: torch.full((4,), v, dtype=x.dtype, device=x.device) + x,
    "full_like": lambda x, i, v: torch.full_like(x, v),
    "new_full": lambda x, i, v: x.new_full((2, 3), v),
    "masked_fill": lambda x, i, v: x.masked_fill(x > 0, v),
    "masked_fill_": lambda x, i, v: x.clone().masked_fill_(x > 0, v),
    "index_fill": lambda x, i, v: x.index_fill(0, i, v),
    "scatter": lambda x, i, v: x.scatter(0, i, v),
    "constant_pad_nd": lambda x, i, v: F.pad(x, (1, 2), value=v),
}
# out of range (eager raises), at the edge of the range, inf (converts), and integers: out of range,
# and -1 into uint8 (255: it wraps), -1.0 (a float does not wrap: raises)
FILL_VALUES = [(f16, 1e6), (f16, 65519.0), (f16, -65504.0), (f16, -INF), (bf16, 1e39), (f32, 1e39),
               (f32, -3.4028234663852886e38), (torch.int8, 300), (torch.int16, -40000), (torch.uint8, -1),
               (torch.uint8, -1.0), (torch.int32, 3e9), (torch.uint8, 2.5)]


@pytest.mark.parametrize("dtype,value", FILL_VALUES, ids=lambda p: str(p).replace("torch.", ""))
@pytest.mark.parametrize("op", FILLS)
def test_a_fill_out_of_the_dtypes_range_behaves_as_eager(device, op, dtype, value):
    behaves_as_eager(_fn(FILLS[op], value), _x(dtype, device), torch.tensor([0, 2], device=device))


@pytest.mark.parametrize("value", [2, -1, 256, 0.5, INF])
@pytest.mark.parametrize("op", ["fill_", "full_like", "masked_fill", "index_fill", "scatter", "constant_pad_nd"])
def test_any_number_fills_a_bool_tensor(device, op, value):
    behaves_as_eager(_fn(FILLS[op], value), torch.tensor([True, False, True, False], device=device),
                     torch.tensor([1, 3], device=device))


def test_a_fill_in_range_is_generated(device):
    x, i = _x(f16, device), torch.tensor([0, 2], device=device)
    for op, value in itertools.product(FILLS.values(), (-65504.0, -INF)):
        torch._dynamo.reset()   # (one code object: a recompile per case)
        check(_fn(op, value), x, i)
    check(lambda x: x.new_full((3,), -1), _x(torch.uint8, device))   # wraps to 255, as in eager
    assert_no_fallbacks()


@pytest.mark.parametrize("op", ["full_like", "masked_fill"])   # (lowered; kept whole by the decompositions)
def test_an_out_of_range_fill_runs_in_aten_and_names_op_value_and_dtype(device, caplog, op):
    with caplog.at_level("INFO", logger="mini_inductor.perf_hints"):
        with pytest.raises(RuntimeError, match="cannot be converted to type c10::Half without overflow"):
            compile_fn(_fn(FILLS[op], 1e6))(_x(f16, device), None)
    assert_fallback(op)
    assert any(f"aten.{op}" in r.message and "1000000.0" in r.message and "torch.float16" in r.message
               for r in caplog.records), [r.message for r in caplog.records]


def test_a_one_element_cpu_fill_of_a_half_type_rounds_as_eager_does():
    # eager's CPU fill of a one-element tensor converts without the check: 1e6 is float16 inf there, and a
    # where's number becomes such a tensor (on CUDA both raise); ATen decides, as in eager
    x = torch.zeros(4, dtype=f16)
    for fn in (lambda x: torch.full((1,), 1e6, dtype=x.dtype) + x, lambda x: torch.where(x > 0, x, 1e6),
               lambda x: torch.where(x >= 0, 65519.0, x), lambda x: x[:1].clone().fill_(1e6)):
        reset_metrics()
        behaves_as_eager(fn, x)
        assert metrics.total_fallbacks(), "the fill should run in ATen"


# ── numbers converted to the result's dtype, or the dtype the op computes in ─────────────────────
OTHERS = {
    "clamp": lambda x, i, v: x.clamp(max=v),
    "clamp_min": lambda x, i, v: torch.clamp_min(x, v),
    "where": lambda x, i, v: torch.where(x > 0, x, v),
    "add alpha": lambda x, i, v: torch.add(x, x, alpha=v),
    "sub alpha": lambda x, i, v: torch.sub(x, x, alpha=v),
    "pow": lambda x, i, v: x.abs() ** v,
    "hardtanh": lambda x, i, v: F.hardtanh(x, -1.0, v),
    "threshold value": lambda x, i, v: F.threshold(x, 0.5, v),
    "threshold": lambda x, i, v: F.threshold(x, v, 0.0),
    "leaky_relu": lambda x, i, v: F.leaky_relu(x, v),
    "elu": lambda x, i, v: F.elu(x, alpha=v),
    "elu scale": lambda x, i, v: torch.ops.aten.elu(x, 1.0, v, 1.0),
    "elu input_scale": lambda x, i, v: torch.ops.aten.elu(x, 1.0, 1.0, v),
    "celu": lambda x, i, v: F.celu(x, alpha=v),
    "softplus": lambda x, i, v: F.softplus(x, beta=v),
    "softplus threshold": lambda x, i, v: F.softplus(x, threshold=v),
    "lerp": lambda x, i, v: torch.lerp(x, x + 1, v),
    "addcmul": lambda x, i, v: torch.addcmul(x, x, x, value=v),
    "addcmul_": lambda x, i, v: x.clone().addcmul_(x, x, value=v),
    "addcdiv_": lambda x, i, v: x.clone().addcdiv_(x, x.abs() + 1, value=v),
    "logit": lambda x, i, v: torch.logit(x.sigmoid(), eps=v),
}
FLOAT_VALUES = [(f16, 1e6), (f16, 65519.0), (bf16, 1e39), (f32, 1e39), (f32, 3.0)]
INT_OPS = ["clamp", "clamp_min", "where", "add alpha", "pow"]
INT_VALUES = [(torch.int8, 300), (torch.int16, 40000), (torch.uint8, 256)]


@pytest.mark.parametrize("op,dtype,value", [
    *[(op, d, v) for op in OTHERS for d, v in FLOAT_VALUES],
    *[(op, d, v) for op in INT_OPS for d, v in INT_VALUES],
], ids=lambda p: str(p).replace("torch.", ""))
def test_a_parameter_out_of_range_behaves_as_eager(device, op, dtype, value):
    behaves_as_eager(_fn(OTHERS[op], value), _x(dtype, device), torch.tensor([0, 2], device=device))


@pytest.mark.parametrize("fn,dtype", [
    (lambda x: torch.nan_to_num(x / 0, posinf=1e39), f32),
    (lambda x: torch.xlogy(x, 1e39), f32),
    (lambda x: torch.lerp(x, x + 1, 1e5), f16),
], ids=["nan_to_num", "xlogy", "lerp"])
def test_a_number_a_decomposition_fills_with_converts_as_its_op_converts_it(device, fn, dtype):
    # nan_to_num's posinf and xlogy's number become scalar_tensors, which in ATen would raise: eager's ops
    # convert them unchecked (inf). lerp's float16 weight converts to float32, not to float16
    behaves_as_eager(fn, _x(dtype, device))


# ── 0-d tensor values: eager converts their `.item()` with the check ─────────────────────────────
@pytest.mark.parametrize("op", ["masked_fill", "index_fill"])
def test_a_constant_tensor_value_is_checked_by_its_value(device, op):
    fill = FILLS[op]
    x, i = _x(f16, device), torch.tensor([0, 2], device=device)
    behaves_as_eager(lambda x, i: fill(x, i, torch.tensor(-1e6, device=x.device)), x, i)
    reset_metrics()
    check(lambda x, i: fill(x, i, torch.tensor(-INF, device=x.device)), x, i)   # a float32 -inf converts
    check(lambda x, i: fill(x, i, torch.tensor(-1e4, device=x.device)), x, i)
    assert_no_fallbacks()


@pytest.mark.parametrize("op", ["masked_fill", "index_fill"])
def test_a_tensor_value_read_at_run_time_runs_in_aten_unless_its_dtype_always_converts(device, op):
    fill = FILLS[op]
    x, i = _x(f32, device), torch.tensor([0, 2], device=device)
    compiled = compile_fn(lambda x, i, v: fill(x, i, v))
    for value in (0.25, 1e39):   # one graph: a float64 value may not convert to float32, eager checks it
        v = torch.tensor(value, dtype=torch.float64, device=device)
        try:
            expected = fill(x, i, v)
        except RuntimeError as e:
            with pytest.raises(RuntimeError, match=re.escape(str(e))):
                compiled(x, i, v)
        else:
            torch.testing.assert_close(compiled(x, i, v), expected)
    assert_fallback(op)
    reset_metrics()
    check(lambda x, i, v: fill(x, i, v), x, i, torch.tensor(0.5, dtype=f16, device=device))
    assert_no_fallbacks()


# ── a dynamic graph's value: a size, or an int argument ──────────────────────────────────────────
@pytest.mark.parametrize("name,fn", [
    ("full of a size", lambda x, k: torch.full((3,), x.shape[0] * 40, dtype=torch.int8, device=x.device)),
    ("full of an int", lambda x, k: torch.full((3,), k, dtype=torch.int8, device=x.device)),
    ("masked_fill of an int", lambda x, k: x.masked_fill(x > 0, k)),
    ("where of an int", lambda x, k: torch.where(x > 0, k, x)),
    ("clamp by an int", lambda x, k: x.clamp(max=k)),
    ("float16 full of a size", lambda x, k: torch.full((3,), x.shape[0] * 20000, dtype=f16, device=x.device)),
    ("float16 full of a float of a size", lambda x, k: torch.full((3,), x.shape[0] * 16384.5, dtype=f16,
                                                                   device=x.device)),
])
def test_a_dynamic_value_is_checked_at_every_size(device, name, fn):
    compiled = torch.compile(fn, backend="mini_inductor", dynamic=True, fullgraph=True)
    for n, k in [(2, 3), (3, 100), (4, 300), (5, -200), (6, 7)]:
        x = torch.ones(n, dtype=torch.int8, device=device)
        try:
            expected = fn(x, k)
        except RuntimeError as e:
            with pytest.raises(RuntimeError, match="without overflow"):
                compiled(x, k)
            assert "without overflow" in str(e)
        else:
            torch.testing.assert_close(compiled(x, k), expected)


def test_a_size_fill_that_always_fits_is_generated(device):
    compiled = torch.compile(lambda x: torch.full((3,), x.shape[0] * 2, dtype=torch.int64, device=x.device) + 1,
                             backend="mini_inductor", dynamic=True, fullgraph=True)
    for n in (2, 5, 9):
        assert compiled(torch.ones(n, device=device)).tolist() == [n * 2 + 1] * 3
    assert_no_fallbacks()


def test_a_float16_power_by_an_int_argument_is_checked_at_every_value(device):
    # eager converts pow's exponent to float16 with the check: x16 ** k raises at k = 70000; a symbolic
    # exponent was not checked (only a Python number was), and the kernel gave inf and 0
    def power(x, k):
        return x.abs() ** k
    compiled = torch.compile(power, backend="mini_inductor", dynamic=True, fullgraph=True)
    x = torch.tensor([0.5, 1.0, 1.5], dtype=f16, device=device)
    for k in (2, 3, 70000):
        if k == 70000:
            with pytest.raises(RuntimeError, match="without overflow"):
                power(x, k)
            with pytest.raises(RuntimeError, match="without overflow"):
                compiled(x, k)
        else:
            torch.testing.assert_close(compiled(x, k), power(x, k))


# ── attention written out with a fill that overflows the scores' dtype ──────────────────────────
@pytest.mark.parametrize("spelling", ["masked_fill", "where of full"])
def test_attention_whose_mask_fill_overflows_raises_as_eager(device, spelling):
    def attention(q, k, v):
        s = q @ k.transpose(-1, -2) * 0.5
        causal = torch.ones(8, 8, dtype=torch.bool, device=q.device).triu(1)
        if spelling == "masked_fill":
            s = s.masked_fill(causal, -1e9)
        else:
            s = torch.where(causal, torch.full((8, 8), -1e9, dtype=s.dtype, device=q.device), s)
        return s.softmax(-1) @ v
    q, k, v = (torch.randn(2, 2, 8, 16, dtype=f16, device=device) for _ in range(3))
    behaves_as_eager(attention, q, k, v)
    if spelling == "masked_fill":   # (full's fill is computed by the graph, an extra tensor of the call)
        (record,) = metrics.attention
        assert not record.target and "-1000000000.0 cannot be converted to torch.float16" in record.reason, \
            record.describe()


@pytest.mark.parametrize("value, matched", [(-1e9, False), (float("-inf"), True), (-65504.0, True)])
def test_attention_masked_with_a_value_tensor_is_matched_only_where_its_number_converts(device, value, matched):
    # masked_fill converts a 0-d value tensor's item() with the same check: torch.tensor(-1e9) into float16
    # scores raises in eager, and was matched to SDPA, which ran
    def attention(q, k, v):
        s = q @ k.transpose(-1, -2) * 0.5
        causal = torch.ones(8, 8, dtype=torch.bool, device=q.device).triu(1)
        return s.masked_fill(causal, torch.tensor(value, device=q.device)).softmax(-1) @ v
    q, k, v = (torch.randn(2, 2, 8, 16, dtype=f16, device=device) for _ in range(3))
    behaves_as_eager(attention, q, k, v)
    (record,) = metrics.attention
    assert bool(record.target) == matched, record.describe()


# ── the rule itself, against eager ───────────────────────────────────────────────────────────────
DTYPES = [torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, f16, bf16, f32,
          torch.float64, torch.complex64]
NUMBERS = [0, True, -1, 127, 128, -129, 255, 256, -255, -256, 32768, 65504, 65505, -65505, 2**31, -2**31 - 1,
           2**63 - 1, 2**63, -2**63 - 1, 2**64, 0.5, -0.5, -1.0, 127.5, -128.5, 255.5, 65504.0, 65504.5, 65519.0,
           65520.0, 3.3895313892515355e38, 3.39e38, 3.4028234663852886e38, 3.4028235e38, 1e39, INF, -INF,
           float("nan"), 2.0**31, 9.3e18, 1 + 2j, 1e39j]


def test_converts_agrees_with_eagers_checked_fill():
    wrong = []
    for dtype, value in itertools.product(DTYPES, NUMBERS):
        try:
            torch.full((2,), value, dtype=dtype)
            eager = True
        except (RuntimeError, OverflowError):
            eager = False
        if converts(value, dtype) != eager:
            wrong.append((dtype, value, eager))
    assert not wrong, wrong
    # the one float c10 lets through to an undefined conversion (int64's max in double) is refused
    assert not converts(2.0**63, torch.int64)


def test_always_converts_agrees_with_eagers_masked_fill_of_a_tensor_value():
    mask = torch.tensor([True, False])
    for source, dtype in itertools.product(DTYPES[:-1], DTYPES[:-1]):
        if source.is_floating_point:
            extremes = [torch.finfo(source).min, torch.finfo(source).max, INF, float("nan")]
        else:
            extremes = [0] if source == torch.bool else [torch.iinfo(source).min, torch.iinfo(source).max]
        fits = True
        for e in extremes:
            try:
                torch.zeros(2, dtype=dtype).masked_fill(mask, torch.tensor(e, dtype=source))
            except RuntimeError:
                fits = False
        assert always_converts(source, dtype) == fits, (source, dtype)

"""Under Triton's interpreter, tl.reduce over triton_helpers' combine functions runs in numpy
(runtime/interpreter.py); it must give what the interpreter's own element-by-element loop gives."""
import pytest
import torch

from mini_inductor.config import interpreting

pytestmark = pytest.mark.skipif(not interpreting(), reason="the interpreter's reductions (CPU only)")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from mini_inductor.runtime import triton_helpers  # noqa: E402
from mini_inductor.runtime.interpreter import install  # noqa: E402


@triton.jit
def _reductions(v_ptr, mean_ptr, m2_ptr, w_ptr, out_ptr, idx_ptr, welford_ptr):
    rows = tl.arange(0, 8)[:, None]
    cols = tl.arange(0, 8)[None, :]
    v = tl.load(v_ptr + rows * 8 + cols)
    index = tl.broadcast_to(cols, v.shape).to(tl.int64)
    tl.store(out_ptr + tl.arange(0, 8), triton_helpers.max2(v, 1))
    tl.store(out_ptr + 8 + tl.arange(0, 8), triton_helpers.min2(v, 1))
    tl.store(out_ptr + 16 + tl.arange(0, 8), triton_helpers.prod(v, 1))
    tl.store(idx_ptr + tl.arange(0, 8), triton_helpers.argmax(v, index, 1))
    tl.store(idx_ptr + 8 + tl.arange(0, 8), triton_helpers.argmin(v, index, 1))
    mean, m2, w = triton_helpers.welford(tl.load(mean_ptr + rows * 8 + cols), tl.load(m2_ptr + rows * 8 + cols),
                                         tl.load(w_ptr + rows * 8 + cols), 1)
    tl.store(welford_ptr + tl.arange(0, 8), mean)
    tl.store(welford_ptr + 8 + tl.arange(0, 8), m2)
    tl.store(welford_ptr + 16 + tl.arange(0, 8), w)


def _run():
    gen = torch.Generator().manual_seed(0)
    v = torch.randint(-3, 4, (8, 8), generator=gen).float()  # many ties
    v[1, 4] = float("nan")
    v[2, [2, 7]] = float("nan")
    v[3] = float("-inf")
    v[4] = 1.0
    w = torch.randint(0, 4, (8, 8), generator=gen).float()
    w[0] = 0  # an empty row
    mean = torch.where(w > 0, torch.randn(8, 8, generator=gen), 0.0)
    m2 = w * torch.rand(8, 8, generator=gen)
    out, idx, welford = torch.empty(24), torch.empty(16, dtype=torch.int64), torch.empty(24)
    _reductions[(1,)](v, mean, m2, w, out, idx, welford)
    return out, idx, welford


def test_numpy_reductions_match_the_interpreters_element_by_element_loop(monkeypatch):
    from triton.runtime import interpreter
    install()
    fast = _run()
    monkeypatch.setattr(interpreter.ReduceOps, "apply_impl", interpreter.ReduceOps.apply_impl.element_by_element)
    slow = _run()
    torch.testing.assert_close(fast[0], slow[0], equal_nan=True, rtol=0, atol=0)   # max, min, prod
    assert torch.equal(fast[1], slow[1]), (fast[1], slow[1])                      # argmax, argmin
    torch.testing.assert_close(fast[2], slow[2], rtol=1e-5, atol=1e-5)            # welford


def test_max_pool_with_indices_is_fast_under_the_interpreter():
    import time

    import torch.nn.functional as F
    x = torch.randn(2, 8, 16, 16)
    fn = torch.compile(lambda x: F.max_pool2d(x, 3, 2, 1, return_indices=True), backend="mini_inductor")
    fn(x)
    start = time.perf_counter()
    out, idx = fn(x)
    took = time.perf_counter() - start
    ref, ref_idx = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    assert torch.equal(out, ref) and torch.equal(idx, ref_idx)
    assert took < 5, f"{took:.1f} s for one 2x8x8x8 max pool"


@triton.jit
def _min_max(a_ptr, b_ptr, out_ptr):
    i = tl.arange(0, 4)
    a, b = tl.load(a_ptr + i), tl.load(b_ptr + i)
    tl.store(out_ptr + i, tl.minimum(a, b))
    tl.store(out_ptr + 4 + i, tl.maximum(a, b))
    tl.store(out_ptr + 8 + i, tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL))


def test_tl_minimum_and_maximum_of_a_nan_give_the_other_operand_as_the_gpus_min_f32_does():
    # PTX min.f32 / max.f32 (tl.minimum without propagate_nan) return the operand that is not NaN;
    # the interpreter's own np.minimum returned NaN and hid erf32's NaN bug from every CPU test
    install()
    nan = float("nan")
    a = torch.tensor([nan, 1.0, nan, -2.0])
    b = torch.tensor([3.0, nan, nan, 5.0])
    out = torch.empty(12)
    _min_max[(1,)](a, b, out)
    assert out[:4].tolist()[:2] == [3.0, 1.0] and out[2].isnan() and out[3] == -2.0
    assert out[4:8].tolist()[:2] == [3.0, 1.0] and out[6].isnan() and out[7] == 5.0
    assert out[8:11].isnan().all() and out[11] == -2.0      # propagate_nan=ALL keeps NaN

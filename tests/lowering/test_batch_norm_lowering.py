"""Batch norm in eval mode (`_native_batch_norm_legit_no_training`) returns what eager returns on each
device: the CPU kernel gives two empty statistics in the input's dtype, the CUDA kernel the running
mean and 1/sqrt(running var + eps) per channel in float32 (float64 for float64). The values are
checked against eager by the OpInfo sweep on the GPU (native_batch_norm) and here on the CPU."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from compile_ir import lower_fn, run_fn

aten = torch.ops.aten


def bn_eval(x, w, b, mean, var):
    return aten._native_batch_norm_legit_no_training.default(x, w, b, mean, var, 0.1, 1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_cuda_eval_statistics_have_eagers_dtype_and_shape(dtype):
    with FakeTensorMode():
        x = torch.empty(4, 3, 5, dtype=dtype, device="cuda")
        w = torch.empty(3, dtype=dtype, device="cuda")
        want = bn_eval(x, w, w, w, w)
    lowered, _ = lower_fn(bn_eval, x, w, w, w, w)
    got = [(o.get_dtype(), [int(s) for s in o.get_size()]) for o in lowered.outputs]
    assert got == [(t.dtype, list(t.shape)) for t in want]
    assert got[1] == (torch.float32, [3])


def test_eval_outputs_equal_eagers_on_this_device():
    # the CPU CI: empty statistics in the input's dtype; the GPU machine (CUDA by default): per channel
    x, w, b = torch.randn(4, 3, 5), torch.randn(3), torch.randn(3)
    mean, var = torch.randn(3), torch.rand(3) + 0.5
    _, _, outs = run_fn(bn_eval, x, w, b, mean, var)   # values checked against eager
    want = bn_eval(x, w, b, mean, var)
    assert [(o.dtype, o.shape) for o in outs] == [(t.dtype, t.shape) for t in want]
    assert outs[1].shape == ((3,) if x.is_cuda else (0,))

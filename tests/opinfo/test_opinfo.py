"""OpInfo conformance: every op of PyTorch's `op_db`, compiled with mini_inductor against eager.

    float32 on the CPU (Triton's interpreter)      test_opinfo_cpu_float32
    float16 and bfloat16 on CUDA (marked gpu)      test_opinfo_cuda

Each op is classified (see sweep.py). An op that fails must be listed in the expectation file
(expected_failures.txt for CPU float32; expected_failures_cuda_<dtype>.txt on the GPU, when that
file exists), and a listed op that passes fails the test too, so the list only ever shrinks.
By default only `DEFAULT_OPS` run; MINI_OPINFO_ALL=1 runs the whole database (`make opinfo`,
`make opinfo-gpu`); see conftest.py for MINI_OPINFO_OUT (results written to a folder).
"""
import os

import pytest
import torch

from sweep import MAX_SAMPLES, op_id, run_op

try:
    import expecttest  # noqa: F401  torch.testing._internal needs it
except ImportError:  # a machine without it (the GPU machine has no network): its TestCase base is enough
    import sys
    import types
    import unittest
    sys.modules["expecttest"] = types.SimpleNamespace(TestCase=unittest.TestCase, ACCEPT=False)  # type: ignore

from torch.testing._internal.common_methods_invocations import op_db  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RUN_ALL = os.environ.get("MINI_OPINFO_ALL", "") not in ("", "0")
# MINI_OPINFO_DTYPES=float16 (or bfloat16): the GPU sweep of one dtype only (default: both)
GPU_DTYPES = [getattr(torch, d.strip()) for d in os.environ.get("MINI_OPINFO_DTYPES", "float16,bfloat16").split(",")
              if d.strip()]

# The CI subset: ops real models use, across pointwise, reductions, views, indexing and norms.
DEFAULT_OPS = """
abs add addcmul amax argmax atan2 minimum cat clamp clone cos cumsum div.no_rounding_mode
div.floor_rounding eq exp expand flip floor gather ge index_select isnan lerp log log_softmax logical_and
masked_fill maximum mean mul neg nn.functional.embedding nn.functional.gelu nn.functional.layer_norm
nn.functional.leaky_relu nn.functional.pad.constant nn.functional.relu nn.functional.silu
nn.functional.softplus permute pow prod reciprocal remainder reshape round rsqrt sigmoid sign sin softmax
sqrt stack sub sum tanh transpose tril var_mean where
""".split()


def _load_expected(name):
    path = os.path.join(HERE, name)
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return {ln.split("#")[0].strip() for ln in f if ln.split("#")[0].strip()}


def _ops():
    ops = [op for op in op_db if RUN_ALL or op_id(op) in DEFAULT_OPS]
    return sorted(ops, key=op_id)


def _check(op, device, dtype, expected_file, record_property):
    name = op_id(op)
    # the CI subset checks one sample per op to stay fast; the whole sweep checks MAX_SAMPLES
    outcome = run_op(op, device, dtype, MAX_SAMPLES if RUN_ALL else 1)
    sweep = f"{device} {str(dtype).replace('torch.', '')}"
    record_property("opinfo", (sweep, name, outcome.status, outcome.detail))
    expected = _load_expected(expected_file)
    if outcome.status == "skipped":
        pytest.skip(outcome.detail)
    if expected is None:
        assert outcome.status != "failed", f"{name}: {outcome.detail}"
        return
    if outcome.status == "failed":
        if name in expected:
            pytest.xfail(f"listed in {expected_file}: {outcome.detail}")
        pytest.fail(f"{name} fails and is not listed in {expected_file}: {outcome.detail}")
    assert name not in expected, f"{name} now passes ({outcome.status}): remove it from {expected_file}"


@pytest.mark.parametrize("op", _ops(), ids=op_id)
def test_opinfo_cpu_float32(op, record_property):
    _check(op, "cpu", torch.float32, "expected_failures.txt", record_property)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", GPU_DTYPES, ids=lambda d: str(d).replace("torch.", ""))
@pytest.mark.parametrize("op", _ops(), ids=op_id)
def test_opinfo_cuda(op, dtype, record_property):
    _check(op, "cuda", dtype, f"expected_failures_cuda_{str(dtype).replace('torch.', '')}.txt", record_property)

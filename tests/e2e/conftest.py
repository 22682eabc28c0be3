"""End-to-end test setup. tests/conftest.py provides `device`, skips `gpu` tests without CUDA and sets
TRITON_INTERPRET=1 on the CPU; this file puts tests/ on sys.path (for `from common import check`) and
gives every test the same random numbers."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pytest  # noqa: E402
import torch  # noqa: E402

import common  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_compile_state():
    """Empty Dynamo caches and compile metrics (also when MINI_TEST_BACKEND is not ours), fixed seed."""
    torch._dynamo.reset()
    common.reset_metrics()
    torch.manual_seed(0)
    yield
    torch._dynamo.reset()

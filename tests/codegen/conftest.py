"""Puts tests/ on sys.path (for `compile_ir`, `common`) and fixes the random seed."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(autouse=True)
def fixed_seed():
    torch.manual_seed(0)
    yield

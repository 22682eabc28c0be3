"""CUDA-graph tree tests: fresh trees, counters and seeds for every test (helpers in cg_helpers.py)."""
import gc
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from mini_inductor.runtime.cudagraphs import trees  # noqa: E402


@pytest.fixture(autouse=True)
def fresh_trees():
    torch._dynamo.reset()
    trees.reset()
    trees.reset_counters()
    torch.manual_seed(0)
    yield
    torch._dynamo.reset()
    trees.reset()
    gc.collect()

"""A one-rank gloo process group in this process, for tests that compile collectives without
starting other processes (a collective of one rank returns its input, and runs for real)."""
import os
import tempfile

import pytest
import torch.distributed as dist


@pytest.fixture
def one_rank_group():
    """The name of the world group of a one-rank gloo process group, torn down after the test."""
    with tempfile.TemporaryDirectory() as folder:
        store = dist.FileStore(os.path.join(folder, "store"), 1)
        dist.init_process_group("gloo", store=store, rank=0, world_size=1)
        try:
            yield dist.group.WORLD.group_name
        finally:
            dist.destroy_process_group()

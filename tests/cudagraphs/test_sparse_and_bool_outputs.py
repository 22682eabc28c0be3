"""Op smoke tests under CUDA graphs (cudagraph-tests.md §5 #40; see TOP40.md): a sparse COO output, and
index_put with accumulate=True on bool data, equal eager after warmup, recording and replays.
"""
import pytest
import torch
from cg_helpers import compiled

pytestmark = pytest.mark.gpu


# --- #40 op smoke tests ------------------------------------------------------------------------

def test_sparse_coo_output_equals_eager():
    def fn(i, v):
        return torch.sparse_coo_tensor(i, v, (4, 4))
    f = compiled(fn)
    i = torch.tensor([[0, 1, 2], [1, 2, 3]], device="cuda")
    for _ in range(3):
        v = torch.randn(3, device="cuda")
        torch.testing.assert_close(f(i, v).to_dense(), fn(i, v).to_dense())


def test_index_put_accumulate_on_bool_data_equals_eager():
    def fn(x, idx, val):
        return torch.zeros_like(x).index_put_((idx,), val, accumulate=True)
    f = compiled(fn)
    for _ in range(3):
        x = torch.zeros(16, dtype=torch.bool, device="cuda")
        idx = torch.randint(0, 16, (6,), device="cuda")
        val = torch.rand(6, device="cuda") > 0.5
        assert torch.equal(f(x, idx, val), fn(x, idx, val))

"""`x.addcmul_(t1, t2, value=v)` reaches the backend as prims.fma (Dynamo's own rewrite): it is lowered,
one kernel with the ops around it, not an ATen call that splits them (Adam's update, each parameter)."""
import torch

from common import check

import mini_inductor  # noqa: F401  registers the backend
from mini_inductor import metrics


def adam_like_update(v, g, scale):
    v.mul_(0.999).addcmul_(g, g, value=0.001)
    return v.sqrt() * scale


def test_addcmul_with_a_value_is_one_kernel_with_its_neighbours_and_no_fallback(device):
    v, g = torch.rand(64, device=device), torch.randn(64, device=device)
    check(adam_like_update, v, g, torch.randn(64, device=device), kernels=1)
    assert all(not r.fallback_ops for r in metrics.compiled_graphs), [r.summary() for r in metrics.compiled_graphs]


def test_fma_rounds_the_product_to_its_dtype_before_the_add_as_eager_does(device):
    # half * half is rounded to half before the float32 add: 1 + 2**-11 loses its last bit there
    a = torch.full((8,), 1 + 2 ** -10, dtype=torch.float16, device=device)
    c = torch.zeros(8, dtype=torch.float32, device=device)
    check(lambda a, c: torch.ops.prims.fma(a, a, c), a, c, atol=0, rtol=0)


def test_a_compiled_adamw_step_has_no_fallback_ops(device):
    model = torch.nn.Linear(8, 4).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randn(2, 8, device=device)).sum().backward()
    metrics.reset()
    torch.compile(opt.step, backend="mini_inductor")()
    graphs = [r for r in metrics.compiled_graphs if r.kernel_names]
    assert graphs and all(not r.fallback_ops for r in graphs), [r.summary() for r in metrics.compiled_graphs]

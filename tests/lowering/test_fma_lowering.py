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


def _adamw_terms(device, dtype=torch.float16):
    g = torch.Generator().manual_seed(0)
    return [torch.randn(4096, generator=g).to(device=device, dtype=dtype) for _ in range(3)]


def test_addcmul_and_addcdiv_with_a_value_round_once_as_eager(device):
    # Dynamo splits `x.addcmul_(t1, t2, value=v)` into `t1 * t2` (rounded to float16) and prims.fma:
    # one element in ten then differed from eager's float32 `x + v * t1 * t2` by an ulp
    def step(x, t1, t2):
        x.addcmul_(t1, t2, value=0.1).addcdiv_(t1, t2.abs() + 1, value=0.3)
        return x
    check(step, *_adamw_terms(device), atol=0, rtol=0)


def test_add_with_a_tensor_alpha_rounds_once_as_eager(device):
    # `x.add_(y, alpha=tensor)` is prims.fma(y, alpha, x) in Dynamo's graph: computed in float32, rounded once
    x, y, _ = _adamw_terms(device)
    check(lambda x, y, s: x.add_(y, alpha=s), x, y, torch.tensor(0.1, device=device), atol=0, rtol=0)


def test_a_product_used_twice_stays_apart():
    from mini_inductor.lowering.decompositions import undo_split_fma
    captured = []

    def backend(gm, example_inputs):
        captured.append(undo_split_fma(gm))
        captured.append([n.target for n in gm.graph.nodes if n.op == "call_function"])
        return gm

    def used_twice(x, t1, t2):
        p = t1 * t2
        return torch.ops.prims.fma(p, 0.5, x), p

    x, t1, t2 = torch.randn(3, 4).unbind(0)
    torch.compile(lambda x, a, b: x.addcmul_(a, b, value=2.0), backend=backend)(x.clone(), t1, t2)
    assert captured[0] == 1 and torch.addcmul in captured[1], captured
    captured.clear()
    torch.compile(used_twice, backend=backend)(x, t1, t2)
    assert captured[0] == 0 and torch.ops.prims.fma in captured[1], captured


def test_a_compiled_adamw_step_has_no_fallback_ops(device):
    model = torch.nn.Linear(8, 4).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model(torch.randn(2, 8, device=device)).sum().backward()
    metrics.reset()
    torch.compile(opt.step, backend="mini_inductor")()
    graphs = [r for r in metrics.compiled_graphs if r.kernel_names]
    assert graphs and all(not r.fallback_ops for r in graphs), [r.summary() for r in metrics.compiled_graphs]


def test_addcmul_of_integers_with_a_float_value_truncates_it_as_eager(device):
    # eager casts value to the tensors' int64 (0.5 adds nothing, 2.7 adds twice the product); rejoined
    # into torch.addcmul with the float, AOT autograd's decomposition refused it (review, session 36)
    g = torch.Generator().manual_seed(0)
    x, t1, t2 = [torch.randint(-9, 9, (16,), generator=g).to(device) for _ in range(3)]
    check(lambda x, a, b: x.addcmul_(a, b, value=0.5), x, t1, t2)
    check(lambda x, a, b: x.addcmul_(a, b, value=2.7), x, t1, t2)
    check(lambda x, a, b: x.addcmul_(a, b, value=-3.0), x, t1, t2)

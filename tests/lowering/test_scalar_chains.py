"""graph_scan.py `scalar_chains_for_the_gpu`: CPU 0-d tensors computed from numbers and sizes for GPU ops
alone are lowered on that GPU, into the kernel that reads them, not run in ATen on the CPU and copied.

These lower graphs of fake CUDA tensors (no GPU needed: lowering builds IR, it runs nothing) and read
what the IR holds. The compiled numbers are checked on a GPU by tests/e2e/test_dynamic_shapes.py and
test_dynamic_int_values.py (a scale of 1 / sqrt(size), nearest interpolation), which run there too.
"""
import math

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

from mini_inductor import config
from mini_inductor.lowering import lower_graph
from mini_inductor.lowering.decompositions import decomposition_table
from mini_inductor.lowering.graph_scan import scalar_chains_for_the_gpu


def lowered_on_fake_cuda(fn, *shapes_or_tensors):
    mode = FakeTensorMode(allow_non_fake_inputs=True)   # (a constant the function closes over is real)
    with mode:
        args = [torch.empty(s, device="cuda") if isinstance(s, tuple) else mode.from_tensor(s)
                for s in shapes_or_tensors]
    gm = make_fx(fn, decomposition_table=decomposition_table(), tracing_mode="fake")(*args)
    with mode:
        return gm, lower_graph(gm, args, "test_scalar_chains", config.current())


def scale_of(x):
    s = torch.scalar_tensor(x.shape[-1], dtype=torch.float64)
    return (1.0 / s.sqrt()).to(torch.float32)


def test_a_scale_computed_on_the_cpu_for_a_gpu_kernel_is_part_of_that_kernel():
    gm, lowered = lowered_on_fake_cuda(lambda x: x * scale_of(x), (3, 5))
    moved = scalar_chains_for_the_gpu(gm.graph)
    assert {n.target for n in moved} >= {torch.ops.aten.scalar_tensor.default, torch.ops.aten.sqrt.default}
    assert {d.type for d in moved.values()} == {"cuda"}
    assert not lowered.fallback_ops and not lowered.extern_ops, (lowered.fallback_ops, lowered.extern_ops)
    assert len(lowered.buffers) == 1 and lowered.buffers[0].get_device().type == "cuda", lowered.buffers


def test_a_chain_also_returned_stays_on_the_cpu():
    # the CPU tensor is the user's result: computed where eager computes it, and copied for the kernel
    def fn(x):
        s = scale_of(x)
        return x * s, s
    gm, lowered = lowered_on_fake_cuda(fn, (3, 5))
    assert not scalar_chains_for_the_gpu(gm.graph)
    assert lowered.extern_ops, "the GPU op reads a copy of the CPU value"


def test_a_chain_read_on_the_cpu_too_stays_there():
    def fn(x):
        s = scale_of(x)
        return x * s, torch.ones(2) * s      # a CPU op reads it as well
    gm, _ = lowered_on_fake_cuda(fn, (3, 5))
    assert not scalar_chains_for_the_gpu(gm.graph)


def test_a_cpu_input_is_the_users_data_and_is_copied_not_moved():
    def fn(x, t):
        return x * (t * 2).sqrt()
    gm, lowered = lowered_on_fake_cuda(fn, (3, 5), torch.tensor(4.0))
    assert not scalar_chains_for_the_gpu(gm.graph)
    assert lowered.extern_ops


def test_random_numbers_on_the_cpu_are_not_moved():
    # torch.rand on the CPU draws from the CPU generator: moved, it would draw other numbers
    gm, _ = lowered_on_fake_cuda(lambda x: x * torch.rand(()), (3, 5))
    assert not scalar_chains_for_the_gpu(gm.graph)


def test_the_scale_matches_the_cpu_chain_in_a_cpu_graph():
    # on the CPU machine the chain and the kernel are both on the CPU: nothing moves, and the values
    # are eager's (the device-agnostic lowering of the same ops)
    from common import check
    x = torch.randn(3, 7)
    check(lambda x: x * scale_of(x), x)
    assert math.isclose(float(scale_of(x)), 1 / math.sqrt(7), rel_tol=1e-6)


def test_a_cpu_constant_read_by_a_gpu_kernel_becomes_the_kernels_constant():
    # `y[:, 0] = 1.0` on CUDA: Dynamo lifts a CPU 0-d constant (lift_fresh_copy) that ran in ATen; a
    # constant the function closes over is the same get_attr node
    one_and_a_half = torch.tensor(1.5, dtype=torch.float64)
    gm, lowered = lowered_on_fake_cuda(lambda x: x * one_and_a_half.clone().to(torch.float32), (3, 5))
    moved = scalar_chains_for_the_gpu(gm.graph)
    assert any(n.op == "get_attr" for n in moved), gm.code
    assert not lowered.fallback_ops and not lowered.extern_ops, (lowered.fallback_ops, lowered.extern_ops, gm.code)


def test_the_moved_constant_keeps_its_value():
    # the same graph on the CPU machine: nothing moves (no GPU reader), the values are eager's
    from common import check

    def fn(x):
        y = x.clone()
        y[:, 0] = torch.tensor(1.5)
        return y
    check(fn, torch.randn(3, 5))


def test_a_moved_op_without_a_lowering_runs_in_aten_on_the_gpu():
    # digamma has no lowering: its ATen call takes the moved (GPU) value, so its output is on the GPU
    # too; laid out on the CPU, the kernel after it read it through a copy (review, session 36)
    gm, lowered = lowered_on_fake_cuda(lambda x: x * torch.digamma(scale_of(x) + 1), (3, 5))
    assert torch.ops.aten.digamma.default in {n.target for n in scalar_chains_for_the_gpu(gm.graph)}
    assert dict(lowered.fallback_ops) == {"aten.digamma.default": 1} and not lowered.extern_ops, \
        (lowered.fallback_ops, lowered.extern_ops)
    assert {b.get_device().type for b in lowered.buffers} == {"cuda"}, lowered.buffers

"""The wrapper's views of buffers: a view to the layout the buffer already has is the buffer itself
(an as_strided call per use saved on every call, on the host), any other layout is an as_strided."""
import copy

import torch

from mini_inductor.codegen.wrapper_ir import render_arg
from mini_inductor.lowering.ir import Buffer, Layout, ReinterpretView
import mini_inductor  # noqa: F401  (the backend)


def _buffer(size, stride):
    return Buffer("buf0", Layout(torch.device("cpu"), torch.float32, size, stride))


def test_a_view_with_its_buffers_layout_is_the_buffer():
    buf = _buffer((4, 8), (8, 1))
    assert render_arg(ReinterpretView(buf, Layout(torch.device("cpu"), torch.float32, (4, 8), (8, 1)))) == "buf0"


def test_a_view_with_another_size_stride_offset_or_of_an_input_stays_a_view():
    buf = _buffer((4, 8), (8, 1))
    cpu = torch.device("cpu")
    for layout in (Layout(cpu, torch.float32, (8, 4), (1, 8)), Layout(cpu, torch.float32, (32,), (1,)),
                   Layout(cpu, torch.float32, (4, 8), (8, 1), 8)):
        assert render_arg(ReinterpretView(buf, layout)).startswith("reinterpret(buf0, ")
    same = Layout(cpu, torch.float32, (4, 8), (8, 1))
    assert render_arg(ReinterpretView(buf, same, view_of_input=True)).startswith("aliased_view(buf0, ")


def test_a_training_step_whose_gradients_are_transposed_views_matches_eager():
    # the weight gradients are mm results seen through t(): views to their own layout are the buffers
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.GELU(), torch.nn.Linear(5, 3))
    twin = copy.deepcopy(model)
    compiled = torch.compile(model, backend="mini_inductor")
    for batch in (4, 4):
        x = torch.randn(batch, 6)
        compiled(x).square().sum().backward()
        twin(x).square().sum().backward()
    for p, q in zip(model.parameters(), twin.parameters()):
        assert p.grad.shape == q.grad.shape and p.grad.stride() == q.grad.stride()
        torch.testing.assert_close(p.grad, q.grad)

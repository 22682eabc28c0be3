"""Every buffer the scheduler receives carries its origin FX nodes (scheduler.md §3.9, feature list 1).

Kernel names, the source-line comments, the fusion report and the CUDA-graph error messages all
read them; a buffer without one is a lowering bug and scheduling refuses it with a clear error.
"""
import pytest
import torch

from compile_ir import lower_fn, run_fn
from mini_inductor.errors import SchedulingError
from mini_inductor.lowering.ir import ExternKernel, MultiOutput
from mini_inductor.scheduler import schedule


def test_a_buffer_without_origins_is_refused_naming_stage_graph_and_buffer():
    lowered, cfg = lower_fn(lambda x: (x.sin() + 1).sum(-1), torch.randn(4, 8), name="forward_7")
    victim = lowered.buffers[-1]
    victim.origins = ()
    with pytest.raises(SchedulingError) as info:
        schedule(lowered, cfg)
    message = str(info.value)
    assert "[scheduling]" in message and "forward_7" in message
    assert f"buffer {victim.name} " in message and "no origin" in message


@pytest.mark.parametrize("case", ["pointwise_chain", "reduction", "extern_with_epilogue", "multi_output",
                                  "random", "output_restrided_view_of_input", "empty_output", "scatter"])
def test_each_lowering_path_gives_its_buffers_origins_that_name_the_aten_op(case):
    fns = {
        "pointwise_chain": (lambda x: torch.relu(x * 2) + 1, [torch.randn(4, 8)]),
        "reduction": (lambda x: x.softmax(-1), [torch.randn(4, 8)]),
        "extern_with_epilogue": (lambda x, w, b: torch.addmm(b, x, w).tanh(), [torch.randn(4, 3), torch.randn(3, 5),
                                                                             torch.randn(5)]),
        "multi_output": (lambda x: torch.sort(x, -1)[0] * 2, [torch.randn(4, 8)]),
        "random": (lambda x: x + torch.rand_like(x), [torch.randn(4, 8)]),
        "output_restrided_view_of_input": (lambda x: x.t().mul(1).t() + x[0], [torch.randn(4, 8)]),
        "empty_output": (lambda x: (x[:0] * 2, x + 1), [torch.randn(4, 8)]),
        "scatter": (lambda x, i: torch.zeros(4, 8).scatter(1, i, x), [torch.randn(4, 2),
                                                                   torch.tensor([[0, 3]] * 4)]),
    }
    fn, args = fns[case]
    lowered, cfg = lower_fn(fn, *args)
    assert lowered.buffers
    for buf in lowered.buffers:
        assert buf.origins, f"{buf!r} has no origin"
        assert all(o.node and o.op for o in buf.origins)
        if isinstance(buf, (ExternKernel, MultiOutput)):
            assert len(buf.origins) == 1
    if case != "random":
        run_fn(fn, *args)


def test_a_copy_made_for_an_outputs_strides_names_the_op_that_produced_the_output():
    # the output is a view of the input; eager returns it contiguous, so lowering copies it (a kernel
    # reading only the graph input: no lowering ran, the output's FX node is its origin)
    from torch.fx.experimental.proxy_tensor import make_fx
    from mini_inductor import config
    from mini_inductor.lowering import lower_graph
    x = torch.randn(4, 8)
    gm = make_fx(lambda x: x.permute(1, 0))(x)
    (permute,) = [n for n in gm.graph.nodes if n.op == "call_function"]
    permute.meta["val"] = torch.empty(8, 4)            # as if eager's result were contiguous
    cfg = config.current()
    lowered = lower_graph(gm, [x], "inference_3", cfg)
    (copy,) = lowered.buffers
    assert [o.node for o in copy.origins] == [permute.name]
    assert copy.layout.stride == (4, 1)
    sched = schedule(lowered, cfg)
    assert len(sched.nodes) == 1


def _node_with(stack_trace, module_stack=None):
    graph = torch.fx.Graph()
    node = graph.call_function(torch.ops.aten.relu.default, (graph.placeholder("x"),))
    node.meta["stack_trace"] = stack_trace
    if module_stack is not None:
        node.meta["nn_module_stack"] = module_stack
    return node


def test_source_line_is_the_users_frame_not_a_device_contexts_dispatch():
    from mini_inductor.fx_source import TORCH_DIR as _TORCH_DIR, source_line as _source_line
    device_frame = f'  File "{_TORCH_DIR}utils/_device.py", line 122, in __torch_function__\n    return func(*args)\n'
    user_frame = '  File "/home/me/net.py", line 9, in forward\n    y = self.proj(x).relu()\n'
    assert _source_line(_node_with(user_frame + device_frame)) == \
        'File "/home/me/net.py", line 9, in forward: y = self.proj(x).relu()'
    # an op of a torch module under `with torch.device(...)`: Dynamo kept only the dispatch frame
    linear = {"1": ("L['fn']", torch.nn.Sequential), "2": ("L['fn'].0", torch.nn.Linear)}
    assert _source_line(_node_with(device_frame, linear)) == "in forward of Linear (model[0])"
    assert _source_line(_node_with("", linear)) == "in forward of Linear (model[0])"
    assert "_device.py" in _source_line(_node_with(device_frame))   # nothing better known: kept as it is
    assert _source_line(_node_with("")) == ""


def test_a_modules_place_reads_as_the_user_indexes_it_not_as_dynamos_source_name():
    from mini_inductor.fx_source import module_path
    assert module_path("L['fn'].0") == "model[0]"                      # torch.compile(nn.Sequential(...))
    assert module_path("L['self'].layers.0.mlp") == "model.layers[0].mlp"
    assert module_path("L['self']._modules['proj']") == "model.proj"
    assert module_path("G['net'].fc") == "net.fc"                      # a global module a function calls

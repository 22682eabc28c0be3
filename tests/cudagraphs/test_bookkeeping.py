"""The parts of the CUDA-graph trees that need no GPU: what codegen hands the runtime, generation
counting, the shape warning, and trees staying off under Triton's interpreter. (The tree itself is
tested on the GPU: test_tree_runtime.py, test_compiled_cudagraphs.py.)"""
import logging

import pytest
import torch
import torch.nn as nn

import mini_inductor
from mini_inductor import metrics
from mini_inductor.runtime.cudagraphs import trees

from mini_inductor.caching import PROCESS  # noqa: E402


def _last_compiled():
    return list(PROCESS.graphs.values())[-1].compiled


def test_generated_module_lists_partition_inputs_and_source_lines(device):
    def fn(x, y):
        a = x.sin() + y
        return a * 2
    f = torch.compile(fn, backend="mini_inductor")
    x, y = torch.randn(8, device=device), torch.randn(8, device=device)
    torch.testing.assert_close(f(x, y), fn(x, y))
    module = _last_compiled().module
    assert list(module.PARTITIONS) == ["partition_0"]
    part = module.PARTITIONS["partition_0"]
    assert list(part.inputs) == module.INPUT_NAMES == ["arg0_1", "arg1_1"]
    assert len(part.traces) == 1 and "test_bookkeeping.py" in part.traces[0] and "a * 2" in part.traces[0]
    # each input's first reader, quoted when a static input moves
    assert len(part.input_traces) == 2 and all("test_bookkeeping.py" in t for t in part.input_traces)


def test_generated_module_lists_the_unsafe_runs_with_their_reason_and_source_line(device):
    def fn(x, w):
        h = x.sin() * 2
        o = torch.mm(h, w)
        return o.cos() + 1
    f = torch.compile(fn, backend="mini_inductor", options={"cudagraph_unsafe_ops": "aten.mm"})
    x, w = torch.randn(4, 8, device=device), torch.randn(8, 4, device=device)
    torch.testing.assert_close(f(x, w), fn(x, w))
    module = _last_compiled().module
    assert list(module.PARTITIONS) == ["partition_0", "partition_1"]
    assert list(module.UNSAFE_PARTITIONS) == ["unsafe_0"]
    meta = module.UNSAFE_PARTITIONS["unsafe_0"]
    assert meta.reason == "aten.mm.default is listed in cudagraph_unsafe_ops"
    assert "test_bookkeeping.py" in meta.source and "torch.mm(h, w)" in meta.source


def test_parameters_are_static_inputs_of_the_forward_and_backward(device):
    lin = nn.Linear(4, 3).to(device)
    f = torch.compile(lin, backend="mini_inductor")
    f(torch.randn(2, 4, device=device, requires_grad=True)).sum().backward()
    compiled = [entry.compiled for entry in PROCESS.graphs.values()]
    forward = next(c for c in compiled if c.kind == "forward")
    backward = next(c for c in compiled if c.kind == "backward")
    names = forward.module.INPUT_NAMES
    assert sorted(names[i] for i in forward.static_input_idxs) == ["primals_1", "primals_2"]   # weight, bias
    assert all(backward.module.INPUT_NAMES[i].startswith("primals_") for i in backward.static_input_idxs)


def test_trees_stay_off_without_a_gpu_and_results_match(device):
    if device == "cuda":
        return   # on the GPU the trees are on: test_compiled_cudagraphs.py covers that case
    f = torch.compile(lambda x: x.exp() * 2, backend="mini_inductor")
    x = torch.randn(16)
    for _ in range(3):
        torch.testing.assert_close(f(x), x.exp() * 2)
    assert _last_compiled().tree_functions == []
    assert trees.get_manager(0) is None
    assert metrics.compiled_graphs[-1].num_kernels == 1


def test_mark_step_starts_generations_and_reset_forgets_them():
    trees.reset()
    start = trees._current_generation()
    mini_inductor.mark_step()
    first = trees._current_generation()
    mini_inductor.mark_step()
    assert first != start and trees._current_generation() == first - 1 and trees._user_marked_steps()
    trees.reset()
    assert trees._MarkStep.counter == 0 and not trees._user_marked_steps()


def test_shape_warning_fires_once_past_the_limit(caplog):
    trees.reset()
    with caplog.at_level(logging.WARNING, logger="mini_inductor.perf_hints"):
        for n in range(5):
            trees.note_compiled_shape("frame0", "inference", ((n,),), limit=2)
        trees.note_compiled_shape("frame1", "inference", ((1,),), limit=2)   # another function: no warning
    msgs = [r.getMessage() for r in caplog.records if "distinct sizes" in r.getMessage()]
    assert len(msgs) == 1 and "observed 3 distinct sizes" in msgs[0]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="mini_inductor.perf_hints"):
        for n in range(5):
            trees.note_compiled_shape("frame2", "inference", ((n,),), limit=0)   # 0: never
    assert not [r for r in caplog.records if "distinct sizes" in r.getMessage()]
    trees.reset()


def test_shape_warning_names_the_remedies_and_how_to_silence_it():
    msg = trees.dynamic_shape_message(2)
    assert msg.startswith("CUDAGraph supports dynamic shapes by recording a new graph for each distinct input size. "
                          "Recording too many CUDAGraphs may lead to extra overhead. We have observed 2 distinct sizes.")
    assert "a) padding inputs to a few fixed number of shapes" in msg
    assert "b) options={'cudagraph_capture_sizes'" in msg and "options={'cudagraphs': False}" in msg
    assert msg.endswith("Set options={'cudagraph_dynamic_shape_warn_limit': 0} to silence this warning.")


def test_cudagraph_options_are_validated():
    f = torch.compile(lambda x: x + 1, backend="mini_inductor", options={"cudagraphs": False,
                                                                         "cudagraph_rerecord_limit": 3})
    x = torch.randn(4, device="cuda" if torch.cuda.is_available() else "cpu")
    torch.testing.assert_close(f(x), x + 1)
    try:
        torch.compile(lambda x: x + 2, backend="mini_inductor", options={"cudagraph_typo": 1})(x)
    except Exception as e:  # noqa: BLE001 — Dynamo wraps the backend's error
        assert "cudagraph_typo" in str(e) and "cudagraph_rerecord_limit" in str(e)
    else:
        raise AssertionError("an unknown option was accepted")


@pytest.mark.gpu
def test_generated_call_runs_under_a_guard_for_its_device():
    f = torch.compile(lambda x: x.cos() + 1, backend="mini_inductor")
    x = torch.randn(8, device="cuda")
    torch.testing.assert_close(f(x), x.cos() + 1)
    with open(_last_compiled().source_path) as src:
        assert "with torch.cuda._DeviceGuard(0):" in src.read()


def test_cpu_scalar_read_by_gpu_ops_is_copied_to_the_gpu_once_and_the_gpu_work_stays_one_partition():
    import os
    import sys
    from torch._subclasses.fake_tensor import FakeTensorMode
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from compile_ir import generate_fn
    with FakeTensorMode():
        x, s = torch.empty(8, device="cuda"), torch.empty((), device="cpu")
    _, gen = generate_fn(lambda x, s: (x * s + 1, (x + s).sum()), x, s)
    call = gen.source[gen.source.index("def call("):gen.source.index("INPUT_SPECS")]
    copies = [ln.strip() for ln in call.splitlines() if "aten._to_copy.default(" in ln]
    assert copies == ["buf0 = torch.ops.aten._to_copy.default(s_1, device=torch.device('cuda:0'))"], call
    assert call.count("partition_0(") == 1 and "partition_1" not in call
    assert call.index("_to_copy") < call.index("partition_0(")       # the copy runs before the graph

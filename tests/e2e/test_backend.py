"""The backend's surfaces: options, errors, the debug dir, caching and reset."""
import os
import pathlib
import subprocess
import sys

import pytest
import torch

import mini_inductor
from mini_inductor import metrics
from mini_inductor.errors import LoweringError
from mini_inductor.lowering.graph import GraphLowering
from mini_inductor.lowering.lowerings import LOWERINGS

ROOT = pathlib.Path(__file__).resolve().parents[2]
aten = torch.ops.aten


def _f(x):
    return torch.relu(x * 2 + 1).sum(-1)


def test_unknown_option_is_a_clear_error_listing_the_valid_ones(device):
    cf = torch.compile(_f, backend="mini_inductor", options={"no_such_option": 1})
    with pytest.raises(Exception, match=r"unknown mini_inductor option.*no_such_option.*valid options.*debug_dir"):
        cf(torch.randn(4, 8, device=device))


def test_unknown_mode_is_a_clear_error(device):
    with pytest.raises(Exception, match="unknown mode 'fastest'"):
        torch.compile(_f, backend="mini_inductor", mode="fastest")(torch.randn(4, 8, device=device))


def test_reduce_overhead_mode_is_accepted(device):
    x = torch.randn(4, 8, device=device)
    torch.testing.assert_close(torch.compile(_f, backend="mini_inductor", mode="reduce-overhead")(x), _f(x))


def _break_relus_fallback(monkeypatch):
    """relu without a lowering, and its ATen fallback failing to build: a lowering error (a lowering
    that raises only makes its node a fallback)."""
    def broken(self, node, target, *args, **kwargs):
        if target is aten.relu.default:
            raise ValueError("boom")
        return original(self, node, target, *args, **kwargs)
    original = GraphLowering._extern
    monkeypatch.delitem(LOWERINGS, aten.relu.default)
    monkeypatch.setattr(GraphLowering, "_extern", broken)


def test_lowering_error_names_stage_graph_and_op(device, monkeypatch):
    _break_relus_fallback(monkeypatch)
    with pytest.raises(Exception) as info:
        torch.compile(_f, backend="mini_inductor")(torch.randn(4, 8, device=device))
    err = info.value
    while err is not None and not isinstance(err, LoweringError):
        err = getattr(err, "inner_exception", None) or err.__cause__
    assert isinstance(err, LoweringError), info.value
    text = str(err)
    assert "[lowering]" in text and "aten.relu.default" in text and "in graph inference_" in text
    assert "boom" in text and "fallback_on_error" in text


def test_a_dtype_without_a_triton_type_runs_in_aten_and_the_rest_is_generated(device):
    # (until session 41 the compile stopped with a CodegenError naming the dtype)
    def through_uint16(x):
        return x.to(torch.uint16).to(torch.int32) + 1
    x = torch.arange(8, device=device)
    out = torch.compile(through_uint16, backend="mini_inductor")(x)
    assert out.dtype == torch.int32 and torch.equal(out, through_uint16(x))
    record = metrics.compiled_graphs[-1]
    assert record.fallback_ops == {"aten._to_copy.default": 2}, record.fallback_ops
    assert record.num_kernels == 1   # the add


def test_fallback_on_error_runs_the_graph_eagerly_with_one_warning(device, monkeypatch):
    _break_relus_fallback(monkeypatch)
    x = torch.randn(4, 8, device=device)
    cf = torch.compile(_f, backend="mini_inductor", options={"fallback_on_error": True})
    with pytest.warns(UserWarning, match="runs eagerly"):
        out = cf(x)
    torch.testing.assert_close(out, _f(x))
    assert metrics.compiled_graphs[-1].ran_eagerly


def test_identical_graph_is_not_compiled_twice_in_one_process(device):
    x = torch.randn(4, 8, device=device)
    torch.compile(_f, backend="mini_inductor")(x)
    torch.compile(lambda x: torch.relu(x * 2 + 1).sum(-1), backend="mini_inductor")(x)
    first, second = metrics.compiled_graphs[-2:]
    assert not first.cache_hit and second.cache_hit
    assert second.kernel_names == first.kernel_names


def test_dynamo_reset_reaches_our_reset(device, monkeypatch):
    calls = []
    monkeypatch.setattr(mini_inductor.backend, "reset", lambda: calls.append(1))
    torch.compile(_f, backend="mini_inductor")(torch.randn(4, 8, device=device))
    torch._dynamo.reset()
    assert calls


def test_a_function_compiled_before_a_reset_is_reset_again_by_the_next_one(device, monkeypatch):
    f = torch.compile(_f, backend="mini_inductor")
    f(torch.randn(4, 8, device=device))
    torch._dynamo.reset()                       # empties torch's table of backends to reset
    calls = []
    monkeypatch.setattr(mini_inductor.backend, "reset", lambda: calls.append(1))
    f(torch.randn(4, 8, device=device))         # compiles again through the same wrapper
    torch._dynamo.reset()
    assert calls


def test_debug_dir_holds_graph_ir_schedule_and_runnable_output_code(device, tmp_path):
    x = torch.randn(4, 8, device=device)
    torch.compile(_f, backend="mini_inductor", options={"debug_dir": str(tmp_path)})(x)
    (folder,) = [p for p in tmp_path.glob("run_*-pid_*/*") if p.is_dir()]
    for name in ("aten_graph.txt", "ir_pre_fusion.txt", "schedule.txt", "output_code.py"):
        assert (folder / name).stat().st_size > 0, name
    assert "aten.relu" in (folder / "aten_graph.txt").read_text()
    assert "ComputedBuffer" in (folder / "ir_pre_fusion.txt").read_text()
    assert "triton_per_fused" in (folder / "output_code.py").read_text()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, str(folder / "output_code.py")], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "ms per call" in proc.stdout


def test_compilation_is_deterministic(device, tmp_path):
    x = torch.randn(4, 8, device=device)
    sources = []
    for i in range(2):
        mini_inductor.reset()
        torch._dynamo.reset()
        torch.compile(_f, backend="mini_inductor", options={"debug_dir": str(tmp_path / str(i))})(x)
        (folder,) = list((tmp_path / str(i)).glob("run_*-pid_*/*"))
        sources.append((folder / "output_code.py").read_text().split("\n", 1)[1])
    assert sources[0] == sources[1]


def test_backward_is_called_boxed_without_the_aot_autograd_warning(device):
    """aot_autograd copies the backward's instance attributes, not class attributes: without the flag on
    the instance it warns and calls the backward unboxed, holding every saved tensor to the end."""
    import warnings

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).to(device)
    x = torch.randn(4, 8, device=device)
    compiled = torch.compile(model, backend="mini_inductor", options={"cudagraphs": False})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled(x).sum().backward()
    assert not [w for w in caught if "boxed" in str(w.message)]
    grads = [p.grad.clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    model(x).sum().backward()
    for got, p in zip(grads, model.parameters()):
        torch.testing.assert_close(got, p.grad, atol=1e-5, rtol=1e-5)
    backward = [g for g in metrics.compiled_graphs if g.name.startswith("backward")]
    assert backward, "no backward graph was compiled"
    # the generated call consumes the list it is given (what a boxed caller relies on)
    assert "args.clear()" in pathlib.Path(backward[-1].source_path).read_text()


def test_compiling_inference_does_not_import_inductor():
    """The backend goes through AOT autograd without torch's `aot_autograd` helper, whose debug-logging
    import brings in most of Inductor (half a second or more of every first call). (A training graph
    still imports it: torch's min-cut partitioner runs Inductor's CSE helpers.)"""
    import subprocess
    import sys

    code = ("import sys, torch, mini_inductor\n"
            "f = torch.compile(lambda x: (x * 2).sin(), backend='mini_inductor')\n"
            "x = torch.randn(8)\n"
            "assert torch.allclose(f(x), (x * 2).sin())\n"
            "print(sorted(m for m in sys.modules if m in ('torch._inductor.debug', 'torch._inductor.scheduler')))\n")
    env = dict(os.environ, TRITON_INTERPRET="1", CUDA_VISIBLE_DEVICES="")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"

"""A graph that runs eagerly is warned about at the user's line, with what to do, and noted for explain."""
import inspect
import warnings

import pytest
import torch

import mini_inductor
from mini_inductor.debug import trace
from mini_inductor.pipeline import DYNAMIC_SHAPES
from mini_inductor.lowering.graph import GraphLowering
from mini_inductor.lowering.lowerings import LOWERINGS

aten = torch.ops.aten


def scaled(x):
    return torch.relu(x) * 3


RELU_LINE = inspect.getsourcelines(scaled)[1] + 1


@pytest.fixture
def fresh_warnings(monkeypatch):
    monkeypatch.setattr(trace, "_warned", set())     # once per reason per process: start from none


def test_dynamic_shapes_warning_points_at_the_users_op_and_says_what_to_do(fresh_warnings, device):
    x = torch.randn(6, 4, device=device)
    torch._dynamo.mark_dynamic(x, 0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.compile(scaled, backend="mini_inductor", options={"dynamic_shapes": "eager"})(x)
    (w,) = [w for w in caught if "runs eagerly" in str(w.message)]
    assert (w.filename, w.lineno) == (__file__, RELU_LINE)
    assert DYNAMIC_SHAPES in str(w.message)
    assert "To compile it: drop options={'dynamic_shapes': 'eager'}" in str(w.message)


def test_fallback_on_error_warning_points_at_the_users_op_and_explain_lists_the_graph(monkeypatch, fresh_warnings,
                                                                                     device):
    def broken(self, node, target, *args, **kwargs):
        if target is aten.relu.default:
            raise ValueError("boom")
        return original(self, node, target, *args, **kwargs)
    original = GraphLowering._extern
    monkeypatch.delitem(LOWERINGS, aten.relu.default)   # relu's ATen fallback then fails: a lowering error
    monkeypatch.setattr(GraphLowering, "_extern", broken)
    x = torch.randn(4, 8, device=device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with trace.capture() as traces:
            out = torch.compile(scaled, backend="mini_inductor", options={"fallback_on_error": True})(x)
    torch.testing.assert_close(out, scaled(x))
    (w,) = [w for w in caught if "runs eagerly" in str(w.message)]
    assert (w.filename, w.lineno) == (__file__, RELU_LINE) and "boom" in str(w.message)
    assert 'Set options={"fallback_on_error": True}' not in str(w.message)   # it is set: no such advice
    (note,) = traces.eager
    assert "boom" in note.reason and note.source.startswith(f'File "{__file__}", line {RELU_LINE}')
    assert "[lowering]" in note.reason and "fallback_on_error" not in note.reason
    assert list(traces) == []


def test_warning_without_a_source_line_points_at_the_callers_frame():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trace.warn_at_user_code("mini_inductor: a message")
    (w,) = caught
    assert w.filename == __file__ and w.lineno == inspect.currentframe().f_lineno - 2

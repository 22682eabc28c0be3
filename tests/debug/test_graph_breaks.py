"""explain lists where Dynamo split the code into graphs, and why, from Dynamo's graph_breaks log
(read while explain runs, printed nowhere unless TORCH_LOGS asks for it)."""
import inspect
import logging

import torch

import mini_inductor
from mini_inductor.debug import trace
from mini_inductor.debug.trace import GraphBreak, graph_break_from_log


def printing(x):
    y = x.sin() * 2
    print("between the graphs")
    return y.cos()


PRINT_LINE = inspect.getsourcelines(printing)[1] + 2

# Dynamo's graph_breaks message (torch 2.13), as symbolic_convert.log_graph_break writes it
MESSAGE = f'''Graph break in user code at {__file__}:{PRINT_LINE}
Graph Break Reason: Encountered graph break when attempting to trace CALL: a function call, e.g. f(x, y):

Failed to trace builtin operator
  Explanation: Dynamo does not know how to trace builtin operator `print` with argument types ['str']
  Hint: Avoid calling builtin `print` with argument types ['str'].

 For more details about this graph break, please visit: https://example.invalid/gb0059.html

User code traceback:
  File "{__file__}", line 99, in caller
  File "{__file__}", line {PRINT_LINE}, in printing
'''


def test_a_graph_break_message_gives_the_users_line_and_the_reason_without_dynamos_wrapping():
    assert graph_break_from_log(MESSAGE) == GraphBreak(
        f'File "{__file__}", line {PRINT_LINE}, in printing: print("between the graphs")',
        "Failed to trace builtin operator: Dynamo does not know how to trace builtin operator `print` with "
        "argument types ['str']")
    assert graph_break_from_log("Restarting analysis due to ...") is None


def test_explain_lists_the_graph_break_between_its_two_graphs_and_prints_no_log(device, capfd):
    r = mini_inductor.explain(printing, torch.randn(8, device=device))
    assert len(r.graphs) == 2
    (found,) = r.graph_breaks
    assert found["source"].startswith(f'File "{__file__}", line {PRINT_LINE}, in printing: print(')
    assert found["reason"].startswith("Failed to trace builtin operator: ") and "`print`" in found["reason"]
    text = str(r)
    assert "Graph breaks (Dynamo ended a graph here and started another" in text
    assert f"test_graph_breaks.py:{PRINT_LINE} (printing): print(" in text
    assert "Graph break in user code" not in capfd.readouterr().err   # Dynamo's log stays off
    page = r.html_page()
    assert '<h2 id="graph-breaks">Graph breaks</h2>' in page and "Failed to trace builtin operator" in page


def test_a_break_dynamo_logs_again_without_the_users_stack_is_listed_once():
    again = (f"Graph break (user stack suppressed due to duplicate graph break) in user code at {__file__}:"
             f"{PRINT_LINE}\nGraph Break Reason: Encountered graph break when attempting to trace CALL: a function "
             f"call, e.g. f(x, y):\n\nFailed to trace builtin operator\n  Explanation: Dynamo does not know how to "
             f"trace builtin operator `print` with argument types ['str']")
    with trace.capture() as traces:
        handler = next(h for h in torch._dynamo.symbolic_convert.graph_break_log.handlers
                       if isinstance(h, trace._GraphBreakHandler))
        for message in (MESSAGE, again):
            handler.emit(logging.LogRecord("graph_breaks", logging.DEBUG, __file__, 1, message, None, None))
    (found,) = traces.graph_breaks
    assert ", in printing: " in found.source

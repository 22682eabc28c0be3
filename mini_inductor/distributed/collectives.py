"""Functional collectives (`torch.ops._c10d_functional.*`) lowered as extern kernels.

    buf2 = all_gather_into_tensor(buf1, 2, "0")   CollectiveKernel: issues the communication, returns at once
    ...                                           independent kernels run meanwhile (overlap.py moves them here)
    buf3 = wait_tensor(buf2)                      WaitKernel: blocks (or makes the stream wait) until it is done
    buf4 = mm(buf3, w)                            readers read the wait's output, never the collective's

What the scheduler needs to know, beyond an ordinary extern call, it reads from these kernels:

- a collective reads its inputs after it returns (the transfer is asynchronous): its wait reads them
  too (`WaitKernel.inputs`), so they live until the wait, the memory plan hands their storage to no
  other buffer before it, and a later write into one is ordered after it;
- a wait returns its input, the same tensor (`aliased_inputs`): the collective's output and the
  wait's are one storage group, never mistaken for a fresh allocation;
- whether a CUDA graph may capture the call (`capture_reason`, see policy.py).

Collectives are never dead code: every rank must issue the same ones in the same order (extern calls
are kept by the scheduler's dead-node elimination; overlap.py keeps their relative order).
"""
from __future__ import annotations

import torch

from ..errors import LoweringError
from ..lowering import ir
from ..lowering.ir import ExternKernel, Layout, MultiOutput, current_graph
from ..lowering.lowerings import register_lowering
from .policy import capture_reason

c10d = torch.ops._c10d_functional


def _overloads(*names: str) -> list:
    """The OpOverloads of `_c10d_functional` named here that this torch has."""
    return [getattr(getattr(c10d, n), "default") for n in names if hasattr(c10d, n)]


# Collectives that return a new tensor (or a list of them).
OUT_OF_PLACE = _overloads("all_reduce", "all_reduce_coalesced", "all_gather_into_tensor",
                          "all_gather_into_tensor_coalesced", "reduce_scatter_tensor",
                          "reduce_scatter_tensor_coalesced", "all_to_all_single", "broadcast")
# The in-place ones (all_reduce_, broadcast_, ..._out) do not reach us: AOT autograd's functionalization
# turns them into these. Should one appear, it runs as a counted ATen fallback.
COLLECTIVE_OPS = frozenset(OUT_OF_PLACE)
WAIT_OPS = frozenset(_overloads("wait_tensor"))


def is_collective(buf) -> bool:
    return isinstance(buf, CollectiveKernel)


def is_wait(buf) -> bool:
    return isinstance(buf, WaitKernel)


class CollectiveKernel(ExternKernel):
    """An extern call that issues a collective and returns before the data has arrived."""

    def __init__(self, name, layout, op, args, kwargs, *, origins=(), device=None, group: str = ""):
        super().__init__(name, layout, op, args, kwargs, fallback=False, origins=origins, device=device)
        self.group = group
        self.capture_reason = capture_reason(self.op_name, group, self.get_device())


class WaitKernel(ExternKernel):
    """`wait_tensor(t)`: returns `t` once the collective that produced it has finished."""

    def __init__(self, name, layout, op, args, kwargs, *, origins=(), device=None):
        super().__init__(name, layout, op, args, kwargs, fallback=False, origins=origins, device=device)
        producer = args[0].data if isinstance(args[0], ir.ReinterpretView) else args[0]
        self.collective = getattr(producer, "parent", producer)   # the call (past a coalesced one's output)
        self.group = getattr(self.collective, "group", "")
        self.capture_reason = capture_reason(self.op_name, self.group, self.get_device())

    def inputs(self) -> list[ir.Buffer]:
        """The tensor waited for, then what its collective sends: the transfer reads that until now."""
        sent = self.collective.inputs() if isinstance(self.collective, CollectiveKernel) else []
        return super().inputs() + [b for b in sent if b.name != self.collective.name]

    def aliased_inputs(self) -> list[str]:
        """The tensor waited for: the wait returns it."""
        return [b.name for b in super().inputs()]


def _contiguous_input(x) -> ir.Buffer | ir.ReinterpretView:
    """A collective sends dense memory: a strided view is copied into a contiguous buffer first."""
    t = ir.realize_as_tensor(x)
    if t.layout.is_contiguous() and t.layout.offset == 0:
        return t
    box = ir.Pointwise.create(t.get_device(), t.get_dtype(), t.make_loader(), t.get_size(), x.origins)
    return box.realize()


def _like(t, first_dim=None) -> Layout:
    size = list(t.get_size())
    if first_dim is not None:
        size[0] = first_dim
    return Layout.contiguous(t.get_device(), t.get_dtype(), size)


def _register(kernel: ExternKernel) -> ir.StorageBox:
    graph = current_graph()
    graph.extern_ops.append(kernel.op_name)
    graph.register_buffer(kernel)
    return ir.StorageBox(kernel)


def _issue(op, args, group, layouts):
    """A CollectiveKernel for `op` on realized `args`; one output per layout (a list: several)."""
    graph = current_graph()
    tensors = [a for a in _leaves(args) if isinstance(a, (ir.Buffer, ir.ReinterpretView))]
    device = tensors[0].get_device()
    if not isinstance(group, str):   # the generated source names its group; an object has no name there
        raise LoweringError(f"the process group is a {type(group).__name__}, not a group name: generated code "
                            "can call a collective only on a group it names (pass group names to the "
                            "functional collectives)")
    if isinstance(layouts, Layout):
        return _register(CollectiveKernel(graph.new_buffer_name(), layouts, op, args, {}, group=group))
    kernel = CollectiveKernel(graph.new_buffer_name(), None, op, args, {}, device=device, group=group)
    _register(kernel)
    outputs = []
    for i, layout in enumerate(layouts):
        out = MultiOutput(graph.new_buffer_name(), layout, kernel, (i,))
        graph.register_buffer(out)
        outputs.append(ir.StorageBox(out))
    return outputs


def _leaves(value) -> list:
    if isinstance(value, (list, tuple)):
        return [x for v in value for x in _leaves(v)]
    return [value]


def _dense(xs):
    return [_contiguous_input(x) for x in xs]


@register_lowering(*_overloads("all_reduce"))
def all_reduce(x, reduce_op, group_name):
    (x,) = _dense([x])
    return _issue(c10d.all_reduce.default, (x, reduce_op, group_name), group_name, _like(x))


@register_lowering(*_overloads("broadcast"))
def broadcast(x, src, group_name):
    (x,) = _dense([x])
    return _issue(c10d.broadcast.default, (x, src, group_name), group_name, _like(x))


@register_lowering(*_overloads("all_gather_into_tensor"))
def all_gather_into_tensor(x, group_size, group_name):
    (x,) = _dense([x])
    return _issue(c10d.all_gather_into_tensor.default, (x, group_size, group_name), group_name,
                  _like(x, x.get_size()[0] * group_size))


@register_lowering(*_overloads("reduce_scatter_tensor"))
def reduce_scatter_tensor(x, reduce_op, group_size, group_name):
    (x,) = _dense([x])
    return _issue(c10d.reduce_scatter_tensor.default, (x, reduce_op, group_size, group_name), group_name,
                  _like(x, x.get_size()[0] // group_size))


@register_lowering(*_overloads("all_to_all_single"))
def all_to_all_single(x, output_split_sizes, input_split_sizes, group_name):
    (x,) = _dense([x])
    rows = sum(output_split_sizes) if output_split_sizes else x.get_size()[0]
    return _issue(c10d.all_to_all_single.default, (x, list(output_split_sizes), list(input_split_sizes), group_name),
                  group_name, _like(x, rows))


@register_lowering(*_overloads("all_reduce_coalesced"))
def all_reduce_coalesced(xs, reduce_op, group_name):
    xs = _dense(xs)
    return _issue(c10d.all_reduce_coalesced.default, (xs, reduce_op, group_name), group_name, [_like(x) for x in xs])


@register_lowering(*_overloads("all_gather_into_tensor_coalesced"))
def all_gather_into_tensor_coalesced(xs, group_size, group_name):
    xs = _dense(xs)
    return _issue(c10d.all_gather_into_tensor_coalesced.default, (xs, group_size, group_name), group_name,
                  [_like(x, x.get_size()[0] * group_size) for x in xs])


@register_lowering(*_overloads("reduce_scatter_tensor_coalesced"))
def reduce_scatter_tensor_coalesced(xs, reduce_op, group_size, group_name):
    xs = _dense(xs)
    return _issue(c10d.reduce_scatter_tensor_coalesced.default, (xs, reduce_op, group_size, group_name), group_name,
                  [_like(x, x.get_size()[0] // group_size) for x in xs])


@register_lowering(*WAIT_OPS)
def wait_tensor(x):
    t = ir.realize_as_tensor(x)
    graph = current_graph()
    return _register(WaitKernel(graph.new_buffer_name(), t.layout, c10d.wait_tensor.default, (t,), {}))

"""Dead graph inputs are released after their last use (scheduler.md §16.2, feature list 42).

The wrapper's `call` takes its inputs boxed (one list, which it empties); once an input's last
reader has run, `call` drops its own name for it too, so the tensor dies mid-call when the caller
holds no other reference (aot_autograd hands the backward its saved tensors this way). Inputs that
are outputs, that an output views, or that the graph writes in place are kept.
"""
import gc
import re
import warnings
import weakref

import pytest
import torch
from torch.multiprocessing.reductions import StorageWeakRef

from common import check, compile_fn
from compile_ir import generate_fn, lower_fn
from mini_inductor import metrics
from mini_inductor.codegen import generate
from mini_inductor.caching.modules import load_module
from mini_inductor.runtime import CompiledGraph
from mini_inductor.runtime.interpreter import install as install_interpreter_shims
from mini_inductor.scheduler import schedule
from mini_inductor.scheduler.partition import partition_nodes

# What the probe op saw when it ran: for each watched input, whether it was already gone. Under
# Triton's interpreter a launch leaves a reference cycle that holds the storages of its arguments
# until the garbage collector runs, so on the CPU the probe watches the tensor objects (freed by
# reference counting alone, once no name or list holds them) and collects before checking storages.
_WATCHED: list[tuple[weakref.ref, StorageWeakRef]] = []
_SEEN: list[list[bool]] = []


@torch.library.custom_op("mini_test::probe_freed", mutates_args=())
def probe_freed(x: torch.Tensor) -> torch.Tensor:
    if _WATCHED:
        dead = [tensor() is None for tensor, _ in _WATCHED]
        if x.device.type == "cpu":
            gc.collect()
        _SEEN.append([d and storage.expired() for d, (_, storage) in zip(dead, _WATCHED)])
    return x.clone()


@probe_freed.register_fake
def _(x):
    return torch.empty_like(x)


def watch(tensors) -> None:
    _WATCHED[:] = [(weakref.ref(t), StorageWeakRef(t.untyped_storage())) for t in tensors]
    _SEEN.clear()


def call_lines(source: str) -> list[str]:
    body = source[source.index("def call(args"):source.index("INPUT_SPECS")].split("\n", 1)[1]
    # a GPU graph's body runs under a device guard: the guard line itself says nothing about releases
    return [ln.strip() for ln in body.splitlines()
            if ln.strip() and not ln.strip().startswith(("#", "with torch.cuda._DeviceGuard("))]


def index_of(lines: list[str], pattern: str) -> int:
    (i,) = [i for i, ln in enumerate(lines) if re.search(pattern, ln)]
    return i


def f_probe(x, y):
    a = x * 2 + 1                               # x's last use
    b = torch.ops.mini_test.probe_freed(a)      # runs after it: x should be gone by now
    return b * y                                # y's last use


def test_generated_call_drops_an_input_right_after_its_last_reader():
    x, y = torch.randn(4, 8), torch.randn(4, 8)
    # the probe runs outside any CUDA graph (on the CPU it does anyway), so it is called from `call`
    _, gen = generate_fn(f_probe, x, y, cudagraph_unsafe_ops="mini_test.probe_freed")
    lines = call_lines(gen.source)
    assert lines[:2] == ["x_1, y_1 = args", "args.clear()"]
    probe = index_of(lines, r"mini_test\.probe_freed")
    first_kernel = next(i for i, ln in enumerate(lines) if "x_1" in ln and i > 1)
    released = index_of(lines, r"^del .*\bx_1\b")
    # right after the partition (or kernel) that reads it last, before the probe runs
    assert first_kernel <= released < probe
    assert not any(re.search(r"^del .*\by_1\b", ln) for ln in lines[:probe])


def compiled_probe(device="cpu", **options):
    install_interpreter_shims()
    x, y = torch.randn(4, 8, device=device), torch.randn(4, 8, device=device)
    lowered, cfg = lower_fn(f_probe, x, y, **options)
    gen = generate(schedule(lowered, cfg), cfg)
    module, path = load_module(gen.source, cfg.cache_dir)
    return CompiledGraph(lowered.name, module, path, lowered.constants, cfg=cfg), x, y


def test_released_input_is_freed_in_the_middle_of_the_call():
    compiled, x, y = compiled_probe()
    args = [x.clone(), y.clone()]
    watch(args)
    try:
        (out,) = compiled(args)         # boxed: the list was the only holder of the inputs
    finally:
        watched = list(_WATCHED)
        _WATCHED.clear()
    assert args == []
    assert _SEEN == [[True, False]], "x must be freed before the probe runs, y only after"
    assert watched[1][0]() is None       # y died with the call's frame
    torch.testing.assert_close(out, f_probe(x, y))


def test_a_caller_that_keeps_its_reference_keeps_the_input():
    compiled, x, y = compiled_probe()
    watch([x])
    try:
        (out,) = compiled([x, y])
    finally:
        _WATCHED.clear()
    assert _SEEN == [[False]]
    torch.testing.assert_close(out, f_probe(x, y))


@pytest.mark.gpu
@pytest.mark.parametrize("cudagraphs", [False, True])
def test_released_input_memory_is_freed_mid_call_on_the_gpu(cudagraphs):
    # the probe runs between partitions (listed unsafe), so with CUDA graphs each call warms up,
    # records or replays partition_0, whose tree lets go of the input once it is copied or read
    compiled, x, y = compiled_probe("cuda", cudagraphs=cudagraphs, cudagraph_unsafe_ops="mini_test.probe_freed")
    expected = f_probe(x, y)
    for _ in range(4):
        args = [x.clone(), y.clone()]
        watch(args)
        try:
            (out,) = compiled(args)
        finally:
            _WATCHED.clear()
        assert _SEEN == [[True, False]]
        torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("kind", ["output", "view_output", "mutated"])
def test_outputs_their_views_and_mutated_inputs_are_never_released(kind):
    def returned(x, y):
        return x.sin() + y, x

    def viewed(x, y):
        return x.sin() + y, x[1:].t()

    def mutated(x, y):
        s = x.sin()
        x.add_(1)          # make_fx keeps the in-place op: an extern call writing into x
        return s + y

    fn = {"output": returned, "view_output": viewed, "mutated": mutated}[kind]
    x, y = torch.randn(4, 4), torch.randn(4, 4)
    sched, gen = generate_fn(fn, x.clone(), y)
    assert "x_1" not in {n for names in sched.frees_after for n in names}
    assert "x_1" not in sched.unused_inputs
    assert not any(re.search(r"^del .*\bx_1\b", ln) for ln in call_lines(gen.source))
    assert any(re.search(r"^del .*\by_1\b", ln) for ln in call_lines(gen.source)) or \
        "y_1" in {n for names in sched.frees_after for n in names}


def test_an_input_no_node_reads_is_dropped_first():
    def fn(x, unused, y):
        return x * y
    sched, gen = generate_fn(fn, torch.randn(8), torch.randn(8), torch.randn(8))
    assert sched.unused_inputs == ["unused_1"]
    lines = call_lines(gen.source)
    assert lines[2] == "del unused_1"


def test_training_step_matches_eager_and_the_backward_releases_its_inputs():
    def fn(x, w):
        h = torch.tanh(x @ w)
        return (h * h).sum(-1).softmax(-1)
    metrics.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check(fn, torch.randn(4, 8), torch.randn(8, 8), grad=True)
    # aot_autograd warns when it must unpack the list for a compiled function (then nothing is freed early)
    assert not [w for w in caught if "boxed" in str(w.message)], [str(w.message) for w in caught]
    backward = [g for g in metrics.compiled_graphs if g.name.startswith("backward")]
    assert backward and backward[0].source_path
    with open(backward[0].source_path) as fh:
        source = fh.read()
    lines = call_lines(source)
    unpacked = lines[0].split(" = args")[0].replace(" ", "").rstrip(",").split(",")
    released = {n for ln in lines if ln.startswith("del ") for n in ln[4:].replace(" ", "").split(",")}
    assert released & set(unpacked), f"the backward frees none of its inputs {unpacked}"
    assert lines[-1].startswith("return")


def test_compiled_function_values_match_eager_with_inputs_released():
    def fn(a, b, c):
        t = (a * b).sum(-1, keepdim=True)
        return torch.relu(t + c), c * 2
    f = compile_fn(fn)
    a, b, c = torch.randn(4, 8), torch.randn(4, 8), torch.randn(4, 1)
    for got, want in zip(f(a, b, c), fn(a, b, c)):
        torch.testing.assert_close(got, want)


def test_dynamo_disable_around_a_compiled_graph_keeps_it_boxed():
    # aot_autograd wraps the compiled backward in torch._dynamo.disable (functools.wraps): the wrapper
    # must still say it takes one list, or aot_autograd calls it with the inputs unpacked
    compiled, x, y = compiled_probe()
    wrapped = torch._dynamo.disable(compiled)
    assert getattr(wrapped, "_boxed_call", False)
    args = [x.clone(), y.clone()]
    (out,) = wrapped(args)
    assert args == []
    torch.testing.assert_close(out, f_probe(x, y))


def test_input_dying_in_a_partition_that_does_not_take_it_is_dropped_by_call():
    # as if x's storage lived on in an alias read last by the final kernel
    def fn(x, w):
        return (torch.mm(x * 2, w) + 1).sin()
    x, w = torch.randn(4, 8), torch.randn(8, 4)
    lowered, cfg = lower_fn(fn, x, w, cudagraph_unsafe_ops="aten.mm")   # three partitions on a GPU too
    sched = schedule(lowered, cfg)
    for names in sched.frees_after:
        if "x_1" in names:
            names.remove("x_1")
    sched.frees_after[-1].append("x_1")
    input_order = {"x_1": 0, "w_1": 1}
    sched.partitions = partition_nodes(sched.nodes, sched.frees_after, sched.output_names, input_order,
                                       frozenset({"aten.mm"}))
    assert "x_1" not in sched.partitions[-1].inputs
    gen = generate(sched, cfg)            # the lifecycle verifier checks every scope (conftest)
    lines = call_lines(gen.source)
    last_call = max(i for i, ln in enumerate(lines) if re.search(r"= partition_\d+\(", ln))
    assert lines[last_call - 3:last_call - 1] == ["del x_1", f"{sched.partitions[-1].name}_args = "
                                                  f"[{', '.join(sched.partitions[-1].inputs)}]"]
    module, _ = load_module(gen.source, cfg.cache_dir)
    torch.testing.assert_close(module.call([x, w], {})[0], fn(x, w))

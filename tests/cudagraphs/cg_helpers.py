"""Helpers for the CUDA-graph tree tests: plain Python functions wrapped as tree functions, compiled
functions and what their trees recorded."""

from mini_inductor import config
from mini_inductor.runtime.cudagraphs import trees
from mini_inductor.runtime.cudagraphs.utils import FunctionInfo


def tree_fn(fn, name="f", *, static=(), mutated=(), mode="inference", traces=None, adoptable=(), **options):
    """`fn(*tensors) -> tuple` as a function of the device-0 tree (boxed, like a compiled partition)."""

    def boxed(args):
        xs = list(args)
        args.clear()
        out = fn(*xs)
        del xs
        return list(out) if isinstance(out, (list, tuple)) else [out]

    info = FunctionInfo(fn=boxed, name=name, device=0, mode=mode, static_idxs=tuple(static),
                        mutated_idxs=tuple(mutated), input_names=[f"{name}_in{i}" for i in range(8)],
                        output_traces=traces, adoptable=frozenset(adoptable))
    return trees.TreeFunction(info, config.current().replace(**options))


def manager():
    return trees.get_manager(0)


def stats():
    return trees.stats(0)


def compiled(fn, **options):
    """`fn` under torch.compile with mini_inductor, static shapes, and these options."""
    import torch

    return torch.compile(fn, backend="mini_inductor", dynamic=False, options=options or None)


def step():
    """Start a new CUDA-graph iteration, as a user's mini_inductor.mark_step() does."""
    import mini_inductor

    mini_inductor.mark_step()


def leaf(*shape):
    """A CUDA leaf tensor that requires grad (20 x 20 unless a shape is given)."""
    import torch

    return torch.rand(*(shape or (20, 20)), device="cuda", requires_grad=True)


def graphed_partitions() -> int:
    """Partitions run from CUDA graphs, over every graph compiled in this test."""
    from mini_inductor.caching import PROCESS
    from mini_inductor.runtime import CompiledGraph

    return sum(len(e.compiled.tree_functions) for e in PROCESS.graphs.values()
               if isinstance(e.compiled, CompiledGraph))


def tree_roots() -> list[list[int]]:
    """The device-0 tree's shape: for each function with roots, the descendant count of each root; sorted."""
    return sorted(manager().tree_shape().values())


def skip_messages(caplog, text: str) -> list[str]:
    """The log messages caplog recorded that contain `text`."""
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


def in_pool(t) -> bool:
    """Whether tensor t's memory lies inside the device-0 tree's pool (the allocator's segments of it)."""
    import torch

    pool, ptr = tuple(manager().pool), t.untyped_storage().data_ptr()
    return any(seg["address"] <= ptr < seg["address"] + seg["total_size"]
               for seg in torch.cuda.memory_snapshot() if tuple(seg.get("segment_pool_id", ())) == pool)


def fake_cuda_module(devices):
    """A stand-in for a generated module whose inputs live on `devices` ("cuda:0", "cpu", ...): enough
    for CompiledGraph to decide whether its partitions join a tree (no kernels, nothing runs)."""
    import types

    import torch

    from mini_inductor.runtime.module_spec import InputSpec, PartitionSpec

    names = [f"arg{i}_1" for i in range(len(devices))]
    return types.SimpleNamespace(
        call=lambda args, constants: [], PARTITIONS={"partition_0": PartitionSpec(inputs=tuple(names), traces=(None,))},
        INPUT_SPECS=[InputSpec(size=(4,), stride=(1,), dtype=torch.float32, device=d) for d in devices],
        INPUT_NAMES=names)


def pretend_cuda(monkeypatch):
    """Make CompiledGraph believe CUDA graphs are available, for the decisions it takes before any
    CUDA call (skips by device or by capture sizes)."""
    import torch

    import mini_inductor.runtime as runtime
    monkeypatch.setattr(runtime, "interpreting", lambda: False)
    monkeypatch.setattr(runtime, "have_cuda_graph_apis", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


def train_step_matches_eager(f, model, ref, x, tol=1e-4):
    """One step of `f` (compiled `model`) and of `ref` (its eager copy) on `x`: outputs and grads must
    agree; the grads are cleared afterwards."""
    import torch

    out = f(x)
    out.square().mean().backward()
    want = ref(x)
    want.square().mean().backward()
    torch.testing.assert_close(out, want, atol=tol, rtol=tol)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=tol, rtol=tol)
        p.grad = q.grad = None


def run_gpu_and_cpu_inputs(f, caplog, calls: int = 3) -> None:
    """Call f(x, y) = (x + 1, y + 2) with x on the GPU and y on the CPU, checking each result, while
    caplog records the mini_inductor.perf_hints warnings."""
    import logging

    import torch

    with caplog.at_level(logging.WARNING, logger="mini_inductor.perf_hints"):
        for _ in range(calls):
            x, y = torch.randn(16, device="cuda"), torch.randn(16, device="cpu")
            a, b = f(x, y)
            torch.testing.assert_close(a, x + 1)
            torch.testing.assert_close(b, y + 2)

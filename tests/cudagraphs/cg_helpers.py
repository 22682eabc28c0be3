"""Helpers for the CUDA-graph tree tests: plain Python functions wrapped as tree functions."""

from mini_inductor import config
from mini_inductor.runtime import cudagraph_trees as trees
from mini_inductor.runtime.cudagraph_utils import FunctionInfo


def tree_fn(fn, name="f", *, static=(), mutated=(), mode="inference", traces=None, **options):
    """`fn(*tensors) -> tuple` as a function of the device-0 tree (boxed, like a compiled partition)."""

    def boxed(args):
        xs = list(args)
        args.clear()
        out = fn(*xs)
        del xs
        return list(out) if isinstance(out, (list, tuple)) else [out]

    info = FunctionInfo(fn=boxed, name=name, device=0, mode=mode, static_idxs=tuple(static),
                        mutated_idxs=tuple(mutated), input_names=[f"{name}_in{i}" for i in range(8)],
                        output_traces=traces)
    return trees.TreeFunction(info, config.current().replace(**options))


def manager():
    return trees.get_manager(0)


def stats():
    return trees.stats(0)

"""CUDA-graph trees: every cudagraph-safe partition of a compiled graph runs from a recorded CUDA graph.

    trees.py             the tree per device (TreeManager), TreeFunction (a partition routed through it),
                         mark_step, stats, reset: `mini_inductor.cudagraphs` is this module
    nodes.py             the tree's nodes: a warm-up run in the pool, a recorded graph
    utils.py             storage liveness, the private pool, output rebuilding, skip reasons, counters
    capture_sizes.py     option cudagraph_capture_sizes: a graph with dynamic dims specialized per listed size
    cublas_workspace.py  the cuBLAS workspace a warm-up or recording allocates in the pool

Nothing here launches kernels (runtime/launch/) or knows the compiler; CompiledGraph
(runtime/__init__.py) routes a module's partition functions through the trees.
"""

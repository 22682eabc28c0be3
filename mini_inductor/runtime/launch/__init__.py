"""Launching a compiled module's Triton kernels.

    launcher.py        FastKernel (each call site launches its compiled kernel directly after the first
                       launch), accelerate, prepare_kernels (what a freshly loaded module gets)
    static_launch.py   torch's prebuilt C launcher, so that Triton builds none with gcc
    precompile.py      every kernel of a module compiled concurrently before its first call; Triton's
                       setup and torch's lazy imports started in background threads at import
    autotune.py        mode="max-autotune": candidate configs timed at a kernel's first launch

What stays on disk is caching's: compiled kernels' records (caching/kernel_store.py) and autotuning
winners (caching/autotune.py). Nothing here touches CUDA graphs (runtime/cudagraphs/).
"""

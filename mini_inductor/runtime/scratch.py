"""Global scratch memory for Triton kernels that ask for it at launch (a matmul template's TMA
descriptors: 128 bytes each per program), from torch's caching allocator.

    scratch_allocator()      before a launch that may need it (launcher.py), and in generated modules

Triton keeps its allocator in a context variable, which every thread starts without (autograd runs a
backward's kernels in a thread of its own): each launch that may need one calls this, which sets ours
where none is set and leaves an allocator the user set alone.
"""
from __future__ import annotations

import torch


def _scratch(size: int, alignment: int, stream) -> torch.Tensor:
    # freed once the launch returns, reused in stream order; inside a CUDA-graph capture it comes from the
    # graph's pool. Torch's blocks are 512-byte aligned, past the 128 Triton asks for
    return torch.empty(size, dtype=torch.int8, device="cuda")


def scratch_allocator() -> None:
    from triton.runtime import _allocation

    if _allocation._allocator.get() is _allocation._NULL_ALLOCATOR:
        _allocation._allocator.set(_scratch)

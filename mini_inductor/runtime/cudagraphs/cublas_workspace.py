"""The cuBLAS workspace that a CUDA-graph warm-up or recording of a graph allocates in the tree's pool.

torch keeps one cuBLAS workspace per (handle, stream) and creates it at the first cuBLAS call on
that stream. `capture_hygiene` (utils.py) drops the cached ones before and after every
warm-up and recording, so the first cuBLAS call of a graphed partition allocates a fresh workspace,
from the pool, while the partition's own buffers are live:

    warm-up / recording call:  [ partition buffers (memory plan) ][ cuBLAS workspace ]
    replay:                    nothing allocated
    cudagraphs=False:          the workspace is made once (first call) and kept, outside the plan

The memory plan (`GraphRecord.planned_peak_bytes`) counts the graph's own buffers;
`GraphRecord.graphed_workspace_bytes` is this workspace, and a warm-up or recording call peaks at
most at their sum (`GraphRecord.recording_peak_bytes`). Which ops call cuBLAS: scheduler/partition.py
CUBLAS_OPS; the codegen lists them per partition function in the module's PARTITIONS table.

    workspace_bytes(env_value, capability, torch_reported)   # pure: the size torch allocates
    cublas_workspace_bytes(device)                            # the same, asked of this process
    lt_workspace_bytes(...), cublaslt_workspace_bytes(device)  # cuBLASLt's own, where it has one
    graphed_workspace_bytes(partitions, device)               # a compiled graph's figure
"""
from __future__ import annotations

import os
import re
from typing import Callable

import torch

from ..module_spec import PartitionSpec

KIB = 1024
# torch's defaults (aten/src/ATen/cuda/CublasHandlePool.cpp): ":4096:8" (32 MiB) on compute capability
# 9.x, 10.x and 12.x (Hopper, Blackwell), ":4096:2:16:8" (8 MiB + 128 KiB) elsewhere. Builds that can
# report their size (below) may differ from this table (later ones also give 11.x 32 MiB); theirs wins.
LARGE_DEFAULT = 4096 * KIB * 8
SMALL_DEFAULT = 4096 * KIB * 2 + 16 * KIB * 8
_LARGE_DEFAULT_MAJORS = (9, 10, 12)
_CONFIG_PAIR = re.compile(r":([0-9]+):([0-9]+)")


def workspace_bytes(env_value: str | None, capability: tuple[int, int] | None, torch_reported: int | None) -> int:
    """Bytes of one cuBLAS workspace, as torch sizes it.

    torch_reported: what torch itself says (torch.backends.cuda.cublas_workspace_size(), in torch 2.13,
    which also sees a size set from Python), used as is when given. Otherwise env_value, the
    CUBLAS_WORKSPACE_CONFIG text: ":SIZE:COUNT" pairs, SIZE in KiB, summed over the pairs (torch warns
    and takes the default when none parses). Otherwise the default for the GPU's compute capability
    (major, minor); unknown capability: the smaller default.
    """
    if torch_reported is not None:
        return int(torch_reported)
    if env_value is not None:
        pairs = _CONFIG_PAIR.findall(env_value)
        if pairs:
            return sum(int(size) * KIB * int(count) for size, count in pairs)
    if capability is not None and capability[0] in _LARGE_DEFAULT_MAJORS:
        return LARGE_DEFAULT
    return SMALL_DEFAULT


def _reported(query: str) -> int | None:
    """torch.backends.cuda.<query>() where this torch has it (2.13 does, 2.11 does not), else None."""
    ask = getattr(torch.backends.cuda, query, None)
    if ask is None:
        return None
    try:
        return ask()
    except (AttributeError, RuntimeError):   # a build without the query behind it
        return None


def cublas_workspace_bytes(device: int | None) -> int:
    """The cuBLAS workspace torch allocates on CUDA device `device` (None: the current one).

    Reads sizes and settings only (no tensor is made), so it may run while compiling under FakeTensor mode.
    """
    reported = _reported("cublas_workspace_size")
    capability = torch.cuda.get_device_capability(device) if reported is None else None
    return workspace_bytes(os.environ.get("CUBLAS_WORKSPACE_CONFIG"), capability, reported)


LT_DEFAULT = 1024 * KIB     # CUBLASLT_WORKSPACE_SIZE's default (KiB)
_TRUE = ("1", "y", "yes", "true", "on")
_FALSE = ("0", "n", "no", "false", "off")


def _env_flag(value: str | None) -> bool | None:
    if value is None:
        return None
    v = value.strip().lower()
    return True if v in _TRUE else False if v in _FALSE else None


def lt_workspace_bytes(unified_env: str | None, size_env: str | None, cublas_bytes: int,
                       torch_reported: int | None, unified_by_default: bool) -> int:
    """Bytes of the separate cuBLASLt workspace a cuBLASLt call allocates (0 when it shares cuBLAS's).

    cuBLASLt calls (addmm with a 1-d bias, _addmm_activation, _scaled_mm) take the cuBLAS handle, so
    they allocate the cuBLAS workspace too, and a cuBLASLt workspace of their own unless
    TORCH_CUBLASLT_UNIFIED_WORKSPACE says to share (unified_env; unset: unified_by_default, which
    the torch version decides). Its size: what torch reports, else CUBLASLT_WORKSPACE_SIZE (KiB),
    else 1 MiB; capped at the cuBLAS workspace unless the flag is set false.
    """
    flag = _env_flag(unified_env)
    if flag is True or (flag is None and unified_by_default):
        return 0
    if torch_reported is not None:
        return int(torch_reported)
    size = LT_DEFAULT
    if size_env is not None:
        try:
            size = int(size_env) * KIB
        except ValueError:          # torch warns and keeps the default
            size = LT_DEFAULT
    return size if flag is False else min(size, cublas_bytes)


def _unified_by_default() -> bool:
    # measured on the H100 with torch 2.11: a separate 1 MiB workspace (the C++ side unifies only when
    # the variable is set); torch 2.13's open-source builds share the cuBLAS workspace by default
    return torch.__version__ >= (2, 13)


def cublaslt_workspace_bytes(device: int | None) -> int:
    """The separate cuBLASLt workspace torch allocates on `device` at a cuBLASLt call (0: shared)."""
    return lt_workspace_bytes(os.environ.get("TORCH_CUBLASLT_UNIFIED_WORKSPACE"),
                              os.environ.get("CUBLASLT_WORKSPACE_SIZE"), cublas_workspace_bytes(device),
                              _reported("cublaslt_workspace_size"), _unified_by_default())


def graphed_workspace_bytes(partitions: dict[str, PartitionSpec], device: int | None,
                            size_of: Callable[[int | None], int] = cublas_workspace_bytes,
                            lt_size_of: Callable[[int | None], int] = cublaslt_workspace_bytes) -> int:
    """The workspaces a warm-up or recording of a compiled graph allocates in the pool: the cuBLAS
    workspace when a partition function that runs in a CUDA-graph tree calls cuBLAS, plus the
    cuBLASLt one when one calls cuBLASLt; else 0.

    partitions: the generated module's PARTITIONS table (name -> PartitionSpec), restricted to the
    functions that run in trees (empty when CUDA graphs are off for the graph). The workspaces are
    dropped after each warm-up and recording, so partitions recorded one after another do not hold
    one each.
    """
    if not any(spec.cublas for spec in partitions.values()):
        return 0
    lt = lt_size_of(device) if any(spec.cublaslt for spec in partitions.values()) else 0
    return size_of(device) + lt

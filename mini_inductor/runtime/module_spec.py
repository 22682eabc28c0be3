"""The records a generated module hands the runtime: one frozen dataclass per table.

Codegen (codegen/wrapper.py) writes these constants into every generated module as constructor
calls with keyword arguments, after `from mini_inductor.runtime.module_spec import ...` in its header;
the runtime reads them back by attribute. Both sides import this module, so a field renamed on one
side only fails when the generated module is imported (a TypeError for the unknown keyword), on any
machine, rather than as a KeyError inside a CUDA-graph recording on a GPU.

    constant           records                        one per                    read by
    ─────────────────  ─────────────────────────────  ─────────────────────────  ──────────────────────────
    INPUT_SPECS        list[InputSpec]                argument of call(args)     runtime/__init__.py,
                                                                                 launch/precompile.py,
                                                                                 the module's
                                                                                 make_example_inputs()
    CONSTANT_SPECS     dict[str, ConstantSpec]        get_attr tensor            the module's benchmark()
    PARTITIONS         dict[str, PartitionSpec]       partition function         runtime/__init__.py (trees),
                                                                                 cudagraphs/cublas_workspace.py
    UNSAFE_PARTITIONS  dict[str, UnsafePartition]     run of nodes kept out of   runtime/__init__.py (logged,
                                                      CUDA graphs                or the skip reason)
    KERNEL_LAUNCHES    list[KernelLaunch]             launch whose pointer       launch/precompile.py
                                                      dtypes and sizes are known
    SIZE_SYMBOLS       list[str] (dynamic graphs only) size symbol, passed to     runtime/__init__.py (trees
                                                      every partition after      record per distinct size)
                                                      its buffers

Sizes and strides are ints: a dynamic graph's INPUT_SPECS hold the sizes (and int inputs) it was traced with. Records are frozen and their
sequences tuples: the runtime cannot edit a table by accident. This module imports nothing from the
compiler (tests/packaging/test_import_rules.py): a generated module loads with the runtime alone.
"""
from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass(frozen=True)
class InputSpec:
    """One argument of `call(args)`: a tensor's size, stride, dtype (a torch.dtype) and device ("cuda:0",
    "cpu"), or all four None for an argument that is not a tensor (a SymInt, an unused argument); `value`:
    an int argument's traced value (a dynamic graph's size), which make_example_inputs passes."""

    size: tuple[int, ...] | None
    stride: tuple[int, ...] | None
    dtype: Any
    device: str | None
    value: int | None = None


@dataclasses.dataclass(frozen=True)
class ConstantSpec:
    """A get_attr tensor of the graph (the loader fills CONSTANTS with the real ones)."""

    size: tuple[int, ...]
    dtype: Any
    device: str


@dataclasses.dataclass(frozen=True)
class PartitionSpec:
    """A partition function of the module, run inside a CUDA-graph tree when they are on.

    inputs: its argument names, in order (the runtime classifies static inputs by name).
    traces: per output, the user's source line of the op that produced it (quoted in errors).
    input_traces: per input, the user's source line of the first op that reads it (quoted when a
        static input's address changes).
    cublas / cublaslt: the ATen ops it calls that use cuBLAS, and those of them that run through
        cuBLASLt (a recording allocates both workspaces: runtime/cudagraphs/cublas_workspace.py).
    returned: (its output position, the module's output position) for each output that `call`
        returns as it is, the same tensor object, once (a backward's parameter gradients among them
        become `.grad` in pool memory: runtime/cudagraphs/nodes.py: adopted gradients).
    """

    inputs: tuple[str, ...]
    traces: tuple[str | None, ...]
    input_traces: tuple[str | None, ...] = ()
    cublas: tuple[str, ...] = ()
    cublaslt: tuple[str, ...] = ()
    returned: tuple[tuple[int, int], ...] = ()


@dataclasses.dataclass(frozen=True)
class UnsafePartition:
    """A run of nodes kept out of CUDA graphs: why (`reason`), and the user's source line of its first
    op that has one (`source`, None when none has)."""

    reason: str
    source: str | None = None


@dataclasses.dataclass(frozen=True)
class KernelLaunch:
    """One launch signature of a Triton kernel, compiled before the first call (runtime/launch/precompile.py).

    kernel: the kernel's name in the module. dtypes: a torch.dtype per pointer argument. sizes: the
    size arguments after the pointers. meta: the block sizes (constexprs). num_warps: warps per block.
    """

    kernel: str
    dtypes: tuple[Any, ...]
    sizes: tuple[int, ...]
    meta: dict[str, int]
    num_warps: int

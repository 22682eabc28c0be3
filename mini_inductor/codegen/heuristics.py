"""Block sizes and warps for a kernel, from its sizes alone (the configs mode="max-autotune" tries
at run time are the runtime's: runtime/launch/autotune.py)."""
from __future__ import annotations

import dataclasses

from ..runtime.launch.autotune import next_power_of_2


@dataclasses.dataclass(frozen=True)
class KernelConfig:
    XBLOCK: int
    RBLOCK: int          # 1 for pointwise kernels
    num_warps: int
    persistent: bool     # a reduction whose whole row fits in one block
    YBLOCK: int | None = None   # 2-D tiled pointwise kernels (codegen/tiling.py): rows of the tile

    def meta(self, reduction: bool) -> dict[str, int]:
        if reduction:
            return {"XBLOCK": self.XBLOCK, "RBLOCK": self.RBLOCK}
        if self.YBLOCK is not None:
            return {"YBLOCK": self.YBLOCK, "XBLOCK": self.XBLOCK}
        return {"XBLOCK": self.XBLOCK}


def pick_config(numel: int, rnumel: int, persistent_limit: int, outer: bool = False,
                itemsize: int = 4) -> KernelConfig:
    """Pointwise: 1-D tiles of up to 1024. Reductions: persistent rows up to `persistent_limit`, else looped.

    `itemsize`: the widest element the kernel loads or stores, in bytes. A 1-D pointwise block of 1024
    4-byte elements has 8 warps, 4 elements (16 bytes) a thread. Kernels of 2-byte types take blocks of
    2048 at 4 warps: 16 elements, two 16-byte accesses a thread. At 1024 and 8 warps an fp16 kernel's
    loads and stores were 8 bytes a thread (ld.global.v2.b32, compiled for sm_90), where ATen's
    vectorized kernels move 16. Timed on an H200 over 50M fp16 elements (benchmarks/pointwise.py,
    session 28), GELU took 0.0843 ms at 1024x8, 0.0744 at 1024x4, 0.0678 at 2048x4 against eager's
    0.0653 and Inductor's 0.0729; a multiply 0.0543, 0.0495 and 0.0501 against eager's 0.0501 (the
    bandwidth limit); 2048 at 8 warps, 4096 at 8, and 512 at 2 or 4 were no faster.

    `outer`: the reduction's reads are contiguous across rows, not along them (x.sum(0) of a row-major
    x). Then a block holds many rows (XBLOCK ≥ 8: a 32-byte sector of fp32 per reduction step) and
    loops over short reduction steps, with at least ~128 programs while rows allow.
    """
    if rnumel <= 1:
        if itemsize <= 2:
            return KernelConfig(min(2048, next_power_of_2(numel)), 1, 4, True)
        xblock = min(1024, next_power_of_2(numel))
        return KernelConfig(xblock, 1, 4 if xblock <= 512 else 8, True)
    if outer:
        xblock = min(64, max(8, next_power_of_2(numel) // 128))
        rblock = min(next_power_of_2(rnumel), 2048 // xblock)
        return KernelConfig(xblock, rblock, 8, False)
    if rnumel <= persistent_limit:
        rblock = next_power_of_2(rnumel)
        # rows of 1024 or more: one a program. A residual add and layer norm over 768 float32 columns
        # (benchmarks/norm_configs.py, H200, session 32) took 3.44, 7.01, 9.59 and 27.6 µs at 512, 2048,
        # 3152 and 8192 rows with 1 row and 8 warps a program, against 3.97, 7.24, 10.7 and 28.9 with 4
        # rows (the earlier choice) and Inductor's 3.24, 7.53, 10.1 and 29.5
        if rblock >= 1024:
            # rows wider than 4096 (only with a raised limit) keep at most 32 values a thread in registers
            return KernelConfig(1, rblock, min(max(8, rblock // 1024), 32), True)
        xblock = max(1, min(next_power_of_2(numel), 4096 // rblock, 64))
        return KernelConfig(xblock, rblock, max(1, min(8, xblock * rblock // 256)), True)
    xblock = 1 if numel < 1024 else 4
    rblock = 2048 // xblock
    return KernelConfig(xblock, rblock, 8, False)


def multipass_looped_config(rnumel: int) -> KernelConfig:
    """A looped reduction that reads its rows in more than one loop (softmax, norms of long rows).

    The second loop's reads hit L2 only if the rows in flight fit in it: between a program's two
    reads of an element every resident program streams a row. One row per program and 16 warps keep
    about two programs per SM: on the H100, 132 SMs x 2 rows x 128 KB (32768 fp32) = 34 MB of a
    50 MB L2, where 4-row programs of 8 warps would keep every row of the tensor in flight.
    """
    return KernelConfig(1, min(4096, next_power_of_2(rnumel)), 16, False)


# widest X side of a 2-D tile: 32 contiguous elements are a full 128-byte line in fp32
TILE_XBLOCK_MAX = 32


def pick_tile_config(ynumel: int, xnumel: int) -> KernelConfig:
    """A 2-D pointwise tile of up to 1024 elements: X up to 32 wide, Y takes the rest (a narrow X,
    e.g. 3 channels of an NHWC write, leaves Y long so the read stays coalesced)."""
    xblock = min(TILE_XBLOCK_MAX, next_power_of_2(xnumel))
    yblock = min(next_power_of_2(ynumel), 1024 // xblock)
    return KernelConfig(xblock, 1, 4, True, YBLOCK=yblock)

"""Block sizes and warps for a kernel, from its sizes alone (autotuning comes later)."""
from __future__ import annotations

import dataclasses


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


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def pick_config(numel: int, rnumel: int, persistent_limit: int) -> KernelConfig:
    """Pointwise: 1-D tiles of up to 1024. Reductions: persistent rows up to `persistent_limit`, else looped."""
    if rnumel <= 1:
        xblock = min(1024, next_power_of_2(numel))
        return KernelConfig(xblock, 1, 4 if xblock <= 512 else 8, True)
    if rnumel <= persistent_limit:
        rblock = next_power_of_2(rnumel)
        xblock = max(1, min(next_power_of_2(numel), 4096 // rblock, 64))
        warps = max(1, min(8, xblock * rblock // 256))
        return KernelConfig(xblock, rblock, warps, True)
    xblock = 1 if numel < 1024 else 4
    rblock = 2048 // xblock
    return KernelConfig(xblock, rblock, 8, False)


# widest X side of a 2-D tile: 32 contiguous elements are a full 128-byte line in fp32
TILE_XBLOCK_MAX = 32


def pick_tile_config(ynumel: int, xnumel: int) -> KernelConfig:
    """A 2-D pointwise tile of up to 1024 elements: X up to 32 wide, Y takes the rest (a narrow X,
    e.g. 3 channels of an NHWC write, leaves Y long so the read stays coalesced)."""
    xblock = min(TILE_XBLOCK_MAX, next_power_of_2(xnumel))
    yblock = min(next_power_of_2(ynumel), 1024 // xblock)
    return KernelConfig(xblock, 1, 4, True, YBLOCK=yblock)

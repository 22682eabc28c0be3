"""Block sizes and warps for a kernel, from its sizes alone; the configs mode="max-autotune" tries."""
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


def pick_config(numel: int, rnumel: int, persistent_limit: int, outer: bool = False) -> KernelConfig:
    """Pointwise: 1-D tiles of up to 1024. Reductions: persistent rows up to `persistent_limit`, else looped.

    `outer`: the reduction's reads are contiguous across rows, not along them (x.sum(0) of a row-major
    x). Then a block holds many rows (XBLOCK ≥ 8: a 32-byte sector of fp32 per reduction step) and
    loops over short reduction steps, with at least ~128 programs while rows allow.
    """
    if rnumel <= 1:
        xblock = min(1024, next_power_of_2(numel))
        return KernelConfig(xblock, 1, 4 if xblock <= 512 else 8, True)
    if outer:
        xblock = min(64, max(8, next_power_of_2(numel) // 128))
        rblock = min(next_power_of_2(rnumel), 2048 // xblock)
        return KernelConfig(xblock, rblock, 8, False)
    if rnumel <= persistent_limit:
        rblock = next_power_of_2(rnumel)
        xblock = max(1, min(next_power_of_2(numel), 4096 // rblock, 64))
        # rows wider than 4096 (only with a raised limit) keep at most 32 values a thread in registers
        warps = max(1, min(max(8, rblock // 1024), 32, xblock * rblock // 256))
        return KernelConfig(xblock, rblock, warps, True)
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


def autotune_candidates(xnumel: int, rnumel: int | None, meta: dict[str, int], num_warps: int, *,
                        looped: bool, tune_blocks: bool, limit: int = 8) -> list[tuple[dict[str, int], int]]:
    """Configs `mode="max-autotune"` times for one kernel: (block sizes, num_warps), the heuristic's first.

    `meta` is the heuristic's XBLOCK (and RBLOCK for reductions). A persistent reduction keeps its
    RBLOCK (the whole row must fit in one block); a looped one may trade RBLOCK for XBLOCK. Without
    `tune_blocks` (a grid that does not follow XBLOCK) only num_warps varies.
    """
    default = (dict(meta), num_warps)
    found = [default]

    def add(blocks: dict[str, int], warps: int) -> None:
        cand = ({k: blocks.get(k, v) for k, v in meta.items()}, warps)
        if cand not in found and len(found) <= limit:
            found.append(cand)

    xcap = next_power_of_2(max(1, xnumel))
    if not tune_blocks or not meta.keys() <= {"XBLOCK", "RBLOCK"}:
        elements = 1
        for v in meta.values():
            elements *= v
        for warps in (num_warps // 2, num_warps * 2, num_warps * 4):
            if 1 <= warps <= 16 and warps * 32 <= max(32, elements):
                add({}, warps)
        return found
    if "RBLOCK" not in meta:                                   # pointwise
        for xblock in (256, 512, 1024, 2048):
            xblock = min(xblock, xcap)
            for warps in (max(1, xblock // 256), max(1, xblock // 128)):
                add({"XBLOCK": xblock}, min(warps, 16))
        return found
    if not looped:                                             # persistent: RBLOCK stays
        rblock = meta["RBLOCK"]
        xblocks = [x for x in (1, 2, 4, 8, 16, 32, 64) if x <= xcap and x * rblock <= 16384]
        for xblock in xblocks:
            base = max(1, min(16, xblock * rblock // 256))
            for warps in (base, min(16, base * 2)):
                add({"XBLOCK": xblock}, warps)
        return found
    rcap = next_power_of_2(max(1, rnumel or 1))                # looped
    for xblock, rblock in ((1, 2048), (1, 4096), (1, 1024), (2, 1024), (4, 512), (8, 256), (16, 128), (32, 64)):
        if xblock <= xcap and rblock <= max(rcap, 64):
            add({"XBLOCK": xblock, "RBLOCK": rblock}, 8 if xblock * rblock >= 2048 else 4)
    return found

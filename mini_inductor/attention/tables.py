"""The flash kernels' block tables, and how an extra tensor is laid out for the kernels.

    block_ranges(sm, L, S, block_m, block_n, ...)  which key blocks each query block visits (and, for
                 the backward, which query blocks each key block does): once per shape for a mask of
                 i, j, L and S; from the tensors' values on every call for a mask given as data
    extra_args(extra, shape, device, sm)   the extra tensors as the kernels take them: a tensor and its
                 strides at [B, Hq, L, S] (0 along broadcast dims); a tensor read at a computed index
                 (score_mod.Gather) as a one-element view at its offset, with its layout's strides
"""
from __future__ import annotations

import contextlib
import dataclasses

import torch

from ..config import current as current_config
from ..runtime.launch.autotune import next_power_of_2
from . import score_mod

Tensor = torch.Tensor

# (mod, L, S, BLOCK_M, BLOCK_N, device, backward) → block ranges; never evicted: a CUDA graph that
# captured a launch reads its table's memory at every replay
_RANGES: dict[tuple, tuple] = {}
_TABLE_KERNELS: dict[tuple, object] = {}   # (mod, extra kinds, axes) → the table kernels' module


@dataclasses.dataclass(frozen=True)
class BlockTable:
    """Which blocks of one (mod, L, S, block sizes) the kernels visit, in blocks (int32 on the device).

    kv_lo, kv_hi     per query block: the key blocks holding a live score
    full_lo, full_hi per query block, inside those: key blocks where no score is dead, so the forward
                     runs the modification without its masking there (score_mod.assume_live)
    q_lo, q_hi       per key block: the query blocks holding a live score (dk, dv)
    qfull_lo, qfull_hi  per key block, inside those: the whole query blocks, which dk/dv runs unmasked
    tab_b, tab_h     a mask given as data has a table per batch and head it varies along, each tensor
                     [tables, blocks] (else [blocks]): batch b, head h read row b * tab_b + h * tab_h
    """

    kv_lo: Tensor
    kv_hi: Tensor
    full_lo: Tensor
    full_hi: Tensor
    q_lo: Tensor
    q_hi: Tensor
    qfull_lo: Tensor
    qfull_hi: Tensor
    tab_b: int = 0
    tab_h: int = 0


def block_ranges(sm: score_mod.ScoreMod, L: int, S: int, block_m: int, block_n: int, device: torch.device,
                 backward: bool, extra=(), q_block_m: int | None = None, empty_rows_zero: bool = False) -> BlockTable:
    """The blocks to visit; outside kv_lo..kv_hi (q_lo..q_hi) no score is live. For the backward, every
    range is whole when some row is fully masked (eager's gradients then have NaN for every key; see
    the module docstring); for the forward too where a masked score may be a finite fill (such a row
    is eager's average over every key). Not with `empty_rows_zero` (flex attention's), where such a
    row has no gradient, unless the fill is finite.

    `q_block_m` (a multiple of block_m; block_m if None): the query blocks of q_lo..qfull_hi, where
    dk/dv steps over taller query blocks than dq (backward_config, dq_config): one table serves both.

    Where the extra tensors decide which scores are dead (a mask given as data), the table is built
    from their values on every call (in a CUDA graph, by every replay), one per batch and head the
    tensors vary along: a padding mask's batch skips its own padding."""
    q_block_m = q_block_m or block_m
    assert q_block_m % block_m == 0, (q_block_m, block_m)
    if sm.dead_reads_tensors:
        return _data_block_ranges(sm, L, S, block_m, block_n, device, backward, extra, q_block_m, empty_rows_zero)
    key = (sm.text, L, S, block_m, block_n, device, backward, q_block_m, empty_rows_zero)
    hit = _RANGES.get(key)
    if hit is not None:
        return hit

    def build() -> BlockTable:
        table = _block_ranges(sm, L, S, block_m, block_n, device, backward, empty_rows_zero=empty_rows_zero)
        if q_block_m == block_m:
            return table
        taller = _block_ranges(sm, L, S, q_block_m, block_n, device, backward, empty_rows_zero=empty_rows_zero)
        return dataclasses.replace(table, q_lo=taller.q_lo, q_hi=taller.q_hi, qfull_lo=taller.qfull_lo,
                                   qfull_hi=taller.qfull_hi)
    if device.type != "cuda":
        table = build()
    elif torch.cuda.is_current_stream_capturing():
        # inside a CUDA graph's recording: built by the graph itself on every replay (a few tiny
        # kernels), in its pool, and not kept (a kept tensor of the pool would outlive its recording)
        return build()
    else:
        # kept for the process's life: not in a CUDA-graph tree's pool, where its warm-up run allocates
        from ..runtime.cudagraphs.utils import outside_pool
        with outside_pool(device.index if device.index is not None else torch.cuda.current_device()):
            table = build()
    _RANGES[key] = table
    return table


def _grid_view(t: Tensor, rows: Tensor, cols: Tensor, L: int, S: int) -> Tensor:
    """An extra tensor (broadcasting to [B, H, L, S]) at the grid's rows and columns (clamped: the
    padding past L and S is not valid anyway), as [B or 1, H or 1, rows or 1, cols or 1]."""
    t = t.reshape((1,) * (4 - t.dim()) + tuple(t.shape))
    if t.shape[2] > 1:
        t = t.index_select(2, rows.clamp(max=L - 1))
    if t.shape[3] > 1:
        t = t.index_select(3, cols.clamp(max=S - 1))
    return t


def _table_shape(extra, read, sm: score_mod.ScoreMod) -> tuple[int, int]:
    """(batches, heads) the extra tensors that `read` names (t0, t1, ...) vary along: 1 or B, 1 or H.
    (A tensor read at a computed index that decides which scores are dead is indexed by i, j, L and
    S only: dead_names would hold b or h, and nothing would skip.)"""
    gathered = {g.n for g in sm.gathers}
    as4 = [t.reshape((1,) * (4 - t.dim()) + tuple(t.shape)) for n, t in enumerate(extra)
           if f"t{n}" in read and n not in gathered]
    return max([t.shape[0] for t in as4] or [1]), max([t.shape[1] for t in as4] or [1])


def _block_ranges(sm: score_mod.ScoreMod, L: int, S: int, block_m: int, block_n: int, device: torch.device,
                  backward: bool, extra=(), empty_rows_zero: bool = False) -> BlockTable:
    """The table from the whole score grid, with torch (chunk by chunk): for masks of i, j, L and S,
    once per shape; with extra tensors, the reference the table kernel is tested against (a table
    per batch and head they vary along)."""
    n_m, n_n = -(-L // block_m), -(-S // block_n)
    read = {f"t{n}": t for n, t in enumerate(extra) if f"t{n}" in score_mod.dead_names(sm.tree)}
    n_b, n_h = _table_shape(extra, read, sm)
    gathered = {f"t{g.n}" for g in sm.gathers}
    tables = n_b * n_h
    live = torch.zeros(tables, n_m, n_n, dtype=torch.bool, device=device)
    whole = torch.zeros(tables, n_m, n_n, dtype=torch.bool, device=device)   # no dead score among the valid ones
    dead_row = torch.zeros(tables, 1, dtype=torch.bool, device=device)
    cols = torch.arange(n_n * block_n, device=device)
    step = max(1, (1 << 22) // (n_n * block_n * block_m * tables))   # query blocks per chunk: ~4M grid points
    for m0 in range(0, n_m, step):
        m1 = min(n_m, m0 + step)
        rows = torch.arange(m0 * block_m, m1 * block_m, device=device)
        env = {"i": rows[:, None], "j": cols[None, :], "L": L, "S": S,
               **{name: t.to(device) if name in gathered else _grid_view(t.to(device), rows, cols, L, S)
                  for name, t in read.items()}}
        dead = torch.as_tensor(score_mod.dead_mask(sm.tree, env), device=device)
        dead = dead.reshape((1,) * (4 - dead.dim()) + tuple(dead.shape))
        dead = dead.expand(n_b, n_h, len(rows), len(cols)).reshape(tables, len(rows), len(cols))
        valid = (rows[:, None] < L) & (cols[None, :] < S)
        blocks = (tables, m1 - m0, block_m, n_n, block_n)
        live[:, m0:m1] = (valid & ~dead).view(blocks).any(4).any(2)
        whole[:, m0:m1] = (~valid | ~dead).view(blocks).all(4).all(2)
        dead_row |= ((dead | ~valid)[..., :S].all(-1) & (rows < L)).any(-1, keepdim=True)
    whole &= live

    index_n, index_m = torch.arange(n_n, device=device), torch.arange(n_m, device=device)
    kv_lo, kv_hi = _span(live, index_n)
    full_lo, full_hi = _whole_run(whole, index_n, kv_hi)
    q_lo, q_hi = _span(live.transpose(1, 2), index_m)
    qfull_lo, qfull_hi = _whole_run(whole.transpose(1, 2), index_m, q_hi)
    rows_rule = sm.finite_fill or (backward and not empty_rows_zero)   # see block_ranges
    if rows_rule:
        kv_lo, kv_hi = torch.where(dead_row, 0, kv_lo), torch.where(dead_row, n_n, kv_hi)
    if backward and rows_rule:
        q_lo, q_hi = torch.where(dead_row, 0, q_lo), torch.where(dead_row, n_m, q_hi)
    parts = (kv_lo, kv_hi, full_lo, full_hi, q_lo, q_hi, qfull_lo, qfull_hi)
    return _table(parts, n_b, n_h)


def _table(parts, n_b: int, n_h: int) -> BlockTable:
    """A BlockTable of the eight [tables, blocks] ranges: one table read by every batch and head as
    [blocks]."""
    tables = n_b * n_h
    parts = [t.to(torch.int32).reshape(tables, -1) for t in parts]
    if tables == 1:
        return BlockTable(*(t[0] for t in parts))
    return BlockTable(*parts, tab_b=n_h if n_b > 1 else 0, tab_h=1 if n_h > 1 else 0)


def _whole_run(whole: Tensor, index: Tensor, hi: Tensor) -> tuple[Tensor, Tensor]:
    """Per row of `whole` (blocks along its last dim): the run of whole blocks that a kernel runs
    unmasked. It needs one run: otherwise (or with none) the range is empty, at `hi`."""
    lo_w, hi_w = _span(whole, index)
    run = whole.sum(-1) == hi_w - lo_w
    lo_w, hi_w = torch.where(run & (hi_w > lo_w), lo_w, hi), torch.where(run, hi_w, hi)
    return lo_w, torch.maximum(hi_w, lo_w)


def _span(mask: Tensor, index: Tensor) -> tuple[Tensor, Tensor]:
    """Per row of `mask` (blocks along its last dim): the first and one past the last set block; an
    empty range at 0 where none is set."""
    count = len(index)
    hi = torch.where(mask, index + 1, 0).amax(-1)
    lo = torch.minimum(torch.where(mask, index, count).amin(-1), hi)
    return lo, hi


def _data_block_ranges(sm: score_mod.ScoreMod, L: int, S: int, block_m: int, block_n: int, device: torch.device,
                       backward: bool, extra, q_block_m: int | None = None, empty_rows_zero: bool = False) -> BlockTable:
    """block_ranges for a mask given as data: the generated kernels of kernels.py table_source read the
    tensors once and give the tables of every batch and head they vary along (the backward's query
    ranges and the fully-masked-row rule included) in one int32 tensor: four launches at most (a
    zero fill first where the fully-masked-row rule applies), two where it does not (a forward with
    -inf fills, flex attention's backward). The
    query ranges of taller blocks (`q_block_m`) merge the flags of block_m's, so dq's table and dk/dv's
    are one build (before, a backward built two: eight launches). A mask the same for every query (a
    padding mask of keys) has its flags computed for the first query block only, which the others
    read; likewise for keys."""
    q_block_m = q_block_m or block_m
    n_m, n_n = -(-L // block_m), -(-S // block_n)
    n_mq = -(-L // q_block_m)
    names = score_mod.dead_names(sm.tree)
    read = [n for n in range(len(extra)) if f"t{n}" in names]
    n_b, n_h = _table_shape(extra, {f"t{n}" for n in read}, sm)
    tables = n_b * n_h
    # the tensors that decide as the kernels read them (_extra_args), at [n_b, n_h, L, S]; the others unread
    as4, strides, axes = [], [], []
    for n, t in enumerate(extra):
        if n in read:
            (t,), stride = extra_args([t], (n_b, n_h, L, S), device, sm, first=n)
        else:
            stride = (0, 0, 0, 0)
        as4.append(t)
        strides.extend(stride)
        axes.append(axes_of(stride, L, S))
    kinds = tuple("bool" if t.dtype == torch.bool else "float" if t.is_floating_point() else "int" for t in extra)
    module = _table_kernel(sm, kinds, tuple(axes))
    # the flags of one query (key) block stand for all where the mask is the same along i (j): a
    # block's valid scores are then those of the first block, or a subset of their rows (columns)
    along_i = "i" in names or any("i" in axes[n] for n in read)
    along_j = "j" in names or any("j" in axes[n] for n in read)
    f_m, f_n = (n_m if along_i else 1), (n_n if along_j else 1)
    need_rows = sm.finite_fill or (backward and not empty_rows_zero)   # the row rule (block_ranges)
    rows = tables * L if need_rows else 0
    flags = torch.empty(tables, f_m, f_n, dtype=torch.int8, device=device)
    if need_rows:
        counts = torch.zeros(tables + rows, dtype=torch.int32, device=device)   # DEAD [bh], then ROW_LIVE [bh, row]
        dead, row_live = counts[:tables], counts[tables:]
    else:
        dead = row_live = flags   # (not read)
    ranges = torch.empty(tables * (4 * n_m + 4 * n_n), dtype=torch.int32, device=device)
    with launch_context_of(device):
        module.block_flags[(f_m, f_n, tables)](flags, row_live, *as4, *strides, n_h, L, S, f_m, f_n,
                                               BLOCK_M=block_m, BLOCK_N=block_n, NEED_ROWS=need_rows)
        if need_rows:   # the rows of the first query block stand for all where the mask is the same along i
            checked = L if along_i else min(L, block_m)
            module.dead_rows[(-(-checked // 1024), tables)](row_live, dead, L, checked, BLOCK=1024)
        module.block_ranges[(n_m + (n_n if backward else 0), tables)](
            flags, dead, ranges, n_m, n_n, n_mq, f_m * f_n, f_n if along_i else 0, 1 if along_j else 0,
            N_M=next_power_of_2(n_mq), N_N=next_power_of_2(n_n), MERGE=q_block_m // block_m, HAS_DEAD=need_rows)
    kv_parts = ranges[:4 * tables * n_m].view(4, tables, n_m).unbind(0)
    q_parts = ranges[4 * tables * n_m:].view(4, tables, n_n).unbind(0) if backward else kv_parts   # (unread)
    return _table((*kv_parts, *q_parts), n_b, n_h)


def _table_kernel(sm: score_mod.ScoreMod, kinds: tuple[str, ...], axes: tuple[str, ...]):
    key = ("table", sm.text, kinds, axes)
    module = _TABLE_KERNELS.get(key)
    if module is None:
        from ..caching.modules import load_module
        from .kernels import table_source
        module, _ = load_module(table_source(sm, kinds, axes), current_config().cache_dir)
        _TABLE_KERNELS[key] = module
    return module


def extra_args(extra, shape, device, sm: score_mod.ScoreMod, first: int = 0) -> tuple[list[Tensor], list[int]]:
    """The extra tensors on `device` and their strides seen at [B, Hq, L, S] (0 along broadcast dims).
    A tensor read at a computed index is passed as a one-element view at its index's offset, with the
    strides of score_mod.Gather.layout (the op has checked the index stays inside it). `first`: the
    number (t<first>) of extra[0]."""
    gathers = {g.n: g for g in sm.gathers}
    tensors, strides = [], []
    for n, t in enumerate(extra, first):
        t = t.to(device) if t.device != device else t
        if n in gathers:
            offset, along = gathers[n].layout(t, shape[2], shape[3])
            tensors.append(at_offset(t, offset))
            strides.extend(along)
        else:
            tensors.append(t)
            strides.extend(t.expand(shape).stride())
    return tensors, strides


def at_offset(t: Tensor, offset: int) -> Tensor:
    """A one-element view of `t`'s storage `offset` elements past its first (a kernel's base pointer)."""
    return t.as_strided((1,), (1,), t.storage_offset() + offset)


def launch_context_of(device: torch.device):
    return torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext()


# offsets along i and j (row * stride + col * stride) from this many elements on are computed in int64
# (a [B, 1, L, S] mask at L = S = 46341 passes 2**31); the tests lower it to run that code at small sizes
WIDE_OFFSETS_FROM = 2 ** 31


def axes_of(stride, L: int, S: int) -> str:
    """The score axes ("i", "j") along which an extra tensor, expanded to [B, H, L, S], varies, then "w"
    where its offsets along them reach WIDE_OFFSETS_FROM elements (the kernels' int32 would wrap)."""
    along = ("i" if stride[2] != 0 and L > 1 else "") + ("j" if stride[3] != 0 and S > 1 else "")
    reach = abs(stride[2]) * (L - 1) * ("i" in along) + abs(stride[3]) * (S - 1) * ("j" in along)
    return along + ("w" if along and reach >= WIDE_OFFSETS_FROM else "")

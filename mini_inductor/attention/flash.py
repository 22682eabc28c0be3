"""`torch.ops.mini_inductor.flash_attention`: attention with a score modification, in one Triton kernel.

The contract (attention/__init__.py) fixes what the op computes; this module decides how. Three ops:

    flash_attention(q, k, v, extra, mod) -> out                 what the matcher emits; a composite
        = flash_attention_forward(q, k, v, extra, mod)[0]       (CompositeImplicitAutograd), so AOT
                                                                autograd traces the two below
    flash_attention_forward(q, k, v, extra, mod) -> (out, lse)  the forward kernel; saves the LSE
                                                                as [B, H, 2, L]: each row's max and
                                                                log2 of its sum, in base 2, apart
    flash_attention_backward(dout, q, k, v, out, lse, extra, mod) -> (dq, dk, dv)

and, for a float extra tensor that requires grad, flash_attention_extra_backward (extra_grads.py),
each with a last optional argument `empty_rows_zero` (False; flex attention's rewrite passes True), so
the forward graph holds the kernel that also returns the log-sum-exp and the backward graph the
backward kernels: nothing is recomputed but the scores, which is the point of flash attention. All
three are extern kernels of the compiled graph (lowering/graph.py: EXTERN_LIBRARY_OPS), not fallbacks.

Where it runs: CUDA tensors, and CPU tensors under TRITON_INTERPRET=1, run the generated Triton
kernels (kernels.py); other CPU tensors (and empty ones) run the torch reference, which evaluates the
modification on the materialized score matrix (and is what the tests check the kernels against).

Choices, and why:
- Block skipping. When the modification masks with -inf (or a fill at or below score_mod.DEAD_FILL,
  finfo.min) where i, j, L, S or the extra tensors say, a table gives each query block the range of
  key blocks holding a live score (and each key block its range of query blocks, for dk/dv): a causal
  mask visits the lower triangle only, and masks only its diagonal blocks (the others run the
  modification without its `where`). It is computed with torch from score_mod.dead_mask (where the
  modification is dead whatever s is) and lives on the device (no host sync): once per (mod, L, S,
  block sizes, device) from the indices, or on every call from the tensors' values (a causal mask
  kept as a bool buffer, as HuggingFace's GPT-2 does; a padding mask).
- Fully masked rows give NaN, as eager's softmax does: the forward's 0/0, row max -inf. Eager's backward
  then has NaN in dv for every key of that head (the row of P is NaN) and, through an additive mask,
  in dq and dk; a `where` mask passes 0 instead. The kernels get the same by recomputing P from the
  -inf row max (NaN) and running the modification's gradient as autograd would (score_mod.gradient);
  when such a row exists, the backward visits every block, as eager touches every key (with
  empty_rows_zero it need not: the row has no gradient).
  With `empty_rows_zero` (flex attention's rewrite, flex.py) such a row gives 0 and no gradient, as
  eager flex attention's does: the forward divides its zeros by 1, the backward reads the row's
  (max, log2 sum) = (-inf, -inf) as (+inf, 0), so P = 0 there (kernels.py `row_stats`).
- Precision: scores and softmax in float32; tl.dot in the input dtype, accumulating in float32;
  float32 inputs use TF32 only when torch.backends.cuda.matmul.allow_tf32 says so ("ieee" otherwise).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import re

import torch

from ..config import current as current_config, interpreting
from . import score_mod
from .kernels import kernel_source
from .tables import axes_of, block_ranges, extra_args, launch_context_of

Tensor = torch.Tensor

_KERNELS: dict[tuple, object] = {}       # (mod, extra kinds, skip, even head dims) → the kernel module


def flash_attention(q: Tensor, k: Tensor, v: Tensor, extra=(), mod: str = "s * scale",
                    empty_rows_zero: bool = False) -> Tensor:
    """softmax_j(mod(s = q·k, ...)) @ v, by the op of the contract; `scale` in `mod` stands for
    1/sqrt(E) (E = q's head dim). q [B, Hq, L, E], k [B, Hkv, S, E], v [B, Hkv, S, Ev] → [B, Hq, L, Ev].
    `empty_rows_zero`: a row whose every modified score is -inf gives 0 (flex attention's), not NaN."""
    mod = re.sub(r"\bscale\b", repr(1.0 / math.sqrt(q.shape[-1])), mod)
    return torch.ops.mini_inductor.flash_attention(q, k, v, list(extra), mod, empty_rows_zero)


# ---------------------------------------------------------------------------------------------------
# checks

def _check(q: Tensor, k: Tensor, v: Tensor, extra, mod: str) -> score_mod.ScoreMod:
    sm = score_mod.parse(mod)
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(f"flash_attention: q, k, v must be [B, H, L, E]; got {list(q.shape)}, {list(k.shape)}, "
                         f"{list(v.shape)}")
    B, Hq, L, E = q.shape
    if k.shape[0] != B or v.shape[0] != B or k.shape[1] != v.shape[1] or k.shape[2] != v.shape[2] \
            or k.shape[3] != E:
        raise ValueError(f"flash_attention: k {list(k.shape)} and v {list(v.shape)} do not fit q {list(q.shape)}")
    if k.shape[1] == 0 or Hq % k.shape[1]:
        raise ValueError(f"flash_attention: {Hq} query heads are not a multiple of {k.shape[1]} key/value heads")
    if not (q.dtype == k.dtype == v.dtype) or not q.is_floating_point():
        raise ValueError(f"flash_attention: q, k, v must share one floating dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    if sm.tensors > len(extra):
        raise ValueError(f"flash_attention mod {mod!r} reads t{sm.tensors - 1}, but only {len(extra)} extra "
                         f"tensor(s) were given")
    gathers = {g.n: g for g in sm.gathers}
    for n, t in enumerate(extra):
        if n in gathers:   # read at a computed index: it must stay inside the tensor
            gathers[n].check(t, B, Hq, L, k.shape[2], mod)
            continue
        try:
            torch.broadcast_shapes(t.shape, (B, Hq, L, k.shape[2]))
        except RuntimeError:
            raise ValueError(f"flash_attention: extra tensor t{n} of shape {list(t.shape)} does not broadcast to "
                             f"[B, Hq, L, S] = {[B, Hq, L, k.shape[2]]}") from None
    _check_kinds(mod, tuple(_tensor_kinds(extra).items()))
    return sm


@functools.lru_cache(maxsize=1024)
def _check_kinds(mod: str, kinds: tuple[tuple[str, str], ...]) -> None:
    """A ModError for a bool tensor used as a number, or a float one as a condition."""
    score_mod.kind(score_mod.parse(mod).tree, dict(kinds))


def _tensor_kinds(extra) -> dict[str, str]:
    return {f"t{n}": "bool" if t.dtype == torch.bool else "float" if t.is_floating_point() else "int"
            for n, t in enumerate(extra)}


# ---------------------------------------------------------------------------------------------------
# the torch reference

def _reference_scores(q: Tensor, k: Tensor, extra, sm: score_mod.ScoreMod) -> tuple[Tensor, Tensor, dict]:
    """(s, mod(s), the names' values) on the materialized [B, Hq, L, S] matrix, in float32."""
    B, Hq, L, _ = q.shape
    S = k.shape[2]
    s = q.float() @ k.float().repeat_interleave(Hq // k.shape[1], dim=1).transpose(-1, -2)
    dev = q.device
    env = {"s": s, "L": L, "S": S, "b": torch.arange(B, device=dev).view(B, 1, 1, 1),
           "h": torch.arange(Hq, device=dev).view(1, Hq, 1, 1), "i": torch.arange(L, device=dev).view(1, 1, L, 1),
           "j": torch.arange(S, device=dev).view(1, 1, 1, S), **{f"t{n}": t for n, t in enumerate(extra)}}
    score = torch.as_tensor(score_mod.evaluate(sm.tree, env), device=dev).float().expand(B, Hq, L, S)
    return s, score, env


def _softmax(score: Tensor, empty_rows_zero: bool) -> Tensor:
    """softmax over the keys; with `empty_rows_zero`, 0 on rows whose every score is -inf (else NaN)."""
    p = torch.softmax(score, dim=-1)
    if empty_rows_zero:
        p = torch.where((score == -math.inf).all(-1, keepdim=True), 0.0, p)
    return p


def reference_forward(q: Tensor, k: Tensor, v: Tensor, extra, mod: str,
                      empty_rows_zero: bool = False) -> tuple[Tensor, Tensor]:
    """(out, lse) on the materialized score matrix, in float32, as the contract reads."""
    _, score, _ = _reference_scores(q, k, extra, score_mod.parse(mod))
    out = _softmax(score, empty_rows_zero) @ v.float().repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    # (no keys: every row is empty, its max -inf, as amax would say if it took an empty dim)
    m = score.amax(dim=-1) * score_mod.LOG2E if score.shape[-1] else score.new_full(score.shape[:-1], -math.inf)
    # a row with no live score: max -inf and log2 of its sum -inf, as the kernel stores them (not NaN)
    total = torch.exp2(score * score_mod.LOG2E - torch.where(m == -math.inf, 0.0, m)[..., None]).sum(-1)
    return out.to(q.dtype).contiguous(), torch.stack([m, torch.log2(total)], dim=2).contiguous()


def reference_dscore(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, extra, sm: score_mod.ScoreMod,
                     empty_rows_zero: bool = False, grad_lse: Tensor | None = None):
    """(s, the names' values, P, d loss / d mod(s)) on the materialized [B, Hq, L, S] matrices, in float32."""
    s, score, env = _reference_scores(q, k, extra, sm)
    p = _softmax(score, empty_rows_zero)
    dp = dout.float() @ v.float().repeat_interleave(q.shape[1] // k.shape[1], dim=1).transpose(-1, -2)
    dscore = p * (dp - (p * dp).sum(-1, keepdim=True))
    if grad_lse is not None:   # d log-sum-exp / d score is P (times log2(e) for base 2)
        dscore = dscore + p * lse_gradient(grad_lse)[..., None]
    return s, env, p, dscore


def reference_backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, extra, mod: str, empty_rows_zero: bool = False,
                       grad_lse: Tensor | None = None):
    """(dq, dk, dv) by the formulas the kernels use, on materialized matrices (an op's implementation
    runs below autograd: no autograd here). NaN where eager's autograd has NaN; with `empty_rows_zero`
    a row with no live score contributes nothing (its P is 0)."""
    sm = score_mod.parse(mod)
    B, Hq, L, E = q.shape
    Hkv, S = k.shape[1], k.shape[2]
    group = Hq // Hkv
    s, env, p, dscore = reference_dscore(dout, q, k, v, extra, sm, empty_rows_zero, grad_lse)
    grad = score_mod.gradient(sm.tree)
    ds = (torch.as_tensor(score_mod.evaluate(grad, {**env, "g": dscore})).float().expand(B, Hq, L, S)
          if grad is not None else torch.zeros_like(s))
    dq = ds @ k.float().repeat_interleave(group, dim=1)
    dk = (ds.transpose(-1, -2) @ q.float()).view(B, Hkv, group, S, E).sum(2)
    dv = (p.transpose(-1, -2) @ dout.float()).view(B, Hkv, group, S, v.shape[3]).sum(2)
    return dq.to(q.dtype), dk.to(k.dtype), dv.to(v.dtype)


# ---------------------------------------------------------------------------------------------------
# configs and block tables

def _uses_triton(q: Tensor) -> bool:
    return q.device.type == "cuda" or (q.device.type == "cpu" and interpreting())


def _pad(n: int) -> int:
    return max(16, 1 << (n - 1).bit_length())


def forward_config(block_e: int, dtype: torch.dtype, on_gpu: bool, skips: bool = False) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) of the forward kernel (`skips`: it has the three loops
    of block skipping). Head dims up to 64 in 16-bit types were timed on an H200 (benchmarks/
    flash_configs.py, session 28): (64, 64, 4, 3) was the fastest of 30 for hf_causal and ALiBi at L 1024
    and 4096, 12-16% under the (128, 64) configs chosen before by ptxas's register counts. The
    others are still those register-count choices (no spills), not timed."""
    if not on_gpu:
        return 16, 16, 1, 1    # the interpreter runs every program in Python: small tiles, few programs
    if dtype == torch.float32:   # an "ieee" dot is FMAs in registers: 8 warps keep it from spilling
        return (64, 32, 8, 2) if block_e <= 64 else (32, 32, 8, 2)
    if block_e <= 64:
        return 64, 64, 4, 3
    if block_e <= 128:
        return 128, 64, 8, 3
    return 64, 32, 4, 2


def backward_config(block_e: int, dtype: torch.dtype, on_gpu: bool, narrow_band: bool = False) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) of the dk/dv kernel: a program holds BLOCK_N keys and
    steps over the queries BLOCK_M at a time. Head dims up to 64 in 16-bit types: timed on an H200,
    the whole backward with dq's config kept (session 33, `flash_configs --configs`), (128, 64, 4, 2)
    was the fastest in all 18 cases of causal, a causal mask from data and padding, L 1024 to 4096, fp16
    and bf16: 1% (the mask from data at L 1024) to 18% (causal at L 4096: 1.198 against 1.460 ms)
    under (64, 64, 4, 3), which session 28 had chosen over 36 configs; for ALiBi (no block skipped,
    bf16, L 2048) the two were level (0.873 against 0.868 ms). In the attention sweep (fp16, the
    same call) it took padding's fwd+bwd from 0.287 to 0.271 ms (L 1024) and 3.093 to 2.836 (L 4096),
    ALiBi's from 0.269 to 0.257 and 3.411 to 3.182, but the sliding window's up from 0.159 to 0.178 and
    0.551 to 0.614: a narrow band of live scores wastes more of a taller block. So a mask of i and j
    whose live queries per key block span a narrow band (`narrow_band`, see `narrow_band`: a window of
    256) keeps (64, 64, 4, 3); a triangle (causal, with ALiBi or a soft cap) takes the taller blocks:
    FlexAttention's ALiBi fwd+bwd (fp16, B 4, 16 heads, queued, H200) took 0.233 ms at L 1024 and 2.10 at
    L 4096 in session 42's run, 0.218 and 1.88 in session 43's (Inductor's 0.225 and 2.00, 0.225 and
    2.01 in the same runs)."""
    if not on_gpu:
        return 16, 16, 1, 1
    if dtype == torch.float32 or block_e > 128:
        return 32, 32, 8, 1
    if block_e <= 64:
        return (64, 64, 4, 3) if narrow_band else (128, 64, 4, 2)
    return 64, 64, 8, 2


# dk/dv's (BLOCK_M, BLOCK_N, num_warps, num_stages) in 16-bit types, head dims up to 64, where an extra
# tensor is loaded per score (it varies along i and j: a [H, L, S] bias, a relative-position table read
# at i - j + c), or None for backward_config's choice. Such a tile is a [BLOCK_N, BLOCK_M] load per
# step beside dk and dv. Timed on an H200 (session 44, FlexAttention fp16, B 4, 16 heads, E 64, a
# causal mask and a bias per head, fwd+bwd, queued ms; benchmarks/flex_attention.py --flash-option):
# with backward_config's (128, 64, 4, 2) the dk/dv kernel took 4.47 ms of 7.09 at L 4096 for the table
# read at i - j + L - 1, 2.86 of 4.59 for the same bias as a [H, L, S] tensor; with (64, 64, 4, 3) 1.76
# of 4.39 and 1.83 of 3.56 (L 1024: 0.748 → 0.473 and 0.385); (64, 64, 4, 2) was level at L 4096 for
# the table (4.39), slower for the tensor (3.80); (128, 64, 8, 2) slower than both (5.14, 4.75).
PER_SCORE_DKDV: tuple[int, int, int, int] | None = (64, 64, 4, 3)

# a key block's live queries spanning fewer query blocks of 64 than this, on average, make a narrow
# band (backward_config): a window of 256 spans about 5, a causal triangle at L 1024 8.5
NARROW_BAND_BLOCKS = 8


@functools.lru_cache(maxsize=256)
def narrow_band(mod: str, L: int, S: int, block: int = 64) -> bool:
    """Whether the scores a mask of i and j (no extra tensors) leaves live span, per key block, fewer
    than NARROW_BAND_BLOCKS query blocks on average, judged at the blocks' centres (a heuristic: either
    answer computes the same result)."""
    sm = score_mod.parse(mod)
    rows, cols = torch.arange(block // 2, L + block // 2, block), torch.arange(block // 2, S + block // 2, block)
    env = {"i": rows.clamp(max=L - 1)[:, None], "j": cols.clamp(max=S - 1)[None, :], "L": L, "S": S}
    live = ~torch.as_tensor(score_mod.dead_mask(sm.tree, env)).expand(len(rows), len(cols))
    index = torch.arange(len(rows))[:, None]
    spans = (torch.where(live, index + 1, 0).amax(0) - torch.where(live, index, len(rows)).amin(0)).clamp(min=0)
    return bool(spans.float().mean() < NARROW_BAND_BLOCKS)


def dq_config(block_e: int, dtype: torch.dtype, on_gpu: bool) -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, num_warps, num_stages) of the dq kernel: a program holds BLOCK_M queries and
    steps over the keys BLOCK_N at a time, the other way round from dk/dv (benchmarks/flash_configs.py
    times them apart). Timed on an H200 (session 28), (64, 64, 4, 3) was the fastest or within 2% of it
    in all four cases; again the fastest for causal and ALiBi in bf16 at L 2048 (session 33), where
    dk/dv's (128, 64, 4, 2) is not."""
    if on_gpu and dtype != torch.float32 and block_e <= 64:
        return 64, 64, 4, 3
    return backward_config(block_e, dtype, on_gpu)


def _kernels(sm: score_mod.ScoreMod, kinds: tuple[str, ...], skip: bool, even_e: bool, even_ev: bool,
             axes: tuple[str, ...]):
    key = (sm.text, kinds, skip, even_e, even_ev, axes)
    module = _KERNELS.get(key)
    if module is None:
        from ..caching.modules import load_module
        module, _ = load_module(kernel_source(sm, kinds, skip, even_e, even_ev, axes), current_config().cache_dir)
        _KERNELS[key] = module
    return module


def _dot_dtype(dtype: torch.dtype, on_gpu: bool):
    """The dtype tl.dot multiplies in: the inputs', but float32 for bfloat16 in the interpreter."""
    import triton.language as tl
    if dtype == torch.bfloat16 and not on_gpu:
        return tl.float32
    return {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16, torch.float32: tl.float32}[dtype]


def _precision(dtype: torch.dtype, allow_tf32: bool) -> str:
    """tl.dot's input_precision: float32 inputs use TF32 only where torch's matmuls may."""
    return "ieee" if dtype == torch.float32 and not allow_tf32 else "tf32"


def _sizes(q: Tensor, k: Tensor, v: Tensor) -> list[int]:
    return [q.shape[1], q.shape[1] // k.shape[1], q.shape[2], k.shape[2], q.shape[3], v.shape[3]]


def _launch_context(q: Tensor):
    return launch_context_of(q.device)


@dataclasses.dataclass(frozen=True)
class LaunchPlan:
    """What launching one modification's kernels takes besides the tensors, sizes and strides."""

    module: object           # the generated module: flash_fwd, flash_bwd_delta, flash_bwd_dkdv, flash_bwd_dq
    block_m: int
    block_n: int
    meta: dict               # the kernels' constexprs and launch options (a backward's: the dk/dv kernel's)
    skip: bool               # the kernels take a block table (block_ranges)
    dq: tuple[int, int, dict] | None = None   # a backward's dq kernel: its BLOCK_M, BLOCK_N and meta


# A mask given as data is turned into a block table on every call. Built with torch ops over the whole
# score grid it took milliseconds a call on the H100 (fp16, B 4, 16 heads, L 4096; session 24): a
# padding mask's forward went from 1.35 to 9.10 ms, a causal bool buffer's to 4.77 ms (SDPA's causal
# 0.37). A first generated kernel (one program per query block) with torch ops after it, turned on
# (0) on two H200s (session 25, fp16, B 4, 16 heads; forward / forward + backward ms), won where half
# the blocks are dead and lost where few are: hf_causal L 4096 1.36 → 0.83 / 5.78 → 3.63, L 1024
# 0.17 → 0.17 / 0.77 → 0.81; padding L 4096 0.98 → 1.06 / 4.09 → 4.41, L 1024 0.11 → 0.21. The table
# is now three kernels over grids as wide as their work (`_data_block_ranges`). Timed on an H200
# (session 27, fp16, B 4, 16 heads; forward / forward + backward ms, off → on): hf_causal L 4096
# 1.29 → 0.58 / 5.88 → 3.22, L 1024 0.145 → 0.114 / 0.93 → 0.86; padding L 4096 0.85 → 0.75 /
# 4.13 → 3.72, L 1024 0.113 → 0.131 / 0.83 → 0.76 (its forward's GPU time alone 0.059 → 0.055: the
# loss is the three launches' host time, which CUDA graphs remove). On from B * H * L * S = 2**26
# scores (L 1024 at B 4, 16 heads); below it the launches cost more than the dead blocks. None: off.
# The tests set it to 0 to check the tables and the kernels that read them at small sizes.
DATA_SKIP_MIN_SCORES: int | None = 2 ** 26


@functools.lru_cache(maxsize=1024)
def _plan(mod: str, kinds: tuple[str, ...], E: int, Ev: int, dtype: torch.dtype, on_gpu: bool, tf32: bool,
          backward: bool, skip: bool, axes: tuple[str, ...], narrow: bool = False,
          per_score_dkdv: tuple | None = None) -> LaunchPlan:
    """`narrow`: a backward's mask of i and j leaves a narrow band (see narrow_band).
    `per_score_dkdv`: PER_SCORE_DKDV (an argument so the cache tells its values apart)."""
    sm = score_mod.parse(mod)
    block_e, block_ev = _pad(E), _pad(Ev)
    if backward:
        bm, bn, warps, stages = backward_config(max(block_e, block_ev), dtype, on_gpu, narrow)
        if per_score_dkdv is not None and on_gpu and any("i" in a and "j" in a for a in axes) and dtype != torch.float32 \
                and max(block_e, block_ev) <= 64:
            dq_m, dq_n = dq_config(max(block_e, block_ev), dtype, on_gpu)[:2]
            if per_score_dkdv[1] == dq_n and per_score_dkdv[0] % dq_m == 0:   # (one table: see below)
                bm, bn, warps, stages = per_score_dkdv
    else:
        bm, bn, warps, stages = forward_config(max(block_e, block_ev), dtype, on_gpu, skip)
    module = _kernels(sm, kinds, skip, E == block_e, Ev == block_ev, axes)
    meta = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_E=block_e, BLOCK_EV=block_ev, PRECISION=_precision(dtype, tf32),
                DOT=_dot_dtype(dtype, on_gpu), num_warps=warps, num_stages=stages)
    dq = None
    if backward:
        dq_m, dq_n, dq_warps, dq_stages = dq_config(max(block_e, block_ev), dtype, on_gpu)
        # the backward's one block table (block_ranges' q_block_m) needs dk/dv's key blocks to be dq's
        # and its query blocks a whole number of dq's
        assert dq_n == bn and bm % dq_m == 0, ((bm, bn), (dq_m, dq_n))
        dq = (dq_m, dq_n, dict(meta, BLOCK_M=dq_m, BLOCK_N=dq_n, num_warps=dq_warps, num_stages=dq_stages))
    return LaunchPlan(module, bm, bn, meta, skip, dq)


def _plan_for(q: Tensor, v: Tensor, extra, sm: score_mod.ScoreMod, backward: bool,
              extra_strides: list[int] | None = None) -> LaunchPlan:
    """`extra_strides`: the extra tensors' strides at [B, Hq, L, S], as _extra_args gives them."""
    kinds = tuple("bool" if t.dtype == torch.bool else "float" if t.is_floating_point() else "int" for t in extra)
    B, Hq, L, _ = q.shape
    S = v.shape[2]
    skip = sm.skips_blocks and (not sm.dead_reads_tensors or (DATA_SKIP_MIN_SCORES is not None
                                                              and B * Hq * L * S >= DATA_SKIP_MIN_SCORES))
    if extra_strides is None:
        extra_strides = extra_args(extra, (B, Hq, L, S), q.device, sm)[1]
    axes = tuple(axes_of(extra_strides[4 * n:4 * n + 4], L, S) for n in range(len(extra)))
    narrow = backward and skip and not sm.dead_reads_tensors and narrow_band(sm.text, L, S)
    return _plan(sm.text, kinds, q.shape[3], v.shape[3], q.dtype, q.device.type == "cuda",
                 torch.backends.cuda.matmul.allow_tf32 and q.is_cuda, backward, skip, axes, narrow,
                 PER_SCORE_DKDV)


def triton_forward(q: Tensor, k: Tensor, v: Tensor, extra, sm: score_mod.ScoreMod,
                   empty_rows_zero: bool = False) -> tuple[Tensor, Tensor]:
    B, Hq, L, _ = q.shape
    S, Ev = k.shape[2], v.shape[3]
    tensors, strides = extra_args(extra, (B, Hq, L, S), q.device, sm)
    plan = _plan_for(q, v, extra, sm, False, strides)
    bm, bn = plan.block_m, plan.block_n
    out = torch.empty(B, Hq, L, Ev, dtype=q.dtype, device=q.device)
    lse = torch.empty(B, Hq, 2, L, dtype=torch.float32, device=q.device)
    if plan.skip:
        table = block_ranges(sm, L, S, bm, bn, q.device, False, extra, empty_rows_zero=empty_rows_zero)
        ranges = (table.kv_lo, table.kv_hi, table.full_lo, table.full_hi, table.tab_b, table.tab_h)
    else:
        ranges = (lse,) * 4 + (0, 0)   # not read
    with _launch_context(q):
        plan.module.flash_fwd[(-(-L // bm), B * Hq)](
            q, k, v, out, lse, *tensors, *ranges, *q.stride(), *k.stride(), *v.stride(), *strides,
            *_sizes(q, k, v), EVEN_N=S % bn == 0, EMPTY_ROWS_ZERO=empty_rows_zero, **plan.meta)
    return out, lse


def triton_backward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor, extra,
                    sm: score_mod.ScoreMod, empty_rows_zero: bool = False,
                    grad_lse: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    B, Hq, L, E = q.shape
    Hkv, S, Ev = k.shape[1], k.shape[2], v.shape[3]
    tensors, strides = extra_args(extra, (B, Hq, L, S), q.device, sm)
    plan = _plan_for(q, v, extra, sm, True, strides)
    bm, bn = plan.block_m, plan.block_n          # dk/dv's blocks
    dq_m, dq_n, dq_meta = plan.dq                # dq's
    dout = dout.to(q.dtype)
    delta = torch.empty(B, Hq, L, dtype=torch.float32, device=q.device)
    dq = torch.empty(B, Hq, L, E, dtype=q.dtype, device=q.device)
    dk = torch.empty(B, Hkv, S, E, dtype=k.dtype, device=k.device)
    dv = torch.empty(B, Hkv, S, Ev, dtype=v.dtype, device=v.device)
    if plan.skip:
        # one table: its query ranges in dk/dv's query blocks (whole numbers of dq's; see _plan)
        table = block_ranges(sm, L, S, dq_m, dq_n, q.device, True, extra, q_block_m=bm,
                             empty_rows_zero=empty_rows_zero)
        q_lo, q_hi = table.q_lo, table.q_hi      # per key block of dk/dv, in its query blocks
        qfull_lo, qfull_hi = table.qfull_lo, table.qfull_hi   # ... and inside those, its whole ones
        kv_lo, kv_hi = table.kv_lo, table.kv_hi  # per query block of dq, in its key blocks
        full_lo, full_hi = table.full_lo, table.full_hi   # ... and inside those, its whole ones
        tab = (table.tab_b, table.tab_h)
    else:
        kv_lo = kv_hi = full_lo = full_hi = q_lo = q_hi = qfull_lo = qfull_hi = delta   # not read
        tab = (0, 0)
    strides_qkvdo = [*q.stride(), *k.stride(), *v.stride(), *dout.stride()]
    module = plan.module
    with _launch_context(q):
        backward_delta(plan, out, dout, delta, grad_lse)
        module.flash_bwd_dkdv[(-(-S // bn), B * Hkv)](q, k, v, dout, lse, delta, dk, dv, *tensors, q_lo, q_hi,
                                                      qfull_lo, qfull_hi, *tab,
                                                      *strides_qkvdo, *strides, *_sizes(q, k, v),
                                                      EMPTY_ROWS_ZERO=empty_rows_zero, **plan.meta)
        module.flash_bwd_dq[(-(-L // dq_m), B * Hq)](q, k, v, dout, lse, delta, dq, *tensors, kv_lo, kv_hi, full_lo, full_hi, *tab,
                                                     *strides_qkvdo, *strides, *_sizes(q, k, v),
                                                     EMPTY_ROWS_ZERO=empty_rows_zero, **dq_meta)
    return dq, dk, dv


def backward_delta(plan: LaunchPlan, out: Tensor, dout: Tensor, delta: Tensor, grad_lse: Tensor | None) -> None:
    """delta [B, H, L] = rowsum(dO * out), less the LSE's gradient where it has one (dS = P (dP - delta)
    + P g = P (dP - (delta - g)))."""
    B, Hq, L, Ev = out.shape
    dq_m, _, dq_meta = plan.dq
    plan.module.flash_bwd_delta[(-(-L // dq_m), B * Hq)](out, dout, delta, *out.stride(), *dout.stride(), Hq, L, Ev,
                                                         BLOCK_M=dq_m, BLOCK_EV=plan.meta["BLOCK_EV"],
                                                         num_warps=dq_meta["num_warps"])
    if grad_lse is not None:
        delta.sub_(lse_gradient(grad_lse))


# ---------------------------------------------------------------------------------------------------
# the ops

# empty_rows_zero (flex attention's rewrite, attention/flex.py): a row whose every modified score is -inf
# gives 0 and zero gradients, where eager's softmax (the default, written-out attention's) gives NaN
_SCHEMA_FWD = ("(Tensor q, Tensor k, Tensor v, Tensor[] extra, str mod, bool empty_rows_zero=False)"
               " -> (Tensor, Tensor)")
_SCHEMA_BWD = ("(Tensor grad_out, Tensor q, Tensor k, Tensor v, Tensor out, Tensor lse, Tensor[] extra, str mod,"
               " bool empty_rows_zero=False, Tensor? grad_lse=None) -> (Tensor, Tensor, Tensor)")


def base2_lse(lse: Tensor, mod: str) -> Tensor:
    """The rows' log-sum-exp in base 2 [B, H, L], what flex attention's higher-order op returns as its LSE
    (flex_attention() scales it by ln 2 for the user), from the forward op's [B, H, 2, L] (each row's
    max, in log2 units or, where score_mod.log2_clamps, the score's own; log2 of its sum). Either way
    its gradient g reaches the second part whole, which `lse_gradient` reads back."""
    m, log2_sum = lse.select(2, 0), lse.select(2, 1)
    if score_mod.log2_clamps(score_mod.parse(mod).tree):
        return m * score_mod.LOG2E + log2_sum
    return m + log2_sum


def base2_max(lse: Tensor, mod: str) -> Tensor:
    """The rows' max modified score in base 2 [B, H, L] (contiguous), the higher-order op's max-scores
    output (flex_attention() scales it by ln 2), from the forward op's [B, H, 2, L]; -inf for a row with
    no live score. Eager marks it non-differentiable: detached here."""
    m = lse.select(2, 0)
    if score_mod.log2_clamps(score_mod.parse(mod).tree):
        m = m * score_mod.LOG2E
    return m.detach().contiguous()


def lse_gradient(grad_lse: Tensor) -> Tensor:
    """What the LSE's gradient adds to each row's d loss / d score, over P (d log2-sum-exp / d score =
    P · log2(e)), from the forward op's LSE gradient, where the LSE was read only through `base2_lse`."""
    return grad_lse.select(2, 1).float() * score_mod.LOG2E


@torch.library.custom_op("mini_inductor::flash_attention_forward", mutates_args=(), schema=_SCHEMA_FWD)
def flash_attention_forward(q, k, v, extra, mod, empty_rows_zero=False):
    sm = _check(q, k, v, extra, mod)
    if q.numel() == 0 or k.numel() == 0 or v.numel() == 0 or not _uses_triton(q):
        return reference_forward(q, k, v, extra, mod, empty_rows_zero)
    return triton_forward(q, k, v, extra, sm, empty_rows_zero)


@torch.library.register_fake("mini_inductor::flash_attention_forward")
def _forward_fake(q, k, v, extra, mod, empty_rows_zero=False):
    _check(q, k, v, extra, mod)
    B, Hq, L, _ = q.shape
    return q.new_empty(B, Hq, L, v.shape[3]), q.new_empty(B, Hq, 2, L, dtype=torch.float32)


@torch.library.custom_op("mini_inductor::flash_attention_backward", mutates_args=(), schema=_SCHEMA_BWD)
def flash_attention_backward(grad_out, q, k, v, out, lse, extra, mod, empty_rows_zero=False, grad_lse=None):
    sm = _check(q, k, v, extra, mod)
    if q.numel() == 0 or k.numel() == 0 or v.numel() == 0 or not _uses_triton(q):
        dq, dk, dv = reference_backward(grad_out, q, k, v, extra, mod, empty_rows_zero, grad_lse)
        return dq.contiguous(), dk.contiguous(), dv.contiguous()
    return triton_backward(grad_out, q, k, v, out, lse, extra, sm, empty_rows_zero, grad_lse)


@torch.library.register_fake("mini_inductor::flash_attention_backward")
def _backward_fake(grad_out, q, k, v, out, lse, extra, mod, empty_rows_zero=False, grad_lse=None):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output):
    q, k, v, extra, mod, empty_rows_zero = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, *extra)
    ctx.mod, ctx.empty_rows_zero = mod, empty_rows_zero
    ctx.set_materialize_grads(False)   # an LSE nothing reads has no gradient, not one of zeros


def _backward(ctx, grad_out, grad_lse):
    # the LSE has a gradient only where flex attention's rewrite returns it (read through base2_lse)
    q, k, v, out, lse, *extra = ctx.saved_tensors
    if grad_out is None:
        grad_out = torch.zeros_like(out)
    lse_args = () if grad_lse is None else (grad_lse,)
    dq, dk, dv = torch.ops.mini_inductor.flash_attention_backward(grad_out, q, k, v, out, lse, extra, ctx.mod,
                                                                  ctx.empty_rows_zero, *lse_args)
    # a float extra tensor that requires grad (a learnable bias, a slope): its own op (extra_grads.py);
    # none for one the modification only compares (a learned gate as a mask), as eager gives none
    from .extra_grads import has_gradient
    needs = ctx.needs_input_grad[3] if len(ctx.needs_input_grad) > 3 else False
    needs = list(needs) if isinstance(needs, (list, tuple)) else [needs] * len(extra)
    extra_grads = [torch.ops.mini_inductor.flash_attention_extra_backward(
        grad_out, q, k, v, out, lse, extra, ctx.mod, n, ctx.empty_rows_zero, *lse_args)
        if needs[n] and has_gradient(ctx.mod, extra, n) else None for n in range(len(extra))]
    grads = (dq, dk, dv, extra_grads, None)
    # the dispatcher drops a trailing argument equal to its default (empty_rows_zero=False): one None
    # for each input the call was given (needs_input_grad has the inputs' structure)
    return grads + (None,) * (len(ctx.needs_input_grad) - len(grads))


torch.library.register_autograd("mini_inductor::flash_attention_forward", _backward, setup_context=_setup_context)

# The matcher's op: a composite of the forward op, so that AOT autograd's graphs hold the forward op
# (which also returns the LSE) and the backward op, never this one.
torch.library.define("mini_inductor::flash_attention",
                     "(Tensor q, Tensor k, Tensor v, Tensor[] extra, str mod, bool empty_rows_zero=False) -> Tensor")


@torch.library.impl("mini_inductor::flash_attention", "CompositeImplicitAutograd")
def _flash_attention_composite(q, k, v, extra, mod, empty_rows_zero=False):
    return torch.ops.mini_inductor.flash_attention_forward(q, k, v, extra, mod, empty_rows_zero)[0]

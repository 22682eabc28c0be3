"""The flex family: `flex_attention` calls (torch.nn.attention.flex_attention) over fresh q, k, v (see ops.py).

Each statement is one call, `flex_attention(q, k, v, score_mod=..., block_mask=..., ...)`, its score_mod and
mask_mod lambdas drawn from the small grammar mini_inductor/attention/flex.py reads as the flash op's `mod`
(and now and then a form it must leave as written, a near miss, which must still compute eager's result):

  score_mod   a scale, a tanh soft cap, ALiBi `score + slopes[h] * (kv_idx - q_idx)`, a bias `bias[h]`,
              `bias[b, h]`, `bias[h, q_idx, kv_idx]`, a relative-position table at a computed index
              `rel[h, q_idx - kv_idx + c]` (c keeps it in range) or `rel[h, q_idx - kv_idx]` (negative:
              eager counts from the end), a table read through another captured int tensor's values
              (T5's `table[bucket[q_idx - kv_idx + c], h]`, Swin's `table[index[q_idx, kv_idx], h]`), a mask
              written as `torch.where(mask, score, -inf)`
  mask        causal, causal aligned to the last key, a sliding window, a prefix, a late start (row 0 sees
              nothing: eager's zeros), padding `kv_idx < lengths[b]`, a document mask `doc[q_idx] ==
              doc[kv_idx]`, a float gate read only through a comparison; as a mask_mod given through
              create_block_mask(mask_mod, B or None, H or None, L, S, device=q.device), or in the score_mod

and the call's other arguments: scale=, enable_gqa=True (Hq a multiple of Hkv), return_lse=True (or
return_aux=AuxRequest(lse=True)) with the LSE used. Every captured tensor is a program input (so the
shrinker and the repros have it), closed over by the lambda; under --autograd a captured float table
requires grad like any float input (a gate in a score_mod too: its gradient is none, as eager's; not a
mask_mod's, whose buffers eager refuses to take a gradient through). Shapes [B, H, L, E]:
B 1-2, H 1-3, L and S 1..--size, E 1..8 (eager flex accepts them all on the CPU); float32 mostly.

Calls are written with their module's path (`torch.nn.attention.flex_attention.flex_attention(...)`), so
that the program's scope stays `torch` and `F`. Eager flex refuses a backward on the CPU
(`_validate_device`; its math backward runs): `allow_eager_cpu_backward` lifts that, as
tests/attention/test_flex.py does, in every process that draws or runs a flex program (eager, compiled and
the aot_eager triage alike: execute.py calls it for a program of this family), and silences eager flex's
warning that it runs unfused. Repros do the same (shrink.py).

Weight 0 by default (the programs of a seed stay what they were): `--weight flex=40`.
"""
from __future__ import annotations

import dataclasses
import warnings

from .ops import OPS, OpSpec

FLEX = "torch.nn.attention.flex_attention"
# q, k, v and up to two captured tensors per call; a program may hold one input more than the other
# families' MAX_INPUTS (6), so that a program drawn with 1-3 inputs can still take a flex call
MAX_INPUTS = 9
NEG_INF = 'float("-inf")'
_lifted = False


def allow_eager_cpu_backward() -> None:
    """Eager flex's backward on the CPU (refused by `_validate_device`, though its math backward runs) and
    no warnings from eager flex (it runs unfused; return_lse is deprecated). Process-wide, once."""
    global _lifted
    if _lifted:
        return
    import torch.nn.attention.flex_attention as flex_module
    flex_module._validate_device = lambda *args: None
    warnings.filterwarnings("ignore", message="flex_attention called without torch.compile")
    warnings.filterwarnings("ignore", message="return_lse is deprecated")
    _lifted = True


def _row(name: str):
    def register(make):
        OPS.append(OpSpec(name, "flex", make))
        return make
    return register


class _Call:
    """One flex_attention call being drawn: its sizes and the inputs it may still add."""

    def __init__(self, c, gqa: bool):
        rng = c.rng
        self.c = c
        self.B = rng.randint(1, 2)
        self.Hkv = rng.randint(1, 2) if gqa else rng.randint(1, 3)
        self.H = self.Hkv * rng.choice([2, 3]) if gqa else self.Hkv      # query heads (what h indexes)
        self.L = rng.randint(1, c.max_size)
        self.S = self.L if rng.random() < 0.6 else rng.randint(1, c.max_size)
        self.E = rng.randint(1, 8)
        self.Ev = self.E if rng.random() < 0.6 else rng.randint(1, 8)
        self.dt = rng.choice(["float32"] * 6 + ["float16", "bfloat16"])
        self.room = MAX_INPUTS - c.tensor_inputs() - 3      # captured tensors it may add

    def qkv(self) -> tuple[str, str, str]:
        c, rng = self.c, self.c.rng
        layout = lambda: None if rng.random() < 0.25 else "contiguous"   # noqa: E731  (None: drawn)
        q = c.new_input((self.B, self.H, self.L, self.E), self.dt, layout=layout())
        k = c.new_input((self.B, self.Hkv, self.S, self.E), self.dt,
                        layout=rng.choice(["contiguous", "contiguous", "transposed", None]))
        v = c.new_input((self.B, self.Hkv, self.S, self.Ev), self.dt, layout=layout())
        return q, k, v

    def table(self, shape, low=-2.0, high=2.0, grad: bool = True) -> str | None:
        """A captured float tensor (float32, or the call's dtype now and then); under --autograd it requires
        grad as other float inputs do, unless `grad` is False (a mask_mod's: eager flex cannot take a
        gradient through a block mask's buffers, and refuses one that requires grad)."""
        if self.room <= 0:
            return None
        self.room -= 1
        dt = self.dt if self.c.rng.random() < 0.25 else "float32"
        name = self.c.new_input(tuple(shape), dt, layout="contiguous", low=low, high=high)
        spec = self.c.inputs[-1]
        if not grad and spec.requires_grad:
            self.c.inputs[-1] = dataclasses.replace(spec, requires_grad=False)
            self.c.env[name] = self.c.env[name].detach()
        return name

    def ints(self, shape, values) -> str | None:
        """A captured int64 tensor of fixed values."""
        if self.room <= 0:
            return None
        self.room -= 1
        return self.c.new_input(tuple(shape), "int64", values=list(values))


MASKS = ["causal", "causal", "causal_end", "window", "prefix", "late", "padding", "document", "gate"]
# how many captured tensors each kind adds (drawn before q, k and v are made: a call that cannot take them
# returns None before it adds any input)
CAPTURES = {"padding": 1, "document": 1, "gate": 1, "alibi": 1, "bias": 1, "relative": 1, "lookup": 2}


def _mask(call: _Call, kind: str, mask_mod: bool = False) -> str | None:
    """A boolean expression of b, h, q_idx, kv_idx (and captured tensors); mask_mod: a block mask's."""
    rng, L, S = call.c.rng, call.L, call.S
    if kind == "causal":
        return "q_idx >= kv_idx"
    if kind == "causal_end":            # aligned to the last key (cached keys before the queries)
        return f"kv_idx <= q_idx + {S - L}" if S >= L else f"kv_idx - {L - S} <= q_idx"
    if kind == "window":
        w = rng.randint(1, 3)
        return rng.choice([f"(q_idx >= kv_idx) & (q_idx - kv_idx <= {w})",
                           f"(q_idx - kv_idx <= {w}) & (kv_idx - q_idx <= {w})",
                           f"(q_idx - kv_idx).abs() <= {w}"])
    if kind == "prefix":
        return f"(kv_idx < {rng.randint(1, max(1, S))}) | (q_idx >= kv_idx)"
    if kind == "late":                  # the first rows see no key: eager gives 0 there
        return f"kv_idx <= q_idx - {rng.randint(1, 2)}"
    if kind == "padding":
        lengths = call.ints((call.B,), [rng.randint(0, S) if rng.random() < 0.2 else rng.randint(1, S)
                                        for _ in range(call.B)])
        return None if lengths is None else rng.choice([f"kv_idx < {lengths}[b]", f"{lengths}[b] > kv_idx"])
    if kind == "document":
        n = max(L, S) + rng.randint(0, 1)
        cuts = sorted(rng.sample(range(1, n), min(n - 1, rng.randint(0, 2)))) if n > 1 else []
        doc = call.ints((n,), [sum(1 for cut in cuts if cut <= p) for p in range(n)])
        return None if doc is None else f"{doc}[q_idx] == {doc}[kv_idx]"
    # a float tensor read only through a comparison: under --autograd it requires grad and gets none
    shape = rng.choice([(call.H, L, S), (call.B, call.H), (S,)])
    gate = call.table(shape, grad=not mask_mod)
    if gate is None:
        return None
    at = {3: "[h, q_idx, kv_idx]", 2: "[b, h]", 1: "[kv_idx]"}[len(shape)]
    return f"{gate}{at} > {rng.choice(['-1.0', '-1.5', '0.0'])}"


def _score_mod(call: _Call, kind: str, inner_mask: str) -> str | None:
    """A score_mod's body (of score, b, h, q_idx, kv_idx), or None."""
    rng, L, S, H = call.c.rng, call.L, call.S, call.H
    if kind == "scale":
        return rng.choice(["score * 0.5", "score / 2.0", "score * 1.25"])
    if kind == "softcap":
        cap = rng.choice(["2.0", "4.0", "20.0"])
        return f"torch.tanh(score / {cap}) * {cap}"
    if kind == "alibi":
        slopes = call.table((H,), low=0.0, high=1.0)
        return None if slopes is None else rng.choice([f"score + {slopes}[h] * (kv_idx - q_idx)",
                                                       f"score - {slopes}[h] * (q_idx - kv_idx)"])
    if kind == "bias":
        which = rng.choice(["h", "bh", "hij"])
        shape, at = {"h": ((H,), "[h]"), "bh": ((call.B, H), "[b, h]"), "hij": ((H, L, S), "[h, q_idx, kv_idx]")}[which]
        bias = call.table(shape)
        if bias is None:
            return None
        return rng.choice([f"score + {bias}{at}", f"score * 0.5 + {bias}{at}", f"torch.tanh(score / 4.0) * 4.0 + {bias}{at}"])
    if kind == "relative":
        # q_idx - kv_idx runs over -(S - 1)..L - 1; kv_idx - q_idx over -(L - 1)..S - 1
        if rng.random() < 0.5:
            diff, low, high = "q_idx - kv_idx", S - 1, L - 1
        else:
            diff, low, high = "kv_idx - q_idx", L - 1, S - 1
        per_head = rng.random() < 0.7
        if rng.random() < 0.3:
            # a negative index, counted from the end in eager: the table at least as long as both ranges
            size = max(high + 1, low) + rng.randint(0, 2)
            rel = call.table((H, size) if per_head else (size,))
            if rel is None:
                return None
            read = f"{rel}[h, {diff}]" if per_head else f"{rel}[{diff}]"
            return rng.choice([f"score + {read}", f"torch.where(q_idx >= kv_idx, score + {read}, {NEG_INF})"])
        c = low + rng.randint(0, 2)
        size = c + high + 1 + rng.randint(0, 2)
        rel = call.table((H, size) if per_head else (size,))
        if rel is None:
            return None
        read = f"{rel}[h, {diff} + {c}]" if per_head else f"{rel}[{diff} + {c}]"
        return rng.choice([f"score + {read}", f"score + {read} * 2", f"torch.where({read} > -1.0, score, {NEG_INF})"
                           if rng.random() < 0.3 else f"score * 0.5 + {read}"])
    if kind == "lookup":
        # a table read through another captured int tensor's values
        buckets = rng.randint(2, 4)
        table = call.table((buckets, H))
        if rng.random() < 0.6:        # T5: buckets of q_idx - kv_idx (|d| clamped, or random)
            c = S - 1 + rng.randint(0, 1)
            n = c + L + rng.randint(0, 1)
            values = [min(abs(p - c), buckets - 1) if rng.random() < 0.8 else rng.randrange(buckets) for p in range(n)]
            bucket = call.ints((n,), values)
            return f"score + {table}[{bucket}[q_idx - kv_idx + {c}], h]"
        index = call.ints((L, S), [rng.randrange(buckets) for _ in range(L * S)])     # Swin's index table
        return f"score + {table}[{index}[q_idx, kv_idx], h]"
    if kind == "masked":
        mask = _mask(call, inner_mask)
        if mask is None:
            return None
        inner = rng.choice(["score", "score", "score * 0.5", "torch.tanh(score / 4.0) * 4.0"])
        return f"torch.where({mask}, {inner}, {NEG_INF})"
    return None


def _flex(c, score_kinds, masked: float, gqa: float = 0.15) -> str | None:
    """One flex_attention call: a score_mod of one of `score_kinds` (None: no score_mod), a block mask
    with probability `masked`, and the call's other arguments at random."""
    if c.tensor_inputs() + 3 > MAX_INPUTS:
        return None
    allow_eager_cpu_backward()
    rng = c.rng
    call = _Call(c, gqa=rng.random() < gqa)
    kind = rng.choice(score_kinds)
    inner_mask = rng.choice(MASKS)      # (for a score_mod that masks)
    mask_kind = rng.choice(MASKS) if rng.random() < masked else None
    need = CAPTURES.get(kind, 0) + CAPTURES.get(mask_kind, 0) + (CAPTURES.get(inner_mask, 0) if kind == "masked" else 0)
    if need > call.room:
        return None
    q, k, v = call.qkv()
    args = [q, k, v]
    if kind is not None:
        body = _score_mod(call, kind, inner_mask)
        if body is None:
            return None
        args.append(f"score_mod=lambda score, b, h, q_idx, kv_idx: {body}")
    if mask_kind is not None:
        mask = _mask(call, mask_kind, mask_mod=True)
        if mask is None:
            return None
        reads_b = "[b" in mask
        reads_h = "[h" in mask
        b_arg = f"{q}.shape[0]" if reads_b or rng.random() < 0.3 else "None"
        h_arg = f"{q}.shape[1]" if reads_h or rng.random() < 0.3 else "None"
        args.append(f"block_mask={FLEX}.create_block_mask(lambda b, h, q_idx, kv_idx: {mask}, {b_arg}, {h_arg}, "
                    f"{q}.shape[-2], {k}.shape[-2], device={q}.device)")
    if rng.random() < 0.25:
        args.append(f"scale={rng.choice(['0.5', '0.3', '1.0', '2.0'])}")
    if call.H != call.Hkv:
        args.append("enable_gqa=True")
    out = rng.random()
    if out < 0.75:
        return f"{FLEX}.flex_attention({', '.join(args)})"
    if out < 0.85:      # the LSE alone (float32 [B, H, L]; -inf where a row sees nothing)
        return f"{FLEX}.flex_attention({', '.join(args)}, return_lse=True)[1]"
    if out < 0.92:      # both, the LSE added to every output column
        return f"(lambda out, lse: out + lse.unsqueeze(-1))(*{FLEX}.flex_attention({', '.join(args)}, return_lse=True))"
    return f"{FLEX}.flex_attention({', '.join(args)}, return_aux={FLEX}.AuxRequest(lse=True))[1].lse * 0.5"


@_row("flex")
def _plain(c):
    """No captured tensors: a scale, a soft cap, a mask in the score_mod or a block mask, or nothing."""
    return _flex(c, [None, "scale", "softcap", "masked"], masked=0.4)


@_row("flex_bias")
def _bias(c):
    """A captured float tensor in the score_mod: ALiBi slopes, a bias by [h], [b, h], [h, q_idx, kv_idx]."""
    return _flex(c, ["alibi", "bias", "bias"], masked=0.35)


@_row("flex_mask")
def _masks(c):
    """A mask_mod through create_block_mask (padding, document, gate, causal, window, ...)."""
    return _flex(c, [None, None, "scale", "softcap", "bias"], masked=1.0)


@_row("flex_gather")
def _gather(c):
    """A captured table read at a computed index: a relative-position table (negative too), T5's buckets."""
    return _flex(c, ["relative", "relative", "lookup"], masked=0.3)

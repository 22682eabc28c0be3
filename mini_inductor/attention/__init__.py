"""Attention found in the graph and computed by one flash-attention kernel (issue 24).

Two sides, joined by one contract (two passes that call the op, and the op):

- `match.py`: finds, structurally, every matmul(Q, Kᵀ) → pointwise score modification → softmax over
  the key dimension → (dropout) → matmul(·, V) in Dynamo's graph, before AOT autograd, and replaces it
  with one call: ATen's `scaled_dot_product_attention` where the modification is one it computes
  exactly, otherwise `torch.ops.mini_inductor.flash_attention`. Each match and each near miss is
  recorded with its reason for the fusion report and `explain`.
- `flex.py`: the same for `torch.nn.attention.flex_attention` calls (a higher-order op in Dynamo's
  graph): the score_mod and mask_mod become one `mod`, "where(mask, score_mod(s * scale), -inf)",
  their captured tensors extras, and the op is called with empty_rows_zero=True (flex's empty rows).
- `flash.py`: `torch.ops.mini_inductor.flash_attention`, a generated Triton flash-attention kernel
  (online softmax, no score matrix in memory) with the modification inlined, forward and backward
  (the backward recomputes the scores from the saved log-sum-exp).

The contract between them:

    torch.ops.mini_inductor.flash_attention(q, k, v, extra: list[Tensor], mod: str,
                                            empty_rows_zero: bool = False) -> Tensor

    q [B, Hq, L, E], k [B, Hkv, S, E], v [B, Hkv, S, Ev]; Hq a multiple of Hkv (grouped-query heads:
    query head h reads key/value head h // (Hq // Hkv)); the result [B, Hq, L, Ev], contiguous, q's dtype.
    out[b, h, i, :] = softmax_j(mod(b, h, i, j, s=q[b,h,i]·k[b,h',j], t0, t1, ...)) @ v[b, h', :, :]
    computed like eager: the score in float32; a row whose every modified score is -inf gives NaN, as
    eager's softmax does; with empty_rows_zero=True it gives 0, and no gradient, as eager flex
    attention does.

    `mod` is a Python expression (parsed with `ast`, never `eval`ed) over
      s           the raw score q·k in float32 (no scale: a scale is written into `mod`, "s * 0.125")
      b, h, i, j  integer indices: batch, query head, query row, key column
      t0, t1, ... extra[n] at [b, h, i, j]: each extra tensor is broadcastable to [B, Hq, L, S]
                  (the op loads it through its strides, 0 for a broadcast dimension); bool, floating
                  or integer (a document id)
      t0[e, ...]  extra[n] read at a computed index instead, one per dim of the tensor, each an affine
                  integer expression of b, h, i, j, L and S: a relative-position table "t0[h, i - j + 63]"
                  (the op loads it through strides too, negative along j here, and raises an IndexError
                  where an index leaves the tensor on the [B, Hq, L, S] grid)
      L, S        the query and key lengths
    with float and int literals, `inf`, the operators + - * / // % unary -, comparisons, & | ~ (on
    bools), and the functions where(c, x, y), tanh, exp, log, log1p, sigmoid, abs, sqrt, minimum, maximum,
    and f16(x), bf16(x): x rounded to float16 or bfloat16 (a bias the model casts to the inputs' dtype).
    A float extra tensor that requires grad gets its gradient from the op's autograd formula
    (extra_grads.py), summed over the scores that read each of its entries.
    Examples: "s * 0.125", "where(j <= i, s * 0.125, -inf)", "tanh(s * 0.125 / 50.0) * 50.0",
    "s * 0.125 + t0", "where(t0, -inf, s * 0.125)", "s * 0.125 - 0.5 * (i - j)",
    "where((j <= i) & (i - j < 256), s * 0.125, -inf)", "s * 0.125 + f16(t0 * (j - i))" (ALiBi),
    "s * 0.125 + t0[h, i - j + S - 1]" (T5's relative-position bias, unbucketed).
"""

# registers torch.ops.mini_inductor.flash_attention (and its forward and backward ops, and the extra
# tensors' gradient op) on import
from . import extra_grads, flash  # noqa: E402,F401

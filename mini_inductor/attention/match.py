"""Attention written out in the user's code, found in Dynamo's graph and replaced by one call.

Models spell attention in many ways (`q @ k.transpose(-2, -1)`, `torch.bmm` on folded heads,
`einsum`, a softmax written as exp / sum, masks built from `arange` or `tril`), and AOT autograd
would turn each into a score matrix in memory: two matmuls and a softmax kernel between them. This
pass runs on the torch-level graph the backend receives, before the front cache keys it, so every
later level sees (and caches) the rewritten graph.

What is matched is structure, not spelling:

    S = matmul(A, B)                 matmul / @ / bmm / einsum, A [..., L, E], B [..., E, S]
    Z = pointwise(S, t0, t1, ...)    the modification: every path from S to Z is pointwise
    P = softmax(Z, dim=-1)           or exp(Z - amax(Z)) / sum(...) over the key dim
    P = dropout(P)                   optional
    O = matmul(P, V)

with every node between S and O used only inside the pattern. The modification becomes the
contract's `mod` (mini_inductor/attention/__init__.py): S is `s`, tensors that do not depend on the
scores are `t0, t1, ...` (passed as `extra`), and tensors built from `arange`, `ones(...).tril()`
and their comparisons and slices become expressions in `i` and `j`, so that a causal or sliding
window mask costs no memory. Registered buffers and inputs are data, `t0`, with one exception: an
input whose data is a lower triangle of ones when the graph is compiled (GPT-2's and nanoGPT's causal
`bias` buffer, sliced to the sequence length) is read as the `tril` it holds, and the compiled graph
checks on each call that it still does (`DataGuard`: the same tensor at the same version, else its
data read again; a mask that changed sends the graph to eager, with a warning and the reason on its
records). Such a graph is not kept in Dynamo's on-disk cache: a new process reads the data again.

The call is `F.scaled_dot_product_attention` when the modification is exactly what it computes (a
scale, with or without a causal `j <= i` mask filled with -inf or a fill softmax takes to 0), else
the flash-attention op. Float32 attention on a GPU with a small score matrix is left as written
(`float32_left_as_written`).
Everything found, matched or not, is an `AttentionMatch` record with the reason of a near miss.
"""
from __future__ import annotations

import contextlib
import dataclasses
import logging
from typing import Any, Iterator

import torch
import torch.fx
import torch.nn.functional as F
from torch.fx.experimental.symbolic_shapes import guard_scalar

from ..fx_source import source_line
from ..metrics import AttentionMatch
from .modification import (ATTENTION_DTYPES, CASTS, POINTWISE, SAME, TRIL_DATA, NearMiss, Translator,
                           Untranslatable, ALIASING, arg, known_eq, mutated, op_of, render, sdpa_form, shape_of,
                           static, value_of, writes_in_place)

log = logging.getLogger("mini_inductor.attention")

_flash_override: list[Any] = []


@contextlib.contextmanager
def use_flash_op(op) -> Iterator[None]:
    """Rewrite to `op` (an OpOverload with the contract's signature) instead of
    torch.ops.mini_inductor.flash_attention, inside the block (tests)."""
    _flash_override.append(op)
    try:
        yield
    finally:
        _flash_override.pop()


def flash_target():
    """The flash-attention op a rewrite calls, looked up when it rewrites; None when none is registered."""
    if _flash_override:
        return _flash_override[-1]
    try:
        import importlib
        importlib.import_module("mini_inductor.attention.flash")   # registers the op, when present
    except ImportError:
        pass
    packet = getattr(getattr(torch.ops, "mini_inductor", None), "flash_attention", None)
    try:
        return packet.default if packet is not None else None
    except AttributeError:
        return None


# ── the pattern ─────────────────────────────────────────────────────────────────────────────────
@dataclasses.dataclass
class _Found:
    """One attention, analysed, before the graph changes."""

    out: torch.fx.Node                  # the second matmul
    q: torch.fx.Node
    q_perm: list | None
    k: torch.fx.Node                    # [..., S, E] (not transposed)
    k_perm: list | None
    v: torch.fx.Node
    v_perm: list | None
    expr: tuple
    extras: list
    dropout: float
    region: list                        # the nodes the call replaces
    rank: int
    out_shape: tuple
    score_shape: tuple
    kv_heads: Any = None                # Hkv of k and v when fewer than the query heads, or None
    data_tril: tuple = ()               # inputs read as `j <= i` by their compile-time data (guarded)
    sym_scalars: tuple = ()             # numbers made of sizes, taken at their values (guarded on them)


def _matmul_operands(node):
    """(left, right, None) of a matmul; (first, second, (its letters, the other's, the output's)) of a
    two-operand einsum; None for anything else."""
    op = op_of(node)
    if op == "matmul":
        if len(node.args) != 2 or node.kwargs:
            return None
        return node.args[0], node.args[1], None
    if op == "einsum":
        operands = node.args[1:]
        if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
            operands = operands[0]
        equation = node.args[0]
        if len(operands) != 2 or not isinstance(equation, str) or "..." in equation or "->" not in equation:
            return None
        ins, out = equation.replace(" ", "").split("->")
        left, right = ins.split(",")
        return operands[0], operands[1], (left, right, out)
    return None


def _contraction(letters):
    """For an einsum X·Y: (first operand's index, permutation of it to [batch, row, c],
    permutation of the other to [batch, col, c]) where out = batch + row + col and c is summed."""
    left, right, out = letters
    if len(set(out)) != len(out) or len(out) < 2:
        return None
    summed = (set(left) & set(right)) - set(out)
    if len(summed) != 1 or len(left) != len(out) or len(right) != len(out):
        return None
    (c,) = summed
    batch, row, col = out[:-2], out[-2], out[-1]
    for first, a, b in ((0, left, right), (1, right, left)):
        if set(a) == set(batch + row + c) and set(b) == set(batch + col + c) and len(set(a)) == len(a):
            return first, [a.index(x) for x in batch + row + c], [b.index(x) for x in batch + col + c]
    return None


def _softmax_input(node):
    """(Z, dim, nodes of the softmax) for a softmax node or a written-out one, else None."""
    op = op_of(node)
    if op == "softmax":
        return arg(node, 1, "dim"), node.args[0], [node]
    if op != "div":
        return None
    num, den = node.args[0], arg(node, 1, "other")
    if op_of(num) != "exp" or op_of(den) != "sum" or den.args[0] is not num:
        return None
    if not (arg(den, 2, "keepdim", False) is True):
        return None
    dim = arg(den, 1, "dim")
    dim = dim[0] if isinstance(dim, (list, tuple)) and len(dim) == 1 else dim
    shifted = num.args[0]
    nodes = [node, num, den]
    if op_of(shifted) == "sub":
        z, top = shifted.args[0], shifted.args[1]
        while op_of(top) == "detach":
            nodes.append(top)
            top = top.args[0]
        if op_of(top) == "amax" and top.args[0] is z and arg(top, 2, "keepdim", False) is True:
            top_dim = arg(top, 1, "dim")
            top_dim = top_dim[0] if isinstance(top_dim, (list, tuple)) and len(top_dim) == 1 else top_dim
            if top_dim == dim:
                return dim, z, nodes + [shifted, top]
    return dim, shifted, nodes


def _is_key_dim(dim, rank: int) -> bool:
    return isinstance(dim, int) and dim in (-1, rank - 1)


def _dropout(node, gm):
    """(input, p, training) of a dropout node (F.dropout, torch.dropout, an nn.Dropout module), or None."""
    if node.op == "call_module":
        module = gm.get_submodule(node.target)
        if isinstance(module, torch.nn.Dropout):
            return node.args[0], module.p, module.training
        return None
    if op_of(node) != "dropout":
        return None
    p = arg(node, 1, "p", 0.5)
    training = arg(node, 2, "train" if node.target is torch.dropout else "training", True)
    return node.args[0], p, training


def _untransposed(node):
    """x for x.transpose(-2, -1) (or .mT, or a permute swapping the last two axes), else None."""
    op, rank = op_of(node), len(shape_of(node))
    if op == "transpose" and {d % rank for d in node.args[1:3] if isinstance(d, int)} == {rank - 2, rank - 1}:
        return node.args[0]
    if op == "getattr" and node.args[1] == "mT":
        return node.args[0]
    if op == "permute":
        order = list(node.args[1]) if len(node.args) == 2 and isinstance(node.args[1], (list, tuple)) \
            else list(node.args[1:])
        if [d % rank for d in order] == list(range(rank - 2)) + [rank - 1, rank - 2]:
            return node.args[0]
    return None


def _base(node):
    """The tensor `node` is a view of, through a chain of views and ops that may alias (`node` itself
    when it is no view)."""
    while isinstance(node, torch.fx.Node) and node.op in ("call_function", "call_method") and node.args \
            and isinstance(node.args[0], torch.fx.Node):
        name = node.target if isinstance(node.target, str) else getattr(node.target, "__name__", "")
        if op_of(node) not in ALIASING and name not in ALIASING:
            break
        node = node.args[0]
    return node


def _unrepeated(node):
    """(x, Hkv) for the heads of a 4-D x repeated Hq // Hkv times each (repeat_interleave on dim 1, or
    x[:, :, None].expand(...).reshape(...)), else (node, None)."""
    shape = shape_of(node)
    if len(shape) != 4:
        return node, None
    if op_of(node) == "repeat_interleave":
        source, dim = node.args[0], arg(node, 2, "dim")
        if isinstance(arg(node, 1, "repeats"), int) and dim in (1, -3) and len(shape_of(source)) == 4:
            return source, shape_of(source)[1]
    if op_of(node) in ("reshape", "view"):
        expanded = node.args[0]
        if op_of(expanded) == "expand" and len(shape_of(expanded)) == 5:
            inserted = expanded.args[0]
            source = None
            if op_of(inserted) == "getitem" and isinstance(inserted.args[1], tuple) \
                    and len(inserted.args[1]) >= 3 and inserted.args[1][2] is None \
                    and all(i == slice(None) for i in inserted.args[1][:2] + inserted.args[1][3:]):
                source = inserted.args[0]
            elif op_of(inserted) == "unsqueeze" and arg(inserted, 1, "dim") in (2, -3):
                source = inserted.args[0]
            if source is not None and len(shape_of(source)) == 4:
                return source, shape_of(source)[1]
    return node, None


def _analyse(out, gm) -> _Found | None:
    """The attention ending at `out`, a matmul / einsum; None when `out` is not one; NearMiss when it is
    attention that cannot be replaced."""
    operands = _matmul_operands(out)
    if operands is None or not isinstance(value_of(out), torch.Tensor):
        return None
    left, right, letters = operands
    v_perm = None
    if letters is not None:
        found = _contraction(letters)
        if found is None:
            return None
        first, p_perm, v_perm = found
        if first == 1:
            left, right = right, left
        if p_perm != list(range(len(p_perm))):
            return None
        v_perm = v_perm[:-2] + [v_perm[-1], v_perm[-2]]      # [batch, S, Ev]
    p, region, dropout = left, [out], 0.0
    while True:
        if not isinstance(p, torch.fx.Node):
            return None
        step = _dropout(p, gm)
        if step is not None:
            region.append(p)
            p, rate, training = step
            if training is not False and (not isinstance(rate, (int, float)) or not isinstance(training, bool)):
                # (a rate passed in as an argument: a symbol Dynamo traced, known only at run time)
                raise NearMiss("the dropout's rate or training flag is a value of the graph, not a constant")
            if training and rate > 0:
                if dropout > 0:
                    raise NearMiss("two dropouts of the attention weights")
                dropout = rate
            continue
        if op_of(p) in CASTS | SAME:
            region.append(p)
            p = p.args[0]
            continue
        break
    softmax = _softmax_input(p)
    if softmax is None:
        return None
    dim, z, softmax_nodes = softmax
    region += softmax_nodes
    score, dependent = _scores(z)
    if score is None:
        return None
    rank = len(shape_of(score))
    if not _is_key_dim(dim, len(shape_of(z))):
        raise NearMiss(f"the softmax is over dim {dim}, not the key dim (-1)")
    operands = _matmul_operands(score)
    if operands is None:
        return None
    q, k_source, s_letters = operands
    q_perm = k_perm = None
    if s_letters is not None:
        found = _contraction(s_letters)
        if found is None:
            raise NearMiss("the scores' einsum is not a batched q·kᵀ")
        first, q_perm, k_perm = found
        if first == 1:
            q, k_source = k_source, q
        k = k_source
    else:
        k = _untransposed(k_source)
        k_perm = None if k is not None else list(range(rank - 2)) + [rank - 1, rank - 2]
        k = k if k is not None else k_source
    if any(not isinstance(x, torch.fx.Node) for x in (q, k, right)):
        raise NearMiss("an operand is not a tensor of the graph")
    if not (len(shape_of(q)) == len(shape_of(k_source)) == len(shape_of(right)) == rank >= 2):
        raise NearMiss("the matmuls' operands differ in rank (broadcast matmul)")
    # everything between the scores and the output is used only inside the pattern
    inside = set(region) | dependent
    for node in [p] + region[1:]:
        if any(u not in inside for u in node.users):
            raise NearMiss("the attention weights are used elsewhere")
    for node in dependent:
        if any(u not in inside for u in node.users):
            raise NearMiss("the attention scores are used elsewhere")
    changed = [x.name for x in (q, k_source, right) if mutated(x)]
    # a view shares its base's version counter: a change through another view of the base after the
    # scores breaks the call's backward, which keeps q, k and v (fuzz seed 98)
    changed += [x.name for x in (q, k_source, right) if x.name not in changed and mutated(_base(x), after=score)]
    if changed:
        raise NearMiss(f"{', '.join(changed)} changed in place: the call would read the new values")
    if mutated(out):
        # the written-out matmul saves no output for its backward; SDPA and the flash op do
        raise NearMiss(f"the attention's output {out.name} is changed in place: the call keeps it for the backward")
    dtypes = {value_of(x).dtype for x in (q, k, right)}
    if len(dtypes) != 1 or next(iter(dtypes)) not in ATTENTION_DTYPES:
        raise NearMiss(f"dtype {', '.join(sorted(str(d) for d in dtypes))}: attention takes float16, bfloat16 "
                       "or float32 (one dtype for q, k and v)")
    translator = Translator(score, dependent)
    try:
        expr = translator.finish(z, translator.translate(z))
        render(expr)
    except Untranslatable as e:
        raise NearMiss(f"the modification cannot be written as an expression: {e}") from None
    for extra in translator.extras:
        if mutated(_base(extra), after=out):
            raise NearMiss(f"{extra.name} is changed in place after the attention: the flash-attention op "
                           "reads it again in the backward")
        value = value_of(extra)
        shape = tuple(value.shape)
        if len(shape) > rank or any(not (known_eq(a, 1) or known_eq(a, b))
                                    for a, b in zip(shape[::-1], shape_of(z)[::-1])):
            raise NearMiss(f"{extra.name} {list(shape)} does not broadcast to the scores {list(shape_of(z))}")
    k_heads = v_heads = None
    if rank == 4 and k_perm is None and v_perm is None:
        k_un, k_heads = _unrepeated(k)
        v_un, v_heads = _unrepeated(right)
        if k_heads is not None and k_heads == v_heads:
            k, right = k_un, v_un
        else:
            k_heads = None
        if k_heads is None and known_eq(shape_of(k)[1], 1) and known_eq(shape_of(right)[1], 1):
            k_heads = 1          # one key/value head, broadcast by the matmul over the query heads
    region += sorted(dependent, key=lambda n: -n.meta.get("mini_inductor_order", 0))
    return _Found(out, q, q_perm, k, k_perm, right, v_perm, expr, list(translator.extras), float(dropout),
                  region, rank, shape_of(out), shape_of(z), k_heads, tuple(dict.fromkeys(translator.data_tril)),
                  tuple(translator.sym_scalars))


def _scores(z):
    """(the score matmul, the nodes on paths from it to z) for the modification ending at z."""
    leaves, seen, stack = set(), set(), [z]
    while stack:
        n = stack.pop()
        if not isinstance(n, torch.fx.Node) or n in seen:
            continue
        seen.add(n)
        op = op_of(n)
        if op in ("matmul", "einsum"):
            leaves.add(n)
        elif op in POINTWISE:
            stack.extend(a for a in list(n.args) + list(n.kwargs.values()) if isinstance(a, torch.fx.Node))
    candidates = [n for n in leaves if len(shape_of(n)) >= 2 and shape_of(n) == shape_of(z)[-len(shape_of(n)):]]
    if len(candidates) != 1:
        return None, set()
    score = candidates[0]
    dependent: set = set()
    memo: dict = {}

    def reaches(n) -> bool:
        if n is score:
            return True
        if not isinstance(n, torch.fx.Node) or op_of(n) not in POINTWISE:
            return False
        if n not in memo:
            memo[n] = any(reaches(a) for a in list(n.args) + list(n.kwargs.values()))
        return memo[n]
    reaches(z)
    dependent = {n for n, r in memo.items() if r} | {score}
    if shape_of(score) != shape_of(z):
        raise NearMiss("the scores are broadcast to a larger shape before the softmax")
    return score, dependent


# ── the rewrite ──────────────────────────────────────────────────────────────────────────────────
class _Emitter:
    """New nodes before `anchor`, each with its example_value computed under the graph's fake mode."""

    def __init__(self, graph, anchor, fake_mode):
        self.graph, self.anchor, self.fake_mode = graph, anchor, fake_mode
        self.created: list[torch.fx.Node] = []

    def __call__(self, kind: str, target, *args, **kwargs) -> torch.fx.Node:
        with self.graph.inserting_before(self.anchor):
            node = self.graph.create_node(kind, target, args, kwargs)
        self.created.append(node)
        for key in ("stack_trace", "nn_module_stack", "source_fn_stack"):
            if key in self.anchor.meta:
                node.meta[key] = self.anchor.meta[key]
        fake_args, fake_kwargs = torch.fx.node.map_arg((args, kwargs), lambda n: n.meta["example_value"])
        # the mode of the graph's own fake values (the tracing context may hold another one)
        mode = next((getattr(n.meta["example_value"], "fake_mode", None) for n in node.all_input_nodes
                     if getattr(n.meta["example_value"], "fake_mode", None) is not None), self.fake_mode)
        with mode if mode is not None else contextlib.nullcontext():
            if kind == "call_method":
                value = getattr(fake_args[0], target)(*fake_args[1:], **fake_kwargs)
            else:
                value = target(*fake_args, **fake_kwargs)
        node.meta["example_value"] = value
        return node

    def undo(self) -> None:
        for node in reversed(self.created):
            self.graph.erase_node(node)


def _to_4d(emit, node, perm, rank: int, batch: tuple, heads=None):
    """`node` with its batch dims folded to [B, H] (the call takes 4-D tensors)."""
    if perm is not None and perm != list(range(rank)):
        node = emit("call_method", "permute", node, *perm)
    shape = shape_of(node)
    want = batch[:-1] + ((heads,) if heads is not None else batch[-1:]) if batch else ()
    if tuple(shape[:-2]) != want:
        if any(not known_eq(a, b) for a, b in zip(shape[:-2], want)):
            if not static(*want):
                raise NearMiss("symbolic sizes: a broadcast batch dim would need an expand")
            node = emit("call_method", "expand", node, *want, -1, -1)
    if rank <= 4:
        return _leading_ones(emit, node, 4 - rank)
    return emit("call_method", "flatten", node, 0, rank - 4)


def _leading_ones(emit, node, count: int):
    for _ in range(count):
        node = emit("call_method", "unsqueeze", node, 0)
    return node


def _extra_4d(emit, node, rank: int, score_shape: tuple):
    """An extra tensor right-aligned against the scores, padded to the scores' rank and folded like them."""
    shape = shape_of(node)
    value = value_of(node)
    if not (value.dtype == torch.bool or value.dtype.is_floating_point):
        node = emit("call_method", "to", node, torch.float32)
    node = _leading_ones(emit, node, rank - len(shape))
    if rank <= 4:
        return _leading_ones(emit, node, 4 - rank)
    batch = shape_of(node)[:rank - 3]
    if not all(known_eq(b, 1) for b in batch) and \
            any(not known_eq(a, b) for a, b in zip(batch, score_shape[:rank - 3])):
        if not static(*score_shape[:rank - 3]):
            raise NearMiss("symbolic sizes: an extra tensor would need an expand")
        node = emit("call_method", "expand", node, *score_shape[:rank - 3], -1, -1, -1)
    return emit("call_method", "flatten", node, 0, rank - 4)


def _rewrite(gm, found: _Found, fake_mode, choice) -> None:
    target, scale, causal = choice
    emit = _Emitter(gm.graph, found.out, fake_mode)
    try:
        batch = found.out_shape[:-2]
        rank = found.rank
        if rank > 4 and not static(*batch):
            raise NearMiss("symbolic sizes: folding more than two batch dims back needs their sizes")
        q = _to_4d(emit, found.q, found.q_perm, rank, batch)
        k = _to_4d(emit, found.k, found.k_perm, rank, batch, found.kv_heads)
        v = _to_4d(emit, found.v, found.v_perm, rank, batch, found.kv_heads)
        gqa = found.kv_heads is not None and not known_eq(found.kv_heads, shape_of(q)[1])
        if not gqa and not known_eq(shape_of(k)[1], shape_of(q)[1]):
            gqa = True       # one key/value head broadcast over the query heads
        if target == "sdpa":
            kwargs = {"dropout_p": found.dropout, "is_causal": causal, "scale": scale}
            if gqa:
                kwargs["enable_gqa"] = True
            result = emit("call_function", F.scaled_dot_product_attention, q, k, v, **kwargs)
            # matmul's layout: CUDA's SDPA kernels return [B, L, H, E]'s (a no-op where it is contiguous)
            result = emit("call_method", "contiguous", result)
        else:
            extras = [_extra_4d(emit, t, rank, found.score_shape) for t in found.extras]
            result = emit("call_function", target, q, k, v, extras, render(found.expr))
        if rank < 4:
            for _ in range(4 - rank):
                result = emit("call_method", "squeeze", result, 0)
        elif rank > 4:
            result = emit("call_method", "unflatten", result, 0, tuple(batch[:-1]))
    except BaseException:
        emit.undo()
        raise
    found.out.replace_all_uses_with(result)
    _erase_dead(gm.graph, found.region)


def _erase_dead(graph, nodes) -> None:
    """Erase the replaced nodes and what only they used (never placeholders or in-place calls)."""
    stack, erased = list(nodes), set()
    while stack:
        node = stack.pop()
        if node in erased or node.users or node.op not in ("call_function", "call_method", "call_module"):
            continue
        if node.op == "call_method" and str(node.target).endswith("_"):
            continue
        inputs = list(node.all_input_nodes)
        graph.erase_node(node)
        erased.add(node)
        stack.extend(inputs)


# float32 attention on a GPU whose score matrix is at most this many bytes stays as written: two
# cuBLAS matmuls and a softmax kernel. SDPA has no float32 flash kernel (its memory-efficient one
# runs without tensor cores) and neither has the Triton kernel in IEEE precision; on the H100 (session
# 23, GPT-2 small widths, 4 layers, 512 tokens, fp32) the model took 2.270 ms with its causal attention
# sent to SDPA and 2.473 ms with Hugging Face's mask through the Triton kernel, against 1.973 and 1.998
# ms for Inductor's reduce-overhead, which leaves them written out. The matmuls also keep eager's
# numerics where TF32 is allowed (SDPA's kernels compute in full float32). Past the limit the memory
# the score matrix would take decides.
FLOAT32_WRITTEN_OUT_MAX_SCORE_BYTES = 256 << 20


def float32_left_as_written(q, score_shape) -> str | None:
    """The near-miss reason when a float32 attention on a GPU stays as written, else None."""
    if q.dtype != torch.float32 or q.device.type != "cuda" or not static(*score_shape):
        return None
    nbytes = 4
    for size in score_shape:
        nbytes *= int(size)
    if nbytes > FLOAT32_WRITTEN_OUT_MAX_SCORE_BYTES:
        return None
    return (f"float32 on the GPU with {nbytes / 2**20:.1f} MiB of scores: left as written (cuBLAS matmuls "
            f"and a softmax kernel; no float32 flash kernel is faster; fused past "
            f"{FLOAT32_WRITTEN_OUT_MAX_SCORE_BYTES >> 20} MiB)")


def _choose(found: _Found):
    """("sdpa", scale, is_causal), or (the flash op, None, False); NearMiss when neither computes it or
    it is left as written (`float32_left_as_written`)."""
    reason = float32_left_as_written(value_of(found.q), found.score_shape)
    if reason is not None:
        raise NearMiss(reason)
    form = sdpa_form(found.expr)
    score_shape = found.score_shape
    if form is not None and form[1] and not known_eq(score_shape[-1], score_shape[-2]):
        form = None          # is_causal only where L == S is known (without a guard)
    if form is not None:
        return "sdpa", form[0], form[1]
    if found.dropout > 0:
        raise NearMiss(f"dropout (p={found.dropout}) in training after a modification SDPA does not compute "
                       f"({render(found.expr)}): the flash-attention op has no dropout")
    op = flash_target()
    if op is None:
        raise NearMiss("no flash-attention op is registered (mini_inductor/attention/flash.py)")
    return op, None, False


def _shapes(found: _Found) -> str:
    """q [..., L, E], k [..., S, E], v [..., S, Ev] as the call takes them (before the batch dims are folded)."""
    parts = []
    for name, node, perm in (("q", found.q, found.q_perm), ("k", found.k, found.k_perm), ("v", found.v, found.v_perm)):
        shape = shape_of(node)
        parts.append(f"{name} {[shape[d] for d in perm] if perm is not None else list(shape)}")
    return ", ".join(parts)


# ── masks held as data: a causal buffer ─────────────────────────────────────────────────────────
DATA_GUARDS = "mini_inductor_data_guards"   # gm.meta: [(input position, (its tensor at compile time, name))]
TRIL_CHECK_MAX_NUMEL = 1 << 24


def tril_inputs(gm: torch.fx.GraphModule, example_inputs) -> dict[torch.fx.Node, int]:
    """The placeholders (with their positions) whose real example is a tensor of at least two dims, every
    leading dim 1, holding exactly ones(...).tril() (bool or numbers): GPT-2's registered `bias`
    (bool), nanoGPT's (float). Such a mask is data (it could change), so match.py reads it as `j <= i`
    only under a guard on the tensor (`DataGuard`). Read once a compile (a GPU sync where it lives on one)."""
    from torch._subclasses.fake_tensor import FakeTensor
    found = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs) or _changes_in_place(gm):
        return found
    for pos, (node, x) in enumerate(zip(placeholders, example_inputs)):
        if not isinstance(x, torch.Tensor) or isinstance(x, FakeTensor) or x.dim() < 2 \
                or not (x.dtype == torch.bool or x.dtype.is_floating_point) \
                or x.is_meta or any(s != 1 for s in x.shape[:-2]) or not 0 < x.numel() <= TRIL_CHECK_MAX_NUMEL \
                or x.requires_grad or x.is_inference():   # (an inference tensor keeps no version to guard on)
            continue
        try:
            if torch.equal(x, torch.ones_like(x).tril()):
                found[node] = pos
        except Exception:  # noqa: BLE001  (a tensor subclass that cannot be compared: data, as before)
            continue
    return found


def _changes_in_place(gm: torch.fx.GraphModule) -> bool:
    """The graph writes a tensor in place (an in-place method or function, a setitem, an `out=`). Then
    no input's data is read: a write through a view of the mask, or through another input sharing its
    memory, would change it after the check (`mutated` follows views, not every alias)."""
    return any(writes_in_place(n) or n.op in ("call_function", "call_method") and "out" in n.kwargs
               for n in gm.graph.nodes)


class DataGuard:
    """The compiled graph of a Dynamo graph whose attention read some inputs' data as a causal mask,
    behind a check of those inputs: the same tensor object, over the same memory, at the same version
    as at compile time (a change in place bumps the version, `t.data = other` moves the memory, another
    tensor is another object, even at the same address). One that changed is read again (a GPU sync);
    while it still holds the same lower triangle the compiled graph serves, else the graph runs eagerly
    from then on, as traced, without the rewrite (`eager`, Dynamo's graph before attention fusion),
    with a warning and the reason on the compile's graph records (`ran_eagerly`, which summaries and
    `explain` print). Writes that bypass the version counter (through `t.data[...]`, numpy or DLPack)
    are not seen, as autograd does not see them either."""

    def __init__(self, compiled, guards: list, eager, graph: str, records=()):
        import weakref
        self.compiled, self.eager, self.graph = compiled, eager, graph
        self.records = list(records)   # the GraphRecords of the compile: marked when it stops serving
        self.names = {pos: name for pos, (_, name) in guards}
        self.checks = [(pos, weakref.ref(t), t.data_ptr(), t._version) for pos, (t, _) in guards]
        self.broken: str | None = None

    def __call__(self, *args):
        if self.broken is None:
            for n, (pos, ref, ptr, version) in enumerate(self.checks):
                x = args[pos]
                if x is not ref() or version < 0 or x._version != version or x.data_ptr() != ptr:
                    self._recheck(n, x)
                    if self.broken is not None:
                        break
        return self.compiled(*args) if self.broken is None else self.eager(*args)

    def _recheck(self, n: int, x) -> None:
        import weakref
        pos = self.checks[n][0]
        try:
            still = isinstance(x, torch.Tensor) and torch.equal(x, torch.ones_like(x).tril())
        except Exception:  # noqa: BLE001  (what cannot be compared is not the mask read at compile time)
            still = False
        if still:   # (an inference tensor has no version: read again at every call)
            self.checks[n] = (pos, weakref.ref(x), x.data_ptr(), -1 if x.is_inference() else x._version)
            return
        self.broken = (f"input {self.names[pos]} held a causal mask (ones(...).tril()) when {self.graph} was "
                       "compiled, and attention read it as one; now it holds something else")
        for record in self.records:
            record.ran_eagerly = self.broken
        log.warning("mini_inductor: %s: %s: the graph runs eagerly from now on", self.graph, self.broken)


# the ops the search starts from (Q·Kᵀ): a graph without one is left as it is
ANCHOR_OPS = ("matmul", "einsum")


def fuse_attention(gm: torch.fx.GraphModule, example_inputs, graph: str,
                   tril: dict[torch.fx.Node, int] | None = None) -> list[AttentionMatch]:
    """Replace every attention in Dynamo's graph `gm` (named `graph` in the records) by one call, in
    place; the records of what was found, matched or not. Inputs read as a causal mask by their data
    (`tril`: `tril_inputs`' answer, when the caller has it) are listed in gm.meta[DATA_GUARDS]: the
    caller guards the compiled graph on them (`DataGuard`)."""
    tril = tril_inputs(gm, example_inputs) if tril is None else tril
    for node in tril:
        node.meta[TRIL_DATA] = True
    used: dict[int, torch.Tensor] = {}
    try:
        records = _fuse_all(gm, example_inputs, graph, tril, used)
    finally:
        for node in tril:
            node.meta.pop(TRIL_DATA, None)
    if used:
        gm.meta[DATA_GUARDS] = sorted(used.items())
    return records


def _fuse_all(gm, example_inputs, graph: str, tril: dict, used: dict) -> list[AttentionMatch]:
    fake_mode = torch._guards.detect_fake_mode(example_inputs)
    if fake_mode is None:
        fake_mode = torch._guards.detect_fake_mode([n.meta.get("example_value") for n in gm.graph.nodes
                                                    if isinstance(n.meta.get("example_value"), torch.Tensor)])
    records = []
    for n, node in enumerate(gm.graph.nodes):
        node.meta["mini_inductor_order"] = n
    alive = set(gm.graph.nodes)
    for node in list(gm.graph.nodes):
        if node not in alive or op_of(node) not in ANCHOR_OPS:
            continue
        where, name = source_line(node), node.name
        try:
            found = _analyse(node, gm)
            if found is None:
                continue
            choice = _choose(found)
            mod, shapes = render(found.expr), _shapes(found)
            for value in found.sym_scalars:   # a guard through Dynamo's ShapeEnv: another value recompiles
                guard_scalar(value)
            _rewrite(gm, found, fake_mode, choice)
            alive = set(gm.graph.nodes)
        except NearMiss as e:
            records.append(AttentionMatch(graph, name, where, "", reason=str(e)))
            continue
        except Exception as e:  # noqa: BLE001  (a pass that finds attention never fails a compile)
            log.warning("mini_inductor: attention at %s not replaced: %s: %s", name, type(e).__name__, e)
            records.append(AttentionMatch(graph, name, where, "", reason=f"internal error: {type(e).__name__}: {e}"))
            continue
        for node in found.data_tril:
            used[tril[node]] = (example_inputs[tril[node]], node.name)
        guarded = ", ".join([f"{n.name} holds a causal mask (guarded on it)" for n in found.data_tril]
                            + [f"a number made of {', '.join(sorted(map(str, v.node.expr.free_symbols)))} taken as "
                               f"{v.node.hint:.6g} (guarded on it)" for v in found.sym_scalars])
        records.append(AttentionMatch(graph, name, where, "sdpa" if choice[0] == "sdpa" else "flash", mod, shapes,
                                      data=guarded))
    for node in gm.graph.nodes:
        node.meta.pop("mini_inductor_order", None)
    if any(r.target for r in records):
        gm.graph.lint()
        gm.recompile()
    return records

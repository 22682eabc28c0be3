"""Channels-last convolutions in inference graphs: cuDNN gets NHWC activations, not NCHW ones.

Given NCHW (contiguous) fp16 or bf16 activations, cuDNN on the H100 converts each convolution's input
to NHWC and its output back (`nchwToNhwcKernel` / `nhwcToNchwKernel`): in a ResNet-18 at batch 32
those two kernels took 38% of the GPU time of our compiled graph. A channels-last input skips them,
and its output is channels-last too. fp32 convolutions, which cuDNN runs in TF32 by default, often
gain as well, but not always: those are measured first (below).

So before lowering, an inference graph with 2-D convolutions gets a channels-last copy of each
convolution's input (`aten.clone(memory_format=torch.channels_last)`); FakeTensor propagation then
gives every node downstream its new layout (batch norm, ReLU and adds follow their input's layout in
ATen). A copy whose input is channels-last already after that is dropped, so only the first one stays
(the image), and the pointwise kernels between convolutions read and write NHWC (lowering/graph.py
realizes such a node with the layout its FakeTensor has, and runs its loops in memory order:
ir.ComputedBuffer.order). Each weight gets one channels-last copy of ours too, made just before the
first convolution that uses it: else each convolution would copy its weight with an ATen kernel of
its own, a launch and a host round of `contiguous` a call each.

Outputs keep eager's strides: an output whose layout changed is copied back to it (a permute, a
contiguous copy, the inverse permute), so nothing the caller sees changes. A graph with an output
that is not dense (a strided view of an intermediate), or whose propagation fails, is left as it was.
Forward graphs of training are left alone too: their saved tensors' layouts are what the backward
graph was traced with.

Which graphs (option `conv_layout`):
  "auto" (the default)  CUDA fp16/bf16 convolutions, always: measured on the H100 and known good.
                        A CUDA graph of other dtypes (fp32, which cuDNN runs in TF32 by default) goes
                        channels-last only when measured faster: at compile time each distinct
                        convolution of the graph is timed in both layouts, and the copies channels-last
                        adds (the image into NHWC, the weights, outputs back to eager's strides) in it;
                        channels-last must save 3% of the NCHW total (layout_timing.py; the timings are
                        kept in memory and under cache_dir/autotune, so a warm start measures nothing).
                        A graph with fp16/bf16 convolutions leaves its others in NCHW. CPU graphs: none.
  "measure"             every 2-D convolution graph, any device and dtype, decided by measurement as
                        above (the CPU tests use it)
  "channels_last"       every 2-D convolution, any device and dtype, unmeasured (the CPU tests use it)
  "off"                 none
Measured or not, the summary (gm.meta[SUMMARY]: GraphRecord.layout, `explain`, the perf_hints log)
says what was done and, when measured, the two totals; a graph kept in NCHW by its timings keeps a
summary saying so. Graphs with symbolic sizes are not measured (they stay NCHW).

H100, ResNet-18 at batch 32, fp16, in one process (benchmarks/call_profile.py): with CUDA graphs
0.66 ms a call with "auto" against 1.01 ms with "off"; without them 1.32 ms against 1.37 ms (the
weights were still copied by ATen then).
"""
from __future__ import annotations

import logging

import torch
import torch.fx

from . import layout_timing

aten = torch.ops.aten
log = logging.getLogger("mini_inductor.perf_hints")

MODES = ("auto", "channels_last", "measure", "off")
MARK = "mini_inductor_channels_last"     # gm.meta key: how many convolutions the pass changed
SUMMARY = "mini_inductor_channels_last_summary"   # gm.meta key: what it did, in words (GraphRecord.layout)


def _val(node):
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _plan(gm: torch.fx.GraphModule, mode: str) -> tuple[list[torch.fx.Node], bool]:
    """The convolutions the pass gives channels-last inputs, and whether to measure before it does."""
    convs = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is not aten.convolution.default:
            continue
        x = _val(node.args[0])
        if isinstance(x, torch.Tensor) and x.dim() == 4 and not node.args[6]:   # 2-D, not transposed
            convs.append(node)
    if mode != "auto":
        return convs, mode == "measure"
    cuda = [c for c in convs if _val(c.args[0]).is_cuda]
    halves = [c for c in cuda if _val(c.args[0]).dtype in (torch.float16, torch.bfloat16)]
    return (halves, False) if halves else (cuda, True)


def is_channels_last(t: torch.Tensor) -> bool:
    return t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last) and not t.is_contiguous()


def is_non_overlapping_and_dense(t: torch.Tensor) -> bool:
    """Every storage element in [0, numel) is used exactly once (a permutation of a contiguous layout)."""
    if not all(isinstance(n, int) for n in (*t.shape, *t.stride())):
        return _symbolic_non_overlapping_and_dense(t)
    dims = sorted((st, s) for s, st in zip(t.shape, t.stride()) if s != 1)
    expected = 1
    for st, s in dims:
        if st != expected:
            return False
        expected *= s
    return True


def _symbolic_non_overlapping_and_dense(t: torch.Tensor) -> bool:
    """The same for a dynamic graph's FakeTensor, without a guard (comparing its SymInts would add
    guards that specialize the graph to the traced sizes): dims ordered by their strides at the traced
    sizes, each stride compared as an expression with the product of the sizes inside it."""
    import sympy
    from .symbolic import hint, stride_exprs, to_expr

    pairs = sorted(((st, to_expr(n)) for n, st in zip(t.shape, stride_exprs(t)) if to_expr(n) != 1),
                   key=lambda d: (hint(d[0]), hint(d[1])))   # (an unbacked size's hint is a guess)
    expected = sympy.Integer(1)
    for st, n in pairs:
        if sympy.expand(st - expected) != 0:
            return False
        expected = expected * n
    return True


def _same_strides(a: torch.Tensor, b: torch.Tensor) -> bool:
    return all(s == 1 or x == y for s, x, y in zip(a.shape, a.stride(), b.stride()))


def channels_last_convolutions(gm: torch.fx.GraphModule, mode: str, name: str = "", *,
                               cache_dir: str | None = None) -> torch.fx.GraphModule:
    """`gm` with channels-last convolutions (a new GraphModule; `gm` itself is not changed), or `gm`
    where there is nothing to do, measurement says NCHW is as fast (then `gm.meta[SUMMARY]` says so),
    or the pass cannot keep every output's strides. `cache_dir`: where measured layout timings are kept."""
    if mode not in MODES:
        raise ValueError(f"conv_layout must be one of {MODES}, not {mode!r}")
    convs, measured = _plan(gm, mode) if mode != "off" else ([], False)
    if not convs:
        return gm
    output = next(n for n in gm.graph.nodes if n.op == "output")
    results = list(output.args[0]) if isinstance(output.args[0], (list, tuple)) else [output.args[0]]
    if any(isinstance(_val(r), torch.Tensor) and not is_non_overlapping_and_dense(_val(r)) for r in results):
        log.info("%s: convolutions keep NCHW: an output is a strided view", name)
        return gm
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    fake_mode = torch._guards.detect_fake_mode([_val(p) for p in placeholders])
    if fake_mode is None:
        return gm
    shapes = [layout_timing.ConvShape.of(c) for c in convs] if measured else []
    if measured and (None in shapes or _capturing()):
        log.info("%s: convolutions keep NCHW: not measured (%s)", name,
                 "symbolic sizes" if None in shapes else "a CUDA graph is being captured")
        return gm
    graph = torch.fx.Graph()
    node_copies = {}
    out = graph.graph_copy(gm.graph, node_copies)
    graph.output(out)
    new = torch.fx.GraphModule(gm, graph)
    try:
        changed, layout_copies = _rewrite(new, [node_copies[c] for c in convs], fake_mode,
                                          [_val(p) for p in placeholders])
        if measured:
            verdict = layout_timing.compare(shapes, layout_copies, _val(convs[0].args[0]).device, cache_dir)
    except Exception as e:  # noqa: BLE001  (the graph as it was is still right, only slower)
        log.info("%s: convolutions keep NCHW: %s: %s", name, type(e).__name__, e)
        return gm
    if measured and not verdict.channels_last_wins:
        gm.meta[SUMMARY] = verdict.describe()
        log.info("%s: %s [%s]", name, gm.meta[SUMMARY], verdict.sources())
        return gm
    if measured:
        new.meta[SUMMARY] += f"; {verdict.describe()}"
    new.meta[MARK] = changed
    log.info("%s: %s%s", name, new.meta[SUMMARY], f" [{verdict.sources()}]" if measured else "")
    return new


def _capturing() -> bool:
    return torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()


def _rewrite(gm: torch.fx.GraphModule, convs: list[torch.fx.Node], fake_mode, inputs) -> tuple[int, list]:
    """Give `convs` (nodes of `gm`) channels-last inputs and weights, in place; how many, and the layout
    copies the graph makes for that (LayoutCopy: the inputs', the weights', the outputs' back)."""
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp
    graph = gm.graph
    output = next(n for n in graph.nodes if n.op == "output")
    results = list(output.args[0]) if isinstance(output.args[0], (list, tuple)) else [output.args[0]]
    before = {r: _val(r) for r in results if isinstance(_val(r), torch.Tensor)}
    copies = []
    for conv in convs:
        x = conv.args[0]
        with graph.inserting_before(conv):
            copy = graph.call_function(aten.clone.default, (x,), {"memory_format": torch.channels_last})
        copy.meta.update({k: v for k, v in conv.meta.items() if k in ("stack_trace", "source_fn_stack", "nn_module_stack")})
        conv.update_arg(0, copy)
        copies.append(copy)
    weights = {}
    for conv in convs:
        w = conv.args[1]
        wval = _val(w)
        if not isinstance(wval, torch.Tensor) or wval.dim() != 4 or is_channels_last(wval):
            continue
        if w not in weights:
            # one channels-last copy per weight, generated by us: otherwise each convolution makes one
            # with its own ATen kernel (one launch and a host round of `contiguous` a call each)
            with graph.inserting_before(conv):     # made where first needed: no longer alive than that
                weights[w] = graph.call_function(aten.clone.default, (w,), {"memory_format": torch.channels_last})
        conv.update_arg(1, weights[w])
    FakeTensorProp(gm, mode=fake_mode).propagate_dont_convert_inputs(*inputs)
    kept = []
    for copy in copies:
        x = copy.args[0]
        if is_channels_last(_val(x)):
            copy.replace_all_uses_with(x)
            graph.erase_node(copy)
        else:
            kept.append(copy)
    dropped = len(copies) - len(kept)
    layout_copies = [layout_timing.LayoutCopy.of(_val(c.args[0]), _val(c)) for c in (*kept, *weights.values())]
    restored = 0
    for r, old in before.items():
        new = _val(r)
        if _same_strides(old, new):
            continue
        restored += 1
        # back to eager's layout: permute so that it is the contiguous order, copy, permute back
        order = sorted(range(old.dim()), key=lambda d: (-old.stride()[d], d))
        inverse = sorted(range(old.dim()), key=lambda d: order[d])
        with graph.inserting_before(output):
            p = graph.call_function(aten.permute.default, (r, order))
            c = graph.call_function(aten.clone.default, (p,), {"memory_format": torch.contiguous_format})
            back = graph.call_function(aten.permute.default, (c, inverse))
        with fake_mode:
            p.meta["val"] = aten.permute.default(new, order)
            c.meta["val"] = aten.clone.default(p.meta["val"], memory_format=torch.contiguous_format)
            back.meta["val"] = aten.permute.default(c.meta["val"], inverse)
        if not _same_strides(old, back.meta["val"]):
            raise RuntimeError(f"cannot give output {r.name} its strides {old.stride()} back")
        output.replace_input_with(r, back)
        layout_copies.append(layout_timing.LayoutCopy.of(new, back.meta["val"]))
    graph.lint()
    gm.recompile()
    gm.meta[SUMMARY] = (f"channels-last convolutions: {len(convs)} (inputs copied {len(copies) - dropped}, "
                        f"weights copied {len(weights)}, outputs copied back to eager's strides {restored})")
    return len(convs), layout_copies

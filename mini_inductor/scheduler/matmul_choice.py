"""Template or cuBLAS, per matmul: the cost model of option matmul_templates="auto", and the choice
the scheduler records on each template node after fusion (`choose_matmuls`).

    "template"   the Triton template runs, with its fused epilogues (codegen/matmul_template.py)
    "cublas"     the ATen call runs (MatmulTemplate.as_extern(): addmm keeps its bias in cuBLAS's
                 epilogue), and the epilogues as a kernel of their own after it
    "measure"    mode="max-autotune" on CUDA: codegen times the template's configs with the epilogues
                 against cuBLAS plus the epilogue kernel, and keeps the faster (codegen/matmul_autotune.py)
    "tune"       the same with matmul_templates="always": the template's configs only

The cost model (`prefer_template`) compares, per matmul and with the epilogue fused:

    cuBLAS   = max(flops / peak,              bytes / bandwidth) + 2 * output bytes / bandwidth + launch
    template = max(flops / (peak * TEMPLATE_EFFICIENCY * occupancy), bytes / bandwidth)

(occupancy: the share of the SMs the template's tiles fill over its waves, at most 1)

the epilogue kernel after cuBLAS re-reads the product and the product is written once more: that is
what fusing saves, against the template's slower main loop. Where both are compute-bound a template
wins while K < itemsize * (peak / bandwidth) * e / (1 - e) (e = TEMPLATE_EFFICIENCY), about 1400 in
fp16: the up-projection of a linear layer (K = 768, N = 3072) becomes a template with a residual add,
its down-projection (K = 3072) stays cuBLAS, and so does a GELU epilogue (the cost below).
plus, for an epilogue computing a transcendental function, TRANSCENDENTAL_US_PER_MELEM per million
output elements (measured). The constants are the H100's (SXM, dense); the main loop's efficiency
(0.70-0.80 of cuBLAS on the shapes of benchmarks/matmul_templates.py, fp16, one H100 run of session 23)
and the transcendental cost were checked against measurements; the peaks are nominal.
"""
from __future__ import annotations

import dataclasses

import torch

from ..lowering.ir import MatmulTemplate
from .matmul_activation import epilogue_activation
from .nodes import BaseSchedulerNode, template_in, template_parts

# H100 SXM, as cuBLAS reaches them on large shapes (TFLOP/s): fp16/bf16 tensor cores, fp32 as TF32
# or in full precision (SIMT)
PEAK_TFLOPS = {torch.float16: 700.0, torch.bfloat16: 700.0, "tf32": 350.0, torch.float32: 50.0}
HBM_GB_PER_S = 3000.0
TEMPLATE_EFFICIENCY = 0.75     # the template's main loop against cuBLAS's, same shape (a guess to refit)
# float32 without TF32 (tl.dot in "ieee" precision, FMA loops like cuBLAS's SIMT kernels): GPT-2's
# scores (12 x 512 x 512 x 64) took 31.5 µs in the template (a mask fused) against cuBLAS's 21.5 µs
# (H100, benchmarks/kernel_profile.py, session 24)
TEMPLATE_EFFICIENCY_FP32 = 0.6
# float32 with TF32 allowed: the template rounds its operands to TF32 as cuBLAS does
# (triton_helpers.round_tf32), which costs it a third: linear + residual on the H100 (session 25),
# template against cuBLAS's addmm, 0.324 vs 0.213 ms (8192 x 3072 x 768), 0.256 vs 0.148
# (8192 x 768 x 3072), 0.160 vs 0.129 (2048 x 8192 x 512); truncating instead ran at cuBLAS's
# speed but made every product about 2**-10 too small
TEMPLATE_EFFICIENCY_TF32 = 0.5
LAUNCH_US = 2.0                # one more kernel in a CUDA graph
NUM_SMS = 132                  # H100 SXM and H200: a template's tiles fewer than this leave SMs idle
# A transcendental epilogue (GELU's erf, tanh, SiLU's exp) inside the template costs more than in a
# kernel of its own. Measured on the H100 (fp16, M 8192, benchmarks/matmul_templates.py, session 23):
# the template with bias+GELU against the same template with a residual add, 94 vs 78 µs for N 2304
# K 768 and 118 vs 91 µs for N 3072 K 768, i.e. 0.85-1.07 µs per million output elements.
TRANSCENDENTAL_US_PER_MELEM = 1.0
TRANSCENDENTAL_OPS = frozenset({"erf", "erfc", "tanh", "exp", "exp2", "expm1", "sigmoid", "log", "log1p",
                                "gelu", "silu", "softplus", "mish", "sin", "cos", "pow", "rsqrt", "sqrt"})
MEASURE_DEVICES = ("cuda",)    # where max-autotune times the choice (the interpreter's timings mean nothing)


@dataclasses.dataclass
class MatmulDecision:
    """What became of one matmul (the fusion report and `explain` print these)."""

    name: str                    # the template's buffer
    op: str                      # aten.mm.default, ...
    shape: str                   # "B x M x N x K dtype"
    choice: str                  # "template", "cublas", "measure" or "tune" (then codegen fills in the winner)
    reason: str
    fused: list[str]             # ops of the epilogues fused into the template
    measured: list[tuple[str, float]] = dataclasses.field(default_factory=list)   # (candidate, ms)
    prologue: list[str] = dataclasses.field(default_factory=list)   # ops computed on the template's loads
    lt_epilogue: str = ""        # "relu" or "gelu": cuBLASLt applies it (matmul_activation.py)

    def describe(self) -> str:
        if self.choice == "template":
            parts = ([f"prologue: {', '.join(self.prologue)}"] if self.prologue else []) + \
                ([f"fused: {', '.join(self.fused)}"] if self.fused else [])
            what = "Triton template" + (f" ({'; '.join(parts)})" if parts else "")
        elif self.lt_epilogue:
            what = f"cuBLAS with {describe_lt(self.lt_epilogue)}"
        else:
            what = "cuBLAS" + (f" + epilogue kernel ({', '.join(self.fused)})" if self.fused else "") + \
                (f" after a prologue kernel ({', '.join(self.prologue)})" if self.prologue else "")
        line = f"{self.name}: {self.op} {self.shape}: {what} — {self.reason}"
        if self.measured:
            line += "; measured: " + ", ".join(f"{c} {ms:.4f} ms" for c, ms in self.measured)
        return line


def describe_lt(act: str) -> str:
    return f"{'tanh-GELU' if act == 'gelu' else 'ReLU'} in cuBLASLt's epilogue (aten._addmm_activation)"


def _tf32(dtype: torch.dtype) -> bool:
    return dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32


def transcendental(ops) -> bool:
    """Some of the ATen ops (names as aten.erf.default) are transcendental functions."""
    return any(_short(str(op)) in TRANSCENDENTAL_OPS for op in ops)


def prefer_template(batch: int, m: int, n: int, k: int, dtype: torch.dtype, epilogue: bool,
                    transcendental: bool = False, separate_passes: int = 2) -> tuple[bool, str]:
    """(template wins, why) by the cost model of this module's docstring, in µs on an H100.
    `transcendental`: the epilogue computes one (erf, tanh, exp, ...), which the template pays for.
    `separate_passes`: what the epilogue costs after cuBLAS, in passes over the product: 2 as a kernel
    of its own (and a launch), fewer where its readers would compute it instead (`_epilogue_passes`)."""
    itemsize = dtype.itemsize
    peak = PEAK_TFLOPS["tf32" if _tf32(dtype) else dtype] * 1e6          # flop per µs
    bandwidth = HBM_GB_PER_S * 1e3                                        # bytes per µs
    flops = 2.0 * batch * m * n * k
    moved = (batch * m * k + batch * k * n + batch * m * n) * itemsize
    efficiency = (TEMPLATE_EFFICIENCY if dtype != torch.float32 else
                  TEMPLATE_EFFICIENCY_TF32 if _tf32(dtype) else TEMPLATE_EFFICIENCY_FP32)
    cublas = max(flops / peak, moved / bandwidth)
    template = max(flops / (peak * efficiency * _occupancy(batch, m, n)), moved / bandwidth)
    if transcendental:
        template += batch * m * n / 1e6 * TRANSCENDENTAL_US_PER_MELEM
    if not epilogue:
        return False, f"no epilogue to fuse: cuBLAS {cublas:.1f} µs, template {template:.1f} µs (model)"
    separate = separate_passes * batch * m * n * itemsize / bandwidth + (LAUNCH_US if separate_passes == 2 else 0.0)
    wins = template < cublas + separate
    where = "" if separate_passes == 2 else f", in its readers' kernel ({separate_passes} pass{'es' if separate_passes != 1 else ''})"
    return wins, (f"template {template:.1f} µs vs cuBLAS {cublas:.1f} µs + epilogue {separate:.1f} µs{where} "
                  f"(cost model)")


def _occupancy(batch: int, m: int, n: int) -> float:
    """The share of the SMs the template's default tiles keep busy, over its waves: one tile per SM at
    a time, so fewer tiles than SMs leave the rest idle (the template has no split-K; cuBLAS picks one
    where it pays), and a last wave part full idles the rest for a wave. On the H200 (session 27, fp16,
    M 256, a GELU epilogue) the template took 0.020 ms against cuBLAS plus the epilogue's 0.010 at
    N 768, K 3072 (12 tiles), where the model without idle SMs had 2.5 against 4.5 µs. With them
    but not the last wave's (session 28), 2048 x 2304 x 768 with bias+GELU (288 tiles: 2.2 waves, run
    as 3) became a template of 0.028 ms against cuBLAS plus the epilogue's 0.022."""
    block_m, block_n = default_tile(m, n)
    tiles = batch * -(-m // block_m) * -(-n // block_n)
    return tiles / (-(-tiles // NUM_SMS) * NUM_SMS)


def default_tile(m: int, n: int) -> tuple[int, int]:
    """BLOCK_M and BLOCK_N of the template's default config on a GPU (codegen/matmul_template.py
    `default_config`; a block larger than its dimension covers it in one tile, as the fitted one does)."""
    return (128, 128) if m >= 128 and n >= 128 else (64, 64)


def _epilogue_passes(n2: BaseSchedulerNode, readers: dict[str, set[str]], outputs: set[str],
                     by_name: dict[str, BaseSchedulerNode]) -> int:
    """Passes over the product an epilogue n2 costs if it is not fused into the template: 2 (a kernel
    of its own) unless every reader of what it writes is a kernel it can fuse into (no library call, no
    template). Then those readers compute it: 0 where its one reader is the only use of its result (a
    causal mask before a softmax), 1 where the result is stored anyway (a residual kept for later)."""
    members = n2.get_names()
    users: set[str] = set()
    stored = False
    for name in members:
        users |= readers.get(name, set()) - members
        stored |= name in outputs
    nodes = [by_name.get(u) for u in users]
    if not nodes or any(r is None or r.is_extern() or r.is_template() for r in nodes):
        return 2
    return 1 if stored or len(nodes) > 1 else 0


def template_of(group: BaseSchedulerNode) -> MatmulTemplate:
    template = template_in(group)
    assert template is not None, group
    return template


MODEL_DEVICES = ("cuda",)   # where the cost model may keep an epilogue out of a template (what it was fitted on)


def fusion_check(mode: str, max_autotune: bool, readers: dict[str, set[str]], outputs: set[str],
                 by_name: dict[str, BaseSchedulerNode] | None = None, lt_activations: bool = False):
    """can_fuse's `template_check(n1, n2)`. A prologue n1 must have no reader but the template (not
    even an epilogue of it) and not be a graph output: it is recomputed per tile, never stored. An epilogue n2 is
    refused in "auto" without max-autotune where the cost model keeps cuBLAS even with it fused, unless
    (`lt_activations`) it is the ReLU or GELU that cuBLASLt applies itself, the product's sole reader
    (matmul_activation.py): it stays with the addmm, and codegen makes the two one call."""
    def check(n1: BaseSchedulerNode, n2: BaseSchedulerNode) -> str | None:
        if n2.is_template() and not n1.is_template():
            elsewhere = sorted(readers.get(n1.name, set()) - {template_of(n2).name})
            if elsewhere or n1.name in outputs:
                return (f"{n1.name} is read outside the template too ({', '.join(elsewhere) or 'a graph output'}): "
                        f"a prologue is recomputed per tile, never stored")
            return None
        if mode != "auto" or max_autotune:
            return None
        t = template_of(n1)
        if t.get_device().type not in MODEL_DEVICES:
            return None
        ops = [o.op for m in n2.get_nodes() for o in m.node.origins]
        passes = _epilogue_passes(n2, readers, outputs, by_name or {})
        wins, why = prefer_template(*t.sizes(), t.layout.dtype, True, transcendental(ops), passes)
        if not wins and lt_activations:
            inside = {m.name for m in n2.get_nodes()}
            if epilogue_activation(t, n2.get_nodes(),
                                   lambda name: name in outputs or bool(readers.get(name, set()) - inside)) is not None:
                return None
        return None if wins else f"cuBLAS preferred for {t.name}: {why}"
    return check


def choose_matmuls(nodes: list[BaseSchedulerNode], mode: str, max_autotune: bool, lt_activations: bool = False,
                   outputs: set[str] = frozenset()) -> list[MatmulDecision]:
    """Set each template's `choice` (see the module docstring) after fusion; one record each.
    `lt_activations` (option cublaslt_activations): in "auto", an addmm whose whole epilogue is a ReLU
    or tanh-GELU that cuBLASLt applies itself goes to cuBLAS, whatever the cost model says of a
    template (H200, fp16, session 29: cuBLASLt's tanh-GELU ran at 0.103 ms where the template's ReLU
    ran at 0.108, 16384 x 2304 x 768; 0.210 against 0.230 at 16384 x 4096 x 1024). `outputs`: the
    graph's outputs (the product and what lies between must be read by the epilogue alone)."""
    readers: dict[str, set[int]] = {}
    for gi, g in enumerate(nodes):
        for member in g.get_nodes():
            for d in member.reads:
                readers.setdefault(d.name, set()).add(gi)
    decisions = []
    for gi, group in enumerate(nodes):
        if not group.is_template():
            continue
        prologue, template, epilogue = template_parts(group)
        t = template.node
        b, m, n, k = t.sizes()
        if mode == "always" and max_autotune and t.get_device().type in MEASURE_DEVICES:
            choice, reason = "tune", "matmul_templates='always': its configs timed (max-autotune)"
        elif mode == "always":
            choice, reason = "template", "matmul_templates='always'"
        elif max_autotune and t.get_device().type in MEASURE_DEVICES:
            choice, reason = "measure", "timed at compile time (max-autotune)"
        elif lt_activations and mode == "auto" and epilogue and t.get_device().type in MODEL_DEVICES and \
                epilogue_activation(t, epilogue, lambda name, gi=gi: name in outputs
                                    or bool(readers.get(name, set()) - {gi})) is not None:
            choice, reason = "cublas", "cuBLASLt applies the activation itself, faster than a template's epilogue"
        else:
            ops = [o.op for e in epilogue for o in e.node.origins]
            wins, reason = prefer_template(b, m, n, k, t.layout.dtype, bool(epilogue or prologue), transcendental(ops))
            choice = "template" if wins else "cublas"
        t.choice, t.choice_reason = choice, reason
        fused = list(dict.fromkeys(o.op for e in epilogue for o in e.node.origins))
        loaded = list(dict.fromkeys(o.op for p in prologue for o in p.node.origins))
        shape = f"{b} x {m} x {n} x {k}" if t.batched else f"{m} x {n} x {k}"
        decisions.append(MatmulDecision(t.name, str(t.op), f"{shape} {t.layout.dtype}", choice, reason,
                                        [_short(op) for op in fused], prologue=[_short(op) for op in loaded]))
    return decisions


def _short(op: str) -> str:
    """aten.gelu.default → gelu."""
    parts = op.split(".")
    return parts[1] if op.startswith("aten.") and len(parts) > 1 else op

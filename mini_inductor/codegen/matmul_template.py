"""The Triton matmul template: one kernel for mm / addmm / bmm and the pointwise epilogues fused
into it (scheduler/fusion.py), applied to the tile in registers before its one store.

    program p (grid axis 0) → tile (pid_m, pid_n) in grouped order: GROUP_M row blocks walk the
                              column blocks together, so the columns of B they share stay in L2
    grid axis 1             → the batch (bmm)
    persistent (a config)   → one program per SM (NUM_PROGRAMS), each looping over tiles p,
                              p + NUM_PROGRAMS, ...: no tail of short-lived programs (mm, addmm)
    acc[BLOCK_M, BLOCK_N] (fp32) += A[rows, k:k+BLOCK_K] @ B[k:k+BLOCK_K, cols]   for k over K
                              (A or B computed by a fused prologue instead of loaded: a cast, a scale)
    bias (addmm) added to acc; the product cast to the output dtype → epilogue nodes → stores

Rows of A past M and columns of B past N are read wrapped around (row % M) rather than masked: their
results are never stored, and the loads stay unmasked. K is masked only where BLOCK_K does not
divide it (EVEN_K). Inputs take any strides (a transposed weight of a linear layer included).

    tma (a config; option matmul_tma) → A and B loaded through tensor descriptors made in the kernel
                              (`tl.make_tensor_descriptor`: Hopper's TMA; `tma_layouts` says where the
                              layouts allow it), tiles past an edge read as zeros. The descriptors take
                              global scratch memory, which the launcher allocates (launcher.py); the
                              wrapper launches the pointer-load twin (`unaligned_twin`) where an operand's
                              address is not 16-byte aligned, which TMA requires

Epilogue nodes run under the same `ops` handler as every kernel (triton_ops.py): yindex holds the
tile's rows [BLOCK_M, 1], xindex its columns [1, BLOCK_N] and bindex the batch, and a load of the
template's output at the index it is stored at reuses the register. A prologue node runs inside the
K loop over its operand's tile (a_row, a_col for A; b_row, b_col for B), its store taken as the tile.
"""
from __future__ import annotations

import dataclasses

import sympy
import torch

from ..config import interpreting
from ..errors import CodegenError
from ..lowering.ir import MatmulTemplate, ReinterpretView
from ..lowering.virtualized import set_ops_handler
from ..runtime.launch.autotune import next_power_of_2
from ..scheduler.matmul_choice import default_tile
from ..scheduler.nodes import SchedulerNode
from .triton import INT32_MAX, TritonKernel, _broadcast_reads, _split
from .triton_ops import XINDEX, YINDEX, CSEVar, TritonOps, _operand, texpr, tl_dtype

TF32 = ', input_precision="tf32"'   # tl.dot's argument for float32 operands where TF32 is allowed

BINDEX = sympy.Symbol("bindex", integer=True, nonnegative=True)


@dataclasses.dataclass(frozen=True)
class MatmulConfig:
    """Block sizes, the group width of the program order, warps and pipeline stages of one launch."""

    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    GROUP_M: int = 8
    num_warps: int = 4
    num_stages: int = 3
    persistent: bool = False
    tma: bool = False

    def tiles(self, m: int, n: int) -> int:
        return -(-m // self.BLOCK_M) * -(-n // self.BLOCK_N)

    def meta(self, k: int, programs: int = 0) -> dict[str, int]:
        """The kernel's constexpr arguments; `programs`: a persistent launch's program count."""
        meta = {"BLOCK_M": self.BLOCK_M, "BLOCK_N": self.BLOCK_N, "BLOCK_K": self.BLOCK_K,
                "GROUP_M": self.GROUP_M, "EVEN_K": int(k % self.BLOCK_K == 0)}
        if self.persistent:
            meta["NUM_PROGRAMS"] = programs
        return meta

    def grid(self, batch: int, m: int, n: int, batched: bool, programs: int = 0) -> tuple[int, ...]:
        tiles = min(self.tiles(m, n), programs) if self.persistent else self.tiles(m, n)
        return (tiles, batch) if batched else (tiles,)

    def label(self) -> str:
        return (f"{self.BLOCK_M}x{self.BLOCK_N}x{self.BLOCK_K} g{self.GROUP_M} "
                f"w{self.num_warps} s{self.num_stages}" + (" persistent" if self.persistent else "")
                + (" tma" if self.tma else ""))


# Candidates for the H100 (fp16/bf16; fp32 halves BLOCK_K): wide tiles with 8 warps for large
# problems, smaller ones with deeper pipelines where the tile count would leave SMs idle.
H100_CONFIGS = (
    MatmulConfig(128, 128, 64, 8, 8, 3),
    MatmulConfig(128, 256, 64, 8, 8, 3),
    MatmulConfig(256, 128, 64, 8, 8, 3),
    MatmulConfig(128, 128, 32, 8, 4, 4),
    MatmulConfig(64, 128, 64, 8, 4, 4),
    MatmulConfig(128, 64, 64, 8, 4, 4),
    MatmulConfig(64, 64, 64, 8, 4, 5),
    MatmulConfig(64, 64, 32, 8, 2, 5),
    MatmulConfig(32, 64, 32, 8, 2, 5),
    MatmulConfig(128, 128, 64, 8, 8, 3, persistent=True),
    MatmulConfig(128, 256, 64, 8, 8, 3, persistent=True),
    MatmulConfig(128, 64, 64, 8, 4, 4, persistent=True),
)


def _fit(config: MatmulConfig, m: int, n: int, k: int, dtype: torch.dtype) -> MatmulConfig:
    """`config` with blocks no larger than the problem needs (at least 16: tl.dot's smallest)."""
    block_k = config.BLOCK_K // 2 if dtype == torch.float32 else config.BLOCK_K
    return dataclasses.replace(config, BLOCK_M=max(16, min(config.BLOCK_M, next_power_of_2(m))),
                               BLOCK_N=max(16, min(config.BLOCK_N, next_power_of_2(n))),
                               BLOCK_K=max(16, min(block_k, next_power_of_2(k))))


def matmul_configs(m: int, n: int, k: int, dtype: torch.dtype, batched: bool = False,
                   tma: bool = False) -> list[MatmulConfig]:
    """What max-autotune times: the default first, then H100_CONFIGS fitted to the sizes, once each
    (persistent ones only for mm and addmm); with `tma` (option matmul_tma, where the operands' layouts
    allow it), each of them again with TMA loads, after them."""
    found = [default_config(m, n, k, dtype)]
    for c in H100_CONFIGS:
        if c.persistent and batched:
            continue
        c = _fit(c, m, n, k, dtype)
        if c not in found:
            found.append(c)
    if tma:
        found += [dataclasses.replace(c, tma=True) for c in found]
    return found


def tma_layouts(template: MatmulTemplate, loaded) -> dict[str, str] | None:
    """How each operand of `loaded` ("a", "b": those the kernel loads, not a prologue's) is read through
    a tensor descriptor: "direct" (its contiguous dim is the last of its tile: A's K, B's N) or
    "transposed" (the first: a linear layer's weight, B = W.T, is read as W's [BLOCK_N, BLOCK_K] tiles,
    then transposed); None where one cannot be. TMA's rules: 2-D, a 2-byte dtype here, one dim
    contiguous, the other's stride and the offset multiples of 16 bytes (the address too: the wrapper
    checks it at run time)."""
    if template.batched:
        return None
    found = {}
    for operand in sorted(loaded):
        lay = (template.a if operand == "a" else template.b).layout
        if lay.dtype not in (torch.float16, torch.bfloat16) or len(lay.size) != 2:
            return None
        try:
            rows, cols = (int(s) for s in lay.stride)
            offset = int(lay.offset)
        except TypeError:   # symbolic strides
            return None
        k_stride, other = (cols, rows) if operand == "a" else (rows, cols)   # A is [M, K], B is [K, N]
        if 0 in (k_stride, other):   # a broadcast operand: not known to work with TMA (not tried on a GPU)
            return None
        if k_stride == 1 and (other * 2) % 16 == 0:         # A row-major; B a weight's transpose
            found[operand] = "direct" if operand == "a" else "transposed"
        elif other == 1 and (k_stride * 2) % 16 == 0:       # A transposed; B row-major
            found[operand] = "transposed" if operand == "a" else "direct"
        else:
            return None
        if (offset * 2) % 16:
            return None
    return found


def default_config(m: int, n: int, k: int, dtype: torch.dtype) -> MatmulConfig:
    """The config launched without measurements. Under Triton's interpreter the smallest tiles (it
    runs one program at a time in numpy, so fewer, bigger tiles gain nothing)."""
    if interpreting():
        return _fit(MatmulConfig(32, 32, 32, 8, 4, 1), m, n, k, torch.float16)
    return gpu_default_config(m, n, k, dtype)


def gpu_default_config(m: int, n: int, k: int, dtype: torch.dtype) -> MatmulConfig:
    """The default config on a GPU: its tiles are the cost model's (scheduler/matmul_choice.py)."""
    if default_tile(m, n) == (128, 128):
        return _fit(MatmulConfig(128, 128, 64, 8, 8, 3), m, n, k, dtype)
    return _fit(MatmulConfig(64, 64, 64, 8, 4, 4), m, n, k, dtype)


def program_count(device: torch.device) -> int:
    """Programs of a persistent launch: one per SM (two under the interpreter, to test the loop)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 2


def operand_buffer(x) -> str:
    """The buffer a template operand reads (a view's underlying one)."""
    return x.data.name if isinstance(x, ReinterpretView) else x.name


_name = operand_buffer


class MatmulTemplateKernel(TritonKernel):
    """Builds one template kernel: the matmul of `template` and its `epilogue` nodes.

    Shares TritonKernel's bookkeeping (loads, stores, CSE, dropped stores of buffers that stay in
    the kernel, the signature) but not its loop structure: the tile is 2-D over the output.
    Key methods: `generate()`, then `signature()`, `launch()`.
    """

    def __init__(self, template: MatmulTemplate, epilogue: list[SchedulerNode], kernel_local: set[str],
                 buffer_dtypes: dict[str, torch.dtype], buffer_spans: dict[str, int] | None = None,
                 config: MatmulConfig | None = None, prologue: list[SchedulerNode] = (), tma: bool = False):
        self.template = template
        self.nodes = epilogue
        # prologue node → the operand ("a" or "b") it computes where the template would load it
        self.prologue = {p.name: ("a" if p.name == _name(template.a) else "b") for p in prologue}
        self.prologue_nodes = list(prologue)
        self.operands: dict[str, CSEVar] = {}     # operand → its value in the K loop (a prologue's)
        self.name = "triton_tem"
        self.batch, self.m, self.n, self.k = template.sizes()
        self.numel, self.rnumel = self.batch * self.m * self.n, 1
        self.config = config or dataclasses.replace(default_config(self.m, self.n, self.k, template.layout.dtype),
                                                    tma=tma)
        # operand → "direct" / "transposed" where it is loaded through a tensor descriptor
        self.tma_loads = tma_layouts(template, {"a", "b"} - set(self.prologue.values())) or {}
        if self.config.tma and not self.tma_loads:
            self.config = dataclasses.replace(self.config, tma=False)
        if not self.config.tma:
            self.tma_loads = {}
        self.dynamic, self.is_reduction, self.outer, self.looped = False, False, False, False
        self.size_bounds: dict = {}
        self.tiling = None
        self.tile_2d = True      # its loads' pointers are [BLOCK_M, BLOCK_N] blocks (triton_ops._pointer)
        self.row_mask = "mask_mn"
        self.kernel_local = set(kernel_local)
        self.buffer_dtypes = buffer_dtypes
        self.buffer_spans = buffer_spans or {}
        self.sections = {}
        self.section = self._section(0)
        self.counter = 0
        self.loads: list[str] = []
        self.stores: list[str] = []
        self.store_cache = {}
        self.load_misses: set[str] = set()
        self.reduction_cache = {}
        spans = [_span(x) for x in (template.a, template.b, template) if x is not None]
        self.int64 = max(spans) > INT32_MAX
        self.indirect = {}
        self.device_asserts = True
        self.broadcast_reads: set[str] = set()
        self.loaded_in: dict[str, set[int]] = {}
        self.recomputed: dict = {}
        self.online: dict = {}
        self.var_ranges = {YINDEX: sympy.Integer(self.m), XINDEX: sympy.Integer(self.n)}
        if template.batched:
            self.var_ranges[BINDEX] = sympy.Integer(self.batch)

    def _tile_vars(self) -> list[sympy.Expr]:
        return [BINDEX, YINDEX, XINDEX] if self.template.batched else [YINDEX, XINDEX]

    def generate(self, allow_tf32: bool = True) -> str:
        t = self.template
        self.allow_tf32 = allow_tf32
        for x in (t.a, t.b):
            if _name(x) not in self.loads and _name(x) not in self.prologue:
                self.loads.append(_name(x))
        for node in self.prologue_nodes:
            self._prologue(node, self.prologue[node.name])
        self.section, self.broadcast_reads = self._section(0), set()
        handler = TritonOps(self, False)
        value = CSEVar("acc", torch.float32)
        if t.bias is not None:
            bias = handler.load(_name(t.bias), _broadcast_index(t.bias, self._tile_vars()))
            value = self.emit(f"acc + {handler.to_dtype(bias, torch.float32)}", torch.float32)
        value = handler.to_dtype(value, t.layout.dtype)
        with set_ops_handler(handler):
            handler.store(t.name, t.layout.index(self._tile_vars()), value)
        for node in self.nodes:
            self._epilogue(node)
        return self._render()

    def _prologue(self, node: SchedulerNode, operand: str) -> None:
        """Generate a prologue node over one operand's tile in the K loop (section 1: A's, 3: B's):
        its value at [rows, k] (A) or [k, columns] (B), where the template would have loaded it."""
        rows, cols = (self.m, self.k) if operand == "a" else (self.k, self.n)
        r, c = PROLOGUE_VARS[operand]
        saved = self.var_ranges, self.row_mask
        self.var_ranges = {r: sympy.Integer(rows), c: sympy.Integer(cols)}
        self.row_mask = f"{operand}_mask"
        self.section = self._section(1 if operand == "a" else 3)
        sizes = [int(s) for s in node.body.sizes]
        # the element the template reads at [r, c] is element `flat` of the prologue's contiguous output
        # (the operand is that buffer, or a transpose of it)
        flat = (self.template.a if operand == "a" else self.template.b).layout.index([r, c])
        xvars = [r, c] if sizes == [rows, cols] and flat == r * cols + c else _split(flat, sizes)
        self.broadcast_reads = _broadcast_reads(node)
        index, rindex = node.body.reindex(xvars, [])
        ops = _PrologueOps(self, operand)
        try:
            with set_ops_handler(ops):
                node.node.store_body(index, rindex)
        except NotImplementedError as e:
            raise CodegenError(str(e), op=", ".join(sorted({o.op for o in node.node.origins})), node=node.name) from e
        self.operands[operand] = ops.value
        self.var_ranges, self.row_mask = saved

    def removed_buffers(self) -> set[str]:
        return super().removed_buffers() | set(self.prologue)   # computed in the K loop, never stored

    def _epilogue(self, node: SchedulerNode) -> None:
        """Generate one epilogue node over the tile: its loop variables from the tile's position."""
        sizes = [int(s) for s in node.body.sizes]
        tile = self._tile_vars()
        shape = [self.batch, self.m, self.n] if self.template.batched else [self.m, self.n]
        if sizes == shape:
            xvars = list(tile)
        else:
            flat = sympy.Integer(0)
            for v, s in zip(tile, shape):
                flat = flat * s + v
            xvars = _split(flat, sizes)
        self.broadcast_reads = _broadcast_reads(node)
        index, rindex = node.body.reindex(xvars, [])
        try:
            with set_ops_handler(TritonOps(self, False)):
                node.node.store_body(index, rindex)
        except NotImplementedError as e:
            raise CodegenError(str(e), op=", ".join(sorted({o.op for o in node.node.origins})), node=node.name) from e

    def _render(self) -> str:
        t = self.template
        args = self.signature()
        loads = [b for b in args if b not in self.stores]
        stores = [b for b in args if b in self.stores]
        argnames = {**{b: f"in_ptr{i}" for i, b in enumerate(loads)}, **{b: f"out_ptr{i}" for i, b in enumerate(stores)}}
        self.argnames = argnames
        persistent = self.config.persistent
        if persistent and t.batched:
            raise CodegenError("a persistent matmul template of a bmm", node=t.name)
        constexprs = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M", "EVEN_K") + (("NUM_PROGRAMS",) if persistent else ())
        params = [argnames[b] for b in args] + [f"{p}: tl.constexpr" for p in constexprs]
        a_lay, b_lay = t.a.layout, t.b.layout
        *a_batch, sam, sak = [int(s) for s in a_lay.stride]
        *b_batch, sbk, sbn = [int(s) for s in b_lay.stride]
        m, n, k = self.m, self.n, self.k
        wide = ".to(tl.int64)" if self.int64 else ""
        body = [
            "pid = tile" if persistent else "pid = tl.program_id(0)",
            f"grid_m = ({m} + BLOCK_M - 1) // BLOCK_M",
            f"grid_n = ({n} + BLOCK_N - 1) // BLOCK_N",
            "# grouped order: GROUP_M row blocks take the column blocks in turn (B's columns stay in L2)",
            "in_group = GROUP_M * grid_n",
            "first_m = (pid // in_group) * GROUP_M",
            "group_rows = tl.minimum(grid_m - first_m, GROUP_M)",
            "pid_m = first_m + (pid % in_group) % group_rows",
            "pid_n = (pid % in_group) // group_rows",
            f"offs_m = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)){wide}",
            f"offs_n = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)){wide}",
            "offs_k = tl.arange(0, BLOCK_K)",
            "# rows and columns past the edge read row % M, column % N: computed, never stored",
            f"rows_a = offs_m % {m}",
            f"cols_b = offs_n % {n}",
        ]
        a_base, b_base = int(a_lay.offset), int(b_lay.offset)
        a_off, b_off = str(a_base), str(b_base)
        if t.batched:
            body.insert(1, f"bindex = tl.program_id(1){wide}")
            a_off = f"{a_base} + bindex * {a_batch[0]}"
            b_off = f"{b_base} + bindex * {b_batch[0]}"
        pointers = [x for x in ("a", "b") if x not in self.operands and x not in self.tma_loads]
        if "a" in pointers:
            body.append(f"a_ptrs = {argnames[_name(t.a)]} + ({a_off} + rows_a[:, None] * {sam} + offs_k[None, :] * {sak})")
        if "b" in pointers:
            body.append(f"b_ptrs = {argnames[_name(t.b)]} + ({b_off} + offs_k[:, None] * {sbk} + cols_b[None, :] * {sbn})")
        # the descriptors, made once per program (before a persistent program's loop over tiles)
        descriptors = [self._descriptor(x, argnames, (a_base, sam, sak) if x == "a" else (b_base, sbk, sbn))
                       for x in sorted(self.tma_loads)]
        body += [
            "acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
            f"for k in range(0, {k}, BLOCK_K):",
            *["    " + ln for ln in self._operand_lines("a", k, argnames)],
            *["    " + ln for ln in self._operand_lines("b", k, argnames)],
            *(["    a = triton_helpers.round_tf32(a)", "    b = triton_helpers.round_tf32(b)"]
              if self._precision() == TF32 else []),
            f"    acc = tl.dot(a, b, acc{self._precision()})",
            *([f"    a_ptrs += BLOCK_K * {sak}"] if "a" in pointers else []),
            *([f"    b_ptrs += BLOCK_K * {sbk}"] if "b" in pointers else []),
            "yindex = offs_m[:, None]",
            "xindex = offs_n[None, :]",
            f"mask_mn = (yindex < {m}) & (xindex < {n})",
        ]
        sec = self.sections[0]
        body += self._lines(sec.lines, argnames, 0)
        if persistent:
            tiles = f"(({m} + BLOCK_M - 1) // BLOCK_M) * (({n} + BLOCK_N - 1) // BLOCK_N)"
            body = [f"for tile in range(tl.program_id(0), {tiles}, NUM_PROGRAMS):"] + ["    " + ln for ln in body]
        body = descriptors + body
        out = ["@triton.jit", f"def {self.name}({', '.join(params)}):"]
        out += ["    " + ln for ln in body]
        return "\n".join(out) + "\n"

    def _descriptor(self, operand: str, argnames: dict[str, str], layout: tuple[int, int, int]) -> str:
        """The line that makes `operand`'s tensor descriptor: over [M, K] ([K, N] for B) as stored, or
        over the transpose where the first dim is the contiguous one."""
        t = self.template
        base, s0, s1 = layout
        pointer = argnames[_name(t.a if operand == "a" else t.b)] + (f" + {base}" if base else "")
        dims = [(self.m, s0, "BLOCK_M"), (self.k, s1, "BLOCK_K")] if operand == "a" else \
            [(self.k, s0, "BLOCK_K"), (self.n, s1, "BLOCK_N")]
        if self.tma_loads[operand] == "transposed":
            dims.reverse()
        (n0, st0, b0), (n1, _, b1) = dims
        return (f"{operand}_desc = tl.make_tensor_descriptor({pointer}, shape=[{n0}, {n1}], strides=[{st0}, 1], "
                f"block_shape=[{b0}, {b1}])")

    def _operand_lines(self, operand: str, k: int, argnames: dict[str, str]) -> list[str]:
        """The K loop's lines that give `a` (or `b`) its [BLOCK_M, BLOCK_K] ([BLOCK_K, BLOCK_N]) tile:
        a load, or the prologue's code; past K its elements are zeros."""
        if operand in self.tma_loads:   # (TMA reads zeros past every edge: no mask)
            at = ["pid_m * BLOCK_M", "k"] if operand == "a" else ["k", "pid_n * BLOCK_N"]
            if self.tma_loads[operand] == "transposed":
                return [f"{operand} = {operand}_desc.load([{at[1]}, {at[0]}]).T"]
            return [f"{operand} = {operand}_desc.load([{at[0]}, {at[1]}])"]
        if operand not in self.operands:
            edge = "offs_k[None, :]" if operand == "a" else "offs_k[:, None]"
            return ["if EVEN_K:", f"    {operand} = tl.load({operand}_ptrs)", "else:",
                    f"    {operand} = tl.load({operand}_ptrs, mask={edge} < {k} - k, other=0.0)"]
        r, c = PROLOGUE_VARS[operand]
        # the mask has the tile's whole shape: a prologue's loads, index values and constants are padded
        # to it, and so is a value that does not depend on the row (or the column) at all
        if operand == "a":
            lines = [f"{r} = rows_a[:, None]", f"{c} = (k + offs_k)[None, :]",
                     f"a_mask = tl.broadcast_to({c} < {k}, (BLOCK_M, BLOCK_K))"]
        else:
            lines = [f"{r} = (k + offs_k)[:, None]", f"{c} = cols_b[None, :]",
                     f"b_mask = tl.broadcast_to({r} < {k}, (BLOCK_K, BLOCK_N))"]
        section = 1 if operand == "a" else 3
        lines += self._lines(self.sections[section].lines, argnames, section)
        value = self.operands[operand]   # zeros past K, in the operand's dtype (tl.dot takes one dtype)
        return lines + [f"{operand} = tl.where({operand}_mask, {value}, 0.0).to({tl_dtype(value.dtype)})"]

    def _precision(self) -> str:
        """fp32 inputs: TF32 tensor cores only where torch allows them for matmuls, the operands
        rounded to TF32 as cuBLAS rounds them (triton_helpers.round_tf32)."""
        if self.template.a.get_dtype() != torch.float32:
            return ""
        # eager's CPU matmuls never use TF32: neither does the interpreter's run of a CPU template
        on_cuda = self.template.get_device().type == "cuda"
        return TF32 if self.allow_tf32 and on_cuda else ', input_precision="ieee"'

    def launch(self) -> tuple[tuple[int, ...], dict[str, int], int, int]:
        """(grid, constexpr arguments, num_warps, num_stages) of the launch."""
        c = self.config
        programs = program_count(self.template.get_device()) if c.persistent else 0
        return (c.grid(self.batch, self.m, self.n, self.template.batched, programs), c.meta(self.k, programs),
                c.num_warps, c.num_stages)


PROLOGUE_VARS = {
    "a": (sympy.Symbol("a_row", integer=True, nonnegative=True), sympy.Symbol("a_col", integer=True, nonnegative=True)),
    "b": (sympy.Symbol("b_row", integer=True, nonnegative=True), sympy.Symbol("b_col", integer=True, nonnegative=True)),
}


class _PrologueOps(TritonOps):
    """The ops handler of a prologue: blocks of the operand's tile shape, and its store kept as the
    operand's value instead of written."""

    def __init__(self, kernel, operand: str):
        super().__init__(kernel, False)
        self.operand = operand
        self.value: CSEVar | None = None

    def _pointer(self, name: str, index, after_loop: bool = False) -> str:
        full = set(PROLOGUE_VARS[self.operand]) <= index.free_symbols
        pad = "" if full else f" + tl.zeros({self.operand}_mask.shape, tl.int32)"
        return f"@{name}@ + {_operand(self.k.wide_index(index))}{pad}"

    def store(self, name: str, index, value, mode: str | None = None, after_loop: bool = False):
        self.value = self.to_dtype(value, self.k.buffer_dtypes[name])

    def index_expr(self, expr, dtype: torch.dtype):
        # the tile's row and column variables are blocks already (TritonOps would wrap an index
        # without xindex in tl.full, which takes only a scalar on a GPU); padded to the tile's shape
        expr = self._index(expr)
        if not expr.free_symbols & set(PROLOGUE_VARS[self.operand]):
            return super().index_expr(expr, dtype)
        full = set(PROLOGUE_VARS[self.operand]) <= expr.free_symbols
        pad = "" if full else f" + tl.zeros({self.operand}_mask.shape, tl.int64)"
        text = texpr(self.k.wide_index(expr))
        return self.k.emit(f"({text}{pad}).to({tl_dtype(dtype)})", dtype)


def _span(x) -> int:
    lay = x.layout
    return int(lay.offset) + 1 + sum((int(s) - 1) * int(st) for s, st in zip(lay.size, lay.stride))


def _broadcast_index(bias, tile: list[sympy.Expr]) -> sympy.Expr:
    """The element of `bias` (broadcast to the output, aligned right) that the tile position reads."""
    lay = bias.layout
    dims = len(lay.size)
    idx = [v if int(s) != 1 else sympy.Integer(0) for v, s in zip(tile[-dims:], lay.size)] if dims else []
    return lay.index(idx)

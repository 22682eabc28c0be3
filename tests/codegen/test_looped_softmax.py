"""A looped softmax (rows too long to keep in registers) moves only its input and output: exp(x - max)
is recomputed in each loop instead of being stored and read back, and the row max and sum are
computed in one pass (online softmax), so the row is read twice, not three times. NaN and -inf
rows give what eager gives."""
import re

import pytest
import torch
import torch.nn.functional as F

from common import check
from compile_ir import generate_fn
from mini_inductor import config, metrics
from mini_inductor.debug import trace as debug_trace
from mini_inductor.debug.report import graph_report

LOOPED = {"persistent_reduction_limit": 64}   # rows of 256 then need a looped kernel


def softmax(x):
    return torch.softmax(x, -1)


def kernel_sources(source: str) -> list[str]:
    return re.findall(r"^@triton\.jit\n(def .*?)(?=^\S)", source, re.M | re.S)


def special_rows(dtype: torch.dtype, rows: int = 6, width: int = 256) -> torch.Tensor:
    x = torch.randn(rows, width) * 3
    x[1, ::3] = float("-inf")        # a masked row: -inf at some places
    x[1, :130] = float("-inf")       # ...and for the whole first block of the row
    x[2] = float("-inf")             # fully masked: eager gives NaN
    x[3, 17] = float("nan")
    x[4, 200] = float("inf")
    return x.to(dtype)


def test_looped_softmax_stores_only_its_output_and_reads_the_row_twice():
    sched, gen = generate_fn(softmax, torch.randn(4, 256), **LOOPED)
    (kernel,) = kernel_sources(gen.source)
    assert kernel.count("tl.store(") == 1, kernel
    assert kernel.count("for roffset in range") == 2, kernel      # max+sum, then the output
    assert kernel.count("tl.load(") == 2, kernel
    assert gen.source.count("empty_strided(") == 1, gen.source    # the output, no exp(x - max) buffer
    assert len(sched.nodes) == 1


def test_without_online_softmax_the_row_is_read_three_times_and_still_never_stored():
    _, gen = generate_fn(softmax, torch.randn(4, 256), online_softmax=False, **LOOPED)
    (kernel,) = kernel_sources(gen.source)
    assert kernel.count("for roffset in range") == 3 and kernel.count("tl.store(") == 1, kernel


def test_bytes_moved_by_a_looped_softmax_are_its_input_and_output():
    x = torch.randn(4, 256)
    with debug_trace.capture() as traces, config.patch(**LOOPED):
        torch.compile(softmax, backend="mini_inductor")(x)
    (kernel,) = graph_report(traces[0])["kernels"]
    assert kernel["bytes_read"] + kernel["bytes_written"] == 2 * x.numel() * 4, kernel
    assert traces[0].schedule.estimated_bytes_moved == 2 * x.numel() * 4


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("online", [True, False])
def test_looped_softmax_matches_eager_on_inf_and_nan_rows(dtype, online):
    x = special_rows(dtype)
    with config.patch(online_softmax=online, **LOOPED):
        out = check(softmax, x, kernels=1)
    assert out[2].isnan().all() and out[3].isnan().all() and not out[1].isnan().any()


def test_looped_log_softmax_matches_eager_and_is_online():
    x = special_rows(torch.float32)
    with config.patch(**LOOPED):
        check(lambda x: F.log_softmax(x, -1), x, kernels=1)
    (rec,) = metrics.compiled_graphs
    with open(rec.source_path) as f:
        (kernel,) = kernel_sources(f.read())
    assert kernel.count("for roffset in range") == 2, kernel


def test_a_sum_of_exp_kept_as_an_output_is_nan_where_eager_is():
    def logsumexp_parts(x):
        m = x.amax(-1, keepdim=True)
        return m, torch.exp(x - m).sum(-1)
    with config.patch(**LOOPED):
        check(logsumexp_parts, special_rows(torch.float32), kernels=1)
    (rec,) = metrics.compiled_graphs
    with open(rec.source_path) as f:
        (kernel,) = kernel_sources(f.read())
    assert kernel.count("for roffset in range") == 1, kernel


def test_exp_of_something_else_than_the_max_is_not_taken_for_a_softmax():
    def not_softmax(x, y):
        m = x.amax(-1, keepdim=True)
        return torch.exp(y - m).sum(-1), torch.exp(x - m * 2).sum(-1)
    with config.patch(**LOOPED):
        check(not_softmax, torch.randn(4, 256), torch.randn(4, 256), kernels=1)
    (rec,) = metrics.compiled_graphs
    with open(rec.source_path) as f:
        (kernel,) = kernel_sources(f.read())
    assert kernel.count("for roffset in range") == 2, kernel        # max, then both sums


def test_softmax_of_a_scaled_input_with_a_bias_is_online():
    x, b = torch.randn(3, 300), torch.randn(300)
    with config.patch(**LOOPED):
        check(lambda x, b: torch.softmax(x * 0.5 + b, -1), x, b, kernels=1)
    (rec,) = metrics.compiled_graphs
    with open(rec.source_path) as f:
        (kernel,) = kernel_sources(f.read())
    assert kernel.count("for roffset in range") == 2 and kernel.count("tl.store(") == 1, kernel


@pytest.mark.parametrize("norm", ["layer_norm", "rms_norm"])
def test_looped_norms_store_only_their_output(norm):
    x, w, b = torch.randn(4, 256), torch.randn(256), torch.randn(256)
    fns = {"layer_norm": lambda x, w, b: F.layer_norm(x, (256,), w, b),
           "rms_norm": lambda x, w, b: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w}
    with config.patch(**LOOPED):
        check(fns[norm], x, w, b, kernels=1, atol=1e-4, rtol=1e-4)
    (rec,) = metrics.compiled_graphs
    with open(rec.source_path) as f:
        source = f.read()
    (kernel,) = kernel_sources(source)
    assert kernel.count("for roffset in range") == 2 and kernel.count("tl.store(") == 1, kernel
    assert source.count("empty_strided(") == 1


def test_a_centered_row_read_by_two_later_loops_is_recomputed_not_stored():
    def centered_square_mean(x):
        centered = x - x.mean(-1, keepdim=True)
        return (centered ** 2).mean(-1, keepdim=True) + centered
    _, gen = generate_fn(centered_square_mean, torch.randn(4, 256), **LOOPED)
    (kernel,) = kernel_sources(gen.source)
    assert kernel.count("for roffset in range") == 3 and kernel.count("tl.store(") == 1, kernel
    assert gen.source.count("empty_strided(") == 1, gen.source
    with config.patch(**LOOPED):
        check(centered_square_mean, torch.randn(4, 256), kernels=1, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_looped_softmax_on_the_gpu_matches_eager_on_inf_and_nan_rows(dtype):
    # 32768 > a persistent limit of 4096: looped; 256 rows fill the GPU, so the rows are not split
    # (split_reduction.py)
    x = special_rows(dtype, rows=256, width=32768).cuda()
    with config.patch(persistent_reduction_limit=4096):
        out = check(softmax, x, kernels=1)
    assert out[2].isnan().all() and out[3].isnan().all() and not out[1].isnan().any()
    (rec,) = metrics.compiled_graphs
    with open(rec.source_path) as f:
        source = f.read()
    (kernel,) = kernel_sources(source)
    assert kernel.count("for roffset in range") == 2 and kernel.count("tl.store(") == 1, kernel


def test_a_kernel_reading_its_rows_in_two_loops_takes_one_row_per_program():
    # so that the rows in flight fit in L2 and the second loop's reads hit it (heuristics.py)
    _, gen = generate_fn(softmax, torch.randn(2048, 256), **LOOPED)
    assert re.search(r"triton_red_\w+\[\(2048,\)\]\(.*XBLOCK=1, RBLOCK=256, num_warps=16\)", gen.source), gen.source
    _, gen = generate_fn(lambda x: x.sum(-1), torch.randn(2048, 256), **LOOPED)   # one loop: as before
    assert re.search(r"XBLOCK=4, RBLOCK=512, num_warps=8\)", gen.source), gen.source

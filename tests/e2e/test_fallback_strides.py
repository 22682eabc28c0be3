"""An op run in ATen may return other strides than its FakeTensor said; kernels reading its output
still read the right elements (the wrapper gives the output the strides they were generated for)."""
import re

import pytest
import torch
import torch.nn.functional as F

from common import assert_fallback, check, compile_fn

aten = torch.ops.aten


def _permuted(device):
    """(2, 3, 6, 5) with its last two dims swapped: batch norm's statistics path returns it contiguous,
    its FakeTensor keeps the input's order."""
    return torch.randn(2, 3, 5, 6, device=device).permute(0, 1, 3, 2) * 2 + 1


def _weight_bias(device):
    return torch.randn(3, device=device), torch.randn(3, device=device)


def _assert_strides_differ_from_fake(x, w, b):
    """The premise: eager's batch norm output has other strides than its FakeTensor (else the test tests nothing)."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    op = aten._native_batch_norm_legit.no_stats
    real = op(x, w, b, True, 0.1, 1e-5)[0]
    with FakeTensorMode() as mode:
        fake = op(mode.from_tensor(x), mode.from_tensor(w), mode.from_tensor(b), True, 0.1, 1e-5)[0]
    assert real.stride() != fake.stride()


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CPU graph gets code only under Triton's interpreter (CPU CI); the gpu tests below cover CUDA")
def test_kernel_after_batch_norm_without_running_stats_on_permuted_input_reads_eager_values():
    # the CPU kernel returns other strides than its FakeTensor; CUDA's keeps the input's (the gpu test below)
    device = "cpu"
    x, (w, b) = _permuted(device), _weight_bias(device)
    _assert_strides_differ_from_fake(x, w, b)
    check(lambda x, w, b: (F.batch_norm(x, None, None, w, b, training=True) * 2 + 1).sum(1), x, w, b)
    assert_fallback("_native_batch_norm_legit")


def test_gradients_through_batch_norm_without_running_stats_on_permuted_input_match_eager(device):
    w, b = _weight_bias(device)
    check(lambda x, w, b: (F.batch_norm(x, None, None, w, b, training=True) * 2 + 1).sum(1),
          _permuted(device), w, b, grad=True)


def test_matmul_reading_a_transposed_batch_norm_output_reads_eager_values(device):
    # an extern call takes the fallback's output through a strided view (reinterpret), not a kernel
    w, b = _weight_bias(device)
    m = torch.randn(6, 4, device=device)
    check(lambda x, w, b, m: F.batch_norm(x, None, None, w, b, training=True).transpose(2, 3) @ m,
          _permuted(device), w, b, m)


def test_batch_norm_output_returned_next_to_a_kernel_reading_it_has_eager_values(device):
    # the returned output has the strides the graph was compiled for (its FakeTensor's), as Inductor's do
    w, b = _weight_bias(device)
    check(lambda x, w, b: (lambda y: (y, y.exp()))(F.batch_norm(x, None, None, w, b, training=True)),
          _permuted(device), w, b, check_stride=False)


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CPU graph gets code only under Triton's interpreter (CPU CI); the gpu tests below cover CUDA")
def test_every_fresh_aten_output_is_guarded_and_views_are_not():
    from mini_inductor import metrics
    device = "cpu"   # the buffers and strides below are the CPU graph's
    x = _permuted(device)
    w, b = _weight_bias(device)
    fn = compile_fn(lambda x, w, b, m: (F.batch_norm(x, None, None, w, b, training=True).flatten(0, 2) @ m).t())
    fn(x, w, b, torch.randn(5, 4, device=device))
    (graph,) = metrics.compiled_graphs
    source = open(graph.source_path).read()
    # batch norm's output (its statistics are unused) and the matmul's, each before anything reads it;
    # the returned transpose is a view of the matmul's output, not an output of its own
    guarded = re.findall(r"\n( *)(buf\d+) = [^\n]*\n\1if \2\.stride\(\) != ", source)
    assert [name for _, name in guarded] == ["buf1", "buf5"], source
    # batch norm's output is expected with eager's strides (contiguous; its FakeTensor says (90, 30, 1, 6))
    assert "if buf1.stride() != (90, 30, 5, 1): buf1 = restrided(buf1, (2, 3, 6, 5), (90, 30, 5, 1))" in source
    assert source.count("restrided(") == 1 + 2   # the helper's definition and the two guards


@pytest.mark.gpu
def test_kernel_after_batch_norm_without_running_stats_on_permuted_input_reads_eager_values_on_gpu():
    w, b = _weight_bias("cuda")
    check(lambda x, w, b: (F.batch_norm(x, None, None, w, b, training=True) * 2 + 1).sum(1),
          _permuted("cuda"), w, b)

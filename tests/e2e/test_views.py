"""Views feeding pointwise ops, non-contiguous inputs, indexing and concatenation."""
import torch
import torch.nn.functional as F

from common import check


def test_transpose_then_add(device):
    x, y = torch.randn(8, 16, device=device), torch.randn(16, 8, device=device)
    check(lambda x, y: x.t() + y, x, y)


def test_transposed_output_keeps_eager_strides(device):
    x = torch.randn(8, 16, device=device)
    check(lambda x: x.t() * 2 + 1, x)


def test_permute_3d_then_mul(device):
    x, y = torch.randn(2, 3, 4, device=device), torch.randn(4, 2, 3, device=device)
    check(lambda x, y: x.permute(2, 0, 1) * y, x, y)


def test_reshape_then_mul(device):
    x, y = torch.randn(4, 6, device=device), torch.randn(2, 12, device=device)
    check(lambda x, y: x.reshape(2, 12) * y + 1, x, y)


def test_reshape_of_permuted_tensor_copies(device):
    x = torch.randn(4, 6, 2, device=device)
    check(lambda x: x.permute(1, 0, 2).reshape(6, 8) + 1, x)


def test_flatten_of_transposed_input(device):
    x = torch.randn(8, 4, device=device)
    check(lambda x: torch.flatten(x.t() * 3), x)


def test_expand_then_add(device):
    x, y = torch.randn(1, 8, device=device), torch.randn(6, 8, device=device)
    check(lambda x, y: x.expand(6, 8) + y, x, y)


def test_slice_with_step(device):
    x = torch.randn(16, 12, device=device)
    check(lambda x: x[::2, 1::3] * 2, x)


def test_slice_with_negative_start(device):
    x = torch.randn(16, 12, device=device)
    check(lambda x: x[-5:, :-2] + 1, x)


def test_select_then_add(device):
    x = torch.randn(4, 8, 6, device=device)
    check(lambda x: x[:, 3] + x[1, :4, 2].unsqueeze(-1), x)


def test_squeeze_and_unsqueeze(device):
    x = torch.randn(4, 1, 8, device=device)
    check(lambda x: (x.squeeze(1) * 2).unsqueeze(0) + x.unsqueeze(-1).squeeze(-1), x)


def test_as_strided_overlapping_windows(device):
    x = torch.randn(32, device=device)
    check(lambda x: torch.as_strided(x, (5, 4), (3, 1), 2) * 2, x)


def test_unfold_windows_then_sum(device):
    x = torch.randn(40, device=device)
    check(lambda x: x.unfold(0, 8, 4).sum(-1), x)


def test_diagonal_then_add(device):
    x = torch.randn(8, 8, device=device)
    check(lambda x: torch.diagonal(x) + 1, x)


def test_transposed_input_times_two_is_one_kernel(device):
    x = torch.randn(16, 24, device=device).t()
    check(lambda x: x * 2, x, kernels=1)


def test_sliced_noncontiguous_input(device):
    x = torch.randn(16, 24, device=device)[2:14, ::3]
    check(lambda x: torch.relu(x) + x.sum(0), x)


def test_noncontiguous_inputs_of_different_layouts(device):
    x = torch.randn(12, 8, device=device).t()
    y = torch.randn(8, 24, device=device)[:, ::2]
    check(lambda x, y: x * y - 1, x, y)


def test_cat_of_pointwise_results(device):
    x, y = torch.randn(4, 8, device=device), torch.randn(6, 8, device=device)
    check(lambda x, y: torch.cat([x + 1, y * 2], dim=0), x, y)


def test_cat_along_last_dim(device):
    x, y = torch.randn(4, 3, device=device), torch.randn(4, 5, device=device)
    check(lambda x, y: torch.cat([torch.relu(x), y, x], dim=1), x, y)


def test_stack(device):
    x, y = torch.randn(4, 3, device=device), torch.randn(4, 3, device=device)
    check(lambda x, y: torch.stack([x, y * 2], dim=1), x, y)


def test_split_then_pointwise(device):
    x = torch.randn(10, 4, device=device)
    check(lambda x: [t * i for i, t in enumerate(torch.split(x, 3), start=1)], x)


def test_chunk_and_add_halves(device):
    x = torch.randn(8, 6, device=device)
    check(lambda x: x.chunk(2, dim=-1)[0] + x.chunk(2, dim=-1)[1], x)


def test_flip(device):
    x = torch.randn(6, 5, device=device)
    check(lambda x: torch.flip(x, [0, 1]) + x, x)


def test_repeat(device):
    x = torch.randn(3, 4, device=device)
    check(lambda x: x.repeat(2, 3) * 2, x)


def test_constant_pad(device):
    x = torch.randn(2, 5, 6, device=device)
    check(lambda x: F.pad(x, (1, 2, 0, 3), value=-1.0) + 1, x)


def test_index_select_with_index_tensor(device):
    x = torch.randn(10, 6, device=device)
    idx = torch.tensor([7, 0, 3, 3, 9], device=device)
    check(lambda x, i: torch.index_select(x, 0, i) * 2, x, idx)


def test_advanced_indexing_with_negative_indices(device):
    x = torch.randn(10, 6, device=device)
    idx = torch.tensor([-1, 0, -3, 2], device=device)
    check(lambda x, i: x[i] + 1, x, idx)


def test_gather_along_last_dim(device):
    x = torch.randn(6, 8, device=device)
    idx = torch.randint(0, 8, (6, 3), device=device)
    check(lambda x, i: torch.gather(x, 1, i), x, idx)


def test_embedding_lookup(device):
    weight = torch.randn(20, 8, device=device)
    ids = torch.tensor([[1, 5, 19], [0, 5, 2]], device=device)
    check(lambda ids, w: F.embedding(ids, w) * 2, ids, weight)


def test_view_ops_gradients_match_eager(device):
    x = torch.randn(6, 8, device=device)
    check(lambda x: (x.t()[::2] * 3).reshape(-1) + torch.cat([x[0], x[-1], x[2]]).flip(0), x, grad=True)


def test_as_strided_with_an_offset_follows_the_inputs_own_offset_at_every_call(device):
    # the explicit offset counts from the storage's start; the input's own offset (a slice of a
    # larger tensor) can change between calls without a recompile (review, session 32: ours read
    # elements 6, 7 at offset 3 and 3, 4 at offset 0, as if compiled for offset 2)
    base = torch.arange(20., device=device)
    fn = lambda x: x.as_strided((2, 2), (1, 1), 5) * 1  # noqa: E731
    compiled = torch.compile(fn, backend="mini_inductor")
    for start in (2, 3, 0):
        x = base[start:start + 10]
        torch.testing.assert_close(compiled(x), fn(x), rtol=0, atol=0)


def test_as_strided_of_a_view_starts_at_the_views_offset(device):
    x = torch.arange(24., device=device).view(4, 6)
    check(lambda x: x[1:].as_strided((2, 3), (1, 2)) + 1, x)
    check(lambda x: (x * 2)[1:].as_strided((2, 3), (1, 2)) + 1, x)


def test_as_strided_of_an_intermediate_reads_eagers_layout(device):
    # x.t() * 2 is column-major in eager: the storage as_strided reads must hold it so
    x = torch.arange(24., device=device).view(4, 6)
    check(lambda x: (x.t() * 2).as_strided((3, 3), (1, 2), 1) + 1, x)
    check(lambda x: x.t().clone().as_strided((2, 2), (1, 6), 0) + 1, x)
    check(lambda x: torch.where(x.t() > 3, x.t(), 0.).as_strided((3, 3), (2, 1), 2) * 3, x)

"""Outputs have eager's strides (on dims of size > 1) and values where the graph's FakeTensors or a
decomposition would give another layout: pointwise ops with a broadcast operand (eager's
TensorIterator orders dims by the operands that are not broadcast), batch norm (eager's kernels
allocate contiguous or channels last; cuDNN alike), and repeat (always a new contiguous tensor).
`check` compares values, dtypes, shapes and strides with eager's."""
import pytest
import torch
import torch.nn.functional as F

from common import check


def _transposed(*shape, device="cpu", dtype=torch.float32):
    """A tensor of `shape` whose last two dims are swapped in memory."""
    return torch.randn(*shape[:-2], shape[-1], shape[-2], device=device, dtype=dtype).transpose(-2, -1)


# ─── pointwise ops with a broadcast operand ───────────────────────────────────────────────────────

@pytest.mark.parametrize("op", [torch.logical_and, torch.logical_or, torch.logical_xor, torch.heaviside])
def test_binary_op_with_broadcast_first_operand_keeps_the_other_operands_layout(op, device):
    check(lambda a, b: op(a, b.abs() + 1), torch.randn(1, 1, device=device), _transposed(2, 3, device=device))


def test_logical_and_of_broadcast_and_transposed_has_eagers_strides_in_float16(device):
    check(lambda x0, x1: torch.logical_and(x1, x0), _transposed(2, 3, device=device, dtype=torch.float16),
          torch.randn(1, 1, device=device, dtype=torch.float16))


def test_floor_divide_of_transposed_by_broadcast_has_eagers_strides(device):
    check(lambda x0, x3: torch.floor_divide(x3.transpose(-2, -1), x0.abs() + 1),
          torch.randn(1, 1, 1, device=device), torch.randn(2, 3, 4, device=device))


def test_pointwise_op_reading_an_input_updated_through_a_slice_has_eagers_strides(device):
    def fn(x0, x2):   # functionalized: the update is a slice_scatter into a copy of x0, eager's layout
        x0[0:1].mul_(2)
        return torch.remainder(x2, x0.abs() + 1)
    check(fn, torch.randint(-4, 5, (2, 2), device=device).t(), torch.randn(1, 1, device=device))


def test_view_of_a_pointwise_output_with_broadcast_operand_has_eagers_strides(device):
    # masked_fill is no TensorIterator op: it fills a contiguous copy of its input
    check(lambda x0, x1: (torch.logical_and(x1, x0).t(), torch.copysign(x1, x0)[1:], x0.masked_fill(x1 > 0, 1.0)),
          _transposed(3, 4, device=device), torch.randn(1, 1, device=device))


def test_masked_fill_by_a_mask_laid_out_by_its_operands_is_contiguous_in_one_kernel(device):
    # fuzz seed 239 prog 12: the mask (logical_xor of a broadcast and a diagonal view) has eager's
    # strides (1, 3); masked_fill's `where` took them, where eager fills a contiguous copy: (2, 1)
    def fn(x0, x1):
        mask = torch.logical_xor(x1, torch.diagonal(x0, 0, 2, 0))
        return x1.masked_fill(mask, 0), (x0.float().sum(0).t() * 2).masked_fill(mask.t(), 1.0)
    check(fn, torch.randint(-4, 5, (2, 3, 2), device=device), torch.randint(-4, 5, (1,), device=device))
    check(lambda x, m: x.masked_fill(m, 0.5) * 2, torch.randn(4, 6, device=device).t(),
          torch.rand(6, 4, device=device) > 0.5, kernels=1)


# ─── repeat ───────────────────────────────────────────────────────────────────────────────────────

def test_repeat_along_a_dim_of_size_one_returns_a_contiguous_tensor_in_one_kernel(device):
    check(lambda x: x.repeat((1, 2, 1)), torch.randn(2, 1, 1, device=device), kernels=1)


def test_repeat_of_a_transposed_input_returns_a_contiguous_tensor(device):
    check(lambda x: (x.t().repeat(2, 2), x.transpose(-2, -1).repeat(2, 1, 1)),
          torch.randn(3, 2, device=device))


def test_repeat_with_autograd_has_eagers_strides_and_grads(device):
    check(lambda x: ((x * 2).t().repeat(2, 1, 1), x[:, :1, None].repeat(1, 2, 1)), torch.randn(3, 2, device=device),
          grad=True)


# ─── batch norm ───────────────────────────────────────────────────────────────────────────────────

def _params(c, device):
    return (torch.randn(c, device=device), torch.randn(c, device=device),
            torch.randn(c, device=device), torch.rand(c, device=device) + 0.5)


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_of_transposed_2d_input_has_eagers_strides(training, device):
    x = _transposed(3, 6, device=device)
    w, b, mean, var = _params(6, device)
    check(lambda x, w, b, m, v: F.batch_norm(x, m, v, w, b, training=training), x, w, b, mean, var)


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_of_4d_input_with_swapped_last_dims_has_eagers_strides(training, device):
    x = _transposed(1, 2, 2, 5, device=device)
    w, b, mean, var = _params(2, device)
    check(lambda x, w, b, m, v: F.batch_norm(x, m, v, w, b, training=training), x, w, b, mean, var)


def test_batch_norm_without_running_stats_on_transposed_input_has_eagers_strides(device):
    check(lambda x, w: F.batch_norm(x, None, None, w, None, training=True),
          _transposed(3, 6, device=device), torch.randn(6, device=device))


def test_batch_norm_of_transposed_input_and_its_flattening_have_eagers_strides_and_values(device):
    def fn(x0, x1):
        out = F.batch_norm(x0.t(), None, None, None, x1, training=True)
        return out, out.flatten()
    check(fn,
          torch.randn(4, 2, device=device), torch.randn(4, device=device))


@pytest.mark.parametrize("training", [True, False])
def test_batch_norm_with_autograd_on_transposed_input_has_eagers_strides_and_grads(training, device):
    def fn(x, w, b, g):   # running statistics made inside: inputs that require grad cannot be them
        mean, var = torch.zeros(3, device=x.device) + 0.1, torch.ones(3, device=x.device) * 1.5
        out = F.batch_norm(x, mean, var, w, b, training=training)
        # a tensor saved for backward keeps the strides the backward graph reads it with
        return out, F.rms_norm(out, (5,), g, eps=1e-5)
    check(fn, _transposed(2, 3, 4, 5, device=device), torch.randn(3, device=device), torch.randn(3, device=device),
          torch.rand(5, device=device), grad=True)


def test_elementwise_strides_are_eagers_for_mixed_layouts_and_broadcasts():
    from mini_inductor.lowering.eager_strides import elementwise_strides
    gen = torch.Generator().manual_seed(0)
    layouts = [lambda: torch.randn(2, 3, 4), lambda: torch.randn(4, 3, 2).permute(2, 1, 0),
               lambda: torch.randn(2, 4, 3).transpose(1, 2), lambda: torch.randn(1, 3, 1), lambda: torch.randn(4),
               lambda: torch.randn(1, 1, 4), lambda: torch.randn(3, 1).expand(3, 4), lambda: torch.randn(()),
               lambda: torch.randn(2, 3, 8)[:, :, ::2], lambda: torch.randn(3, 2, 4).transpose(0, 1)]
    for _ in range(200):
        picks = torch.randint(len(layouts), (3,), generator=gen, device="cpu").tolist()
        a, b, c = (layouts[i]() for i in picks)
        want = torch.where(a > 0, b, c)
        assert elementwise_strides(list(want.shape), [a > 0, b, c]) == list(want.stride()), picks
        want = torch.add(a, b)
        assert elementwise_strides(list(want.shape), [a, b]) == list(want.stride()), picks


@pytest.mark.gpu
@pytest.mark.parametrize("op", ["native_batch_norm", "_native_batch_norm_legit"])
def test_batch_norm_aten_op_called_directly_on_cuda_keeps_the_inputs_layout_on_gpu(op):
    # the ATen op runs CUDA's own kernel (output allocated like the input), never cuDNN
    x = _transposed(2, 3, 4, 5, device="cuda")
    w, b, _, _ = _params(3, "cuda")
    fn = {"native_batch_norm": lambda x, w, b: torch.native_batch_norm(x, w, b, None, None, True, 0.1, 1e-5)[0],
          "_native_batch_norm_legit": lambda x, w, b: torch._native_batch_norm_legit(x, w, b, True, 0.1, 1e-5)[0]}[op]
    check(fn, x, w, b)


@pytest.mark.gpu
@pytest.mark.parametrize("dims", [2, 4])
def test_f_batch_norm_on_cuda_has_eagers_strides_with_and_without_cudnn_on_gpu(dims):
    # F.batch_norm goes to cuDNN for 3+ dims with weight and bias (contiguous output), else to the
    # native kernel (the input's layout)
    x = _transposed(3, 6, device="cuda") if dims == 2 else _transposed(2, 3, 4, 5, device="cuda")
    c = x.shape[1]
    w, b, mean, var = _params(c, "cuda")
    for args in [(w, b), (None, None)]:
        check(lambda x, m, v, *wb: F.batch_norm(x, m, v, *wb, training=False), x, mean, var, *args)
        check(lambda x, *wb: F.batch_norm(x, None, None, *wb, training=True), x, *args)


# ─── sort: eager's size-1 strides, which later ops order dims by ──────────────────────────────────

def _sort_then_index(x, idx):
    v = torch.sort(x, dim=1, stable=True).values
    w = torch.movedim(v, 2, 0)
    return v, w, w[:, idx]


def _sort_add_then_index(x, idx):
    v = torch.sort(x, dim=1, stable=True).values + 1
    return v.movedim(2, 0)[:, idx]


def _check_static_and_dynamic(fn, dynamic, *args):
    if not dynamic:
        check(fn, *args)
        return
    expected = fn(*args)
    compiled = torch.compile(fn, backend="mini_inductor", dynamic=True, options={"dynamic_shapes": "symbolic"})
    got = compiled(*args)
    for got, want in zip(*[o if isinstance(o, tuple) else (o,) for o in (got, expected)]):
        assert got.stride() == want.stride() and torch.equal(got, want), (got.stride(), want.stride())


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("fn", [_sort_then_index, _sort_add_then_index])
def test_an_index_of_a_permuted_sort_of_a_size_one_dim_has_eagers_strides(fn, dynamic, device):
    # fuzz seed 259 prog 339: eager's sort keeps a dense input's strides, (2, 1, 1) here, where the
    # FakeTensor has (2, 2, 1); the advanced index of its permutation then came out (1, 2, 6), not
    # (3, 1, 1); with `+ 1` between them the same (review: the pointwise op's size-1 strides were the
    # FakeTensor's: its Python number is an operand of eager's TensorIterator, which then orders dims)
    x = torch.randn(3, 2, 1, device=device).half().transpose(-2, -1)
    _check_static_and_dynamic(fn, dynamic, x, torch.tensor([1, 0, 0], device=device))


@pytest.mark.parametrize("op", [lambda c: c + 1, lambda c: c * 2.0, lambda c: (c == 1).float(), lambda c: 1 - c,
                                lambda c: torch.maximum(c, torch.tensor(0.0, device=c.device)), torch.exp,
                                lambda c: c.pow(2), lambda c: c.clamp(min=0), lambda c: c + c],
                         ids=["add", "mul", "eq", "rsub", "maximum_0d", "exp", "pow", "clamp", "add_self"])
@pytest.mark.parametrize("size1_stride", [7, 1])
def test_pointwise_ops_give_a_size_one_dim_eagers_stride_where_an_index_reads_it(op, size1_stride, device):
    # a number operand (x + 1, x == 1) or a 0-d tensor keeps eager's TensorIterator off its fast path,
    # which orders the dims by the strides, size-1 dims too; a number parameter (pow, clamp) does not
    x = torch.empty_strided((3, 1, 2), (2, size1_stride, 1), device=device).normal_()
    check(lambda x, idx: op(x).movedim(2, 0)[:, idx], x, torch.tensor([1, 0, 0], device=device))


# ─── advanced indexing: eager's TensorIterator layout, not the FakeTensor's ─────────────────────────

_INDEX_CASES = {   # x's shape and strides, the index tensors (None: a dim taken whole)
    "unsqueezed_transpose": ((3, 1, 4, 5), (20, 4, 1, 4), [None, None, [1, 0]]),
    "size_one_dims_broadcast_index": ((1, 3, 1, 3), (1, 1, 1, 3), [None, [2, 0], [0, 0]]),
    "not_adjacent": ((4, 1, 2, 1, 3), (1, 8, 4, 4, 8), [[0, 1], None, [[0, 1], [1, 0]]]),
    "row_index_of_a_column_major": ((4, 3), (1, 4), [[2, 0, 1]]),
}


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("case", list(_INDEX_CASES))
def test_advanced_indexing_has_eagers_strides_where_the_fake_tensor_differs(case, dynamic, device):
    # the FakeTensor's meta function for aten.index orders the output's dims otherwise than eager's
    # TensorIterator in about 2% of random cases, observably in half of them (review, session 31:
    # x.unsqueeze(1)[:, :, idx] of a transposed x gave (10, 1, 1, 2), eager (10, 10, 5, 1))
    shape, stride, idx = _INDEX_CASES[case]
    x = torch.randn(max(shape) ** len(shape), device=device).as_strided(shape, stride)
    indices = [None if i is None else torch.tensor(i, device=device) for i in idx]
    fn = lambda x, indices: torch.ops.aten.index.Tensor(x * 2, indices)   # noqa: E731
    expected = fn(x, indices)
    options = dict(dynamic=True, options={"dynamic_shapes": "symbolic"}) if dynamic else {}
    got = torch.compile(fn, backend="mini_inductor", **options)(x, indices)
    observable = lambda t: [s for s, n in zip(t.stride(), t.shape) if n > 1]   # noqa: E731
    assert observable(got) == observable(expected) and torch.equal(got, expected), (got.stride(), expected.stride())


def test_index_strides_are_eagers_over_random_layouts_and_indices():
    # eager_strides.index_strides against eager's aten.index itself (CPU), int64 and int32 indices
    import random
    from mini_inductor.lowering.eager_strides import index_strides
    rng = random.Random(0)
    checked = 0
    for _ in range(600):
        nd = rng.randint(1, 4)
        x = torch.randn(*[rng.choice([1, 1, 2, 3, 4]) for _ in range(nd)]).permute(rng.sample(range(nd), nd))
        if rng.random() < 0.3:
            x = x.unsqueeze(rng.randint(0, x.dim()))
        shape = [rng.choice([1, 2, 3]) for _ in range(rng.randint(0, 2))]
        indices = [None] * x.dim()
        for d in sorted(rng.sample(range(x.dim()), rng.randint(1, x.dim()))):
            t = torch.randint(0, x.shape[d], shape if rng.random() < 0.7 else shape[1:],
                              dtype=rng.choice([torch.int64, torch.int32]))
            indices[d] = t.t() if t.dim() == 2 and t.shape[0] == t.shape[1] and rng.random() < 0.3 else t
        while indices[-1] is None:
            indices.pop()
        want = torch.ops.aten.index.Tensor(x, indices)
        assert index_strides(x, indices) == list(want.stride()), (x.shape, x.stride(), indices)
        checked += 1
    assert checked == 600


_SIZE_ONE_CASES = {   # op, x's shape and strides, a permutation, the dim indexed after it
    "clone": (lambda x: x.clone(), (2, 1, 1), (1, 100, 1), [0, 2, 1], 1),
    "isinf": (torch.isinf, (3, 2, 3, 1), (3, 9, 1, 2), [0, 3, 2, 1], 2),
    "threshold": (lambda x: F.threshold(x, 0.1, 20.0), (1, 2, 3), (2, 3, 1), [1, 2, 0], 1),
    "xlogy": (lambda x: torch.xlogy(x, 2.0), (2, 2, 1, 1), (2, 1, 2, 100), [0, 1, 3, 2], 1),
    "hardtanh": (F.hardtanh, (3, 1, 2, 3), (6, 1, 3, 1), [2, 3, 0, 1], 2),
    "pow_scalar": (lambda x: 2 ** x, (2, 2, 2), (2, 4, 1), [0, 1, 2], 2),
}


@pytest.mark.parametrize("case", list(_SIZE_ONE_CASES))
def test_a_size_one_dims_stride_read_by_an_index_is_eagers_after_more_ops(case, device):
    # review, session 31: taking the exact size-1 strides of every pointwise op overwrote right ones:
    # clone and hardtanh keep a dense input's (empty_like), threshold's decomposition has a number
    # operand that eager's single kernel does not; and 2 ** x is a new contiguous tensor in eager
    op, shape, stride, perm, k = _SIZE_ONE_CASES[case]
    x = torch.empty_strided(shape, stride, device=device).uniform_(0.5, 1.5)
    n = [shape[d] for d in perm][k]
    idx = torch.arange(n, device=device).flip(0).repeat(2)[:max(2, n)]
    check(lambda x, idx: op(x).permute(perm)[(slice(None),) * k + (idx,)], x, idx)


@pytest.mark.parametrize("dynamic", [False, True])
def test_an_index_by_data_sized_indices_has_eagers_strides(dynamic, device):
    # review, session 31: with the index from nonzero, the sizes read from data had no hint and the
    # FakeTensor's layout stayed
    def fn(x, m):
        return torch.ops.aten.index.Tensor(x * 2, [None, None, m.nonzero().squeeze(1)])
    x = torch.randn(80, device=device).as_strided((3, 1, 4, 5), (20, 4, 1, 4))
    m = torch.tensor([True, False, True, False], device=device)
    with torch._dynamo.config.patch(capture_dynamic_output_shape_ops=True):
        got = torch.compile(fn, backend="mini_inductor", dynamic=dynamic)(x, m)
    want = fn(x, m)
    observable = lambda t: [s for s, n in zip(t.stride(), t.shape) if n > 1]   # noqa: E731
    assert observable(got) == observable(want) and torch.equal(got, want), (got.stride(), want.stride())


# ─── ops whose eager kernel allocates in the input's suggested memory format ────────────────────

def test_adaptive_average_pool_of_a_channels_last_input_is_channels_last(device):
    # not dividing the input: the decomposition builds a contiguous result; eager's kernels (CPU and
    # CUDA) follow the input's memory format (review, session 33)
    check(lambda x: F.adaptive_avg_pool2d(x, (4, 4)),
          torch.randn(2, 4, 5, 6, device=device).to(memory_format=torch.channels_last))


@pytest.mark.parametrize("name,fn", [
    ("roll", lambda x: x.roll(1, 2)),
    ("roll without dims", lambda x: torch.roll(x, 3)),
    ("roll by a whole turn", lambda x: torch.roll(x, 0, 2)),
    ("max_unpool2d", lambda x: F.max_unpool2d(*F.max_pool2d(x, 2, return_indices=True), 2)),
])
def test_roll_and_unpool_of_a_channels_last_input_match_eager_values(name, fn, device):
    # their layouts differ between eager's CPU kernels (the input's) and CUDA's (contiguous), and
    # between cases of one op: only the values are compared
    x = torch.randn(2, 4, 5, 6, device=device).to(memory_format=torch.channels_last)
    torch.testing.assert_close(torch.compile(fn, backend="mini_inductor")(x), fn(x))

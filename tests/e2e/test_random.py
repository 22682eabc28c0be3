"""Random ops as generated Philox code: reproducible under torch.manual_seed, fresh values on every
call, the right distributions, independent streams per op, and dropout whose forward and backward
use the same mask. Values need not equal eager's (as with Inductor), so statistics are checked,
with bounds loose enough for a few thousand samples (each is several standard errors wide)."""
import pytest
import torch
import torch.nn.functional as F

from common import COUNTS_KERNELS, assert_no_fallbacks, compile_fn

N = (64, 64)  # 4096 samples: the standard error of a uniform mean is ~0.0045, of a normal's ~0.016


def _records():
    from mini_inductor import metrics
    return metrics.compiled_graphs


def _assert_generated(op: str) -> None:
    """`op` ran in a Triton kernel that calls tl.rand/tl.randn, with one seed draw per graph."""
    if not COUNTS_KERNELS:
        return
    assert_no_fallbacks()
    records = [r for r in _records() if not r.cache_hit]
    kernels = [n for r in records for n in r.kernel_names]
    assert any(op in name for name in kernels), f"no kernel fused {op}: {kernels}"
    sources = "".join(open(r.source_path).read() for r in records)
    assert "tl.rand(" in sources or "tl.randn(" in sources, "the kernels do not call Triton's Philox"
    for r in records:
        assert r.extern_calls.count("aten.randint.low") <= 1, f"{r.name}: more than one seed draw {r.extern_calls}"


def test_rand_is_reproducible_under_manual_seed(device):
    fn = compile_fn(lambda x: x + torch.rand(N, device=x.device) + torch.randn_like(x))
    x = torch.zeros(N, device=device)
    torch.manual_seed(123)
    first = fn(x).clone()   # on a GPU a CUDA graph's next run overwrites its outputs
    torch.manual_seed(123)
    second = fn(x).clone()
    torch.manual_seed(124)
    other = fn(x)
    assert torch.equal(first, second), "the same seed gave different values"
    assert not torch.equal(first, other), "a different seed gave the same values"
    _assert_generated("rand")


def test_rand_differs_from_call_to_call_without_reseeding(device):
    fn = compile_fn(lambda x: torch.rand_like(x))
    x = torch.empty(N, device=device)
    a, b = fn(x).clone(), fn(x)   # clone: on a GPU a CUDA graph's next run overwrites its outputs
    assert (a != b).float().mean() > 0.99, "two calls drew (mostly) the same numbers"


def test_rand_is_uniform_on_zero_one(device):
    u = compile_fn(lambda: torch.rand(N, device=device))()
    assert u.shape == N and u.dtype == torch.float32 and u.device.type == torch.device(device).type
    assert u.min() >= 0 and u.max() < 1
    assert abs(u.mean().item() - 0.5) < 0.03
    assert abs(u.std().item() - (1 / 12) ** 0.5) < 0.02
    # each tenth of [0, 1) holds about a tenth of the draws (expected 410, sd ~19)
    counts = torch.histc(u.cpu(), bins=10, min=0, max=1)
    assert counts.min() > 300 and counts.max() < 520, counts
    _assert_generated("rand")


def test_randn_is_standard_normal(device):
    z = compile_fn(lambda x: torch.randn_like(x))(torch.empty(N, device=device))
    assert abs(z.mean().item()) < 0.08
    assert abs(z.std().item() - 1) < 0.06
    inside = (z.abs() < 1).float().mean().item()
    assert abs(inside - 0.6827) < 0.04, f"{inside:.3f} of the draws within one sd"
    _assert_generated("randn")


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_rand_in_other_float_dtypes(device, dtype):
    u, z = compile_fn(lambda: (torch.rand(N, device=device, dtype=dtype),
                               torch.randn(N, device=device, dtype=dtype)))()
    assert u.dtype == dtype and z.dtype == dtype
    assert u.min() >= 0 and u.max() < 1, "rounding to a low-precision dtype must not reach 1.0"
    assert abs(u.float().mean().item() - 0.5) < 0.03
    assert abs(z.float().std().item() - 1) < 0.06


def test_two_rand_calls_in_one_graph_are_independent(device):
    a, b, c = compile_fn(lambda x: (torch.rand_like(x), torch.rand_like(x), torch.randn_like(x)))(
        torch.empty(N, device=device))
    for name, (p, q) in {"rand/rand": (a, b), "rand/randn": (a, c)}.items():
        assert not torch.equal(p, q), f"{name}: the same stream twice"
        corr = torch.corrcoef(torch.stack([p.flatten(), q.flatten()]))[0, 1].item()
        assert abs(corr) < 0.06, f"{name}: correlation {corr:.3f}"


def test_random_values_are_the_same_in_every_kernel_that_reads_them(device):
    # the mask is used by two outputs of different shapes: each kernel recomputes or loads the same draws
    def fn(x):
        mask = torch.rand_like(x) < 0.5
        return x * mask, mask.sum(0), mask
    x = torch.randn(N, device=device)
    out, counts, mask = compile_fn(fn)(x)
    assert torch.equal(out, x * mask)
    assert torch.equal(counts, mask.sum(0))


@pytest.mark.parametrize("cols", [1000, 5000], ids=["persistent", "looped"])
def test_random_values_inside_a_reduction(device, cols):
    sums = compile_fn(lambda x: (torch.rand_like(x) * x).sum(-1))(torch.ones(4, cols, device=device))
    # a sum of n uniforms: mean n/2, sd sqrt(n/12); 5 sd either way
    assert ((sums - cols / 2).abs() < 5 * (cols / 12) ** 0.5).all(), sums
    assert len(set(sums.tolist())) == 4, "rows drew the same numbers"
    _assert_generated("rand")


def test_bernoulli_with_float_p_has_mean_p(device):
    fn = compile_fn(lambda x: (torch.bernoulli(x, 0.3), x.bernoulli(0.8)))
    a, b = fn(torch.empty(N, device=device))
    for draws, p in ((a, 0.3), (b, 0.8)):
        assert draws.dtype == torch.float32
        assert set(draws.unique().tolist()) <= {0.0, 1.0}
        assert abs(draws.mean().item() - p) < 0.03, f"mean {draws.mean().item():.3f}, p = {p}"
    _assert_generated("bernoulli")


def test_bernoulli_with_tensor_p_follows_each_probability(device):
    p = torch.tensor([0.0, 0.1, 0.5, 0.9, 1.0], device=device).repeat_interleave(1024).reshape(5, 1024)
    draws = compile_fn(lambda p: torch.bernoulli(p))(p)
    means = draws.mean(1).tolist()
    assert means[0] == 0 and means[-1] == 1, means
    for got, want in zip(means[1:4], (0.1, 0.5, 0.9)):
        assert abs(got - want) < 0.05, means
    _assert_generated("rand")


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_zeroes_a_fraction_p_and_scales_the_rest(device, p):
    x = torch.rand(N, device=device) + 1  # no zeros of its own
    y = compile_fn(lambda x: F.dropout(x, p, training=True))(x)
    dropped = (y == 0).float().mean().item()
    assert abs(dropped - p) < 0.03, f"dropped {dropped:.3f}, p = {p}"
    kept = y != 0
    torch.testing.assert_close(y[kept], x[kept] / (1 - p))
    _assert_generated("dropout")


def test_dropout_edge_probabilities(device):
    x = torch.rand(8, 8, device=device) + 1
    none, every = compile_fn(lambda x: (F.dropout(x, 0.0, training=True), F.dropout(x, 1.0, training=True)))(x)
    assert torch.equal(none, x)
    assert torch.equal(every, torch.zeros_like(x)), "p = 1 drops everything (no NaN from 0 * inf)"


def test_dropout_in_half_precision(device):
    x = (torch.rand(N, device=device) + 1).half()
    y = compile_fn(lambda x: F.dropout(x, 0.25, training=True))(x)
    assert y.dtype == torch.float16
    assert abs((y == 0).float().mean().item() - 0.25) < 0.03
    kept = y != 0
    torch.testing.assert_close(y[kept], (x[kept].float() / 0.75).half())


def test_dropout_in_eval_mode_is_the_identity(device):
    x = torch.randn(8, 8, device=device)
    assert torch.equal(compile_fn(lambda x: F.dropout(x, 0.5, training=False))(x), x)


class _DropoutMLP(torch.nn.Module):
    def __init__(self, p):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 4)
        self.p = p

    def forward(self, x, mask=None):
        h = torch.tanh(self.fc1(x)) + 2  # never 0: a zero after dropout means "dropped"
        dropped = F.dropout(h, self.p, training=True) if mask is None else h * mask / (1 - self.p)
        return self.fc2(dropped).square().mean(), dropped


def _step_matches_eager_with_its_mask(compiled, model, x, what: str = "") -> torch.Tensor:
    """A compiled training step's loss, dropout output and gradients equal eager's run with the mask the
    compiled step drew (read from its output: a zero means dropped); returns that mask."""
    loss, dropped = compiled(x)
    loss.backward()
    grads = {name: p.grad.clone() for name, p in model.named_parameters()}
    mask = (dropped != 0).float()
    model.zero_grad()
    eager_loss, eager_dropped = model(x, mask)
    eager_loss.backward()
    torch.testing.assert_close(dropped, eager_dropped)
    torch.testing.assert_close(loss, eager_loss)
    for name, p in model.named_parameters():
        torch.testing.assert_close(grads[name], p.grad, msg=lambda m: f"{what}grad of {name}: {m}")
    return mask


def test_dropout_training_step_grads_match_eager_with_the_same_mask(device):
    torch.manual_seed(0)
    model = _DropoutMLP(p=0.4).to(device)
    x = torch.randn(32, 16, device=device)
    mask = _step_matches_eager_with_its_mask(compile_fn(model), model, x)
    assert 0.3 < 1 - mask.mean().item() < 0.5
    if COUNTS_KERNELS:
        records = {r.name.split("_")[0]: r for r in _records()}
        assert "aten.randint.low" in records["forward"].extern_calls
        # the backward reads the mask the forward saved: it draws nothing itself
        assert "aten.randint.low" not in records["backward"].extern_calls, records["backward"].extern_calls
        _assert_generated("dropout")


def test_dropout_training_steps_draw_new_masks_and_replay_under_a_seed(device):
    model = _DropoutMLP(p=0.5).to(device)
    step = compile_fn(model)
    x = torch.randn(32, 16, device=device)
    torch.manual_seed(7)
    _, first = step(x)
    _, second = step(x)
    torch.manual_seed(7)
    _, replay = step(x)
    assert not torch.equal(first != 0, second != 0), "two steps used the same mask"
    assert torch.equal(first, replay), "the same seed gave another mask"


@pytest.mark.gpu
def test_random_ops_under_cuda_graphs_draw_fresh_values_each_replay_and_follow_manual_seed():
    fn = torch.compile(lambda x: (F.dropout(x, 0.5, training=True), torch.randn_like(x)),
                       backend="mini_inductor", mode="reduce-overhead")
    from mini_inductor.runtime.cudagraphs import trees

    x = torch.rand(N, device="cuda") + 1
    torch.manual_seed(5)
    steps = []   # what each call did in the tree, and the generator's state after it (for a failure's message)

    def call():
        before = {k: trees.stats().get(k, 0) for k in ("warmups", "recordings", "replays", "fallback_runs")}
        out = tuple(t.clone() for t in fn(x))
        after = trees.stats()
        steps.append(({k: after.get(k, 0) - v for k, v in before.items() if after.get(k, 0) != v},
                      torch.cuda.get_rng_state()[-16:].tolist()))
        return out
    runs = [call() for _ in range(4)]  # warmup, record, replays
    torch.manual_seed(5)
    again = [tuple(t.clone() for t in fn(x)) for _ in range(4)]
    for i in range(1, 4):
        # (call 1 returned the warm-up's mask in full GPU runs, sessions 28 and 32, never alone: the capture
        # stream's RNG writes raced the first replay; tests/cudagraphs/test_rng_streams_and_capture.py)
        assert not torch.equal(runs[i][0], runs[i - 1][0]), f"call {i} repeated the previous dropout mask: {steps}"
        assert not torch.equal(runs[i][1], runs[i - 1][1]), f"call {i} repeated the previous randn values"
    for i, (a, b) in enumerate(zip(runs, again)):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]), f"call {i} not reproducible under manual_seed"
    for dropped, z in runs:
        assert abs((dropped == 0).float().mean().item() - 0.5) < 0.03
        assert abs(z.std().item() - 1) < 0.06


def test_random_ops_in_a_dynamic_graph_are_generated_once_with_independent_streams(device):
    """Under dynamic=True the Philox offsets of each random node are expressions of the sizes: two
    draws over a dynamic batch stay independent at every batch, and the graph compiles once with no
    ATen fallback (dropout in a training loop with a smaller last batch)."""
    from mini_inductor import metrics
    f = torch.compile(lambda x: (torch.rand_like(x), F.dropout(x, 0.3, training=True)), backend="mini_inductor",
                      dynamic=True, fullgraph=True)
    for rows in (48, 40, 72):   # never 64, the columns: duck sizing would give both one symbol
        x = torch.rand(rows, 64, device=device) + 1
        u, y = f(x)
        assert u.shape == y.shape == x.shape
        assert abs(u.mean().item() - 0.5) < 0.03, f"{rows} rows: mean {u.mean().item():.3f}"
        assert abs((y == 0).float().mean().item() - 0.3) < 0.04, f"{rows} rows"
        kept = y != 0
        torch.testing.assert_close(y[kept], x[kept] / 0.7)
        # the dropout's draws are not the rand_like's: its mask is not u < 0.3
        assert not torch.equal(y == 0, u < 0.3), f"{rows} rows: both nodes drew the same stream"
    records = list(metrics.compiled_graphs)
    assert len(records) == 1 and records[0].dynamic_symbols, [r.summary() for r in records]
    assert records[0].dynamic_fallback is None and records[0].ran_eagerly is None
    _assert_generated("rand")


def test_dropout_training_with_a_dynamic_batch_matches_eager_with_the_same_mask(device):
    torch.manual_seed(0)
    model = _DropoutMLP(p=0.4).to(device)
    compiled = torch.compile(model, backend="mini_inductor", dynamic=True)
    for rows in (32, 20):
        model.zero_grad()
        _step_matches_eager_with_its_mask(compiled, model, torch.randn(rows, 16, device=device), f"{rows} rows, ")
    _assert_generated("dropout")

"""Small models: the compiled forward matches eager, and a training step gives eager's parameter gradients."""
import copy

import torch
import torch.nn as nn
import torch.nn.functional as F

from common import assert_same_tensor, check, compile_fn

TOL = dict(atol=1e-4, rtol=1e-4)


class MLP(nn.Module):
    def __init__(self, d_in=16, d_hidden=32, d_out=8):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_hidden)
        self.fc3 = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        x = F.gelu(self.fc2(x))
        return self.fc3(x)


class TransformerBlock(nn.Module):
    """Pre-norm block: x + attn(ln1(x)), then + mlp(ln2(x)); attention through scaled_dot_product_attention."""

    def __init__(self, dim=32, heads=4, hidden=64):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.ln2 = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(attn.transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh"))


def cross_entropy_loss(model, x, target):
    return F.cross_entropy(model(x).flatten(0, -2), target.flatten())


def mse_loss(model, x, target):
    return F.mse_loss(model(x), target)


def assert_training_steps_match(model, loss_fn, batches):
    """Forward + backward for each batch, eagerly and compiled: losses and every parameter gradient agree."""
    eager_model = model
    compiled_model = copy.deepcopy(model)
    compiled_step = compile_fn(lambda x, t: loss_fn(compiled_model, x, t))
    for step, (x, target) in enumerate(batches):
        eager_model.zero_grad(set_to_none=True)
        compiled_model.zero_grad(set_to_none=True)
        expected = loss_fn(eager_model, x, target)
        expected.backward()
        actual = compiled_step(x, target)
        assert_same_tensor(actual, expected, f"step {step} loss", **TOL)
        actual.backward()
        for (name, p_eager), (_, p_compiled) in zip(eager_model.named_parameters(),
                                                    compiled_model.named_parameters()):
            assert p_compiled.grad is not None, f"step {step}: {name} got no gradient"
            assert_same_tensor(p_compiled.grad, p_eager.grad, f"step {step} grad of {name}",
                               check_stride=False, **TOL)


def test_mlp_forward_matches_eager(device):
    model = MLP().to(device)
    check(model, torch.randn(8, 16, device=device), **TOL)


def test_mlp_forward_without_grad_matches_eager(device):
    model = MLP().to(device).eval()
    with torch.no_grad():
        check(model, torch.randn(8, 16, device=device), **TOL)


def test_mlp_training_step_gives_eager_parameter_gradients(device):
    model = MLP().to(device)
    batches = [(torch.randn(8, 16, device=device), torch.randn(8, 8, device=device)) for _ in range(2)]
    assert_training_steps_match(model, mse_loss, batches)


def test_mlp_input_gradients_match_eager(device):
    model = MLP().to(device)
    check(model, torch.randn(8, 16, device=device), grad=True, **TOL)


def test_transformer_block_forward_matches_eager(device):
    model = TransformerBlock().to(device)
    check(model, torch.randn(2, 8, 32, device=device), **TOL)


def test_transformer_block_training_step_gives_eager_parameter_gradients(device):
    model = TransformerBlock().to(device)
    batches = [(torch.randn(2, 8, 32, device=device), torch.randint(0, 32, (2, 8), device=device))
               for _ in range(2)]
    assert_training_steps_match(model, cross_entropy_loss, batches)


def test_transformer_block_input_gradients_match_eager(device):
    model = TransformerBlock().to(device)
    check(model, torch.randn(2, 8, 32, device=device), grad=True, **TOL)

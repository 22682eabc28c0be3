"""Found by the review of the extra tensors' gradients (attention/extra_grads.py): a float tensor requiring
grad that the modification reads only through a comparison (a learned gate used as a mask) gets no
gradient in eager (`.grad` stays None: the comparison cuts the graph). The flash-attention op gave it
a tensor of zeros (flash.py `_backward` called flash_attention_extra_backward for every float extra
that needed grad), and an optimizer then treated the parameter as having a gradient: AdamW's weight
decay (and momentum) moved it where eager leaves it alone. `_backward` now gives it None."""
import math

import torch

from mini_inductor import metrics

B, H, L, E = 2, 2, 20, 8


def _qkv(device, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(B, H, L, E, generator=gen).to(device) for _ in range(3)]


def test_a_float_extra_read_only_in_a_condition_gets_no_gradient_from_the_op(device):
    q, k, v = _qkv(device)
    q.requires_grad_()
    gate = torch.randn(H, L, L, generator=torch.Generator().manual_seed(1)).to(device).requires_grad_()
    out = torch.ops.mini_inductor.flash_attention(q, k, v, [gate], "where(t0 < 0.0, -inf, s * 0.25)")
    out.sum().backward()
    ref = gate.detach().clone().requires_grad_()
    s = (q @ k.transpose(-1, -2) * 0.25).masked_fill(ref < 0.0, float("-inf"))
    (s.softmax(-1) @ v).sum().backward()
    assert ref.grad is None
    assert gate.grad is None, "eager gives no gradient to a tensor read only in a comparison"


class _GatedAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.gate = torch.nn.Parameter(torch.randn(H, L, L, generator=torch.Generator().manual_seed(1)) + 1.0)

    def forward(self, q, k, v):
        s = (q @ k.transpose(-2, -1) / math.sqrt(E)).masked_fill(self.gate < 0, float("-inf"))
        return s.softmax(-1) @ v


def test_a_compiled_learned_gate_trains_as_eager(device, monkeypatch):
    if torch.cuda.is_available():   # float32 attention this small is left as written on a GPU (match.py)
        from mini_inductor.attention import match
        monkeypatch.setattr(match, "float32_left_as_written", lambda *args: None)
    model, ref = _GatedAttention().to(device), _GatedAttention().to(device)
    compiled = torch.compile(model, backend="mini_inductor")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=0.1)
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=1e-2, weight_decay=0.1)
    q, k, v = (t.requires_grad_() for t in _qkv(device))
    compiled(q, k, v).sum().backward()
    ref(*(t.detach().clone().requires_grad_() for t in (q, k, v))).sum().backward()
    assert [r.target for r in metrics.attention] == ["flash"]
    assert ref.gate.grad is None
    assert model.gate.grad is None, "eager's gate has no gradient"
    opt.step()
    ref_opt.step()
    torch.testing.assert_close(model.gate, ref.gate)

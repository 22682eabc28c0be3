"""Random tensors of given sizes and strides: what generated scripts run on when run on their own."""
from __future__ import annotations

import torch


def random_strided(size, stride, dtype: torch.dtype, device, generator: torch.Generator) -> torch.Tensor:
    """A tensor with exactly these sizes and strides, filled with small random values."""
    n = 1 + sum((s - 1) * st for s, st in zip(size, stride)) if all(size) else 0
    if dtype.is_floating_point:
        flat = torch.randn(n, generator=generator, device="cpu").to(dtype)  # the CPU generator, whatever the default device
    elif dtype == torch.bool:
        flat = torch.randint(0, 2, (n,), generator=generator).bool()
    else:
        flat = torch.randint(0, 8, (n,), generator=generator).to(dtype)
    return torch.as_strided(flat.to(device), size, stride)

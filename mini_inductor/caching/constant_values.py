"""The values of a compiled graph's constants (the get_attr tensors AOT autograd lifts out of
`torch.tensor(...)` in the user's code), kept in a front cache entry, which has no ATen graph to read
them from at a hit.

    packed = pack(compiled.constants)      # {name: {"dtype", "shape", "device", "data"}}; ValueError if not kept
    check(packed)                          # what an entry holds, checked as it is read
    constants = unpack(packed)             # the same tensors again, on their devices

Only small, plain, contiguous tensors of the dtypes below are kept (`LARGEST` bytes each, `MOST` of
them); anything else is a ValueError, and the graph gets no entry, as before. The bytes are base64 of
the tensor's memory, so a value comes back bit for bit (a NaN's payload, -0.0). What `unpack` reads is
checked before a tensor is made of it: a known dtype, a shape of at most 8 non-negative sizes whose
bytes the data has exactly, a CPU or CUDA device.
"""
from __future__ import annotations

import base64
import math

import torch
from torch._subclasses.fake_tensor import unset_fake_temporarily

LARGEST = 64 * 1024
MOST = 64
_DTYPES = {str(d): d for d in (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                               torch.float16, torch.bfloat16, torch.float32, torch.float64,
                               torch.complex64, torch.complex128)}
_DEVICES = ("cpu", "cuda")


def pack(constants: dict) -> dict:
    """The constants by name, as JSON values; ValueError for one that is not kept."""
    if len(constants) > MOST:
        raise ValueError(f"{len(constants)} constants, more than {MOST}")
    packed = {}
    for name, t in sorted(constants.items()):
        if type(t) is not torch.Tensor or t.layout != torch.strided or not t.is_contiguous() or t.requires_grad:
            raise ValueError(f"constant {name} is not a plain contiguous tensor")
        if str(t.dtype) not in _DTYPES or t.device.type not in _DEVICES:
            raise ValueError(f"constant {name} is {t.dtype} on {t.device}")
        if t.numel() * t.element_size() > LARGEST:
            raise ValueError(f"constant {name} holds more than {LARGEST} bytes")
        with unset_fake_temporarily():   # (AOT autograd calls our compilers under its fake mode)
            raw = t.detach().cpu().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        packed[str(name)] = {"dtype": str(t.dtype), "shape": list(t.shape), "device": str(t.device),
                             "data": base64.b64encode(raw).decode("ascii")}
    return packed


def check(packed) -> list[tuple[str, torch.dtype, list[int], torch.device, bytes]]:
    """(name, dtype, shape, device, bytes) of each constant `pack` wrote; ValueError for anything it would
    not have written. Nothing is made (a CUDA constant read on a machine without CUDA is still valid)."""
    if not isinstance(packed, dict) or len(packed) > MOST:
        raise ValueError(f"the constants are not a table of at most {MOST}")
    found = []
    for name, value in packed.items():
        if not isinstance(value, dict) or set(value) != {"dtype", "shape", "device", "data"}:
            raise ValueError(f"constant {name!r} is not a packed tensor")
        dtype = _DTYPES.get(value["dtype"]) if isinstance(value["dtype"], str) else None
        shape = value["shape"]
        if dtype is None or not isinstance(shape, list) or len(shape) > 8 or \
                any(type(s) is not int or s < 0 for s in shape):
            raise ValueError(f"constant {name!r}: dtype {value['dtype']!r}, shape {shape!r}")
        device = torch.device(str(value["device"]))
        if device.type not in _DEVICES:
            raise ValueError(f"constant {name!r} on {device}")
        nbytes = math.prod(shape) * dtype.itemsize
        if nbytes > LARGEST or not isinstance(value["data"], str):
            raise ValueError(f"constant {name!r} is too large or has no data")
        raw = base64.b64decode(value["data"], validate=True)
        if len(raw) != nbytes:
            raise ValueError(f"constant {name!r} has {len(raw)} bytes for {nbytes}")
        found.append((str(name), dtype, shape, device, raw))
    return found


def unpack(packed) -> dict[str, torch.Tensor]:
    """The tensors `pack` wrote, on their devices (`check` first)."""
    constants = {}
    for name, dtype, shape, device, raw in check(packed):
        flat = torch.frombuffer(bytearray(raw), dtype=torch.uint8).view(dtype) if raw else torch.empty(0, dtype=dtype)
        constants[name] = flat.reshape(shape).to(device)
    return constants

"""Which collectives a CUDA graph may capture: the partition rule for communication.

    a collective (or its wait) on ...              captured?   why
    ─────────────────────────────────────────────  ─────────   ─────────────────────────────────────────
    CUDA tensors of an NCCL process group           yes         NCCL kernels are stream work: a graph
                                                                records them and replays them in order
    CUDA tensors of another backend (gloo, ...)     no          the backend copies through the host and
                                                                waits on the CPU: nothing to record
    CPU tensors                                     no          no CUDA graph runs CPU work at all
    an op listed in option cudagraph_unsafe_ops     no          the user said so (scheduler/partition.py)

A call that may not be captured becomes an unsafe partition of its own (scheduler/partition.py): the
kernels around it still replay from CUDA graphs, cut at the collective.
"""
from __future__ import annotations

import torch


def group_backend(group_name: str, device: torch.device) -> str:
    """The backend ("nccl", "gloo", ...) that runs `group_name`'s collectives on `device`; "" if unknown."""
    import torch.distributed as dist
    if not dist.is_available() or not dist.is_initialized():
        return ""
    try:
        from torch.distributed.distributed_c10d import _resolve_process_group
        group = _resolve_process_group(group_name)
    except Exception:  # noqa: BLE001  (a name this process cannot resolve: unknown, so never captured)
        return ""
    try:   # the backend of this device type (a group may run NCCL on CUDA and gloo on the CPU)
        return str(group._get_backend(device).name()).lower()
    except Exception:  # noqa: BLE001
        pass
    try:
        return str(dist.get_backend(group)).lower()
    except Exception:  # noqa: BLE001
        return ""


def capture_reason(op_name: str, group_name, device: torch.device) -> str:
    """Why a CUDA graph may not capture this collective (or wait), or "" when it may."""
    if device.type != "cuda":
        return f"collective on {device.type} tensors ({op_name})"
    backend = group_backend(group_name, device) if isinstance(group_name, str) else ""
    return decide(op_name, device, backend)


def decide(op_name: str, device: torch.device, backend: str) -> str:
    """The rule itself, for a collective on `device` run by `backend` (see the table above)."""
    if device.type != "cuda":
        return f"collective on {device.type} tensors ({op_name})"
    if backend == "nccl":
        return ""
    what = f"a {backend} process group" if backend else "a process group this process cannot resolve"
    return f"collective of {what} syncs with the host ({op_name})"


def graph_key_part(node) -> str:
    """What a graph's generated code reads of a collective node besides the node itself: the backend
    of its group on each device its tensors are on (the partitions differ for NCCL and gloo), or ""
    for a node that is no collective (caching/graph_cache.py adds it to the graph's key)."""
    target = getattr(node, "target", None)
    if getattr(target, "namespace", None) != "_c10d_functional":
        return ""
    names = [a.name for a in target._schema.arguments]
    where = names.index("group_name") if "group_name" in names else None
    group = node.kwargs.get("group_name", node.args[where] if where is not None and where < len(node.args) else None)
    groups = [group] if isinstance(group, str) else []
    val = node.meta.get("val")
    devices = sorted({str(t.device) for t in (val if isinstance(val, (list, tuple)) else [val])
                      if isinstance(t, torch.Tensor)})
    return "|".join(f"group {g} on {d}: {group_backend(g, torch.device(d)) or '?'}" for g in groups for d in devices)

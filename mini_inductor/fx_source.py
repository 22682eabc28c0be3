"""Naming FX nodes for people: an op's printed name and the user's source line an op came from.

Shared by lowering (IR origins), the runtime (why a graph runs eagerly) and the debug reports; it
imports only torch.
"""
from __future__ import annotations

import os
import re

import torch
import torch.fx


def op_name(target) -> str:
    if isinstance(target, torch._ops.OpOverload):
        return f"aten.{target.__name__}" if target.namespace == "aten" else f"{target.namespace}.{target.__name__}"
    return getattr(target, "__name__", str(target))


def source_line(node: torch.fx.Node) -> str:
    trace = node.meta.get("stack_trace") or ""
    lines = [ln.strip() for ln in trace.strip().splitlines() if ln.strip()]
    frames = [i for i, ln in enumerate(lines) if ln.startswith("File ")]
    # the innermost frame of the user's code; failing that, the innermost frame that is not torch's
    # dispatch plumbing (a device context's __torch_function__, the only frame Dynamo keeps for an
    # op of a torch module's forward under `with torch.device(...)`); failing that, the module
    not_plumbing = [i for i in frames if not any(p in lines[i] for p in PLUMBING)]
    user = [i for i in not_plumbing if TORCH_DIR not in lines[i]] or not_plumbing
    if not user:
        return module_line(node) or (lines[frames[-1]] if frames else "")
    i = user[-1]
    code = lines[i + 1] if i + 1 < len(lines) and not lines[i + 1].startswith("File ") else ""
    return f"{lines[i]}: {code}" if code else lines[i]


def module_line(node: torch.fx.Node) -> str:
    """'in forward of Linear (model[0])': the innermost module whose forward ran the op, for an op that
    Dynamo kept no user frame of (nn.Linear's F.linear is torch's own code)."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path, cls = list(stack.values())[-1][:2]
    return f"in forward of {getattr(cls, '__name__', cls)} ({module_path(path)})"


def module_path(source: str) -> str:
    """Dynamo's name of a module as a user writes it: "L['fn'].0" → 'model[0]', "L['self'].layers[0].mlp"
    → 'model.layers[0].mlp' (the compiled module is 'model'), "G['net'].fc" → 'net.fc'."""
    def root(m: re.Match) -> str:
        return "model" if m["scope"] == "L" and m["name"] in ("fn", "self", "mod", "model", "module") else m["name"]

    path = re.sub(r"^(?P<scope>[LG])\['(?P<name>[^']+)'\]", root, source)
    path = re.sub(r"\._modules\['([^']+)'\]", r".\1", path)
    return re.sub(r"\.(\d+)(?=[.\[]|$)", r"[\1]", path)


TORCH_DIR = os.path.dirname(torch.__file__) + os.sep
PLUMBING = tuple(os.path.join(TORCH_DIR, p) for p in ("utils" + os.sep + "_device.py", "overrides.py", "_dynamo" + os.sep))

"""The compiled graph's wrapper for forward-mode AD (torch.autograd.forward_ad): the backend's, and that
of a graph Dynamo's opt-in cache rebuilt in a new process (caching/dynamo_cache.py)."""
from __future__ import annotations

import torch.autograd.forward_ad as _forward_ad
from torch._dynamo import disable

from ..errors import warn_at_user_frame


class ForwardADAware:
    """The compiled graph, run as traced, eagerly, while a forward-mode AD level is open
    (`torch.autograd.forward_ad.dual_level`): generated kernels compute on the primal values alone and
    would return no tangent (Inductor's do the same), where eager's ops carry the tangents through.
    Dynamo compiles a function once for plain and dual inputs alike, so the check is at each call (an
    attribute read); the first eager run warns."""

    def __init__(self, compiled, traced, records=()):
        self.compiled, self.eager = compiled, disable(traced, reason="run as traced for forward-mode AD")
        self.records = list(records)
        self.warned = False

    def __call__(self, *args):
        if _forward_ad._current_level < 0:
            return self.compiled(*args)
        if not self.warned:
            self.warned = True
            names = ", ".join(r.name for r in self.records) or "a graph served from a cache"
            warn_at_user_frame(f"mini_inductor: {names} runs eagerly while a forward-mode AD level is open "
                               "(torch.autograd.forward_ad): generated kernels carry no tangents")
        return self.eager(*args)

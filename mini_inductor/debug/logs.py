"""`MINI_INDUCTOR_LOGS=fusion,schedule,output_code,cudagraphs,perf_hints,autotuning`: switch on our loggers.

Names are those of Inductor's artifacts, under the `mini_inductor.` logger hierarchy. `all` turns
on every one. Each named logger is set to DEBUG and given one stderr handler.
"""
from __future__ import annotations

import logging
import os
import sys

ARTIFACTS = ("fusion", "schedule", "output_code", "cudagraphs", "perf_hints", "autotuning", "debug")
_configured: set[str] = set()


def configure(spec: str | None = None) -> list[str]:
    """Enable the loggers named in `spec` (default: $MINI_INDUCTOR_LOGS); return their names."""
    spec = os.environ.get("MINI_INDUCTOR_LOGS", "") if spec is None else spec
    names = [n.strip() for n in spec.split(",") if n.strip()]
    if "all" in names:
        names = list(ARTIFACTS)
    unknown = [n for n in names if n not in ARTIFACTS]
    if unknown:
        raise ValueError(f"MINI_INDUCTOR_LOGS: unknown log(s) {unknown}; known: {', '.join(ARTIFACTS)}, all")
    for name in names:
        logger = logging.getLogger(f"mini_inductor.{name}")
        logger.setLevel(logging.DEBUG)
        if name not in _configured:
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter(f"[mini_inductor.{name}] %(message)s"))
            logger.addHandler(handler)
            _configured.add(name)
    return names

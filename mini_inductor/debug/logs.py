"""Our loggers, switched on by `MINI_INDUCTOR_LOGS` or by torch's own `TORCH_LOGS`.

    MINI_INDUCTOR_LOGS=fusion,schedule,output_code,cudagraphs,perf_hints,autotuning,debug   (or all)
    TORCH_LOGS=output_code          (or fusion, schedule, cudagraphs, perf_hints, autotuning; `+name` alike)

Names are those of Inductor's artifacts, under the `mini_inductor.` logger hierarchy. Each named logger
is set to DEBUG and given one stderr handler. For TORCH_LOGS (and `torch._logging.set_logs(output_code=True)`)
each compile asks torch which of these artifacts are on (`follow_torch_logs`) and prints ours in torch's
format beside Inductor's; `TORCH_LOGS=all` leaves them off, as it leaves Inductor's output code off.
"""
from __future__ import annotations

import logging
import os
import sys

ARTIFACTS = ("fusion", "schedule", "output_code", "cudagraphs", "perf_hints", "autotuning", "debug")
_configured: set[str] = set()                 # by MINI_INDUCTOR_LOGS / configure()
_from_torch: dict[str, logging.Handler] = {}  # by TORCH_LOGS: artifact → the handler we added


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
            if name in _from_torch:   # one handler per logger: ours replaces the TORCH_LOGS one
                logger.removeHandler(_from_torch.pop(name))
            handler = logging.StreamHandler(sys.stderr)
            handler.setFormatter(logging.Formatter(f"[mini_inductor.{name}] %(message)s"))
            logger.addHandler(handler)
            _configured.add(name)
    return names


def _torch_artifacts_on() -> set[str]:
    """Which of ARTIFACTS torch's log state has on (TORCH_LOGS, set_logs); empty if torch cannot say."""
    try:
        from torch._logging import _internal
        state = _internal._get_log_state() if hasattr(_internal, "_get_log_state") else _internal.log_state
        return {name for name in ARTIFACTS if state.is_artifact_enabled(name)}
    except Exception:  # noqa: BLE001  (a private torch API that moved: TORCH_LOGS is then not followed)
        return set()


def _torch_formatter() -> logging.Formatter:
    """torch's log line format (glog-style prefix, compile id), or ours on a torch without it."""
    try:
        from torch._logging import _internal
        return _internal._default_formatter()
    except Exception:  # noqa: BLE001
        return logging.Formatter("[mini_inductor] %(message)s")


def follow_torch_logs() -> set[str]:
    """Turn our loggers on or off as torch's artifacts of the same names are; return those on.

    Called at each compile, so that `torch._logging.set_logs(...)` between compiles is followed too.
    Loggers turned on by MINI_INDUCTOR_LOGS are left as they are.
    """
    on = _torch_artifacts_on() - _configured
    for name in on - set(_from_torch):
        logger = logging.getLogger(f"mini_inductor.{name}")
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(_torch_formatter())
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        _from_torch[name] = handler
    for name in set(_from_torch) - on:
        logger = logging.getLogger(f"mini_inductor.{name}")
        logger.removeHandler(_from_torch.pop(name))
        logger.setLevel(logging.NOTSET)
    return on

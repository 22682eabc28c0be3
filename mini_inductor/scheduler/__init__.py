"""Scheduling: IR buffers → ordered, fused kernel groups (see scheduler.py)."""
from .scheduler import Schedule, schedule  # noqa: F401

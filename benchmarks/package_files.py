"""Modules of mini_inductor that import only torch (the model catalog, the timing helper), loaded
from their files without importing the package.

Importing them through the package would import mini_inductor, whose import starts threads that set
Triton up and import torch's lazy modules: in eager's and Inductor's workers too, where those threads
would take CPU from (or hash Triton for) the compiler being measured.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import types

PACKAGE_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "mini_inductor")


def load(name: str) -> types.ModuleType:
    """mini_inductor/<name>.py as a module of its own (once per process: later calls return it)."""
    module_name = f"_mini_inductor_file_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, os.path.join(PACKAGE_DIR, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module       # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


examples = load("examples")
timing = load("timing")

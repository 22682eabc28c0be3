"""The package's version and the torch releases it supports; no imports, so that setup.cfg
(``version = attr:``) and ``mini-inductor --version`` read it without importing torch."""
__version__ = "0.1.0"

# torch>=2.11,<2.16, as setup.cfg's install_requires says (tests/packaging/test_packaging.py checks they agree)
TORCH_MIN = (2, 11)
TORCH_BELOW = (2, 16)


def check_torch(version: str) -> str | None:
    """An ImportError for a torch older than TORCH_MIN; a warning text (returned) for one at or past
    TORCH_BELOW, which is untested; None inside the range. `version`: torch.__version__."""
    parts = version.split("+")[0].split(".")
    try:
        found = (int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0))
    except (IndexError, ValueError):
        return None                     # a build whose version we cannot read: let it try
    supported = (f"torch>={TORCH_MIN[0]}.{TORCH_MIN[1]},<{TORCH_BELOW[0]}.{TORCH_BELOW[1]}")
    if found < TORCH_MIN:
        raise ImportError(f"mini_inductor {__version__} needs {supported}; this is torch {version}. "
                          f"Upgrade torch (pip install 'torch>={TORCH_MIN[0]}.{TORCH_MIN[1]}').")
    if found >= TORCH_BELOW:
        return (f"mini_inductor {__version__} is tested with {supported}; this is torch {version}, which "
                f"may have changed the private APIs it uses")
    return None

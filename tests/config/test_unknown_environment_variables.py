"""A MINI_INDUCTOR_* variable that mini_inductor does not read (most likely misspelt) is named in one
warning with the close valid names, at the first compile; it does not stop anything, and the variables
the project itself reads (every option's, the logs', the warm-up's) never warn."""
import os
import pathlib
import re
import subprocess
import sys

import pytest

from mini_inductor import config

ROOT = pathlib.Path(__file__).resolve().parents[2]
PREFIX = "MINI_INDUCTOR_"      # (names are built from it: this file is left out of the scan below)

SCRIPT = """
import torch
import mini_inductor
for k in (1, 2):   # two compiles: the warning comes once
    x = torch.randn(4, 8)
    torch.testing.assert_close(torch.compile(lambda t: t.relu() + k, backend="mini_inductor")(x), x.relu() + k)
print("OK", mini_inductor.config.cudagraphs, mini_inductor.config.debug_dir)
"""


def _run(**variables) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith(PREFIX) or k == PREFIX + "CACHE_DIR"}
    env.update(PYTHONPATH=str(ROOT), TRITON_INTERPRET="1", **variables)
    return subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=300)


def test_a_misspelt_variable_warns_once_naming_the_close_valid_variables(tmp_path):
    proc = _run(**{PREFIX + "CUDAGRAPH": "0", PREFIX + "DEBUGDIR": str(tmp_path)})
    assert proc.returncode == 0 and "OK True None" in proc.stdout, proc.stderr   # ignored, not an error
    warned = [line for line in proc.stderr.splitlines() if "UserWarning" in line]
    assert len(warned) == 2, proc.stderr
    assert (f"environment variable {PREFIX}CUDAGRAPH is not one mini_inductor reads, and is ignored: "
            f"did you mean {PREFIX}CUDAGRAPHS or") in warned[0]
    assert f"environment variable {PREFIX}DEBUGDIR is not one" in warned[1]
    assert f"did you mean {PREFIX}DEBUG_DIR?" in warned[1]
    # shown at the script's compiling line, not inside the package (config.py's own line)
    assert all(line.startswith("<string>:6: UserWarning") for line in warned), warned


def test_a_variable_like_no_name_says_which_variables_are_read():
    with pytest.warns(UserWarning, match=PREFIX + "XYZZY"):
        (message,) = config.warn_unknown_variables({PREFIX + "XYZZY": "1", "PATH": "/bin"})
    assert f"{PREFIX}XYZZY is not one mini_inductor reads" in message
    assert f"{PREFIX}<OPTION>" in message and f"{PREFIX}LOGS" in message and f"{PREFIX}WARM_IMPORTS" in message


def test_variables_that_are_read_do_not_warn():
    proc = _run(**{PREFIX + "CUDAGRAPHS": "0", PREFIX + "LOGS": "", PREFIX + "WARM_IMPORTS": "0"})
    assert proc.returncode == 0 and "OK False None" in proc.stdout, proc.stderr
    assert "is not one mini_inductor reads" not in proc.stderr


def _named_variables() -> dict[str, list[str]]:
    """Every MINI_INDUCTOR_* name the project's code, tests, benchmarks, Makefile and CI spell out
    (a name ending in '_', as in 'MINI_INDUCTOR_CUDAGRAPH_...' or f"MINI_INDUCTOR_{name}", is a pattern)."""
    files = [p for folder in ("mini_inductor", "tests", "benchmarks") for p in (ROOT / folder).rglob("*.py")]
    files += [ROOT / "Makefile", ROOT / "mini_inductor_cli.py", *(ROOT / ".ci").iterdir()]
    found: dict[str, list[str]] = {}
    for path in files:
        if path.resolve() == pathlib.Path(__file__).resolve():
            continue
        for name in re.findall(PREFIX + r"[A-Z0-9_]+", path.read_text(errors="replace")):
            if not name.endswith("_"):
                found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def test_every_variable_the_project_names_is_an_option_or_on_the_allow_list():
    named = _named_variables()
    assert PREFIX + "LOGS" in named and PREFIX + "WARM_IMPORTS" in named and PREFIX + "CACHE_DIR" in named
    unknown = config.warn_unknown_variables(dict.fromkeys(named, "1"))
    assert not unknown, {m: named[m.split()[3]] for m in unknown}

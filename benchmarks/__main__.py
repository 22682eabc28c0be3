"""One entry point for the benchmark scripts.

    python -m benchmarks                      # the benchmarks, one line each
    python -m benchmarks suite --models decoder --backends eager,mini_inductor
    python -m benchmarks NAME --help

`python -m benchmarks NAME ARGS` runs benchmarks/NAME.py as `python -m benchmarks.NAME ARGS` does
(that form keeps working). A benchmark is a module of this folder that runs as a script (it has a
`__main__` block); the listing reads each one's docstring without importing it (no torch import).
"""
from __future__ import annotations

import ast
import os
import runpy
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def _summary(docstring: str | None) -> str:
    """The docstring's first sentence, on one line."""
    paragraph = " ".join((docstring or "").split("\n\n")[0].split())
    sentence = paragraph.split(". ")[0].rstrip(".")
    return sentence if len(sentence) <= 100 else sentence[:99] + "…"


def benchmarks() -> dict[str, str]:
    """{name: one-line summary} of every runnable module in benchmarks/, sorted by name."""
    found = {}
    for filename in sorted(os.listdir(HERE)):
        name, ext = os.path.splitext(filename)
        if ext != ".py" or name.startswith("_"):
            continue
        with open(os.path.join(HERE, filename), encoding="utf-8") as f:
            tree = ast.parse(f.read(), filename)
        runnable = any(isinstance(node, ast.If) and "__main__" in ast.unparse(node.test) for node in tree.body)
        if runnable:
            found[name] = _summary(ast.get_docstring(tree))
    return found


def _listing(found: dict[str, str]) -> str:
    width = max(map(len, found))
    lines = ["usage: python -m benchmarks NAME [ARGS]   (NAME --help for its options)", "", "benchmarks:"]
    return "\n".join(lines + [f"  {name:<{width}}  {summary}" for name, summary in found.items()])


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    found = benchmarks()
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(_listing(found))
        return 0
    name, rest = argv[0], argv[1:]
    if name not in found:
        print(f"unknown benchmark {name!r}\n\n{_listing(found)}", file=sys.stderr)
        return 2
    sys.argv = [name, *rest]      # run_module puts the script's path first, as `python -m benchmarks.NAME` does
    runpy.run_module(f"benchmarks.{name}", run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

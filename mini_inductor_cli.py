"""The `mini-inductor` command: mini_inductor/cli.py without the torch import of `import mini_inductor`.

Importing any `mini_inductor.X` first runs the package's __init__, which imports torch and the compiler
(seconds) to register the backend. --help, --version, list and why need none of that: this entry puts
the package in sys.modules with its __init__ not yet run, and the CLI runs it (cli.load_package) before
a command that compiles. `python -m mini_inductor` runs the same CLI after a full import.
"""
import importlib.util
import sys


def main(argv=None) -> int:
    if "mini_inductor" not in sys.modules:
        spec = importlib.util.find_spec("mini_inductor")
        package = importlib.util.module_from_spec(spec)
        package._init_deferred = True
        sys.modules["mini_inductor"] = package
    from mini_inductor.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    raise SystemExit(main())

"""The import rules between mini_inductor's packages, read from the source (a back edge fails CI).

    runtime     knows compiled modules only: never lowering, scheduler, codegen, debug or the backend
    lowering    never scheduler, codegen, debug or the backend
    scheduler   never codegen, debug or the backend
    codegen     never debug or the backend
    base        config, errors, metrics, fx_source, cache_files, timing, examples, _version: none of the above
(ARCHITECTURE.md draws these layers.)
"""
import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "mini_inductor"

FORBIDDEN = {
    "runtime": ("lowering", "scheduler", "codegen", "debug", "backend", "graph_cache", "front_cache",
                "dynamo_cache", "cli"),
    "lowering": ("scheduler", "codegen", "debug", "backend", "cli"),
    "scheduler": ("codegen", "debug", "backend", "cli"),
    "codegen": ("debug", "backend", "cli"),
}
BASE_MODULES = ("config", "errors", "metrics", "fx_source", "cache_files", "timing", "examples", "_version")
ABOVE_BASE = ("lowering", "scheduler", "codegen", "runtime", "debug", "backend", "graph_cache", "front_cache",
              "dynamo_cache", "cli")


def imported_modules(path: pathlib.Path) -> set[str]:
    module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    return imports_of(path.read_text(), package)


def imports_of(source: str, package: str) -> set[str]:
    """Dotted names of the mini_inductor modules that `source` (a module of `package`) imports,
    anywhere in it (function-level imports too), relative imports resolved."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[:len(parts) - node.level + 1])
                base = f"{anchor}.{base}" if base else anchor
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)   # `from .. import codegen`
    return {m for m in found if m == "mini_inductor" or m.startswith("mini_inductor.")}


def forbidden(layer: str, imported: set[str]) -> list[str]:
    return sorted(m for m in imported if len(m.split(".")) > 1 and m.split(".")[1] in FORBIDDEN[layer])


def _violations(layer: str) -> list[str]:
    return [f"{path.relative_to(PACKAGE.parent)} imports {target}"
            for path in sorted((PACKAGE / layer).rglob("*.py"))
            for target in forbidden(layer, imported_modules(path))]


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_a_package_imports_no_package_above_it(layer):
    assert _violations(layer) == []


@pytest.mark.parametrize("name", BASE_MODULES)
def test_a_base_module_imports_no_package_of_the_compiler(name):
    path = PACKAGE / f"{name}.py"
    imported = imported_modules(path)
    assert sorted(m for m in imported if len(m.split(".")) > 1 and m.split(".")[1] in ABOVE_BASE) == []


def test_the_rule_reader_sees_relative_and_function_level_imports():
    # the reader itself must catch a back edge written either way
    source = "def f():\n    from ..codegen import wrapper\n    from mini_inductor.lowering import ir\n" \
             "from . import launcher\nfrom .. import config\n"
    imported = imports_of(source, "mini_inductor.runtime")
    assert forbidden("runtime", imported) == ["mini_inductor.codegen", "mini_inductor.codegen.wrapper",
                                              "mini_inductor.lowering", "mini_inductor.lowering.ir"]
    assert "mini_inductor.runtime.launcher" in imported and "mini_inductor.config" in imported

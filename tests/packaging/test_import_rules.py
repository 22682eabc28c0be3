"""The import rules between mini_inductor's packages, read from the source (a back edge fails CI).

    runtime           knows compiled modules only: never lowering, scheduler, codegen, debug, the
                      pipeline, the backend, or the compiled-graph caches
    runtime.cudagraphs, runtime.launch
                      the same, and neither imports the other (CompiledGraph, in runtime/__init__,
                      brings them together)
    caching storage   (caching/__init__, files, memory, modules, kernel_store, autotune) the same as the
                      runtime, and never the runtime
    caching           never the pipeline or the backend (no cache reaches into the backend)
    lowering          never scheduler, codegen, debug, the compiled-graph caches, pipeline or backend
    scheduler         never codegen, debug, the compiled-graph caches, pipeline or backend
    distributed       beside the scheduler: never codegen, debug, the compiled-graph caches, pipeline
                      or backend
    codegen           never debug, the compiled-graph caches, pipeline or backend
    attention matcher (attention/match.py, attention/modification.py, attention/flex.py) passes over
                      Dynamo's graph: torch and the base modules only (the backend calls them; the
                      flash-attention op is looked up when a rewrite needs it, never imported by name)
    base              config, errors, metrics, fx_source, timing, examples, _version, conversions: none of
                      the above
(ARCHITECTURE.md draws these layers.)
"""
import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "mini_inductor"

GRAPH_CACHES = ("caching.graph_cache", "caching.front_cache", "caching.front_autograd", "caching.dynamo_cache",
                "caching.lookup")
TOP = ("debug", "pipeline", "backend", "cli", *GRAPH_CACHES)
FORBIDDEN = {
    "runtime": ("lowering", "scheduler", "codegen", *TOP),
    "runtime.cudagraphs": ("runtime.launch", "lowering", "scheduler", "codegen", *TOP),
    "runtime.launch": ("runtime.cudagraphs", "lowering", "scheduler", "codegen", *TOP),
    "caching storage": ("lowering", "scheduler", "codegen", "runtime", *TOP),
    "caching": ("pipeline", "backend", "cli"),
    "lowering": ("scheduler", "codegen", *TOP),
    "scheduler": ("codegen", *TOP),
    "distributed": ("codegen", *TOP),
    "codegen": TOP,
    "attention matcher": ("lowering", "scheduler", "distributed", "codegen", "runtime", "caching", *TOP),
}
CACHING_STORAGE = ("__init__", "files", "memory", "modules", "kernel_store", "autotune", "shape_guards",
                   "constant_values")
ATTENTION_MATCHER = ("match", "modification", "flex")
BASE_MODULES = ("config", "errors", "metrics", "fx_source", "timing", "examples", "_version", "conversions")
ABOVE_BASE = ("lowering", "scheduler", "distributed", "codegen", "runtime", "caching", *TOP)


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


def _below(module: str, names) -> bool:
    """Whether `module` (dotted, from mini_inductor) is one of `names` (relative to the package) or inside one."""
    return any(module == f"mini_inductor.{n}" or module.startswith(f"mini_inductor.{n}.") for n in names)


def forbidden(layer: str, imported: set[str]) -> list[str]:
    return sorted(m for m in imported if _below(m, FORBIDDEN[layer]))


def _files(layer: str) -> list[pathlib.Path]:
    if layer == "caching storage":
        return [PACKAGE / "caching" / f"{name}.py" for name in CACHING_STORAGE]
    if layer == "attention matcher":
        return [PACKAGE / "attention" / f"{name}.py" for name in ATTENTION_MATCHER]
    return sorted(PACKAGE.joinpath(*layer.split(".")).rglob("*.py"))


def _violations(layer: str) -> list[str]:
    return [f"{path.relative_to(PACKAGE.parent)} imports {target}"
            for path in _files(layer)
            for target in forbidden(layer, imported_modules(path))]


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_a_package_imports_no_package_above_it(layer):
    assert _violations(layer) == []


def test_every_caching_module_is_storage_or_a_compiled_graph_cache():
    # a new module of caching/ must be placed on one side of the line the runtime may not cross
    placed = {*CACHING_STORAGE, *(m.split(".", 1)[1] for m in GRAPH_CACHES)}
    assert sorted(p.stem for p in (PACKAGE / "caching").glob("*.py") if p.stem not in placed) == []


@pytest.mark.parametrize("name", BASE_MODULES)
def test_a_base_module_imports_no_package_of_the_compiler(name):
    path = PACKAGE / f"{name}.py"
    imported = imported_modules(path)
    assert sorted(m for m in imported if _below(m, ABOVE_BASE)) == []


def test_the_rule_reader_sees_relative_and_function_level_imports():
    # the reader itself must catch a back edge written either way
    source = "def f():\n    from ..codegen import wrapper\n    from mini_inductor.lowering import ir\n" \
             "from .launch import launcher\nfrom .. import config\n"
    imported = imports_of(source, "mini_inductor.runtime")
    assert forbidden("runtime", imported) == ["mini_inductor.codegen", "mini_inductor.codegen.wrapper",
                                              "mini_inductor.lowering", "mini_inductor.lowering.ir"]
    assert "mini_inductor.runtime.launch.launcher" in imported and "mini_inductor.config" in imported


def test_a_cache_that_reaches_into_the_backend_is_a_violation():
    # the Dynamo cache once imported the backend's private rebuild function (and the backend it)
    imported = imports_of("def build():\n    from ..backend import _rebuild\n", "mini_inductor.caching")
    assert forbidden("caching", imported) == ["mini_inductor.backend", "mini_inductor.backend._rebuild"]


def test_the_cuda_graph_trees_and_the_kernel_launch_path_are_kept_apart():
    imported = imports_of("from ..launch.precompile import precompile\n", "mini_inductor.runtime.cudagraphs")
    assert forbidden("runtime.cudagraphs", imported) == ["mini_inductor.runtime.launch.precompile",
                                                         "mini_inductor.runtime.launch.precompile.precompile"]
    imported = imports_of("from ..cudagraphs import trees\n", "mini_inductor.runtime.launch")
    assert forbidden("runtime.launch", imported) == ["mini_inductor.runtime.cudagraphs",
                                                     "mini_inductor.runtime.cudagraphs.trees"]

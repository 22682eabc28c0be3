"""A third cache level, opt-in: Dynamo's own cache of compiled functions, so that a warm start skips
Dynamo's bytecode tracing and guard building as well.

torch's "caching precompile" (torch._dynamo.config.caching_precompile, torch/_dynamo/package.py)
keeps, per compiled Python function, Dynamo's transformed bytecode and its guards; a fresh process
that calls torch.compile on the same function installs them at that call and traces nothing. What
the backend compiled is not torch's to keep: each graph needs an artifact from its backend, recorded
under the graph's backend id (`gm._backend_id`), that rebuilds the compiled callable in the new
process. This module is mini_inductor's side of it:

    MINI_INDUCTOR_DYNAMO_CACHE=1         torch's switch turned on when mini_inductor is imported (enable)
    keep(gm, compiled, cfg, front_key, mode, options)    backend.py, for each graph it returns:
        records a GraphArtifact (the front cache key, the Dynamo graph, mode/options) and returns
        `compiled` wrapped so that its first call writes Dynamo's entries of our functions (save)
    GraphArtifact.after_deserialization()  in the new process, at torch.compile: a _Reloaded callable,
        which at its first call rebuilds the graph from the front cache entry (front_cache.serve: no
        AOT autograd, no lowering) or, when that cannot be done, compiles the kept Dynamo graph again

Only graphs the front cache can serve get an artifact (inference graphs whose AOT autograd wrapping is
trivial, static shapes, no parameters held by the graph module); a function with any other graph has
no Dynamo cache entry written and is traced as before. Dynamo's loaded guards still decide, call by
call, whether the cached bytecode applies: a new shape, dtype or grad mode recompiles as usual.

Caveats (torch's, written here so nobody has to rediscover them):
- the switch is process-wide, and torch keys an entry on the function's qualified name and first line
  only (not on the backend nor its options): a process that compiles the same function with another
  backend, or other options, runs what the cache holds. Keep such processes on another
  TORCHINDUCTOR_CACHE_DIR (torch writes the entries under $TORCHINDUCTOR_CACHE_DIR/dynamo).
- with the switch on, Dynamo drops its guards on the identity of global functions and modules
  (ID_MATCH, CLOSURE_MATCH, ...; it logs a warning per dropped guard).
- an artifact that raises while it is loaded makes torch.compile itself fail (torch 2.13: the retry
  in eval_frame re-initializes the package: "CompilePackage is already initialized"), so nothing
  here raises before the first call: every failure falls back to compiling the kept graph.
- a recompile of a function loaded from the cache fails in torch 2.13 ("Name '__builtins_dict___0'
  already exists in scope": the new process numbers Dynamo's globals from 0 again); entries carry the
  cold process's count and a load draws numbers past it (_skip_unique_ids_below).
- a warm process does not remember that a size varied (automatic dynamic shapes): the first other
  size recompiles statically, as a first process would.
"""
from __future__ import annotations

import hashlib
import logging
import pickle
import time
from typing import Any, Callable

import torch
from torch._dynamo.backends.registry import lookup_backend

from . import files, front_cache, graph_cache
from ..config import Config, for_compile
from ..runtime.forward_ad import ForwardADAware

log = logging.getLogger("mini_inductor")
schedule_log = logging.getLogger("mini_inductor.schedule")

FORMAT = 1
LABEL = "disk (Dynamo cache)"      # GraphRecord.cache of a graph rebuilt for an entry of Dynamo's cache

try:
    from torch._dynamo.precompile_context import BackendCacheArtifact as _ArtifactBase
except ImportError:                 # a torch without caching precompile: nothing is ever recorded
    _ArtifactBase = object          # type: ignore[assignment,misc]


def torch_support() -> str | None:
    """Why the installed torch cannot keep our graphs in Dynamo's cache, or None when it can."""
    if _ArtifactBase is object:
        return "torch._dynamo.precompile_context.BackendCacheArtifact is missing"
    if not hasattr(torch._dynamo.config, "caching_precompile"):
        return "torch._dynamo.config has no caching_precompile"
    try:
        from torch._dynamo.package import DynamoCache, PrecompileCacheEntry
        from torch._dynamo.precompile_context import PrecompileContext
    except ImportError as e:
        return f"cannot import torch's Dynamo cache ({e})"
    for owner, name in ((PrecompileContext, "record_artifact"), (PrecompileContext, "serialize_artifact_by_key"),
                        (PrecompileCacheEntry, "from_cache_entry"), (DynamoCache, "write")):
        if not hasattr(owner, name):
            return f"{owner.__name__}.{name} is missing"
    if not isinstance(getattr(PrecompileContext, "_dynamo_cache_entries", None), dict):
        return "PrecompileContext._dynamo_cache_entries is missing"
    return None


def enable(cfg: Config) -> bool:
    """Turn torch's caching precompile on when `cfg.dynamo_cache` asks for it (mini_inductor's import
    does this: torch reads the switch at torch.compile, before any backend is called). Whether it is on."""
    if not cfg.dynamo_cache:
        return False
    reason = torch_support()
    if reason is not None:
        log.warning("mini_inductor: dynamo_cache is on, but torch %s cannot keep compiled functions (%s); "
                    "Dynamo traces every function as before", torch.__version__, reason)
        return False
    torch._dynamo.config.caching_precompile = True
    return True


# ── the cold process: an artifact per graph, the entries written at a first call ──────────────────
class GraphArtifact(_ArtifactBase):  # type: ignore[misc,valid-type]
    """What Dynamo's cache keeps for one graph mini_inductor compiled (`content`, a dict: format, the
    front cache key, a hash of what graph keys hash, the Dynamo graph pickled and its sha256, mode and
    options)."""

    def after_deserialization(self) -> Callable:
        _skip_unique_ids_below(self.content.get("unique_ids_below"))
        return _Reloaded(self.key, self.content)


def keep(gm, compiled: Callable, cfg: Config, front_key: str | None, mode: str | None,
         options: dict | None, traced=None) -> Callable:
    """`compiled` (what the backend returns for `gm`), recorded for Dynamo's cache when torch's switch is on
    and the graph qualifies; then wrapped so that its first call writes the entries. `traced`: the
    backend's _AsTraced, whose graph (Dynamo's, before attention fusion rewrote `gm`) is the one kept,
    for a new process to run as traced (forward-mode AD) or compile again."""
    if not cfg.dynamo_cache:
        return compiled
    backend_id = getattr(gm, "_backend_id", None)   # set by Dynamo only while it keeps a package
    if backend_id is None:
        if getattr(torch._dynamo.config, "caching_precompile", False):
            schedule_log.info("not kept in Dynamo's cache: Dynamo keeps no package for this graph (no backend id; "
                              "a graph module holding parameters is one such case)")
        return compiled
    reason = _why_not(gm, front_key)
    if reason is None:
        try:
            graph = pickle.dumps(_detached(traced.as_module() if traced is not None else gm))
            content = {"format": FORMAT, "front_key": front_key, "compiler": compiler_hash(cfg),
                       "mode": mode, "options": dict(options) if options else None,
                       "num_inputs": sum(1 for n in gm.graph.nodes if n.op == "placeholder"),
                       "graph": graph, "graph_sha256": files.sha256(graph)}
            from torch._dynamo.precompile_context import PrecompileContext
            PrecompileContext.record_artifact(GraphArtifact(key=backend_id, content=content))
        except Exception as e:  # noqa: BLE001  (a cache never fails a compile)
            reason = f"cannot record it ({type(e).__name__}: {e})"
    if reason is not None:
        schedule_log.info("%s: not kept in Dynamo's cache (%s); its function is traced again in a new process",
                          backend_id, reason)
        return compiled
    schedule_log.info("%s: kept in Dynamo's cache (front cache key %s…)", backend_id, front_key[:12])
    return _saving_at_first_call(compiled)


def _detached(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of the Dynamo graph module for pickling (its code and what get_attr reads): a new Graph, so
    that Dynamo's graph keeps its owning module."""
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    return torch.fx.GraphModule(gm, graph)


def _why_not(gm, front_key: str | None) -> str | None:
    from ..attention.match import DATA_GUARDS
    if gm.meta.get(DATA_GUARDS):
        return "its attention read an input's data as a causal mask: a new process must read the data again"
    reason = torch_support()
    if reason is not None:
        return reason
    if front_key is None:
        return "no front cache entry: only inference graphs served without AOT autograd are rebuilt"
    if not isinstance(gm, torch.fx.GraphModule):
        return f"a {type(gm).__name__}, not a GraphModule"
    if next(gm.parameters(), None) is not None or next(gm.buffers(), None) is not None:
        return "the graph module holds parameters or buffers"
    return None


def compiler_hash(cfg: Config) -> str:
    """What every graph key hashes besides the graph (versions, global state, options): an entry made under
    other values is not rebuilt from its front cache key but compiled again."""
    return hashlib.sha256("\n".join(graph_cache.compiler_key_parts(cfg)).encode()).hexdigest()


def _saving_at_first_call(compiled: Callable) -> Callable:
    """Dynamo records a function's entry after the backend returns, before the graph first runs: the first
    call is the earliest point where the entry exists, so it writes it."""
    saved = False

    def call(*args: Any) -> Any:
        nonlocal saved
        if not saved:
            saved = True
            save()
        return compiled(*args)
    return call


def save() -> list[str]:
    """Write Dynamo's entries whose every graph is ours (an entry of another backend's function is left
    for that backend or torch.compiler.save_cache_artifacts()); the keys written."""
    from torch._dynamo.package import DynamoCache, PrecompileCacheEntry
    from torch._dynamo.precompile_context import PrecompileContext
    began, written = time.perf_counter(), []
    for key, entry in list(PrecompileContext._dynamo_cache_entries.items()):
        ids = [i for code in entry.codes for i in code.backend_ids]
        artifacts = {i: PrecompileContext.serialize_artifact_by_key(i) for i in ids}
        if not ids or not all(isinstance(a, GraphArtifact) for a in artifacts.values()):
            continue
        below = _unique_ids_used()
        for artifact in artifacts.values():
            artifact.content["unique_ids_below"] = below
        try:
            DynamoCache.write(PrecompileCacheEntry.from_cache_entry(entry, artifacts), key)
        except Exception as e:  # noqa: BLE001  (a cache never fails a run)
            log.warning("mini_inductor: cannot write Dynamo's cache entry %s… (%s: %s)", key[:12],
                        type(e).__name__, e)
            continue
        written.append(key)
    if written:
        schedule_log.info("Dynamo cache: %d entr%s written in %.3f s (%s)", len(written),
                          "y" if len(written) == 1 else "ies", time.perf_counter() - began,
                          ", ".join(k[:12] + "…" for k in written))
    return written


def _unique_ids_used() -> int | None:
    """How many of Dynamo's unique global names (`__builtins_dict___0`, `__compiled_fn_1_…`) this process
    has handed out: every global an entry written now installs is numbered below it."""
    try:
        from torch._dynamo.bytecode_transformation import unique_id
        return int(unique_id("__mini_inductor_mark").rsplit("_", 1)[1])
    except (ImportError, ValueError, TypeError):
        return None


def _skip_unique_ids_below(bound: int | None) -> None:
    """A loaded entry installs the globals its process named (`__builtins_dict___0`, …) into the function's
    module, and a new process numbers from 0 again: a recompile of that function (a new shape) then
    fails in torch 2.13 with "AssertionError: Name '__builtins_dict___0' already exists in scope". Drawing
    numbers up to the cold process's count keeps the new names clear of the loaded ones; it only
    consumes numbers of torch's counter, nothing else changes."""
    if not isinstance(bound, int):
        return
    try:
        from torch._dynamo.bytecode_transformation import unique_id
        for _ in range(bound + 1):
            if int(unique_id("__mini_inductor_skip").rsplit("_", 1)[1]) >= bound:
                return
    except (ImportError, ValueError, TypeError) as e:
        log.warning("mini_inductor: cannot skip Dynamo's unique names (%s); a recompile of a function loaded "
                    "from Dynamo's cache may fail", e)


# ── the warm process ────────────────────────────────────────────────────────────────────────────
class _Reloaded:
    """The callable Dynamo's cache installs for one of our graphs: the first call builds it (from the front
    cache, or by compiling the kept Dynamo graph), every call runs it. `rebuilt_from` says which."""

    def __init__(self, backend_id: str, content: dict):
        self.backend_id = backend_id
        self.content = content
        self.rebuilt_from: str | None = None      # "front cache" or "compile"
        self._run: Callable = self._first_call
        self._kept: torch.fx.GraphModule | None = None

    def __call__(self, *args: Any) -> Any:
        return self._run(*args)

    def _first_call(self, *args: Any) -> Any:
        self._run = self._build(list(args))
        return self._run(*args)

    def _build(self, args: list) -> Callable:
        began = time.perf_counter()
        content = self.content
        try:
            cfg = for_compile(content.get("mode"), content.get("options"))
            reason = self._why_not_served(cfg, args)
            if reason is None:
                served = front_cache.serve(cfg, content["front_key"], len(args), [], began, label=LABEL)
                if served is not None:
                    self.rebuilt_from = "front cache"
                    schedule_log.info("%s: rebuilt from Dynamo's cache and the front cache entry in %.3f s "
                                      "(no Dynamo tracing, no AOT autograd)", self.backend_id,
                                      time.perf_counter() - began)
                    return ForwardADAware(served, self._kept_graph_call)   # (the compile path's backend wraps its own)
                reason = "its front cache entry or the compiled graph it names cannot be loaded"
        except Exception as e:  # noqa: BLE001  (fall back to a compile rather than fail the call)
            reason = f"{type(e).__name__}: {e}"
        log.warning("mini_inductor: graph %s from Dynamo's cache cannot be rebuilt from the front cache (%s); "
                    "compiling its Dynamo graph again", self.backend_id, reason)
        self.rebuilt_from = "compile"
        # the backend by its registered name (mini_inductor's import registered it): no import of backend.py
        backend = lookup_backend("mini_inductor")
        return backend(self._kept_graph(), args, content.get("mode"), content.get("options"))

    def _kept_graph_call(self, *args: Any) -> Any:
        """The kept Dynamo graph run as traced (forward-mode AD's path), unpickled at its first use."""
        if self._kept is None:
            self._kept = self._kept_graph()
        return self._kept(*args)

    def _kept_graph(self) -> torch.fx.GraphModule:
        """The Dynamo graph the entry keeps, unpickled only once its hash matched."""
        graph = self.content.get("graph")
        if not isinstance(graph, bytes) or files.sha256(graph) != self.content.get("graph_sha256"):
            raise RuntimeError(f"mini_inductor: the Dynamo graph kept for {self.backend_id} in Dynamo's cache is "
                               f"damaged (its content hash does not match); it is not loaded. Delete "
                               f"$TORCHINDUCTOR_CACHE_DIR/dynamo (torch's cache of compiled functions) and run again")
        return pickle.loads(graph)

    def _why_not_served(self, cfg: Config, args: list) -> str | None:
        content = self.content
        if content.get("format") != FORMAT:
            return f"entry format {content.get('format')!r}, expected {FORMAT}"
        if not (cfg.graph_cache and cfg.front_cache):
            return "the graph cache or the front cache is off"
        if compiler_hash(cfg) != content["compiler"]:
            return "torch, Triton, mini_inductor or the options changed since the entry was written"
        if len(args) != content["num_inputs"]:
            return f"{len(args)} inputs, the entry was made for {content['num_inputs']}"
        return None

"""Worker processes that compile generated Triton kernels (compile_worker.py), for precompile.py.

Compiling a Triton kernel holds the GIL for most of its time: the frontend walks the kernel's Python
AST, the MLIR passes run, and libdevice is parsed and linked (pybind11 keeps the GIL in all three).
Threads of one process therefore compile kernels nearly one after another: GPT-2's 8 kernels took
1.04 s on the H200 machine's 16 CPUs. Processes compile them side by side.

A worker imports only Triton, so the pool is started at a graph's first compile on a CUDA device
(`warm`), in the background, and is ready before that graph's kernels are generated. A worker writes
each kernel into Triton's cache and answers with the files it wrote; the asking thread builds the
CompiledKernel from them (precompile.py `worker_kernel`), or, where it cannot, compiles the same
specialization as before (`JITFunction.warmup`), which finds it in Triton's cache. Nothing depends on
the worker for correctness: a worker that fails, dies or compiled under another cache key only means
the kernel compiles in this process, as without the pool. `stats` counts the three outcomes.
"""
from __future__ import annotations

import atexit
import logging
import os
import pickle
import queue
import struct
import subprocess
import sys
import threading

log = logging.getLogger("mini_inductor.schedule")

_WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "compile_worker.py")
_HELPERS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "triton_helpers.py")

MAX_WORKERS = 8    # each holds Triton's modules (about 100 MB)
# served: compiled by a worker and found in Triton's cache here; recompiled: compiled by a worker, yet
# this process compiled again (another cache key); failed: the worker raised or died
stats = {"served": 0, "recompiled": 0, "failed": 0}


class _Worker:
    def __init__(self):
        # compiled kernels, never interpreted ones (the pool is not used under the interpreter; a test
        # running under it may still start one)
        env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
        # this process's module path, so that the worker imports the same Triton (the worker also checks)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        # stderr shared (Triton's warnings and IR dumps); a session of its own, so that Ctrl-C in the
        # terminal stops the compile in this process, not every worker
        self.proc = subprocess.Popen([sys.executable, "-u", _WORKER, _HELPERS], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, close_fds=True, env=env, start_new_session=True)

    def ask(self, data: bytes) -> tuple:
        """The answer to a pickled request; any error means the worker is lost."""
        self.proc.stdin.write(struct.pack("<I", len(data)) + data)
        self.proc.stdin.flush()
        header = self.proc.stdout.read(4)
        if len(header) < 4:
            raise EOFError(f"the compile worker exited (code {self.proc.poll()})")
        return pickle.loads(self.proc.stdout.read(struct.unpack("<I", header)[0]))

    def close(self) -> None:
        try:
            self.proc.stdin.close()
        except OSError:
            pass


class Pool:
    """Up to `size` workers, started in a background thread; `compile` blocks its calling thread (not
    the GIL) until a worker has answered."""

    def __init__(self, size: int):
        self.size = size
        self.pid = os.getpid()   # a forked child (a DataLoader worker) must not share the workers' pipes
        self.idle: queue.Queue = queue.Queue()
        self.workers: list[_Worker] = []
        self.started = threading.Event()
        self.lock = threading.Lock()
        self.replaced = 0
        self.closed = False
        threading.Thread(target=self._start, name="mini_inductor_compile_pool", daemon=True).start()

    def _start(self) -> None:
        try:
            for _ in range(self.size):
                worker = _Worker()
                self.workers.append(worker)
                self.idle.put(worker)
        except Exception as e:  # noqa: BLE001  (no processes to spare: the kernels compile in threads, as before)
            log.debug("starting compile workers failed: %s", e)
        finally:
            self.started.set()

    def compile(self, request) -> tuple | None:
        """(True, hash, seconds, {"name", "group"}), (False, error, seconds), or None where no worker
        could take it (compile_worker.py)."""
        try:
            data = pickle.dumps(request)
        except Exception as e:  # noqa: BLE001  (a value the request cannot carry: this process compiles it)
            log.debug("a compile request could not be pickled: %s: %s", type(e).__name__, e)
            return None
        self.started.wait()
        worker = None
        while worker is None:
            if not self.workers or self.closed:
                return None
            try:
                worker = self.idle.get(timeout=0.5)
            except queue.Empty:
                continue
        try:
            answer = worker.ask(data)
        except Exception as e:  # noqa: BLE001  (a broken pipe, a worker that died, an unreadable answer)
            log.debug("compile worker lost: %s: %s", type(e).__name__, e)
            worker.close()
            self._replace(worker)
            return None
        self.idle.put(worker)
        return answer

    def _replace(self, lost: _Worker) -> None:
        """A worker that died is replaced, up to `size` times in all (a kernel that crashes LLVM
        must not start processes without end)."""
        with self.lock:
            self.workers.remove(lost)
            if self.replaced >= self.size:
                return
            self.replaced += 1
            try:
                worker = _Worker()
            except Exception:  # noqa: BLE001
                return
            self.workers.append(worker)
        self.idle.put(worker)

    def close(self) -> None:
        self.closed = True
        for worker in self.workers:
            worker.close()


_pool: list[Pool] = []
_lock = threading.Lock()


def warm(size: int) -> Pool | None:
    """The process's pool, started now with `size` workers if it is not running; None for size 0."""
    if size <= 0:
        return None
    with _lock:
        if _pool and _pool[0].pid != os.getpid():
            _pool.clear()      # forked: the parent's workers answer the parent
        if not _pool:
            _pool.append(Pool(size))
            atexit.register(_pool[0].close)
        return _pool[0]


def running() -> Pool | None:
    """The pool this process started, if any (not one a forked parent started)."""
    return _pool[0] if _pool and _pool[0].pid == os.getpid() else None

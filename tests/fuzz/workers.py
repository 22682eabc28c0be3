"""Programs run in worker subprocesses, each call under a timeout; a worker that hangs or dies is
replaced (on a GPU a crash poisons the CUDA context, so the process must go).

    pool = WorkerPool(jobs=2, timeout=120, device="cpu")
    for job, result in pool.run(jobs): ...       # results as they finish
    pool.close()

A job is a dict: {"seed", "index", "autograd", "size"} (the worker draws the program) or
{"program": Program.to_dict()} (the shrinker's candidates), plus "backend" and "triage" (rerun a
failure with aot_eager; a failure it shares, an error too or wrong in the same way, is torch's).
A result: {"program", "outcome", "seconds"}.
`python -m tests.fuzz.workers` is the worker: JSON lines in on stdin, JSON lines out on stdout.
"""
from __future__ import annotations

import json
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Iterable, Iterator

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STARTUP_TIMEOUT = 180.0


def worker_env(device: str, cache_dir: str) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if device == "cpu":
        env.setdefault("TRITON_INTERPRET", "1")
    env.setdefault("MINI_INDUCTOR_VERIFY_MEMORY_PLAN", "1")
    # a worker's own cache: nothing compiled by an earlier run is served to it
    env["MINI_INDUCTOR_CACHE_DIR"] = cache_dir
    return env


class _Worker:
    def __init__(self, device: str, log_dir: str):
        self.log = tempfile.NamedTemporaryFile("w+", dir=log_dir, prefix="worker_", suffix=".log", delete=False)
        self.cache_dir = tempfile.mkdtemp(prefix="cache_", dir=log_dir)
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.fuzz.workers", device], cwd=ROOT,
                                     env=worker_env(device, self.cache_dir), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, start_new_session=True, text=True, bufsize=1)
        self.buffer = ""
        self.job = None
        self.deadline = time.monotonic() + STARTUP_TIMEOUT
        self.ready = False

    def send(self, job: dict, timeout: float) -> None:
        self.job = job
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        self.deadline = max(self.deadline, time.monotonic() + timeout) if not self.ready else \
            time.monotonic() + timeout

    def read_lines(self) -> list[str] | None:
        """Complete lines available now; None at end of file (the worker died)."""
        chunk = os.read(self.proc.stdout.fileno(), 1 << 16).decode()
        if not chunk:
            return None
        self.buffer += chunk
        *lines, self.buffer = self.buffer.split("\n")
        return lines

    def stderr_tail(self, n: int = 8) -> str:
        self.log.flush()
        with open(self.log.name, errors="replace") as fh:
            return "\n".join(fh.read().strip().splitlines()[-n:])

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.log.close()
        os.unlink(self.log.name)
        shutil.rmtree(self.cache_dir, ignore_errors=True)


class WorkerPool:
    def __init__(self, jobs: int = 1, timeout: float = 120.0, device: str = "cpu"):
        self.n = max(1, jobs)
        self.timeout = timeout
        self.device = device
        self.log_dir = tempfile.mkdtemp(prefix="mini_fuzz_")
        self.workers: list[_Worker] = []

    def run(self, jobs: Iterable[dict]) -> Iterator[tuple[dict, dict]]:
        pending = list(jobs)[::-1]
        sel = selectors.DefaultSelector()
        while len(self.workers) < min(self.n, len(pending)):
            self._start(sel)
        for w in self.workers:
            sel.register(w.proc.stdout, selectors.EVENT_READ, w)
        idle = [w for w in self.workers]
        busy: list[_Worker] = []
        while pending or busy:
            while idle and pending:
                w = idle.pop()
                w.send(pending.pop(), self.timeout)
                busy.append(w)
            wait = max(0.0, min(w.deadline for w in busy) - time.monotonic())
            for key, _ in sel.select(timeout=min(wait, 1.0)):
                w = key.data
                lines = w.read_lines()
                if lines is None:
                    result = self._failed(w, "crash", f"worker exited with {w.proc.poll()}:\n{w.stderr_tail()}")
                    yield w.job, result
                    busy.remove(w)
                    idle.append(self._replace(sel, w))
                    continue
                for line in lines:
                    msg = json.loads(line)
                    if msg.get("ready"):
                        w.ready = True
                        w.deadline = time.monotonic() + self.timeout
                        continue
                    busy.remove(w)
                    idle.append(w)
                    yield w.job, msg
            for w in [w for w in busy if time.monotonic() > w.deadline]:
                yield w.job, self._failed(w, "timeout", f"no answer in {self.timeout:.0f} s")
                busy.remove(w)
                idle.append(self._replace(sel, w))
        sel.close()

    def _start(self, sel) -> _Worker:
        w = _Worker(self.device, self.log_dir)
        self.workers.append(w)
        return w

    def _replace(self, sel, w: _Worker) -> _Worker:
        sel.unregister(w.proc.stdout)
        w.kill()
        self.workers.remove(w)
        fresh = self._start(sel)
        sel.register(fresh.proc.stdout, selectors.EVENT_READ, fresh)
        return fresh

    @staticmethod
    def _failed(w: _Worker, cls: str, detail: str) -> dict:
        return {"program": w.job.get("program"), "outcome": {"cls": cls, "category": cls, "detail": detail},
                "seconds": None}

    def close(self) -> None:
        for w in self.workers:
            w.kill()
        self.workers = []
        shutil.rmtree(self.log_dir, ignore_errors=True)


def _serve(device: str) -> None:
    """The worker's loop: one JSON job a line in, one JSON result a line out."""
    out = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # anything else printed (torch, Triton) goes to the log, not the protocol
    import torch
    torch.set_num_threads(1)
    import mini_inductor  # noqa: F401  registers the backend before the first job is timed
    from .execute import Outcome, matmul_split, matmul_tma, run_program
    from .generate import generate
    from .program import Program
    from .sizes import other_size_sets
    matmul_split()
    matmul_tma()

    out.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        job = json.loads(line)
        start = time.monotonic()
        if job.get("program") is not None:
            program = Program.from_dict(job["program"])
        else:
            try:
                program = generate(job["seed"], job["index"], job.get("autograd", False), job.get("size", 6),
                                   other_sizes=other_size_sets())
            except RuntimeError as err:
                out.write(json.dumps({"program": None, "outcome": Outcome("eager_error", "generate", str(err))
                                      .to_dict(), "seconds": 0}) + "\n")
                continue
        outcome = run_program(program, job.get("backend", "mini_inductor"), device)
        if job.get("triage") and outcome.cls in ("wrong", "error"):
            outcome = _triage(program, outcome, device)
        out.write(json.dumps({"program": program.to_dict(), "outcome": outcome.to_dict(),
                              "seconds": round(time.monotonic() - start, 2)}) + "\n")


# torch's own pipelines up to our lowering: AOT autograd alone, then with the decompositions and the
# min-cut partitioner that mini_inductor also uses (a bug of the partitioner shows only there)
TRIAGE_BACKENDS = ("aot_eager", "aot_eager_decomp_partition")


def _triage(program, outcome, device: str):
    """`outcome` as torch_bug when one of TRIAGE_BACKENDS fails the same way, else ours with their failures
    noted. A wrong result that only aot_eager_decomp_partition shares stays ours: torch's decompositions
    give it (batch norm's strides in a dynamic graph, fuzz seed 120), and giving eager's results over
    them is our job (lowering/eager_strides.py)."""
    from .execute import Outcome, run_program   # in the worker, after torch (see _serve)

    notes = []
    for backend in TRIAGE_BACKENDS:
        shared = run_program(program, backend, device)
        note = f"{shared.cls} {shared.category}: {shared.detail.splitlines()[0] if shared.detail else ''}"
        # both raise (torch often at compile time, with another message), or both are wrong alike
        alike = (shared.cls == outcome.cls == "error") or shared.signature() == outcome.signature()
        if alike and (outcome.cls == "error" or backend == "aot_eager"):
            return Outcome("torch_bug", outcome.category, f"{outcome.detail}\n  {backend} too: {note}")
        if alike:
            notes.append(f"\n  {backend} is wrong alike (torch's decompositions; ours to correct): {note}")
            continue
        if shared.cls != "ok":
            notes.append(f"\n  {backend} fails otherwise: {note}")
    outcome.detail += "".join(notes)
    return outcome


if __name__ == "__main__":
    _serve(sys.argv[1] if len(sys.argv) > 1 else "cpu")

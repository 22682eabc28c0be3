"""`python -m tests.fuzz`: run programs, print the outcome table, shrink failures, write repros.

    python -m tests.fuzz --n 200 --seed 0 [--start 0] [--jobs 2] [--autograd] [--device cuda]
                         [--out DIR] [--size 6] [--timeout 120] [--no-shrink] [--no-triage]

Exit status 1 when a program is wrong, errors, hangs or crashes under mini_inductor in a way that
aot_eager (or, for errors, aot_eager_decomp_partition) does not share (torch_bug failures are listed,
not counted against us; a wrong result only torch's decompositions share is ours: workers.py _triage).
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import re
import sys
import time

from .execute import CLASSES, Outcome
from .program import Program
from .workers import WorkerPool

OURS = ("wrong", "error", "timeout", "crash")


@dataclasses.dataclass
class Result:
    index: int
    program: Program | None
    outcome: Outcome
    seconds: float | None = None
    shrunk: Program | None = None
    shrunk_outcome: Outcome | None = None


def run_programs(pool: WorkerPool, seed: int, indices, autograd: bool = False, size: int = 6,
                 triage: bool = True, progress=None) -> list[Result]:
    jobs = [{"seed": seed, "index": i, "autograd": autograd, "size": size, "triage": triage}
            for i in indices]
    results: list[Result] = []
    for job, msg in pool.run(jobs):
        program = Program.from_dict(msg["program"]) if msg.get("program") else _regenerate(job)
        results.append(Result(job["index"], program, Outcome(**msg["outcome"]), msg.get("seconds")))
        if progress:
            progress(results, len(jobs))
    return sorted(results, key=lambda r: r.index)


def _regenerate(job: dict) -> Program | None:
    """The program of a job whose worker died before answering (drawn again: it is deterministic)."""
    from .generate import generate
    from .sizes import other_size_sets
    try:
        return generate(job["seed"], job["index"], job.get("autograd", False), job.get("size", 6),
                        other_sizes=other_size_sets())
    except RuntimeError:
        return None


def shrink_failures(pool: WorkerPool, results: list[Result], budget: int = 120, log=print) -> None:
    """Shrink each of our failures (not torch's) to a small program failing the same way."""
    from .shrink import shrink

    def evaluate(programs):
        # triaged: a candidate that fails under aot_eager alike is torch's, another failure than ours
        # (fuzz seed 216 prog 243 shrank to two views of an expanded input that aot_eager gets wrong too)
        jobs = [{"program": p.to_dict(), "triage": True} for p in programs]
        answers = {id(j): m for j, m in pool.run(jobs)}
        return [Outcome(**answers[id(j)]["outcome"]) for j in jobs]

    for r in results:
        if r.outcome.cls not in ("wrong", "error", "crash") or r.program is None:
            continue
        start = time.monotonic()
        r.shrunk, tried = shrink(r.program, r.outcome.signature(), evaluate, budget=budget, batch=pool.n)
        r.shrunk_outcome = evaluate([r.shrunk])[0]
        log(f"shrunk {r.program.name}: {len(r.program.stmts)} -> {len(r.shrunk.stmts)} statements "
            f"({tried} candidates, {time.monotonic() - start:.0f} s)")


def table(results: list[Result]) -> str:
    cols = [c for c in CLASSES if any(r.outcome.cls == c for r in results)] or ["ok"]
    rows: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for r in results:
        rows["ALL programs"][r.outcome.cls] += 1
        for fam in (r.program.families() if r.program else ["?"]):
            rows[fam][r.outcome.cls] += 1
    width = max(len(k) for k in rows) + 2
    lines = ["family".ljust(width) + "".join(c.rjust(12) for c in cols)]
    for fam in ["ALL programs"] + sorted(k for k in rows if k != "ALL programs"):
        lines.append(fam.ljust(width) + "".join(str(rows[fam][c]).rjust(12) for c in cols))
    return "\n".join(lines)


def other_sizes_summary(results: list[Result]) -> str:
    """--dynamic: how many programs were also called at other sizes, how many failed only there, and
    which compiled anew there (the point of --dynamic is one compile for every size)."""
    called = [r for r in results if r.program is not None and r.program.size_sets]
    if not called:
        return ""
    failed = [r.index for r in results if r.outcome.sizes and r.outcome.cls not in ("ok", "eager_error")]
    anew = [r for r in results if r.outcome.recompiles]
    calls = sum(r.program.size_sets for r in called)
    lines = [f"other sizes: {len(called)} of {len(results)} programs called at {calls} other size sets; "
             f"{len(failed)} failed there{f' (programs {failed})' if failed else ''}; "
             f"{len(anew)} compiled anew there{f' (programs {[r.index for r in anew]})' if anew else ''}"]
    lines += [f"  program {r.index}: {r.outcome.detail}" for r in anew[:20]]
    return "\n".join(lines)


def warm_summary(results: list[Result]) -> str:
    """--warm: how the second compiles were served (graph records' `cache`), over the programs that ran."""
    served = collections.Counter(c for r in results for c in r.outcome.warm_caches)
    ran = sum(1 for r in results if r.outcome.warm_caches)
    kinds = ", ".join(f"{n} {c}" for c, n in served.most_common())
    lines = [f"warm start: {ran} programs compiled again after torch._dynamo.reset(); their graphs: {kinds or 'none'}"]
    # why graphs went through AOT autograd again: each reason once, its numbers and expressions left out
    notes = collections.Counter(re.sub(r"\d+", "N", note.split(": ", 1)[-1])[:110]
                                for r in results if r.outcome.warm_caches for note in r.outcome.warm_notes)
    lines += [f"  {n} graphs without a front cache entry: {why}" for why, n in notes.most_common(10)]
    return "\n".join(lines)


def distinct_failures(results: list[Result]) -> dict[str, list[Result]]:
    """Failures grouped by how they fail and the ops of their shrunk program."""
    groups: dict[str, list[Result]] = collections.defaultdict(list)
    for r in results:
        if r.outcome.cls in OURS + ("torch_bug",):
            prog = r.shrunk or r.program
            ops = ",".join(prog.ops()) if prog else "?"
            groups[f"{r.outcome.signature()} [{ops}]"].append(r)
    return groups


def write_out(out: str, results: list[Result]) -> list[str]:
    from .shrink import repro_script

    os.makedirs(out, exist_ok=True)
    written = []
    for r in results:
        if r.outcome.cls == "ok" or r.outcome.cls == "eager_error" or r.program is None:
            continue
        prog, outcome = (r.shrunk, r.shrunk_outcome) if r.shrunk is not None else (r.program, r.outcome)
        name = f"{r.outcome.cls}_{prog.name}.py"
        with open(os.path.join(out, name), "w") as fh:
            fh.write(repro_script(prog, outcome, file=name))
        written.append(name)
    summary = [{"index": r.index, "class": r.outcome.cls, "category": r.outcome.category,
                "detail": r.outcome.detail, "families": r.program.families() if r.program else [],
                "seconds": r.seconds, "shrunk_stmts": len(r.shrunk.stmts) if r.shrunk else None,
                "sizes": r.outcome.sizes, "other_calls": r.outcome.other_calls, "recompiles": r.outcome.recompiles,
                "warm_caches": r.outcome.warm_caches, "warm_notes": r.outcome.warm_notes,
                "other_shapes": [r.program.shapes(k) for k in range(1, r.program.size_sets + 1)] if r.program else []}
               for r in results]
    with open(os.path.join(out, "summary.json"), "w") as fh:
        json.dump(summary, fh, indent=1)
    return written


def _progress(start: float):
    tty = sys.stderr.isatty()

    def show(results, total):
        counts = collections.Counter(r.outcome.cls for r in results)
        line = f"[{len(results)}/{total}] " + " ".join(f"{c} {counts[c]}" for c in CLASSES if counts[c]) + \
               f"  {time.monotonic() - start:.0f} s"
        if tty:
            sys.stderr.write("\r" + line)
            if len(results) == total:
                sys.stderr.write("\n")
        elif len(results) % 10 == 0 or len(results) == total:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()
    return show


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100, help="how many programs")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--start", type=int, default=0, help="index of the first program")
    ap.add_argument("--jobs", type=int, default=1, help="worker processes")
    ap.add_argument("--autograd", action="store_true", help="also compare input gradients")
    ap.add_argument("--dynamic", action="store_true",
                    help="compile with dynamic=True and dynamic_shapes='symbolic' (one compile for every size), and "
                         "call each program at other input sizes too (tests/fuzz/sizes.py)")
    ap.add_argument("--warm", action="store_true",
                    help="after the compiled calls, torch._dynamo.reset() and compile and call again: a warm start, "
                         "served from the caches (the front cache where the graph qualifies), compared with eager too")
    ap.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    ap.add_argument("--out", default=None, help="folder for repro scripts and summary.json")
    ap.add_argument("--size", type=int, default=6, help="largest size of an input dim")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds a program may take")
    ap.add_argument("--matmul-split", action="store_true",
                    help="every matmul a template with its epilogues fused, then left to cuBLAS with them as a "
                         "kernel after it (and ReLU in _addmm_activation): the GPU's usual path, run on the CPU")
    ap.add_argument("--matmul-tma", action="store_true",
                    help="every mm and addmm a template of its own kernel, its fp16/bf16 operands loaded through "
                         "TMA descriptors where their layouts allow (option matmul_tma)")
    ap.add_argument("--no-shrink", action="store_true")
    ap.add_argument("--no-triage", action="store_true", help="do not rerun failures with aot_eager and aot_eager_decomp_partition")
    ap.add_argument("--shrink-budget", type=int, default=120, help="candidate programs per failure")
    ap.add_argument("--weight", action="append", default=[], metavar="FAMILY=W",
                    help="draw an op family this often instead (attention=60 makes most programs hold one); "
                         "the programs of a seed change with the weights")
    args = ap.parse_args(argv)
    if args.matmul_split:
        os.environ["MINI_FUZZ_MATMUL_SPLIT"] = "1"   # read by every worker (execute.py matmul_split)
    if args.matmul_tma:
        os.environ["MINI_FUZZ_MATMUL_TMA"] = "1"   # read by every worker (execute.py matmul_tma)
    if args.dynamic:
        os.environ["MINI_FUZZ_DYNAMIC"] = "1"   # read by every worker (execute.py)
    if args.warm:
        os.environ["MINI_FUZZ_WARM"] = "1"      # read by every worker (execute.py)
    if args.weight:
        os.environ["MINI_FUZZ_WEIGHTS"] = ",".join(args.weight)   # read by every worker (ops.py)
    device = args.device or _default_device()
    start = time.monotonic()
    pool = WorkerPool(args.jobs, args.timeout, device)
    try:
        results = run_programs(pool, args.seed, range(args.start, args.start + args.n), args.autograd,
                               args.size, not args.no_triage, _progress(start))
        print(f"\n{len(results)} programs, seed {args.seed}, start {args.start}, device {device}"
              f"{', autograd' if args.autograd else ''}{', dynamic' if args.dynamic else ''}{', warm' if args.warm else ''}"
              f"{', matmul split' if args.matmul_split else ''}{', matmul tma' if args.matmul_tma else ''}, "
              f"{time.monotonic() - start:.0f} s\n")
        print(table(results))
        if other_sizes_summary(results):
            print("\n" + other_sizes_summary(results))
        if args.warm:
            print("\n" + warm_summary(results))
        if not args.no_shrink:
            shrink_failures(pool, results, args.shrink_budget)
    finally:
        pool.close()
    groups = distinct_failures(results)
    if groups:
        print(f"\n{len(groups)} distinct failures:")
        for key, rs in groups.items():
            r = rs[0]
            detail = (r.shrunk_outcome or r.outcome).detail.splitlines()
            print(f"  {key}: programs {[x.index for x in rs]}\n      {detail[0][:200] if detail else ''}")
            if r.shrunk is not None:
                print("\n".join("        " + ln for ln in r.shrunk.to_source().splitlines() if ln))
    if args.out:
        written = write_out(args.out, results)
        print(f"\n{len(written)} repros and summary.json in {args.out}")
    return 1 if any(r.outcome.cls in OURS for r in results) else 0


def _default_device() -> str:
    import torch
    return "cuda" if torch.cuda.is_available() else "cpu"

"""OpInfo sweep setup: which ops run, and the table of outcomes printed at the end of the run.

By default (`make test`) a fixed subset of common ops runs; MINI_OPINFO_ALL=1 (`make opinfo`) runs
every op of `op_db`. Each test records its outcome as a user property, which pytest-xdist carries
back to the controller, so the table covers every worker.

MINI_OPINFO_OUT=<folder>: also write the results there, for collecting from another machine:
    opinfo_results.jsonl   one line per op and sweep, appended as results arrive (kept if the run is cut short)
    opinfo_summary.txt     the tables, the counts and the issue's targets, at the end of the run
"""
import collections
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

_outcomes: dict[str, dict[str, tuple[str, str]]] = collections.defaultdict(dict)
_started = time.time()
OUT = os.environ.get("MINI_OPINFO_OUT", "")

# The targets (issue 4), for each sweep: share of the ops run that are correct and generated.
TARGET_CORRECT = 97.0
TARGET_GENERATED = 60.0


def _is_controller(config) -> bool:
    return not hasattr(config, "workerinput")


_results_file = ""   # set in the controller only (xdist workers report to it, and see the same reports)


def pytest_configure(config):
    global _results_file
    if OUT and _is_controller(config):
        os.makedirs(OUT, exist_ok=True)
        _results_file = os.path.join(OUT, "opinfo_results.jsonl")
        open(_results_file, "w").close()


def pytest_runtest_logreport(report):
    if report.when != "call":
        return
    for key, value in report.user_properties:
        if key == "opinfo":
            sweep, name, status, detail = value
            _outcomes[sweep][name] = (status, detail)
            if _results_file:
                with open(_results_file, "a") as f:
                    f.write(json.dumps({"sweep": sweep, "op": name, "status": status, "detail": detail}) + "\n")


def table_lines(results: dict[str, tuple[str, str]]) -> list[str]:
    """An op a line: its name, status and detail (fallback ops, or why it failed)."""
    width = max(len(n) for n in results)
    return [f"{name:<{width}}  {results[name][0]:<9}  {results[name][1][:160]}" for name in sorted(results)]


def count_lines(results: dict[str, tuple[str, str]]) -> list[str]:
    """The counts per status, and each of the issue's targets met or missed."""
    lines = []
    counts = collections.Counter(status for status, _ in results.values())
    ran = sum(n for s, n in counts.items() if s != "skipped")

    def pct(n):
        return 100.0 * n / ran if ran else 0.0
    for status in ("generated", "view", "fallback", "failed"):
        lines.append(f"{status:<9} {counts[status]:5d}  {pct(counts[status]):5.1f}% of {ran} ops run")
    ok = counts["generated"] + counts["view"] + counts["fallback"]
    lines.append(f"{'correct':<9} {ok:5d}  {pct(ok):5.1f}%   (skipped, not run: {counts['skipped']})")
    wrong = sorted(n for n, (s, d) in results.items() if s == "failed" and d.startswith("mismatch"))
    errors = counts["failed"] - len(wrong)

    def verdict(met: bool) -> str:
        return "met" if met else "MISSED"
    lines.append(f"targets: correct {pct(ok):.1f}% >= {TARGET_CORRECT:.0f}%: {verdict(pct(ok) >= TARGET_CORRECT)}; "
                 f"generated {pct(counts['generated']):.1f}% >= {TARGET_GENERATED:.0f}%: "
                 f"{verdict(pct(counts['generated']) >= TARGET_GENERATED)}; "
                 f"wrong answers {len(wrong)} (compile errors {errors}): {verdict(not wrong)}")
    if wrong:
        lines.append("wrong answers (mismatch with eager): " + ", ".join(wrong))
    return lines


def pytest_terminal_summary(terminalreporter):
    if not _is_controller(terminalreporter.config) or not _outcomes:
        return
    tr = terminalreporter
    everything = []
    for sweep, results in sorted(_outcomes.items()):
        tr.section(f"OpInfo sweep: {sweep}")
        lines = table_lines(results) + [""] + count_lines(results)
        for line in lines:
            tr.write_line(line)
        everything += [f"== OpInfo sweep: {sweep} =="] + lines + [""]
    # the counts of every sweep once more at the very end, where the tail of a long log shows them
    tr.section("OpInfo sweep counts")
    for sweep, results in sorted(_outcomes.items()):
        tr.write_line(sweep)
        for line in count_lines(results):
            tr.write_line("  " + line)
    if OUT:
        everything.append(f"elapsed {time.time() - _started:.0f} s")
        path = os.path.join(OUT, "opinfo_summary.txt")
        with open(path, "w") as f:
            f.write("\n".join(everything) + "\n")
        tr.write_line(f"OpInfo summary written to {path}")

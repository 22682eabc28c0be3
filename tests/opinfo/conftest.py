"""OpInfo sweep setup: which ops run, and the table of outcomes printed at the end of the run.

By default (`make test`) a fixed subset of common ops runs; MINI_OPINFO_ALL=1 (`make opinfo`) runs
every op of `op_db`. Each test records its outcome as a user property, which pytest-xdist carries
back to the controller, so the table covers every worker.
"""
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

_outcomes: dict[str, dict[str, tuple[str, str]]] = collections.defaultdict(dict)


def pytest_runtest_logreport(report):
    if report.when != "call":
        return
    for key, value in report.user_properties:
        if key == "opinfo":
            sweep, name, status, detail = value
            _outcomes[sweep][name] = (status, detail)


def pytest_terminal_summary(terminalreporter):
    if hasattr(terminalreporter.config, "workerinput"):
        return
    for sweep, results in sorted(_outcomes.items()):
        tr = terminalreporter
        tr.section(f"OpInfo sweep: {sweep}")
        width = max(len(n) for n in results)
        for name in sorted(results):
            status, detail = results[name]
            tr.write_line(f"{name:<{width}}  {status:<9}  {detail[:160]}")
        counts = collections.Counter(status for status, _ in results.values())
        ran = sum(n for s, n in counts.items() if s != "skipped")
        tr.write_line("")
        for status in ("generated", "view", "fallback", "failed"):
            pct = 100.0 * counts[status] / ran if ran else 0.0
            tr.write_line(f"{status:<9} {counts[status]:5d}  {pct:5.1f}% of {ran} ops run")
        ok = counts["generated"] + counts["view"] + counts["fallback"]
        tr.write_line(f"{'correct':<9} {ok:5d}  {100.0 * ok / ran if ran else 0.0:5.1f}%   "
                      f"(skipped, not run: {counts['skipped']})")

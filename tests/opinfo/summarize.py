"""The OpInfo sweep's tables, counts and targets from a results file, also of a run that was cut short.

    python3 tests/opinfo/summarize.py OUT/opinfo_results.jsonl [> summary.txt]

The file is what a run with MINI_OPINFO_OUT=OUT appends to as results arrive (see conftest.py).
"""
import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from conftest import count_lines, table_lines  # noqa: E402


def main(path: str) -> None:
    sweeps: dict[str, dict[str, tuple[str, str]]] = collections.defaultdict(dict)
    with open(path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                sweeps[r["sweep"]][r["op"]] = (r["status"], r["detail"])
    for sweep, results in sorted(sweeps.items()):
        print(f"== OpInfo sweep: {sweep} ==")
        print("\n".join(table_lines(results) + [""] + count_lines(results)))
        print()
    for sweep, results in sorted(sweeps.items()):
        print(sweep)
        print("\n".join("  " + ln for ln in count_lines(results)))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])

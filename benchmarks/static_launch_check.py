"""GPU check of the static_launch option (runtime/launch/static_launch.py): cold starts with it on and off,
then launch costs with it on and off. Not a test; prints what to compare.

    PYTHONPATH=. python3 benchmarks/static_launch_check.py [--model launch_bound] [--skip-overhead]

1. `benchmarks.cold_timeline` twice, each in fresh TRITON_CACHE_DIR and MINI_INDUCTOR_CACHE_DIR, with
   options static_launch=True and static_launch=False. With it on there should be no "launcher ..."
   event and no `__triton_launcher*` library in the Triton cache, and the "kernel compile" stage should
   be shorter by about one gcc build (0.23-0.40 s on the H100 machine). Triton's driver helper
   ("Triton driver helper", cuda_utils) is still built once on a cold cache: that is not a launcher.
2. `benchmarks.launch_overhead` with MINI_INDUCTOR_STATIC_LAUNCH=1 and =0: the "µs per call per
   kernel" lines (kernel chain, without CUDA graphs) should not be worse with it on.
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _env(**extra) -> dict:
    env = dict(os.environ, PYTHONPATH=ROOT, **extra)
    env.pop("TRITON_INTERPRET", None)
    return env


def cold_start(model: str, static: bool) -> None:
    with tempfile.TemporaryDirectory(prefix="static_launch_check_") as tmp:
        triton_dir = os.path.join(tmp, "triton")
        env = _env(TRITON_CACHE_DIR=triton_dir, MINI_INDUCTOR_CACHE_DIR=os.path.join(tmp, "mini"))
        cmd = [sys.executable, "-m", "benchmarks.cold_timeline", "--model", model,
               "--options", f"static_launch={static}"]
        out = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        print(f"\n=== cold start, static_launch={static}: {' '.join(cmd[1:])}")
        print(out.stdout)
        if out.returncode:
            print(out.stderr[-4000:])
            return
        launcher_events = [ln for ln in out.stdout.splitlines() if re.search(r"\blauncher\b", ln)]
        libraries = glob.glob(os.path.join(triton_dir, "*", "__triton_launcher*"))
        stages = re.findall(r"kernel compile ([0-9.]+)", out.stdout)
        print(f"--> static_launch={static}: {len(launcher_events)} launcher events, {len(libraries)} "
              f"__triton_launcher libraries in the Triton cache, kernel compile stage(s) {stages} s")


def launch_costs(static: bool) -> None:
    cmd = [sys.executable, "-m", "benchmarks.launch_overhead"]
    out = subprocess.run(cmd, cwd=ROOT, env=_env(MINI_INDUCTOR_STATIC_LAUNCH="1" if static else "0"),
                         capture_output=True, text=True, timeout=1800)
    print(f"\n=== launch overhead, MINI_INDUCTOR_STATIC_LAUNCH={int(static)}")
    print(out.stdout if not out.returncode else out.stdout + out.stderr[-4000:])
    for line in out.stdout.splitlines():
        if "per call per kernel" in line and "mini_inductor" in line:
            print(f"--> static_launch={static}: {line.strip()}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="launch_bound")
    ap.add_argument("--skip-overhead", action="store_true", help="only the two cold starts")
    a = ap.parse_args()
    for static in (True, False):
        cold_start(a.model, static)
    if not a.skip_overhead:
        for static in (True, False):
            launch_costs(static)


if __name__ == "__main__":
    main()

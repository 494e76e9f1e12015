"""Benchmark (not a test): ``chaoslab explore``'s runs per hour on this machine - the default
drawn workloads and faults, the built-in listener variants that promise something, one local
environment reused for every run.

    make bench            # or: .venv/bin/python tests/benchmarks/bench_explore.py [SECONDS]

Prints the runs, the runs per hour of exploring (the environment's start not counted: it is
started once per exploration), and the median, shortest and longest run. Goal (issue 31):
>= 60 listener runs per hour on 2 cores.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from harness.environment.local import LocalEnvironment
from harness.explore.explorer import explore
from harness.explore.inputs import plan

GOAL_PER_HOUR = 60
SECONDS = 600


def main() -> None:
    seconds = int(sys.argv[1]) if len(sys.argv) > 1 else SECONDS
    with tempfile.TemporaryDirectory() as tmp, LocalEnvironment(Path(tmp) / "env") as env:
        asked = plan(
            runtime="listener",
            variants=[],
            kinds=None,
            backend=env.abilities,
            budget=f"{seconds}s",
            seed=1,
            out=Path(tmp) / "explore",
        )
        started = time.monotonic()
        state = explore(env, asked, progress=lambda _line: None, stop=threading.Event())
        wall = time.monotonic() - started
    runs = [r.seconds for r in state.runs]
    per_hour = len(runs) / wall * 3600
    print(f"explore, listener, {', '.join(map(str, asked.explored.variants))}; seed 1; "
          f"{os.cpu_count()} cores")  # fmt: skip
    print(f"  {len(runs)} runs in {wall:.0f} s ({len(state.findings)} findings shrunk on the way)")
    print(f"  runs per hour: {per_hour:.0f} (goal >= {GOAL_PER_HOUR})")
    if runs:
        print(f"  a run: median {statistics.median(runs):.0f} s, {min(runs):.0f}-{max(runs):.0f} s")
    # A built-in variant that broke its promise is a result, not noise: say what and how (the
    # exploration's folder goes with the temporary one).
    for f in state.findings:
        print(f"  found at run {f.run}: {'; '.join(map(str, f.violations))}; minimal: "
              f"{f.minimal.schedule()} (seed {f.minimal.seed}), reproduced in "
              f"{f.reproduced} of {f.replays}")  # fmt: skip


if __name__ == "__main__":
    main()

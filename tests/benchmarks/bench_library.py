"""Benchmark (not a test): the wall time of the demo (``chaoslab demo``, each seed's headline
incident cut to a first look) and of the whole library (``chaoslab matrix --together 2``, what
``make library`` runs), one after the other on this machine, each on a fresh environment of its
own, with each scenario's share.

    make bench            # or: .venv/bin/python tests/benchmarks/bench_library.py [demo|library]

Goal (issue 43): the demo within 5 minutes on 2 cores, the jars and .venv in place.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness.paths import project_root
from harness.results.model import RESULTS

GOAL_DEMO_S = 300.0
COMMANDS = {
    "demo": ["demo"],
    "library": ["matrix", "--together", "2"],
}


def timed(name: str, out: Path) -> tuple[float, int, list[tuple[str, float, bool]]]:
    """Wall seconds of the command, its exit status, and each scenario's seconds and verdict."""
    argv = [sys.executable, "-m", "harness.cli", *COMMANDS[name], "--out", str(out)]
    start = time.monotonic()
    done = subprocess.run(argv, cwd=project_root(), capture_output=True, text=True)
    wall = time.monotonic() - start
    rows = []
    for results in sorted(out.glob(f"*/{RESULTS}")):
        report = json.loads(results.read_text())
        rows.append((results.parent.name, float(report["seconds"] or 0), bool(report["passed"])))
    if done.returncode not in (0, 1):
        print(done.stdout[-2000:], done.stderr[-2000:], sep="\n")
    return wall, done.returncode, rows


def main(names: list[str]) -> None:
    with tempfile.TemporaryDirectory(prefix="chaoslab-bench-") as tmp:
        for name in names:
            print(f"{name}: chaoslab {' '.join(COMMANDS[name])} ...", flush=True)
            wall, code, rows = timed(name, Path(tmp) / name)
            failed = [n for n, _s, ok in rows if not ok]
            print(f"  {len(rows)} scenarios in {wall:.0f} s ({wall / 60:.1f} min), exit {code}"
                  f"{', failed: ' + ', '.join(failed) if failed else ', 0 failed'}")  # fmt: skip
            for scenario, seconds, _ok in sorted(rows, key=lambda r: -r[1]):
                print(f"    {scenario:<28}{seconds:>6.0f} s")
            if name == "demo":
                print(f"  goal: the demo within {GOAL_DEMO_S:.0f} s: {wall:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1:] or list(COMMANDS))

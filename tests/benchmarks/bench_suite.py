"""Benchmark (not a test): the suite's ten most expensive tests, from the last whole run of each
tier that left its times here (``.chaoslab/suite-times/``, written by tests/conftest.py after
``make test`` and ``make library``), so that a change that makes the suite slower shows where.

    make bench            # or: .venv/bin/python tests/benchmarks/bench_suite.py [N]

Goal (issue 69): ``make test`` within 1,500 s of pytest on 2 cores.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from harness.paths import project_root
from tests.tiers import LAST_DIR

GOAL_TEST_S = 1500.0


def main(count: int) -> None:
    folder = project_root() / LAST_DIR
    runs = sorted(folder.glob("*.json")) if folder.is_dir() else []
    if not runs:
        print(f"suite: no run has left its times in {folder} yet (make test writes them)")
        return
    for path in runs:
        run = json.loads(path.read_text())
        tests: dict[str, dict[str, Any]] = run["tests"]
        total = sum(float(t["s"]) for t in tests.values())
        failed = sum(1 for t in tests.values() if t["outcome"] == "failed")
        print(
            f"suite, tier {run['tier']} (started {run['started']}): {len(tests)} tests,"
            f" {run['wall_s']:.0f} s of pytest, {total:.0f} s of test time, {failed} failed"
        )
        if run["tier"] == "test":
            print(f"  goal: within {GOAL_TEST_S:.0f} s of pytest: {run['wall_s']:.0f} s")
        ranked = sorted(tests.items(), key=lambda kv: -float(kv[1]["s"]))
        for nodeid, t in ranked[:count]:
            print(f"  {float(t['s']):>7.1f} s  {nodeid}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10)

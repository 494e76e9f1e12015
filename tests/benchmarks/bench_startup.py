"""Benchmark (not a test): time from ``up`` to every server ready, and Spark's cold start.

    make bench            # or: .venv/bin/python tests/benchmarks/bench_startup.py [ROUNDS]

Goal: the environment is ready within 20 s on 2 cores.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path

from harness.environment.local import LocalEnvironment
from harness.environment.spark import spark_session

GOAL_S = 20.0


def time_up(directory: Path) -> tuple[float, float]:
    env = LocalEnvironment(directory)
    start = time.monotonic()
    env.start()
    ready = time.monotonic() - start
    start = time.monotonic()
    env.stop()
    return ready, time.monotonic() - start


def time_spark(directory: Path) -> float:
    with LocalEnvironment(directory) as env:
        start = time.monotonic()
        session = spark_session(env.spark, "bench")
        session.range(10).count()
        took = time.monotonic() - start
        session.stop()
    return took


def main(rounds: int) -> None:
    with tempfile.TemporaryDirectory(prefix="chaoslab-bench-") as tmp:
        ups, downs = [], []
        for i in range(rounds):
            ready, down = time_up(Path(tmp) / f"env{i}")
            ups.append(ready)
            downs.append(down)
            print(f"  round {i + 1}: up -> ready {ready:5.2f} s, down {down:5.2f} s", flush=True)
        spark = time_spark(Path(tmp) / "spark")
    print()
    print(f"up -> ready, {rounds} rounds (3 Kafka nodes registered with a quorum leader and")
    print("  __consumer_offsets made; MongoDB; the fault proxy):")
    print(f"  min {min(ups):.2f} s  median {statistics.median(ups):.2f} s  max {max(ups):.2f} s")
    print(f"  goal <= {GOAL_S:.0f} s: {'met' if max(ups) <= GOAL_S else 'NOT met'}")
    print(f"down: median {statistics.median(downs):.2f} s")
    print(f"spark session cold start + first job (local[2]): {spark:.2f} s")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5)

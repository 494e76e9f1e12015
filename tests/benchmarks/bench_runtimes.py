"""Benchmark (not a test): each variant alone, on each runtime, over the same workload - events/s
from its first batch to its last commit (``VariantResult.events_per_s``), side by side in one
run on one environment.

    make bench            # or: .venv/bin/python tests/benchmarks/bench_runtimes.py [EVENTS]

Before Spark read Kafka through spark-sql-kafka (a hand-written Python source, every batch
collected to the driver), the Spark runtime moved 82 events/s in the demo.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from harness.environment import LocalEnvironment
from harness.runner import run_scenario
from harness.scenario import parse_scenario

VARIANTS = ["naive", "idempotent", "unique-index", "transactional"]


def main(events: int) -> None:
    scenario = parse_scenario(
        {
            "name": "bench",
            "seed": 1,
            "workload": {"events": events, "keys": 500, "partitions": 3},
            "runtimes": ["listener", "spark"],
            # One at a time: each variant has the machine to itself.
            "pipeline": {"batch_size": 500, "parallel": False, "trigger_ms": 100},
            "variants": VARIANTS,
        }
    )
    with (
        tempfile.TemporaryDirectory(prefix="chaoslab-bench-") as tmp,
        LocalEnvironment(Path(tmp) / "env") as env,
    ):
        result = run_scenario(env, scenario, Path(tmp) / "run", progress=lambda _m: None)
    print(f"each variant alone, {events} events, 3 partitions, batches of 500 (events/s):")
    print(f"{'variant':<16}{'listener':>10}{'spark':>10}")
    rates = {(r.runtime, r.variant): r.events_per_s for r in result.variants}
    for variant in VARIANTS:
        listener, spark = rates[("listener", variant)], rates[("spark", variant)]
        print(f"{variant:<16}{listener:>10.0f}{spark:>10.0f}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5000)

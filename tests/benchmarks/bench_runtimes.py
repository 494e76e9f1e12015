"""Benchmark (not a test): each variant alone, on each runtime, over the same workload - events/s
from its first batch to its last commit (``VariantResult.events_per_s``) - at batches of 500
and of 5,000 records, beside what the environment's MongoDB takes at most: the rate of the
idempotent variant's own write (bulk upserts of the same number of documents from one client),
all in one run on one environment.

    make bench            # or: .venv/bin/python tests/benchmarks/bench_runtimes.py [EVENTS]

Before Spark read Kafka through spark-sql-kafka (a hand-written Python source, every batch
collected to the driver), the Spark runtime moved 82 events/s in the demo.

Goal (issue 11): >= 5,000 events/s for the idempotent variant on Spark on 2 cores. Measured
here it cannot be met by Spark: SecantusDB, the lab's MongoDB, takes ~2,400 upserts/s from one
client and ~2,200/s from two (2026-11-23, bulk writes of 500), so the ceiling line below is
the bound, and the goal line says which side of it each figure is.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pymongo import MongoClient, ReplaceOne

from harness.environment import LocalEnvironment
from harness.runner import run_scenario
from harness.scenario import parse_scenario

VARIANTS = ["naive", "idempotent", "unique-index", "transactional"]
BATCHES = (500, 5000)
GOAL = 5000  # events/s, idempotent on Spark


def upsert_ceiling(mongo_uri: str, events: int) -> float:
    """Upserts/s of ``events`` documents (the landing document's size) in bulks of 500."""
    client: MongoClient[dict[str, Any]] = MongoClient(mongo_uri)
    with client:
        events_coll = client.bench_ceiling.events
        start = time.monotonic()
        for first in range(0, events, 500):
            ops = [
                ReplaceOne(
                    {"_id": f"e{i}"}, {"_id": f"e{i}", "n": i, "pad": "x" * 300}, upsert=True
                )
                for i in range(first, min(first + 500, events))
            ]
            events_coll.bulk_write(ops, ordered=False)
        return events / (time.monotonic() - start)


def main(events: int) -> None:
    rates: dict[tuple[int, str, str], float] = {}
    with (
        tempfile.TemporaryDirectory(prefix="chaoslab-bench-") as tmp,
        LocalEnvironment(Path(tmp) / "env") as env,
    ):
        ceiling = upsert_ceiling(env.mongo_uri, events)
        for batch in BATCHES:
            scenario = parse_scenario(
                {
                    "name": f"bench-{batch}",
                    "seed": 1,
                    "workload": {"events": events, "keys": 500, "partitions": 3},
                    "runtimes": ["listener", "spark"],
                    # One at a time: each variant has the machine to itself.
                    "pipeline": {"batch_size": batch, "parallel": False, "trigger_ms": 100},
                    "variants": VARIANTS,
                }
            )
            print(f"batches of {batch} ...", flush=True)
            result = run_scenario(
                env, scenario, Path(tmp) / f"run-{batch}", progress=lambda _m: None
            )
            for r in result.variants:
                rates[(batch, r.runtime, r.variant)] = r.events_per_s
    print(f"\neach variant alone, {events} events, 3 partitions (events/s):")
    print(
        f"{'variant':<16}"
        + "".join(f"{f'{rt} {b}':>16}" for b in BATCHES for rt in ("listener", "spark"))
    )
    for variant in VARIANTS:
        cells = "".join(
            f"{rates[(b, rt, variant)]:>16.0f}" for b in BATCHES for rt in ("listener", "spark")
        )
        print(f"{variant:<16}{cells}")
    print(f"\nMongoDB (SecantusDB) upsert ceiling, one client, bulks of 500: {ceiling:.0f} docs/s")
    print("Spark before spark-sql-kafka (Python source, driver writes): 82 events/s")
    best = max(rates[(b, "spark", "idempotent")] for b in BATCHES)
    verdict = "met" if best >= GOAL else f"NOT met (the MongoDB ceiling is {ceiling:.0f}/s)"
    print(f"goal: idempotent on Spark >= {GOAL} events/s: {best:.0f}, {verdict}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000)

"""Benchmark (not a test): the local MongoDB's single-document write rate, fresh and after
many retryable writes (harness/environment/servers/secantus_server.py explains why it fell).

    make bench            # or: .venv/bin/python tests/benchmarks/bench_mongo_writes.py [WRITES]

Goal: the rate after 15,000 writes is at least half the fresh rate.
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pymongo import MongoClient
from pymongo.collection import Collection

from harness.environment.local import LocalEnvironment

SAMPLE = 500


def rate(events: Collection, n: int) -> float:
    start = time.monotonic()
    for i in range(n):
        events.insert_one({"i": i})
    return n / (time.monotonic() - start)


def main(writes: int) -> None:
    with (
        tempfile.TemporaryDirectory(prefix="chaoslab-bench-") as tmp,
        LocalEnvironment(Path(tmp) / "env") as env,
    ):
        client: MongoClient[dict[str, Any]] = MongoClient(env.mongo_uri)
        with client:
            events = client.bench.events
            fresh = rate(events, SAMPLE)
            print(f"  fresh server: {fresh:6.0f} inserts/s", flush=True)
            rate(events, writes)
            later = rate(events, SAMPLE)
            print(f"  after {writes} more retryable writes: {later:6.0f} inserts/s", flush=True)
    print(f"goal: later >= half of fresh: {'met' if later >= fresh / 2 else 'NOT met'}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 15_000)

"""Benchmark (not a test): each variant alone, on each runtime, over the same workload - events/s
from its first batch to its last commit (``VariantResult.events_per_s``) - beside the ceilings
of the same servers, all in one run on one environment:

* MongoDB: the landing documents the naive variant wrote, written again by pymongo alone in
  the same batches - ``insert_many`` (naive's and unique-index's write), bulk upserts
  (idempotent's) and a transaction of the batch's upserts plus an offsets document
  (transactional's);
* Kafka: the run's own topic read by a plain confluent-kafka consumer, batch by batch as the
  listener reads, and its records produced again by a plain producer.

Each variant's ratio is to the ceiling it could reach: the lower of its write's ceiling and
the consumer's. Then MongoDB's Spark connector's variants, each alone on Spark over the same
workload, beside the lab's pymongo variants on Spark; and Kafka Connect with MongoDB's sink
connector, each config alone (offsets flushed every second, so its last commit follows its last
write), beside the listener - with how long a run's workers took from their start to the
connector's tasks RUNNING.

    make bench            # or: .venv/bin/python tests/benchmarks/bench_runtimes.py [EVENTS]

Goals (issue 14): the best variant >= 0.5x the raw MongoDB ceiling; transactional >= 0.7x
naive; Spark idempotent >= 5,000 events/s.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition
from pymongo import MongoClient, ReplaceOne, UpdateOne
from pymongo.client_session import ClientSession
from pymongo.database import Database

from harness.environment.local import LocalEnvironment
from harness.history.events import EventKind, read_history
from harness.kafka.clients import consumer_config, producer_config
from harness.run.runner import run_scenario
from harness.scenario import parse_scenario

VARIANTS = ["naive", "idempotent", "unique-index", "transactional"]
RUNTIMES = ["listener", "spark"]
# MongoDB's Spark connector: its defaults (an insert per row) and keyed by the event id
# (a replace with upsert per row), from foreachBatch and as the query's own sink.
CONNECTOR: list[str | dict[str, Any]] = [
    "connector-batch",
    {"name": "connector-batch", "idFieldList": "event_id"},
    "connector-sink",
    {"name": "connector-sink", "idFieldList": "event_id"},
]
# Kafka Connect with MongoDB's sink connector: its defaults, keyed, and keyed with a task per
# partition.
CONNECT: list[str | dict[str, Any]] = [
    "connect-default",
    "connect-idempotent",
    {"name": "connect-idempotent", "label": "connect-idempotent[tasks.max=3]",
     "config": {"tasks.max": 3}},
]  # fmt: skip
FLUSH_MS = 1000  # the workers' offset.flush.interval.ms in the bench (Connect's: 60 s)
BATCH = 500
GOAL_SPARK = 5000  # events/s, idempotent on Spark
Docs = list[dict[str, Any]]


def timed(n: int, work: Callable[[], object]) -> float:
    """``n`` divided by the seconds ``work`` took."""
    start = time.monotonic()
    work()
    return n / (time.monotonic() - start)


def batches(docs: Docs) -> list[Docs]:
    return [docs[i : i + BATCH] for i in range(0, len(docs), BATCH)]


def mongo_ceilings(db: Database[dict[str, Any]], docs: Docs) -> dict[str, float]:
    """Documents/s of each kind of write, in batches of ``BATCH``, each into a new collection."""
    client = db.client

    def insert_many() -> None:
        for b in batches(docs):
            db.c_insert.insert_many([dict(d) for d in b], ordered=True)

    def upserts() -> None:
        for b in batches(docs):
            db.c_upsert.bulk_write(
                [ReplaceOne({"_id": d["_id"]}, d, upsert=True) for d in b], ordered=False
            )

    def transactions() -> None:
        for i, b in enumerate(batches(docs)):

            def body(session: ClientSession, b: Docs = b, i: int = i) -> None:
                db.c_txn.bulk_write(
                    [ReplaceOne({"_id": d["_id"]}, d, upsert=True) for d in b],
                    ordered=False,
                    session=session,
                )
                db.c_offsets.bulk_write(
                    [UpdateOne({"_id": "p0"}, {"$set": {"offset": i}}, upsert=True)],
                    session=session,
                )

            with client.start_session() as session:
                session.with_transaction(body)

    db.create_collection("c_txn")
    db.create_collection("c_offsets")
    return {
        "insert_many": timed(len(docs), insert_many),
        "bulk upserts": timed(len(docs), upserts),
        "transaction": timed(len(docs), transactions),
    }


def kafka_ceilings(bootstrap: str, topic: str, partitions: int) -> tuple[dict[str, float], int]:
    """Records/s of the topic read by a plain consumer (batches of ``BATCH``) and produced
    again by a plain producer (the lab's producer settings); and the number of records."""
    consumer = Consumer(consumer_config(bootstrap, f"bench-{time.time_ns()}"))
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(topic, p))[1] for p in range(partitions)
    }
    total = sum(ends.values())
    records: list[tuple[bytes | None, bytes | None]] = []
    start = time.monotonic()  # before the assignment: the consumer starts fetching at once
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    while len(records) < total:
        for m in consumer.consume(num_messages=BATCH, timeout=0.5):
            if m.error() is None:
                records.append((m.key(), m.value()))
    consume = total / (time.monotonic() - start)
    consumer.close()
    producer = Producer(producer_config(bootstrap))

    def produce() -> None:
        for key, value in records:
            while True:
                try:
                    producer.produce(f"{topic}.bench", key=key, value=value)
                    break
                except BufferError:
                    producer.poll(0.05)
        producer.flush(60)

    return {"consume": consume, "produce": timed(total, produce)}, total


def landing_documents(run_dir: Path) -> tuple[Docs, dict[str, Any]]:
    """The documents the naive listener landed, and its runtime configuration."""
    config = json.loads((run_dir / "listener-naive" / "runtime.json").read_text())
    client: MongoClient[dict[str, Any]] = MongoClient(config["mongo_uri"])
    with client:
        docs = list(client[config["database"]].events.find({}))
    for d in docs:
        d["_id"] = f"{d.get('event_id', d['_id'])}"
    return docs, config


def table(rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in rows)


def alone(events: int, runtimes: list[str], variants: Sequence[str | dict[str, Any]]) -> Any:
    """A scenario running each variant alone on the machine, over the bench's workload."""
    return parse_scenario(
        {
            "name": "bench",
            "seed": 1,
            "workload": {"events": events, "keys": 500, "partitions": 3},
            "runtimes": runtimes,
            # One at a time: each variant has the machine to itself.
            "pipeline": {"batch_size": BATCH, "parallel": False, "trigger_ms": 100,
                         "connect": {"offset.flush.interval.ms": FLUSH_MS}},
            "variants": list(variants),
        }
    )  # fmt: skip


def to_running(result: Any) -> list[float]:
    """Seconds from each Connect lane's first worker start to its last task RUNNING."""
    took = []
    for lane in result.variants:
        events = read_history(lane.directory / "history")
        starts = [e.t for e in events if e.kind is EventKind.RUNTIME_START]
        running = [e.t for e in events if e.kind is EventKind.CONNECTOR_STATE
                   and e.detail.startswith("task ") and " RUNNING " in e.detail]  # fmt: skip
        if starts and running:
            took.append(max(running) - min(starts))
    return took


def main(events: int) -> None:
    with (
        tempfile.TemporaryDirectory(prefix="chaoslab-bench-") as tmp,
        LocalEnvironment(Path(tmp) / "env") as env,
    ):
        print(f"each variant alone: {events} events, batches of {BATCH} ...", flush=True)
        run_dir = Path(tmp) / "run"
        result = run_scenario(env, alone(events, RUNTIMES, VARIANTS), run_dir, progress=print_none)
        rates = {(r.runtime, r.variant): r.events_per_s for r in result.variants}
        print("MongoDB's Spark connector's variants alone, the same workload ...", flush=True)
        connector = run_scenario(
            env, alone(events, ["spark"], CONNECTOR), Path(tmp) / "connector", progress=print_none
        )
        print("Kafka Connect's configs alone, the same workload ...", flush=True)
        connect = run_scenario(
            env, alone(events, ["listener"], CONNECT), Path(tmp) / "connect", progress=print_none
        )
        took = to_running(connect)  # read from the run's histories, gone with ``tmp``
        docs, config = landing_documents(run_dir)
        print(f"ceilings: {len(docs)} landing documents, the run's topic ...", flush=True)
        client: MongoClient[dict[str, Any]] = MongoClient(env.mongo_uri)
        with client:
            mongo = mongo_ceilings(client.bench_ceiling, docs)
        kafka, records = kafka_ceilings(config["bootstrap"], config["topic"], 3)

    print(f"\nceilings of the same servers, batches of {BATCH} (documents or records/s):")
    for name, rate in (*mongo.items(), *(("kafka " + k, v) for k, v in kafka.items())):
        print(f"  {name:<18}{rate:>10.0f}")
    reachable = {
        "naive": min(mongo["insert_many"], kafka["consume"]),
        "unique-index": min(mongo["insert_many"], kafka["consume"]),
        "idempotent": min(mongo["bulk upserts"], kafka["consume"]),
        "transactional": min(mongo["transaction"], kafka["consume"]),
    }
    rows = [["variant", *(f"{rt} ev/s" for rt in RUNTIMES), "ceiling", "listener x", "spark x"]]
    for v in VARIANTS:
        rows.append(
            [
                v,
                *(f"{rates[(rt, v)]:.0f}" for rt in RUNTIMES),
                f"{reachable[v]:.0f}",
                *(f"{rates[(rt, v)] / reachable[v]:.2f}" for rt in RUNTIMES),
            ]
        )
    print(f"\neach variant alone, {events} events ({records} records), 3 partitions:")
    print(table(rows))
    raw = max(mongo["insert_many"], mongo["bulk upserts"])
    best = max(rates.values())
    txn = rates[("listener", "transactional")] / rates[("listener", "naive")]
    spark = rates[("spark", "idempotent")]
    print("\ngoals:")
    print(f"  best variant >= 0.5x the raw MongoDB ceiling ({raw:.0f}/s): {best / raw:.2f}x")
    print(f"  transactional >= 0.7x naive (listener): {txn:.2f}x")
    print(f"  Spark idempotent >= {GOAL_SPARK} events/s: {spark:.0f}")
    print(f"\nSpark, the same {events} events: MongoDB's Spark connector beside pymongo")
    lanes = [(v, rates[("spark", v)]) for v in VARIANTS]
    lanes += [(r.variant, r.events_per_s) for r in connector.variants]
    base = rates[("spark", "idempotent")]
    print(table([["variant", "ev/s", "x idempotent"],
                 *([v, f"{rate:.0f}", f"{rate / base:.2f}"] for v, rate in lanes)]))  # fmt: skip

    print(f"\nKafka Connect (2 workers, offsets flushed every {FLUSH_MS} ms), the same {events} "
          "events, beside the listener")  # fmt: skip
    listener = rates[("listener", "idempotent")]
    lanes = [(v, rates[("listener", v)]) for v in VARIANTS]
    lanes += [(r.variant, r.events_per_s) for r in connect.variants]
    rows = [[v, f"{rate:.0f}", f"{rate / listener:.2f}"] for v, rate in lanes]
    print(table([["variant", "ev/s", "x listener idempotent"], *rows]))
    print(
        f"workers' start to the connector's tasks RUNNING: {', '.join(f'{t:.1f}' for t in took)} s"
    )


def print_none(_message: str) -> None:
    """A run's progress, not printed: the bench prints its figures."""


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000)

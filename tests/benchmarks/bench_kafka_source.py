"""Benchmark (not a test): records/s through the chaoslab-kafka Spark source, and its overhead.

    .venv/bin/python tests/benchmarks/bench_kafka_source.py [RECORDS]

Starts a local environment, produces RECORDS (default 50,000) records of ~100 bytes to a
3-partition topic, then measures:

* the source's own costs outside Spark: one planning call (``latestOffset``) and reading the
  whole topic with ``read()``, as a Python worker would;
* Spark: the records through a streaming query (``foreachBatch`` counting rows) in batches of
  10,000 and in one trigger, and the time per trigger with tiny batches (Spark's per-trigger
  overhead plus ours).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from confluent_kafka import Producer
from pyspark.sql.streaming.datasource import ReadAllAvailable

from harness.environment import LocalEnvironment, spark_session
from harness.kafka import create_topic, producer_config
from harness.pipeline.kafka_source import KafkaDataSource, KafkaStreamReader, register

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PARTITIONS = 3
BIG_BATCH = 10_000
TINY_BATCH = 30
TINY_TRIGGERS = 15


def produce(bootstrap: str, topic: str, records: int) -> None:
    producer = Producer(producer_config(bootstrap))
    payload = b"x" * 90
    for i in range(records):
        producer.produce(topic, key=str(i).encode(), value=payload)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0, "records left unacknowledged"


def stream_reader(bootstrap: str, topic: str) -> KafkaStreamReader:
    source = KafkaDataSource({"bootstrap": bootstrap, "topic": topic})
    return source.streamReader(source.schema())  # type: ignore[arg-type]


def time_planning(bootstrap: str, topic: str, calls: int = 30) -> tuple[float, float]:
    """(first call, median of the rest) of latestOffset, in seconds."""
    reader = stream_reader(bootstrap, topic)
    try:
        start = reader.initialOffset()
        times = []
        for _ in range(calls):
            began = time.monotonic()
            reader.latestOffset(start, ReadAllAvailable())
            times.append(time.monotonic() - began)
    finally:
        reader.stop()
    return times[0], statistics.median(times[1:])


def time_direct_read(bootstrap: str, topic: str) -> tuple[int, float]:
    reader = stream_reader(bootstrap, topic)
    try:
        start = reader.initialOffset()
        ranges = reader.partitions(start, reader.latestOffset(start, ReadAllAvailable()))
    finally:
        reader.stop()
    began = time.monotonic()
    rows = sum(1 for r in ranges for _ in reader.read(r))
    return rows, time.monotonic() - began


def run_query(
    spark: SparkSession,
    bootstrap: str,
    topic: str,
    checkpoint: str,
    limit: int | None,
    stop_after: Callable[[int, int], bool],
) -> tuple[float, dict[str, int], Sequence[dict]]:
    """Run a query until ``stop_after(rows_seen, batches)``; return its progress reports."""
    seen = {"rows": 0, "batches": 0}

    def each(df, _batch_id: int) -> None:
        seen["rows"] += df.count()
        seen["batches"] += 1

    reader = spark.readStream.format("chaoslab-kafka").option("bootstrap", bootstrap)
    if limit is not None:
        reader = reader.option("maxRecordsPerTrigger", limit)
    stream = reader.option("topic", topic).load()
    query = stream.writeStream.foreachBatch(each).option("checkpointLocation", checkpoint).start()
    began = time.monotonic()
    try:
        while not stop_after(seen["rows"], seen["batches"]):
            # pyspark annotates the timeout as int, but takes any positive number of seconds.
            if query.awaitTermination(0.1):  # type: ignore[arg-type]
                raise RuntimeError(f"the query ended: {query.exception()}")
            if time.monotonic() - began > 600:
                raise RuntimeError("the query did not finish within 600 s")
    finally:
        query.stop()
    return time.monotonic() - began, seen, query.recentProgress


def main(records: int) -> None:
    with (
        tempfile.TemporaryDirectory(prefix="chaoslab-bench-") as tmp,
        LocalEnvironment(Path(tmp) / "env") as env,
    ):
        bootstrap, topic = env.kafka_bootstrap, "bench"
        create_topic(bootstrap, topic, PARTITIONS)
        began = time.monotonic()
        produce(bootstrap, topic, records)
        print(f"produced {records:,} records in {time.monotonic() - began:.1f} s", flush=True)
        report_source_alone(bootstrap, topic)
        report_spark(env, topic, records)


def report_source_alone(bootstrap: str, topic: str) -> None:
    first, median = time_planning(bootstrap, topic)
    print(f"latestOffset: first call {first * 1e3:.0f} ms, then median {median * 1e3:.1f} ms")
    rows, took = time_direct_read(bootstrap, topic)
    print(f"read() outside Spark: {rows:,} records in {took:.2f} s = {rows / took:,.0f}/s")


def report_spark(env: LocalEnvironment, topic: str, records: int) -> None:
    spark = spark_session(env.spark, "bench-kafka-source")
    register(spark)
    bootstrap = env.kafka_bootstrap
    for limit in (BIG_BATCH, None):
        took, seen, progress = run_query(
            spark, bootstrap, topic, env.spark.checkpoint(f"all-{limit}"), limit,
            lambda rows, _: rows >= records,
        )  # fmt: skip
        per = f"batches of {limit:,}" if limit else "one trigger, no limit"
        print(
            f"Spark, {per}: {seen['rows']:,} records in {seen['batches']} batches, "
            f"{took:.1f} s from start() = {seen['rows'] / took:,.0f} records/s"
        )
        report_steady(progress)
    _, _, progress = run_query(
        spark, bootstrap, topic, env.spark.checkpoint("tiny"), TINY_BATCH,
        lambda _, batches: batches >= TINY_TRIGGERS,
    )  # fmt: skip
    report_triggers(progress)
    spark.stop()


def report_steady(progress: Sequence[dict]) -> None:
    """Throughput of the batches after the first (which pays for starting Python workers)."""
    steady = [p for p in progress if p["numInputRows"] > 0][1:]
    if steady:
        rows = sum(p["numInputRows"] for p in steady)
        seconds = sum(p["durationMs"]["triggerExecution"] for p in steady) / 1000
        rate = rows / seconds
        print(f"  after the first batch: {rows:,} records in {seconds:.1f} s = {rate:,.0f}/s")


def report_triggers(progress: Sequence[dict]) -> None:
    # The first trigger pays for starting the query's Python workers: leave it out.
    steady = [p for p in progress if p["numInputRows"] > 0][1:]
    total = [p["durationMs"]["triggerExecution"] for p in steady]
    planning = [p["durationMs"].get("latestOffset", 0) for p in steady]
    batch = [p["durationMs"].get("addBatch", 0) for p in steady]
    print(
        f"Spark, batches of {TINY_BATCH} ({len(steady)} triggers): per trigger median "
        f"{statistics.median(total):.0f} ms (latestOffset {statistics.median(planning):.0f} ms, "
        f"addBatch incl. read {statistics.median(batch):.0f} ms)"
    )


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 50_000)

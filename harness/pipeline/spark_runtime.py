"""The Spark runtime: Structured Streaming over Spark's own Kafka source
(``spark.readStream.format("kafka")``, the spark-sql-kafka connector, as users' jobs read), with
the variant called from ``foreachBatch`` - on the executors: each task writes its Kafka
partition's records with pymongo in its Python worker (``write_partition``) and hands the
driver only counts. Offsets live in the query's checkpoint.

    python -m harness.pipeline.spark_runtime CONFIG.json [CONFIG.json ...]

Spark commits a batch (writes its commit log) after ``foreachBatch`` returns; a crash before
that replays the same batch_id with the same offsets on restart - delivery into foreachBatch is
at-least-once, exactly the gap the variants must cope with. The ``after_commit`` crash point
fires from the query listener, which Spark calls once the batch's commit is written.

MongoDB's Spark connector's variants hand the parsed rows to ``format("mongodb")`` instead,
from ``foreachBatch`` or as the query's own sink (``harness.pipeline.spark_connector``).

A query that fails is started again from its checkpoint, as a supervised job would be (Spark
replays the batch it did not commit); one that fails ``FAILURES_FOR_GOOD`` times in a row with no
batch committed in between has failed for good: the lane says so and the driver runs on for
the others.
"""

from __future__ import annotations

import functools
import json
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pyspark import TaskContext
from pyspark.sql import Column, DataFrame, Row, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)
from pyspark.sql.streaming.query import StreamingQuery

from harness.environment.readonly import commit_log
from harness.environment.spark import SparkSettings, spark_session
from harness.history.events import EventKind, HistoryWriter
from harness.kafka.clients import CONSUMER_CLIENT
from harness.pipeline import spark_connector
from harness.pipeline.batch import Poison, RawRecord, dead_letter_topic, split
from harness.pipeline.crash import Crasher, CrashPoint
from harness.pipeline.runtime import (
    BatchHandler,
    RuntimeConfig,
    SinkWriter,
    StopFlag,
    Written,
)
from harness.pipeline.runtimes import SPARK
from harness.pipeline.variants import make_variant
from harness.pipeline.variants.connector import ConnectorVariant
from harness.pipeline.variants.spark_job import JobSink, SparkJob, load_job

# A query that fails this many times in a row, no batch committed in between, has failed for
# good (a replay that fails as the first try did: the connector's E11000 under insert).
FAILURES_FOR_GOOD = 3


class _Committed(StreamingQueryListener):
    """Records each committed batch's end offsets in its variant's history, and passes the
    after_commit crash point. One listener serves every query of the driver."""

    def __init__(self) -> None:
        # By query id (a user's job may name its query as it likes); a query started again
        # from its checkpoint keeps its id.
        self.lanes: dict[str, _Lane] = {}

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        pass

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        progress = event.progress
        lane = self.lanes.get(str(progress.id))
        if lane is None or progress.numInputRows == 0:
            return
        lane.failures_in_a_row = 0
        handler = lane.handler
        # The Kafka source's offsets: {"TOPIC": {"PARTITION": next offset, ...}}.
        end = json.loads(progress.sources[0].endOffset)[handler.config.topic]
        handler.history.record(
            EventKind.COMMIT,
            batch=progress.batchId,
            offsets={int(p): int(o) for p, o in end.items()},
        )
        # Listener events arrive asynchronously: the next batch may be running already, so the
        # batch is named rather than taken from the handler.
        handler.reached(CrashPoint.AFTER_COMMIT, batch_id=progress.batchId)

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        pass


@dataclass
class _Lane:
    """One variant's streaming query inside the driver."""

    config: RuntimeConfig
    handler: BatchHandler
    committed: _Committed  # the driver's query listener, told which query is this lane's
    query: StreamingQuery | None = None
    dead_letters: StreamingQuery | None = None  # the connector sink's poison, to Kafka
    failures_in_a_row: int = 0
    failed_for_good: bool = False
    # The connector's lanes: the mid_write plans armed where its writes run, and the hold of
    # the query's checkpoint entries (its own sink).
    mid_write: spark_connector.MidWrite | None = None
    hold: spark_connector.CheckpointHold | None = None
    planned: int | None = None  # the batch whose offsets the held query wrote last

    @property
    def name(self) -> str:
        return self.config.group.replace(".", "_")

    def write_batch(self, df: DataFrame, batch_id: int) -> None:
        records = df.select("partition", "offset", "value").rdd
        config = self.config.to_json()

        def on_executors(batch_no: int) -> list[Written]:
            task = functools.partial(write_partition, config, os.getpgid(0), batch_id, batch_no)
            return records.mapPartitions(task).collect()

        self.handler.handle_elsewhere(batch_id, on_executors)

    def _started(self, query: StreamingQuery) -> None:
        self.query = query
        self.committed.lanes[query.id] = self

    def start(self, spark: SparkSession) -> None:
        cfg = self.config
        stream = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", cfg.bootstrap)
            # On the consumers' link: the fault proxy tells its clients apart by client.id.
            .option("kafka.client.id", f"{CONSUMER_CLIENT}-spark")
            .option("subscribe", cfg.topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(cfg.batch_size))
            .load()
        )
        write = self.write_batch
        variant = self.handler.variant
        if isinstance(variant, ConnectorVariant):
            self.start_connector(stream, variant)
            return
        if isinstance(variant, SparkJob):
            made = load_job(variant.job)(stream, self.job_sink())
            if isinstance(made, StreamingQuery):
                self._started(made)  # the job started it: the lab only watches
                return
            if not callable(made):
                raise TypeError(
                    f"{variant.job} returned {type(made).__name__}: expected a started "
                    "StreamingQuery or a foreachBatch function (DataFrame, batch_id)"
                )
            write = functools.partial(self.run_job_batch, made)
        self._started(
            stream.writeStream.queryName(self.name)
            .foreachBatch(write)
            .option("checkpointLocation", cfg.checkpoint)
            .trigger(processingTime=f"{cfg.trigger_ms} milliseconds")
            .start()
        )

    def start_connector(self, stream: DataFrame, variant: ConnectorVariant) -> None:
        """MongoDB's Spark connector writes: from foreachBatch, or as the query's own sink."""
        cfg = self.config
        options = spark_connector.options(cfg, variant, spark_connector.driver_group())
        if self.mid_write is None:
            self.mid_write = spark_connector.MidWrite(
                self.handler.crasher, spark_connector.crashes_dir(cfg)
            )
        trigger = f"{cfg.trigger_ms} milliseconds"
        if not variant.streaming_sink:
            write = functools.partial(self.write_with_connector, variant, options)
            self._started(
                stream.writeStream.queryName(self.name)
                .foreachBatch(write)
                .option("checkpointLocation", cfg.checkpoint)
                .trigger(processingTime=trigger)
                .start()
            )
            return
        if self.hold is None:
            self.hold = spark_connector.CheckpointHold(cfg.checkpoint, self.on_checkpoint_entry)
            self.hold.start()
        # A batch replayed from the checkpoint has its offsets already: no offsets entry is
        # held for it, so its mid_write plans are armed now.
        self.mid_write.arm(self.handler.batches + 1, spark_connector.next_batch(cfg.checkpoint))
        self._started(
            spark_connector.rows(stream, variant)
            .writeStream.queryName(self.name)
            .format("mongodb")
            .options(**options)
            .option("checkpointLocation", cfg.checkpoint)
            .trigger(processingTime=trigger)
            .start()
        )
        if self.dead_letters is None or not self.dead_letters.isActive:
            # What does not parse goes to the lane's dead-letter topic, by Spark's Kafka sink.
            self.dead_letters = (
                spark_connector.poison(stream)
                .select(
                    F.col("value"),
                    F.array(
                        _header("error", F.lit("does not parse as a change event")),
                        _header("origin-partition", F.col("partition").cast("string")),
                        _header("origin-offset", F.col("offset").cast("string")),
                    ).alias("headers"),
                )
                .writeStream.queryName(f"{self.name}_dlq")
                .format("kafka")
                .option("kafka.bootstrap.servers", cfg.bootstrap)
                .option("topic", dead_letter_topic(cfg.group))
                .option("checkpointLocation", f"{cfg.checkpoint}-dlq")
                .trigger(processingTime=trigger)
                .start()
            )

    def write_with_connector(
        self, variant: ConnectorVariant, options: dict[str, str], df: DataFrame, batch_id: int
    ) -> None:
        """foreachBatch: the batch's poison dead-lettered, the rest written by the connector."""
        assert self.mid_write is not None
        mid_write = self.mid_write

        def with_connector(batch_no: int) -> list[Written]:
            df.persist()
            try:
                bad = [
                    Poison(r.partition, r.offset, r.value, "does not parse as a change event")
                    for r in spark_connector.poison(df).collect()
                ]
                self.handler.sink.dead_letter(batch_id, bad)
                mid_write.arm(batch_no, batch_id)
                rows = spark_connector.rows(df, variant)
                rows.write.format("mongodb").mode("append").options(**options).save()
                mid_write.settle()
                ends = (
                    df.groupBy("partition")
                    .agg(F.max("offset").alias("last"), F.count("*").alias("records"))
                    .collect()
                )
            finally:
                df.unpersist()
            lasts = {int(r.partition): int(r.last) for r in ends}
            records = sum(int(r.records) for r in ends)
            return [Written(records - len(bad), lasts)] if lasts else []

        self.handler.handle_elsewhere(batch_id, with_connector)

    def on_checkpoint_entry(self, kind: str, batch_id: int) -> None:
        """The connector's sink is about to write an entry of its query's checkpoint: the
        batch's offsets (before it runs), or its commit (after its write)."""
        handler, cfg = self.handler, self.config
        assert self.mid_write is not None
        if kind == "offsets" or self.planned != batch_id:  # a replay was planned before
            self.planned = batch_id
            handler.batches += 1
            handler.batch_id = batch_id
            handler.history.record(EventKind.BATCH, batch=batch_id)
            if kind == "offsets":
                handler.reached(CrashPoint.BEFORE_WRITE)
                self.mid_write.arm(handler.batches, batch_id)
                return
        self.mid_write.settle()
        starts, ends = spark_connector.batch_range(cfg.checkpoint, cfg.topic, batch_id)
        handler.history.record(
            EventKind.WRITTEN,
            batch=batch_id,
            count=sum(end - starts.get(p, 0) for p, end in ends.items()),
            offsets={p: end - 1 for p, end in sorted(ends.items()) if end > starts.get(p, 0)},
        )
        handler.reached(CrashPoint.AFTER_WRITE_BEFORE_COMMIT)
        self.mid_write.arm(handler.batches + 1, batch_id + 1)

    def job_sink(self) -> JobSink:
        cfg = self.config
        return JobSink(cfg.mongo_uri, cfg.database, "events", "orders", cfg.checkpoint, self.name)

    def run_job_batch(
        self, job_batch: Callable[[DataFrame, int], None], df: DataFrame, batch_id: int
    ) -> None:
        """The user's foreachBatch function, between the lab's crash points."""
        self.handler.handle_elsewhere(batch_id, lambda _batch_no: job_batch(df, batch_id))

    def restart_if_failed(self, spark: SparkSession) -> None:
        """A query that stopped is started again from its checkpoint, as a supervised job
        would be: Spark replays the batch it did not commit - the redelivery under test. Its
        commit log unwritable is the lab's fault (commit-failure); any other failure is the
        query's own, recorded in Spark's words, and the ``FAILURES_FOR_GOOD``-th in a row
        ends the lane."""
        assert self.query is not None
        if self.query.isActive or self.failed_for_good:
            return
        failure = self.query.exception()
        message = "" if failure is None else str(failure)
        if str(commit_log(self.config.checkpoint)) in message:
            # Spark's own words, e.g. ".../commits/.3.<uuid>.tmp (Operation not permitted)".
            self.handler.history.record(
                EventKind.COMMIT_FAILED, batch=self.handler.batch_id, detail=first_line(message)
            )
        else:
            self.failures_in_a_row += 1
            self.handler.history.record(
                EventKind.QUERY_FAILED, batch=self.handler.batch_id, detail=spark_failure(message)
            )
            if self.failures_in_a_row >= FAILURES_FOR_GOOD:
                self.failed_for_good = True
                self.handler.history.record(
                    EventKind.FAILED_FOR_GOOD,
                    batch=self.handler.batch_id,
                    detail=f"the query failed {self.failures_in_a_row} times in a row, no "
                    f"batch committed in between: {spark_failure(message)}",
                )
                return
        self.start(spark)

    def stop(self) -> None:
        for query in (self.query, self.dead_letters):
            if query is not None:
                query.stop()
        if self.hold is not None:
            self.hold.stop()


def _header(key: str, value: Column) -> Column:
    return F.struct(F.lit(key).alias("key"), value.cast("binary").alias("value"))


def first_line(message: str) -> str:
    return message.strip().splitlines()[0] if message.strip() else "(no message)"


def spark_failure(message: str) -> str:
    """What stopped a query, in the words that say most: the MongoDB driver's or the
    connector's exception when there is one (Spark wraps it in its job's and task's), else
    Spark's first line."""
    for line in message.splitlines():
        for marker in ("com.mongodb.", "org.apache.kafka."):
            if marker in line:
                return line[line.index(marker) :].strip()
    return first_line(message)


# One sink writer per variant in each executor's Python worker (Spark reuses the workers).
_WRITERS: dict[str, SinkWriter] = {}


def write_partition(
    config_json: str, driver_group: int, batch_id: int, batch_no: int, rows: Iterable[Row]
) -> Iterator[Written]:
    """A task of a batch's write job, in an executor's Python worker: its Kafka partition's
    records, poison dead-lettered, the rest written by the variant; yields what it wrote.
    A crash point reached here (mid_write) kills the runtime that runs the driver - its
    process group, ``driver_group`` - as one reached in the driver would."""
    raw = sorted(
        (RawRecord(r.partition, r.offset, r.value) for r in rows),
        key=lambda r: (r.partition, r.offset),
    )
    if not raw:
        return
    writer = _WRITERS.get(config_json)
    if writer is None:
        config = RuntimeConfig.from_json(config_json)
        label = make_variant(config.variant, config.variant_options).label
        history = HistoryWriter(config.history_dir, SPARK.name, label)
        crasher = Crasher(
            list(config.crash_plans), Path(config.run_dir) / "crashes", history, group=driver_group
        )
        writer = _WRITERS[config_json] = SinkWriter(config, history, crasher)
    config = writer.config
    batch, poison = split(batch_id, config.topic, config.group, raw)
    task = TaskContext.get()
    if task is not None and task.attemptNumber():
        # An earlier attempt may have written these records before it failed (a worker lost
        # after the write, before its result reached the driver): they come again. (The write
        # job has one stage, a result stage: a lost task is retried in it, never the stage.)
        writer.history.record(
            EventKind.TASK_RETRIED,
            batch=batch_id,
            count=len(batch.records),
            detail=f"task {task.partitionId()} attempt {task.attemptNumber()}",
        )
    writer.dead_letter(batch_id, poison)
    writer.write(batch, batch_no)
    yield Written(len(batch.records), batch.last_offsets)


def _import_the_writer(_: int) -> int:
    return len(_WRITERS)  # importing this module is the point


def _warm_up(spark: SparkSession) -> None:
    """Start the executors' Python workers, and import the writer in them, before the first
    batch: otherwise a first batch waits while they start, long enough on a loaded machine for
    a scenario's early fault window to close before its first write (docs/performance.md)."""
    slots = spark.sparkContext.defaultParallelism
    spark.sparkContext.parallelize(range(slots), slots).map(_import_the_writer).collect()


def run(configs: list[RuntimeConfig]) -> None:
    """One driver running one query per configuration - several variants side by side share
    a driver when no fault targets a single consumer process."""
    stop = StopFlag()
    committed = _Committed()
    lanes = [_Lane(c, BatchHandler(c, source=SPARK.name), committed) for c in configs]
    held = any(
        isinstance(v := lane.handler.variant, ConnectorVariant) and v.streaming_sink
        for lane in lanes
    )
    spark = spark_session(
        SparkSettings.from_json(configs[0].spark_settings),
        f"chaoslab-{configs[0].topic}",
        spark_connector.session_conf() if held else None,
    )
    spark.streams.addListener(committed)
    _warm_up(spark)
    try:
        for lane in lanes:
            lane.start(spark)
            lane.handler.history.record(EventKind.RUNTIME_START, detail=f"pid {os.getpid()}")
        while not stop:
            for lane in lanes:
                lane.restart_if_failed(spark)
            stop.wait(0.5)
    finally:
        for lane in lanes:
            lane.stop()
        spark.stop()
        for lane in lanes:
            lane.handler.history.record(EventKind.RUNTIME_EXIT, detail="stopped")


def main(argv: list[str]) -> None:
    """``python -m harness.pipeline.spark_runtime CONFIG.json [CONFIG.json ...]``"""
    configs = [RuntimeConfig.load(path) for path in argv]
    for config in configs:
        config.use_import_path()
    run(configs)


if __name__ == "__main__":
    # Run as the module it is, not as ``__main__``: cloudpickle ships a function of ``__main__``
    # by value, with a fresh copy of the globals it uses - the executors' ``_WRITERS`` was empty
    # in every task, which then made its own MongoClient, history file and Kafka producer (whose
    # first send waits for a producer id), and small tasks took many times as long
    # (docs/performance.md). And the warm-up imported nothing.
    from harness.pipeline import spark_runtime

    spark_runtime.main(sys.argv[1:])

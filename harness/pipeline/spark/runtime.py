"""The Spark runtime: Structured Streaming over Spark's own Kafka source
(``spark.readStream.format("kafka")``, the spark-sql-kafka connector, as users' jobs read), with
the variant called from ``foreachBatch`` - on the executors: each task writes its Kafka
partition's records with pymongo in its Python worker (``write_partition``) and hands the
driver only counts. Offsets live in the query's checkpoint.

    python -m harness.pipeline.spark.runtime CONFIG.json [CONFIG.json ...]

Spark commits a batch (writes its commit log) after ``foreachBatch`` returns; a crash before
that replays the same batch_id with the same offsets on restart - delivery into foreachBatch is
at-least-once, exactly the gap the variants must cope with. The ``after_commit`` crash point
fires from the query listener, which Spark calls once the batch's commit is written.

MongoDB's Spark connector's variants hand the parsed rows to ``format("mongodb")`` instead,
from ``foreachBatch`` or as the query's own sink (``harness.pipeline.spark.connector``).

A query that fails is started again from its checkpoint, as a supervised job would be (Spark
replays the batch it did not commit), after a delay that doubles as a supervisor's back-off
does; one that has kept failing for the pipeline's ``write_retry_s`` with no batch committed
has failed for good: the lane says so and the driver runs on for the others.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pyspark import TaskContext
from pyspark.sql import DataFrame, Row, SparkSession
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
from harness.pipeline.batch import RawRecord, split
from harness.pipeline.crash import Crasher, CrashPoint
from harness.pipeline.runtime import (
    BatchHandler,
    RuntimeConfig,
    SinkWriter,
    StopFlag,
    Written,
)
from harness.pipeline.runtimes import SPARK
from harness.pipeline.spark import connector as spark_connector
from harness.pipeline.spark.connector import ConnectorWrites
from harness.pipeline.variants import make_variant
from harness.pipeline.variants.connector import ConnectorVariant
from harness.pipeline.variants.spark_job import JobSink, SparkJob, load_job

# A failed query is started again after RESTART_S[0] seconds, twice as long after each failure
# in a row, at most RESTART_S[1]: a fault that passes (a step-down of seconds) is outlived, as a
# supervisor's back-off outlives it. One that has kept failing for the pipeline's write_retry_s
# (a listener's write is retried as long) with no batch committed has failed for good (a replay
# that fails as every try did: the connector's E11000 under insert).
RESTART_S = (1.0, 15.0)


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
        lane.failing_since = None  # a batch committed: the query works again
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
    failures_in_a_row: int = 0
    failing_since: float | None = None  # monotonic time of its first failure since a commit
    restart_at: float | None = None  # when its failed query is started again
    failed_for_good: bool = False
    connector: ConnectorWrites | None = None  # MongoDB's Spark connector's lane: its writes

    @property
    def name(self) -> str:
        return self.config.group.replace(".", "_")

    def write_batch(self, df: DataFrame, batch_id: int) -> None:
        records = df.select("partition", "offset", "value").rdd
        config = self.config.to_json()

        def on_executors(batch_no: int) -> list[Written]:
            # The driver draws the batch's mid_write plans, as for the connector's tasks: a plan
            # stays armed here until one task fires it. Drawn in each task's Python worker, a
            # plan due at a batch with no records was never drawn, and never fired.
            crasher = self.handler.crasher
            armed = crasher.arm(CrashPoint.MID_WRITE, batch_no)
            indices = tuple(a.index for a in armed)
            task = functools.partial(
                write_partition, config, os.getpgid(0), batch_id, batch_no, indices
            )
            try:
                return records.mapPartitions(task).collect()
            finally:
                crasher.settle(armed)

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
            if self.connector is None:
                self.connector = ConnectorWrites(cfg, self.handler, variant)
            self._started(self.connector.start(stream, self.name))
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
        commit log unwritable is the lab's fault (commit-failure): at once. Any other failure
        is the query's own, recorded in the words that say most: after a back-off, and not
        after ``write_retry_s`` of failing, which ends the lane."""
        assert self.query is not None
        if self.query.isActive or self.failed_for_good:
            return
        now = time.monotonic()
        if self.restart_at is None:  # a failure not seen yet
            self.restart_at = now
            failure = self.query.exception()
            message = "\n".join(["" if failure is None else str(failure), *causes(self.query)])
            history, batch = self.handler.history, self.handler.batch_id
            if str(commit_log(self.config.checkpoint)) in message:
                # Spark's own words, e.g. ".../commits/.3.<uuid>.tmp (Operation not permitted)".
                history.record(EventKind.COMMIT_FAILED, batch=batch, detail=first_line(message))
            else:
                self.failures_in_a_row += 1
                self.failing_since = self.failing_since or now
                history.record(EventKind.QUERY_FAILED, batch=batch, detail=spark_failure(message))
                if now - self.failing_since >= self.config.write_retry_s:
                    self.failed_for_good = True
                    history.record(
                        EventKind.FAILED_FOR_GOOD,
                        batch=batch,
                        detail=f"the query failed {self.failures_in_a_row} times in "
                        f"{now - self.failing_since:.0f} s, no batch committed in between: "
                        f"{spark_failure(message)}",
                    )
                    return
                first, longest = RESTART_S
                self.restart_at = now + min(first * 2 ** (self.failures_in_a_row - 1), longest)
        if now >= self.restart_at:
            self.restart_at = None
            self.start(spark)

    def stop(self) -> None:
        if self.query is not None:
            self.query.stop()
        if self.connector is not None:
            self.connector.stop()


def first_line(message: str) -> str:
    return message.strip().splitlines()[0] if message.strip() else "(no message)"


def causes(query: StreamingQuery) -> list[str]:
    """What stopped a query, outermost first: each exception of its JVM cause chain, class and
    message (PySpark's exception says only the outermost: "Writing job failed.")."""
    # The query's JVM object: PySpark keeps it as _jsq, and has no public way to the causes.
    stopped = query._jsq.exception()
    error = stopped.get() if stopped.isDefined() else None
    chain: list[str] = []
    while error is not None and len(chain) < 20:
        chain.append(str(error.toString()))
        error = error.getCause()
    return chain


def spark_failure(message: str) -> str:
    """What stopped a query, in the words that say most: the MongoDB driver's or the
    connector's exception when there is one (Spark wraps it in its job's and task's), else
    the first line."""
    for line in message.splitlines():
        for marker in ("com.mongodb.", "org.apache.kafka."):
            if marker in line:
                return line[line.index(marker) :].strip()
    return first_line(message)


# One sink writer per variant in each executor's Python worker (Spark reuses the workers).
_WRITERS: dict[str, SinkWriter] = {}


def write_partition(
    config_json: str,
    driver_group: int,
    batch_id: int,
    batch_no: int,
    armed: tuple[int, ...],
    rows: Iterable[Row],
) -> Iterator[Written]:
    """A task of a batch's write job, in an executor's Python worker: its Kafka partition's
    records, poison dead-lettered, the rest written by the variant; yields what it wrote.
    A crash point reached here (mid_write: the plans the driver ``armed`` for the batch) kills
    the runtime that runs the driver - its process group, ``driver_group`` - as one reached
    in the driver would."""
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
    writer.crasher.take_armed(CrashPoint.MID_WRITE, batch_no, armed)
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
            # The query names the lane's lines in the driver's log (harness.pipeline.spark.log).
            query = "" if lane.query is None else lane.query.id
            lane.handler.history.record(
                EventKind.RUNTIME_START, detail=f"pid {os.getpid()}, query {query}"
            )
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
    """``python -m harness.pipeline.spark.runtime CONFIG.json [CONFIG.json ...]``"""
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
    from harness.pipeline.spark import runtime as spark_runtime

    spark_runtime.main(sys.argv[1:])

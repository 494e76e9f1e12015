"""The Spark runtime: Structured Streaming over Spark's own Kafka source
(``spark.readStream.format("kafka")``, the spark-sql-kafka connector, as users' jobs read), with
the variant called from ``foreachBatch``. Offsets live in the query's checkpoint.

    python -m harness.pipeline.spark_runtime CONFIG.json [CONFIG.json ...]

Spark commits a batch (writes its commit log) after ``foreachBatch`` returns; a crash before
that replays the same batch_id with the same offsets on restart - delivery into foreachBatch is
at-least-once, exactly the gap the variants must cope with. The ``after_commit`` crash point
fires from the query listener, which Spark calls once the batch's commit is written.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)
from pyspark.sql.streaming.query import StreamingQuery

from harness.environment.spark import SparkSettings, spark_session
from harness.history import EventKind
from harness.kafka import CONSUMER_CLIENT
from harness.pipeline.batch import RawRecord
from harness.pipeline.crash import CrashPoint
from harness.pipeline.runtime import BatchHandler, InjectedCommitFailure, RuntimeConfig, StopFlag


class _Committed(StreamingQueryListener):
    """Records each committed batch's end offsets in its variant's history, and passes the
    after_commit crash point. One listener serves every query of the driver."""

    def __init__(self, handlers: dict[str, BatchHandler]) -> None:
        self.handlers = handlers  # by query name

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        pass

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        progress = event.progress
        handler = self.handlers.get(progress.name or "")  # every lane names its query
        if handler is None or progress.numInputRows == 0:
            return
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
    query: StreamingQuery | None = None

    @property
    def name(self) -> str:
        return self.config.group.replace(".", "_")

    def write_batch(self, df: DataFrame, batch_id: int) -> None:
        rows = df.select("partition", "offset", "value").collect()
        raw = sorted(
            (RawRecord(r.partition, r.offset, r.value) for r in rows),
            key=lambda r: (r.partition, r.offset),
        )
        if raw:
            self.handler.handle(batch_id, raw)

    def start(self, spark: SparkSession) -> None:
        cfg = self.config
        self.query = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", cfg.bootstrap)
            # On the consumers' link: the fault proxy tells its clients apart by client.id.
            .option("kafka.client.id", f"{CONSUMER_CLIENT}-spark")
            .option("subscribe", cfg.topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(cfg.batch_size))
            .load()
            .writeStream.queryName(self.name)
            .foreachBatch(self.write_batch)
            .option("checkpointLocation", cfg.checkpoint)
            .trigger(processingTime=f"{cfg.trigger_ms} milliseconds")
            .start()
        )

    def restart_if_failed(self, spark: SparkSession) -> None:
        """A batch failed by design (an injected commit failure) restarts the query from its
        checkpoint, which replays that batch - the redelivery under test. Any other failure
        ends the runtime."""
        assert self.query is not None
        if self.query.isActive:
            return
        failure = self.query.exception()
        if failure is None or InjectedCommitFailure.MARKER not in str(failure):
            raise RuntimeError(f"the streaming query of {self.config.group} failed: {failure}")
        self.start(spark)


def run(configs: list[RuntimeConfig]) -> None:
    """One driver running one query per configuration - several variants side by side share
    a driver when no fault targets a single consumer process."""
    stop = StopFlag()
    lanes = [_Lane(c, BatchHandler(c, source="spark")) for c in configs]
    spark = spark_session(
        SparkSettings.from_json(configs[0].spark_settings), f"chaoslab-{configs[0].topic}"
    )
    spark.streams.addListener(_Committed({lane.name: lane.handler for lane in lanes}))
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
            if lane.query is not None:
                lane.query.stop()
        spark.stop()
        for lane in lanes:
            lane.handler.history.record(EventKind.RUNTIME_EXIT, detail="stopped")


def main(argv: list[str]) -> None:
    """``python -m harness.pipeline.spark_runtime CONFIG.json [CONFIG.json ...]``"""
    run([RuntimeConfig.load(path) for path in argv])


if __name__ == "__main__":
    main(sys.argv[1:])

"""The Spark runtime: Structured Streaming over the lab's Python Kafka source, with the variant
called from ``foreachBatch``. Offsets live in the query's checkpoint.

    python -m harness.pipeline.spark_runtime CONFIG.json [INDEX]

Spark commits a batch (writes its commit log) after ``foreachBatch`` returns; a crash before
that replays the same batch_id with the same offsets on restart - delivery into foreachBatch is
at-least-once, exactly the gap the variants must cope with. The ``after_commit`` crash point
fires from the query listener, which Spark calls once the batch's commit is written.
"""

from __future__ import annotations

import json
import os
import sys

from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery, StreamingQueryListener

from harness.environment.spark import SparkSettings, spark_session
from harness.history import EventKind
from harness.pipeline.batch import RawRecord
from harness.pipeline.crash import CrashPoint
from harness.pipeline.kafka_source import register
from harness.pipeline.runtime import BatchHandler, InjectedCommitFailure, RuntimeConfig, StopFlag


class _Committed(StreamingQueryListener):
    """Records each committed batch's end offsets in the history (and passes after_commit)."""

    def __init__(self, handler: BatchHandler) -> None:
        self.handler = handler

    def onQueryStarted(self, event: object) -> None:
        pass

    def onQueryProgress(self, event: object) -> None:
        progress = event.progress  # type: ignore[attr-defined]
        if progress.numInputRows == 0:
            return
        end = json.loads(progress.sources[0].endOffset)
        self.handler.history.record(
            EventKind.COMMIT,
            batch=progress.batchId,
            offsets={int(p): int(o) for p, o in end.items()},
        )
        # Listener events arrive asynchronously: the next batch may be running already, so the
        # batch is named rather than taken from the handler.
        self.handler.reached(CrashPoint.AFTER_COMMIT, batch_id=progress.batchId)

    def onQueryIdle(self, event: object) -> None:
        pass

    def onQueryTerminated(self, event: object) -> None:
        pass


def run(config: RuntimeConfig) -> None:
    stop = StopFlag()
    handler = BatchHandler(config, source="spark")
    history = handler.history
    spark = spark_session(
        SparkSettings.from_json(config.spark_settings), f"chaoslab-{config.group}"
    )
    register(spark)
    spark.streams.addListener(_Committed(handler))

    def write_batch(df: DataFrame, batch_id: int) -> None:
        rows = df.select("partition", "offset", "value").collect()
        raw = sorted(
            (RawRecord(r.partition, r.offset, r.value) for r in rows),
            key=lambda r: (r.partition, r.offset),
        )
        if raw:
            handler.handle(batch_id, raw)

    def start_query() -> StreamingQuery:
        return (
            spark.readStream.format("chaoslab-kafka")
            .option("bootstrap", config.bootstrap)
            .option("topic", config.topic)
            .option("maxRecordsPerTrigger", str(config.batch_size))
            .load()
            .writeStream.queryName(config.group.replace(".", "_"))
            .foreachBatch(write_batch)
            .option("checkpointLocation", config.checkpoint)
            .trigger(processingTime=f"{config.trigger_ms} milliseconds")
            .start()
        )

    query = start_query()
    history.record(EventKind.RUNTIME_START, detail=f"pid {os.getpid()}")
    try:
        while not stop:
            if query.isActive:
                stop.wait(0.5)
                continue
            failure = query.exception()
            if failure is None:
                break
            if InjectedCommitFailure.MARKER not in str(failure):
                raise RuntimeError(f"the streaming query failed: {failure}")
            # The batch was written, its checkpoint commit never happened: start the query
            # again from the checkpoint, which replays that batch (the redelivery under test).
            query = start_query()
    finally:
        query.stop()
        spark.stop()
        history.record(EventKind.RUNTIME_EXIT, detail="stopped")


def main(argv: list[str]) -> None:
    run(RuntimeConfig.load(argv[0]))


if __name__ == "__main__":
    main(sys.argv[1:])

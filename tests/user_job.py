"""An example of a user's own Spark job, written as it would run in production - nothing in it
knows about the lab. The lab hands it the Kafka stream and a sink, and puts it under its faults
(``variants: [{name: spark-job, job: tests.user_job:ingest}]``; tests/test_user_job.py).

It does what many CDC ingestion jobs do: parse each change, drop what does not parse, append
the change to a staging collection and move the current state forward - with pymongo, on the
executors, inside ``foreachBatch``. Its append is not idempotent: a batch Spark replays after a
driver died between the write and the checkpoint commit is stored twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from pymongo import MongoClient, UpdateOne
from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.query import StreamingQuery

CHANGE = T.StructType(
    [
        T.StructField("event_id", T.StringType()),
        T.StructField("order_id", T.LongType()),
        T.StructField("version", T.LongType()),
        T.StructField("payload", T.StringType()),
    ]
)


def ingest(stream: DataFrame, sink: Any) -> Callable[[DataFrame, int], None]:
    """The job: a foreachBatch function over the Kafka stream."""
    uri, database, events, orders = sink.mongo_uri, sink.database, sink.events, sink.orders

    def write_partition(rows: Iterable[Row]) -> None:
        changes = [row.asDict() for row in rows]
        if not changes:
            return
        client: MongoClient[dict[str, Any]] = MongoClient(uri)
        with client:
            db = client[database]
            db[events].insert_many(changes)  # the driver mints each document's _id
            moves = [
                UpdateOne({"_id": c["order_id"]}, {"$max": {"version": c["version"]}}, upsert=True)
                for c in changes
            ]
            db[orders].bulk_write(moves, ordered=False)

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        parsed = batch.select(F.from_json(F.col("value").cast("string"), CHANGE).alias("c"))
        changes = parsed.where(F.col("c.order_id").isNotNull() & F.col("c.version").isNotNull())
        changes.select("c.event_id", "c.order_id", "c.version").foreachPartition(write_partition)

    return write_batch


def ingest_query(stream: DataFrame, sink: Any) -> StreamingQuery:
    """The same job, as a job that starts its own query (checkpointed where the lab says)."""
    return (
        stream.writeStream.queryName(sink.query_name)
        .foreachBatch(ingest(stream, sink))
        .option("checkpointLocation", sink.checkpoint)
        .trigger(processingTime="200 milliseconds")
        .start()
    )


def ingest_with_connector(stream: DataFrame, sink: Any) -> Callable[[DataFrame, int], None]:
    """The same job written with MongoDB's Spark connector, as many are: each batch's changes
    appended to the staging collection, then each order's newest change replaced in the current
    state - two ``write.format("mongodb")`` calls inside foreachBatch."""

    def write(rows: DataFrame, collection: str, **options: str) -> None:
        (rows.write.format("mongodb").mode("append").option("connection.uri", sink.mongo_uri)
         .option("database", sink.database).option("collection", collection)
         .options(**options).save())  # fmt: skip

    def write_batch(batch: DataFrame, batch_id: int) -> None:
        parsed = batch.select(F.from_json(F.col("value").cast("string"), CHANGE).alias("c"))
        changes = parsed.where(F.col("c.order_id").isNotNull() & F.col("c.version").isNotNull())
        changes = changes.select("c.event_id", "c.order_id", "c.version")
        write(changes, sink.events)  # no _id: the driver mints one - an insert per row
        newest = changes.groupBy("order_id").agg(F.max("version").alias("version"))
        write(newest.withColumnRenamed("order_id", "_id"), sink.orders)  # replace by _id

    return write_batch

"""MongoDB's Spark connector in the Spark runtime's driver: the rows it is handed, the options
it writes with, and the crash points the lab keeps where the connector writes.

Both connector variants parse each Kafka record in Spark (``from_json``, as a job would), split
off what does not parse and hand the rest to ``format("mongodb")``. The write happens in Spark's
JVMs, where the lab's Python cannot reach; its crash points are kept there by the lab's Spark
hooks (``harness/environment/spark_hooks``, built by ``chaoslab fetch``):

* the connector's client is the lab's ``WatchedClientFactory`` (the default factory's client,
  with a command listener): the driver's failed commands and retries go into the history, and a
  write task that has had ``after_docs`` documents acknowledged fires the ``mid_write`` plans
  the driver armed for the batch (``arm``);
* a query's checkpoint entries are held (``CheckpointHold``) when the connector's own sink
  writes: ``offsets/N`` before batch N runs (``before_write``), ``commits/N`` after its write
  and before Spark records it done (``after_write_before_commit``).
"""

from __future__ import annotations

import json
import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.query import StreamingQuery

from harness.history.events import EventKind
from harness.pipeline.batch import Poison, dead_letter_topic
from harness.pipeline.crash import Armed, Crasher, CrashPoint
from harness.pipeline.runtime import CONSUMER_APP, BatchHandler, RuntimeConfig, Written
from harness.pipeline.variants.connector import ROW_ID, ConnectorVariant

# The workload's change events (harness.workload.events) as a job would declare them.
_ROW = T.StructType(
    [
        T.StructField("order_id", T.LongType()),
        T.StructField("version", T.LongType()),
        T.StructField("status", T.StringType()),
        T.StructField("amount_cents", T.LongType()),
        T.StructField("customer_id", T.LongType()),
    ]
)
EVENT = T.StructType(
    [
        T.StructField("event_id", T.StringType()),
        T.StructField("order_id", T.LongType()),
        T.StructField("version", T.LongType()),
        T.StructField(
            "payload",
            T.StructType(
                [
                    T.StructField("op", T.StringType()),
                    T.StructField("before", _ROW),
                    T.StructField("after", _ROW),
                    T.StructField(
                        "source",
                        T.StructType(
                            [
                                T.StructField("txId", T.StringType()),
                                T.StructField("ts_ms", T.LongType()),
                                T.StructField("table", T.StringType()),
                            ]
                        ),
                    ),
                ]
            ),
        ),
    ]
)
FACTORY = "chaoslab.spark.WatchedClientFactory"
ARMED = "armed-mid_write"  # the hooks' Watch.ARMED
HOLD = "chaoslab-hold"  # the hooks' HeldCheckpointFileManager.HOLD
HELD_MANAGER = "chaoslab.spark.HeldCheckpointFileManager"


def _parsed(stream: DataFrame) -> DataFrame:
    return stream.select(
        "partition", "offset", "value", F.from_json(F.col("value").cast("string"), EVENT).alias("e")
    )


def _parses(e: Column) -> Column:
    """What the lab's own parser requires of a record (harness.workload.events.parse)."""
    return (
        e.isNotNull()
        & e.event_id.isNotNull()
        & e.order_id.isNotNull()
        & e.version.isNotNull()
        & e.payload.op.isin("c", "u", "d")
        & e.payload.source.txId.isNotNull()
    )


def rows(stream: DataFrame, variant: ConnectorVariant) -> DataFrame:
    """The records that parse, as the rows the connector writes."""
    e = F.col("e")
    # No write time: Spark's current_timestamp() is the batch's, and a replayed batch keeps its
    # first run's. A copy's time is its ObjectId's, minted by the driver as it inserts
    # (harness.pipeline.sink.written_at).
    lab = F.struct(F.col("partition"), F.col("offset"))
    columns = [
        e.event_id.alias("event_id"),
        e.order_id.alias("order_id"),
        e.version.alias("version"),
        e.payload.source.txId.alias("tx_id"),
        e.payload.alias("payload"),
        lab.alias("_lab"),
    ]
    if variant.row_id:
        columns.insert(0, e[variant.row_id].alias(ROW_ID))
    return _parsed(stream).where(_parses(e)).select(*columns)


def poison(stream: DataFrame) -> DataFrame:
    """The records that do not parse: partition, offset, value."""
    return _parsed(stream).where(~_parses(F.col("e"))).select("partition", "offset", "value")


def with_app_name(uri: str) -> str:
    """The consumers' MongoDB appName on ``uri``: failCommand faults are scoped to it."""
    parts = urlsplit(uri)
    query = [(k, v) for k, v in parse_qsl(parts.query) if k.lower() != "appname"]
    return urlunsplit(parts._replace(query=urlencode([*query, ("appName", CONSUMER_APP)])))


def options(config: RuntimeConfig, variant: ConnectorVariant, driver_group: int) -> dict[str, str]:
    """The connector's options for a lane: where it writes, the variant's write options, and
    the lab's client factory with what it needs (options the connector itself ignores)."""
    return {
        "connection.uri": with_app_name(config.mongo_uri),
        "database": config.database,
        "collection": variant.collection,
        **variant.options,
        "mongoClientFactory": FACTORY,
        "chaoslab.history": str(config.history_dir),
        "chaoslab.variant": variant.label,
        "chaoslab.crashes": str(crashes_dir(config)),
        "chaoslab.driverGroup": str(driver_group),
    }


def crashes_dir(config: RuntimeConfig) -> Path:
    return Path(config.run_dir) / "crashes"  # the Crasher's counters (harness.pipeline.crash)


class MidWrite:
    """The mid_write plans armed for the batch under way, where the hooks read them."""

    def __init__(self, crasher: Crasher, directory: Path) -> None:
        self.crasher = crasher
        self.path = directory / ARMED
        self.armed: list[Armed] = []

    def arm(self, batch_no: int, batch_id: int) -> None:
        """Before the batch's write: the plans due in it (none: the file is removed)."""
        self.settle()
        self.armed = self.crasher.arm(CrashPoint.MID_WRITE, batch_no)
        if not self.armed:
            self.path.unlink(missing_ok=True)
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        partial = self.path.with_suffix(".partial")
        partial.write_text("".join(a.line(batch_id) + "\n" for a in self.armed))
        partial.replace(self.path)  # read whole or not at all

    def settle(self) -> None:
        """After the batch's write: what fired is no longer armed."""
        if self.armed:
            self.path.unlink(missing_ok=True)
            self.crasher.settle(self.armed)
            self.armed = []


# A query held at an entry waits for this; the poll is the delay each batch's entries take.
HOLD_POLL_S = 0.005


class CheckpointHold:
    """Holds a query's checkpoint entries (``offsets/N``, ``commits/N``) while ``on_entry``
    runs - it may kill the driver there - and then lets Spark write them."""

    def __init__(self, checkpoint: str, on_entry: Callable[[str, int], None]) -> None:
        self.folder = Path(checkpoint) / HOLD
        self.on_entry = on_entry
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="checkpoint-hold", daemon=True)

    def start(self) -> None:
        """Before the query starts: what a killed driver left in the folder is cleared."""
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder.mkdir(parents=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def _watch(self) -> None:
        while not self._stop.wait(HOLD_POLL_S):
            for reached in sorted(self.folder.glob("*.reached"), key=_entry_order):
                kind, _, number = reached.stem.partition("-")
                self.on_entry(kind, int(number))
                reached.with_suffix(".go").touch()
                # Answered: wait until Spark took the answer, so it is not answered twice.
                while reached.exists() and not self._stop.wait(HOLD_POLL_S):
                    pass


def _entry_order(path: Path) -> tuple[int, int]:
    kind, _, number = path.stem.partition("-")
    return int(number), 0 if kind == "offsets" else 1


def session_conf() -> dict[str, str]:
    """The Spark session's settings the hold needs: Spark's checkpoint file manager, the lab's
    (every query's; one without the hold folder is left alone)."""
    return {"spark.sql.streaming.checkpointFileManagerClass": HELD_MANAGER}


def driver_group() -> int:
    """The process group a crash point in an executor kills: the runtime's, with the driver."""
    return os.getpgid(0)


def _source_offsets(path: Path, topic: str) -> dict[int, int]:
    """The Kafka source's offsets in an offset-log entry (its last line: {"TOPIC": {"P": o}})."""
    last = path.read_text().strip().splitlines()[-1]
    return {int(p): int(o) for p, o in json.loads(last).get(topic, {}).items()}


Offsets = dict[int, int]  # partition -> next offset


def batch_range(checkpoint: str, topic: str, batch_id: int) -> tuple[Offsets, Offsets]:
    """Where batch ``batch_id`` of a query starts and ends, per partition (next offsets), from
    its checkpoint: the offset log's entry before it (batch 0: the source's initial offsets),
    and its own."""
    root = Path(checkpoint)
    before = root / "offsets" / str(batch_id - 1)
    if batch_id == 0 or not before.exists():
        before = root / "sources" / "0" / "0"
    return _source_offsets(before, topic), _source_offsets(root / "offsets" / str(batch_id), topic)


def next_batch(checkpoint: str) -> int:
    """The batch a query started from ``checkpoint`` runs first: the last planned one if it
    was not committed (Spark runs it again), else the one after."""
    root = Path(checkpoint)

    def last(log: str) -> int:
        entries = [int(p.name) for p in (root / log).glob("*") if p.name.isdigit()]
        return max(entries, default=-1)

    planned = last("offsets")
    return planned if planned > last("commits") else planned + 1


UNPARSED = "does not parse as a change event"  # a dead letter's reason


class ConnectorWrites:
    """A connector lane's part of the driver: its query (``foreachBatch`` or the connector's
    own sink), its dead letters, the crash points the hooks keep for it."""

    def __init__(self, config: RuntimeConfig, handler: BatchHandler, variant: ConnectorVariant):
        self.config = config
        self.handler = handler
        self.variant = variant
        self.options = options(config, variant, driver_group())
        self.mid_write = MidWrite(handler.crasher, crashes_dir(config))
        self.hold: CheckpointHold | None = None  # the sink's checkpoint entries, held
        self.planned: int | None = None  # the batch whose offsets the held query wrote last
        self.dead_letters: StreamingQuery | None = None  # the sink's poison, to Kafka

    def start(self, stream: DataFrame, name: str) -> StreamingQuery:
        """The lane's query, started (again, after a failure: from its checkpoint)."""
        cfg = self.config
        trigger = f"{cfg.trigger_ms} milliseconds"
        if not self.variant.streaming_sink:
            return (
                stream.writeStream.queryName(name)
                .foreachBatch(self.write_batch)
                .option("checkpointLocation", cfg.checkpoint)
                .trigger(processingTime=trigger)
                .start()
            )
        if self.hold is None:
            self.hold = CheckpointHold(cfg.checkpoint, self.on_checkpoint_entry)
            self.hold.start()
        # A batch replayed from the checkpoint has its offsets already: no offsets entry is
        # held for it, so its mid_write plans are armed now.
        self.mid_write.arm(self.handler.batches + 1, next_batch(cfg.checkpoint))
        query = (
            rows(stream, self.variant)
            .writeStream.queryName(name)
            .format("mongodb")
            .options(**self.options)
            .option("checkpointLocation", cfg.checkpoint)
            .trigger(processingTime=trigger)
            .start()
        )
        if self.dead_letters is None or not self.dead_letters.isActive:
            # What does not parse goes to the lane's dead-letter topic, by Spark's Kafka sink.
            self.dead_letters = (
                poison(stream)
                .select(
                    F.col("value"),
                    F.array(
                        _header("error", F.lit(UNPARSED)),
                        _header("origin-partition", F.col("partition").cast("string")),
                        _header("origin-offset", F.col("offset").cast("string")),
                    ).alias("headers"),
                )
                .writeStream.queryName(f"{name}_dlq")
                .format("kafka")
                .option("kafka.bootstrap.servers", cfg.bootstrap)
                .option("topic", dead_letter_topic(cfg.group))
                .option("checkpointLocation", f"{cfg.checkpoint}-dlq")
                .trigger(processingTime=trigger)
                .start()
            )
        return query

    def write_batch(self, df: DataFrame, batch_id: int) -> None:
        """foreachBatch: the batch's poison dead-lettered, the rest written by the connector,
        between the lab's crash points."""

        def with_connector(batch_no: int) -> list[Written]:
            df.persist()
            try:
                bad = [Poison(r.partition, r.offset, r.value, UNPARSED)
                       for r in poison(df).collect()]  # fmt: skip
                self.handler.sink.dead_letter(batch_id, bad)
                self.mid_write.arm(batch_no, batch_id)
                rows(df, self.variant).write.format("mongodb").mode("append").options(
                    **self.options
                ).save()
                self.mid_write.settle()
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
        starts, ends = batch_range(cfg.checkpoint, cfg.topic, batch_id)
        handler.history.record(
            EventKind.WRITTEN,
            batch=batch_id,
            count=sum(end - starts.get(p, 0) for p, end in ends.items()),
            offsets={p: end - 1 for p, end in sorted(ends.items()) if end > starts.get(p, 0)},
        )
        handler.reached(CrashPoint.AFTER_WRITE_BEFORE_COMMIT)
        self.mid_write.arm(handler.batches + 1, batch_id + 1)

    def stop(self) -> None:
        if self.dead_letters is not None:
            self.dead_letters.stop()
        if self.hold is not None:
            self.hold.stop()


def _header(key: str, value: Column) -> Column:
    return F.struct(F.lit(key).alias("key"), value.cast("binary").alias("value"))

"""What both runtimes share: their configuration, and handling one batch from poll to write.

A runtime is a process (so it can be killed) started from a ``RuntimeConfig`` written as JSON.
Handling a batch is the same in both: split off the poison and dead-letter it, pass the crash
points, hand the rest to the variant - retrying a failed write the way a redelivery would - and
record each step in the history. Committing is the runtime's own business (Kafka or Spark).
"""

from __future__ import annotations

import json
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Self

from pymongo import MongoClient
from pymongo.database import Database
from pymongo.errors import PyMongoError

from harness.history.events import EventKind, HistoryWriter
from harness.pipeline.batch import Batch, DeadLetters, Poison, RawRecord, split
from harness.pipeline.crash import Crasher, CrashPlan, CrashPoint
from harness.pipeline.mongo_options import max_commit_time_ms
from harness.pipeline.spark.driver_watch import driver_watch
from harness.pipeline.variants import Variant, WriteContext, make_variant

# The consumers' MongoDB appName: failCommand failpoints are scoped to it, so a fault hits the
# pipeline under test and not the harness reading the results.
CONSUMER_APP = "chaoslab-consumer"


@dataclass(frozen=True)
class RuntimeConfig:
    runtime: str  # listener | spark | command
    bootstrap: str
    mongo_uri: str
    topic: str
    group: str  # consumer group; for spark also the query's name
    database: str  # the variant's MongoDB database
    variant: str
    variant_options: dict[str, Any]
    run_dir: str  # history/, crashes/ and logs/ live here
    batch_size: int = 250  # records per poll (listener) or per trigger (spark)
    crash_plans: tuple[CrashPlan, ...] = ()
    write_retry_s: float = 60.0  # how long a failing write is retried before giving up
    spark_settings: str = ""  # SparkSettings as JSON (spark only)
    checkpoint: str = ""  # spark only
    trigger_ms: int = 200  # spark only
    commit: str = "sync"  # listener only: commit and wait, or commit and go on (async)
    kafka: dict[str, Any] = field(default_factory=dict)  # listener: consumer settings over ours
    # MongoDB client settings (harness.pipeline.mongo_options): the URI's are in mongo_uri already.
    mongo: dict[str, Any] = field(default_factory=dict)
    # Where the harness imported a user's module from (a variant or Spark job named
    # module:callable): the runtime imports it from there too, whatever its working directory.
    import_path: tuple[str, ...] = ()
    # A command consumer's program, the folder it runs in (the scenario's), and the container
    # image it asks for (containers backend; '': the lab's).
    command: tuple[str, ...] = ()
    cwd: str = ""
    image: str = ""
    connect: str = ""  # ConnectSettings as JSON (connect only): the run's Connect cluster

    @property
    def history_dir(self) -> Path:
        return Path(self.run_dir) / "history"

    def to_json(self) -> str:
        raw = asdict(self)
        raw["crash_plans"] = [json.loads(p.to_json()) for p in self.crash_plans]
        return json.dumps(raw, indent=2)

    @classmethod
    def from_json(cls, text: str) -> Self:
        raw = json.loads(text)
        raw["crash_plans"] = tuple(CrashPlan.from_json(json.dumps(p)) for p in raw["crash_plans"])
        raw["import_path"] = tuple(raw.get("import_path", ()))
        raw["command"] = tuple(raw.get("command", ()))
        return cls(**raw)

    def use_import_path(self) -> None:
        """Let this process import the user's modules the harness imported (called first)."""
        sys.path[:0] = [p for p in self.import_path if p not in sys.path]

    @classmethod
    def load(cls, path: str | Path) -> Self:
        return cls.from_json(Path(path).read_text())


@dataclass(frozen=True)
class Written:
    """What one process wrote of a batch: its records' count and each partition's last
    offset."""

    count: int
    last_offsets: dict[int, int]


class SinkWriter:
    """Writes one batch's records into the variant's database, dead-letters its poison, and
    retries a failed write the way a redelivery would - in whichever process holds the records
    (a listener, Spark's driver, or a Spark executor's Python worker)."""

    def __init__(self, config: RuntimeConfig, history: HistoryWriter, crasher: Crasher) -> None:
        self.config = config
        self.history = history
        self.crasher = crasher
        self.variant = make_variant(config.variant, config.variant_options)
        self.client: MongoClient[dict[str, Any]] = MongoClient(
            config.mongo_uri,
            heartbeatFrequencyMS=500,
            appname=CONSUMER_APP,
            event_listeners=driver_watch(history),
        )
        self.db = self.client[config.database]
        self._dead_letters = DeadLetters(config.bootstrap, config.group)

    def dead_letter(self, batch_id: int, poison: list[Poison]) -> None:
        if poison:
            self._dead_letters.send(poison)
            self.history.record(EventKind.DEAD_LETTER, batch=batch_id, count=len(poison))

    def write(self, batch: Batch, batch_no: int) -> None:
        """``batch_no`` counts the consumer process's batches (crash plans are written in it)."""
        deadline = time.monotonic() + self.config.write_retry_s
        delay = 0.2
        while True:
            ctx = WriteContext(
                self.client,
                self.db,
                batch_no,
                self.crasher,
                batch.batch_id,
                max_commit_time_ms(self.config.mongo),
            )
            try:
                self.variant.write(batch, ctx)
                return
            except PyMongoError as exc:
                # Writing the batch again is what a redelivery would do; a variant that is not
                # idempotent shows it here too.
                self.history.record(EventKind.WRITE_FAILED, batch=batch.batch_id, detail=str(exc))
                if time.monotonic() + delay > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 5.0)


@dataclass
class BatchHandler:
    """Everything one consumer process needs to turn polled records into sink writes."""

    config: RuntimeConfig
    source: str  # history source name, e.g. listener-0
    history: HistoryWriter = field(init=False)
    crasher: Crasher = field(init=False)
    sink: SinkWriter = field(init=False)
    batches: int = 0  # batches this process handled (crash plans count these)
    batch_id: int | None = None  # the runtime's id of the batch being handled

    def __post_init__(self) -> None:
        cfg = self.config
        label = make_variant(cfg.variant, cfg.variant_options).label
        self.history = HistoryWriter(cfg.history_dir, self.source, label)
        self.crasher = Crasher(list(cfg.crash_plans), Path(cfg.run_dir) / "crashes", self.history)
        self.sink = SinkWriter(cfg, self.history, self.crasher)

    @property
    def variant(self) -> Variant:
        return self.sink.variant

    @property
    def db(self) -> Database[dict[str, Any]]:
        return self.sink.db

    def handle(self, batch_id: int, raw: Iterable[RawRecord]) -> Batch:
        """Dead-letter the poison, then write the rest; returns the batch for committing."""
        self.batches += 1
        self.batch_id = batch_id
        batch, poison = split(batch_id, self.config.topic, self.config.group, raw)
        firsts = batch.first_offsets()
        self.history.record(
            EventKind.BATCH, batch=batch_id, count=len(batch.records) + len(poison), offsets=firsts
        )
        self.sink.dead_letter(batch_id, poison)
        self.reached(CrashPoint.BEFORE_WRITE)
        self.sink.write(batch, self.batches)
        self.history.record(
            EventKind.WRITTEN, batch=batch_id, count=len(batch.records), offsets=batch.last_offsets
        )
        self.reached(CrashPoint.AFTER_WRITE_BEFORE_COMMIT)
        return batch

    def handle_elsewhere(self, batch_id: int, write: Callable[[int], list[Written] | None]) -> None:
        """A batch whose records are written by other processes (Spark's executors):
        ``write(batch_no)`` writes them and says what each process wrote (None: a user's job,
        which does not say)."""
        self.batches += 1
        self.batch_id = batch_id
        self.history.record(EventKind.BATCH, batch=batch_id)
        self.reached(CrashPoint.BEFORE_WRITE)
        parts = write(self.batches)
        if parts is None:
            self.history.record(EventKind.WRITTEN, batch=batch_id)
            self.reached(CrashPoint.AFTER_WRITE_BEFORE_COMMIT)
            return
        lasts = {p: o for part in parts for p, o in part.last_offsets.items()}
        self.history.record(
            EventKind.WRITTEN,
            batch=batch_id,
            count=sum(part.count for part in parts),
            offsets=dict(sorted(lasts.items())),
        )
        self.reached(CrashPoint.AFTER_WRITE_BEFORE_COMMIT)

    def reached(self, point: CrashPoint, batch_id: int | None = None) -> None:
        """Pass a crash point for the batch being handled (or the one named)."""
        self.crasher.reached(
            point, self.batches, batch_id=self.batch_id if batch_id is None else batch_id
        )


class StopFlag:
    """Set by SIGTERM / SIGINT: the runtime finishes its batch, then stops."""

    def __init__(self) -> None:
        self._event = threading.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self._event.set())

    def __bool__(self) -> bool:
        return self._event.is_set()

    def wait(self, timeout: float) -> bool:
        return self._event.wait(timeout)

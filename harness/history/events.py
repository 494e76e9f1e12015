"""The history's events: every operation and fault of a run, with timestamps, written as it
happens, and read back merged.

Each writing process (the harness, each consumer process, the Spark driver) appends to its own
JSON-lines file under ``RUN/history/``, line-buffered, so a SIGKILL loses at most the line being
written and processes never interleave. Readers merge the files by time.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import IO, Any, Self


class EventKind(StrEnum):
    RUN_START = "run-start"  # a variant's run begins
    RUN_END = "run-end"
    PRODUCED = "produced"  # the producer finished: count acked
    RUNTIME_START = "runtime-start"  # a consumer process (re)started
    RUNTIME_EXIT = "runtime-exit"  # a consumer process ended (detail: how)
    BATCH = "batch"  # a batch was handed to the variant (count, offsets: first offsets)
    # The variant finished writing a batch (count; offsets: the last offset of each partition
    # in it - with BATCH's first offsets, the records a consumer handled)
    WRITTEN = "written"
    WRITE_FAILED = "write-failed"  # the variant's write raised; it will be tried again
    # What the MongoDB driver saw of the variant's commands (harness.pipeline.spark.driver_watch): a
    # command that failed (detail: "insert: the error"), whether or not the driver retries it,
    # and an operation the driver retried that was then answered (detail: its command).
    MONGO_ERROR = "mongo-error"
    MONGO_RETRIED = "mongo-retried"
    POLL_ERROR = "poll-error"  # the consumer reported an error instead of a record
    ASSIGNED = "assigned"  # partitions assigned to a consumer (offsets: start positions)
    COMMIT = "commit"  # consumer positions committed (offsets: partition -> next offset)
    COMMIT_FAILED = "commit-failed"
    # A broker's error response to a consumer's group request, read from its client's log after
    # the run (detail: "NOT_COORDINATOR OffsetCommit"): see harness.pipeline.kafka_log.
    KAFKA_ERROR = "kafka-error"
    DEAD_LETTER = "dead-letter"  # poison records sent to the dead-letter topic (count)
    # A Spark query stopped with an error (detail: what stopped it, in the words of the
    # exception that says most); the runtime starts it again from its checkpoint.
    QUERY_FAILED = "query-failed"
    # A lane's pipeline stopped for good (detail: why): a query that kept failing for a minute
    # of restarts. Its consumers are not waited for; what it did not store is lost.
    FAILED_FOR_GOOD = "failed-for-good"
    CRASH = "crash"  # a crash point fired (detail: the point; fault: the fault's name)
    # A crash point killed the Spark executor running the task (detail: the point, the
    # executor's PID and worker; fault: its name): the driver lives on and retries the task.
    EXECUTOR_LOST = "executor-lost"
    # Spark ran a write task again after an earlier attempt failed (its executor lost with its
    # worker, a write that gave up): its records were handed out again (batch; count: its
    # records; detail: the task and attempt). Written by the attempt itself, on the executor.
    TASK_RETRIED = "task-retried"
    # Spark's driver lost a write task of the variant's query (batch; detail: the task and its
    # error, from the driver's log after the run - and MongoDB's connector's abort, when it
    # said so): Spark runs it again, or fails the batch (harness.pipeline.spark.log).
    TASK_FAILED = "task-failed"
    PAUSED = "paused"  # a consumer froze itself at a point (detail: the point; fault: its name)
    RESUMED = "resumed"  # the supervisor thawed a paused consumer
    SCHEDULE_START = "schedule-start"  # the nemesis's clock starts: fault times count from here
    FAULT_START = "fault-start"  # fault: the fault's name; detail: its kind
    FAULT_END = "fault-end"
    # An instant inside a fault window (fault: its name; detail: what the lab did; count:
    # which, 1-based, or how many it acted on): each broker bounce of a restart or rolling
    # restart, when the broker was taken down; a consumer kill's SIGKILL, and its wait for a
    # consumer that was down when the kill was due (harness.faults.families.consumer); a
    # Connect worker's kill, and when Connect had started its tasks again (families.connect).
    FAULT_STEP = "fault-step"
    # The variant's consumers have committed past every acknowledged record: its work is done,
    # and a fault that starts later hits nothing (it did not fire, for this variant).
    CAUGHT_UP = "caught-up"
    # The lab held its workload's last records back while a fault to come waited for another's
    # window to end (detail: at which record, and for what), or let them go on
    # (harness.workload.producer.Reserve): the lab's doing, not the systems'.
    WORKLOAD_HELD = "workload-held"
    # An outbox relay could not resume its change stream: the resume point is no longer in the
    # oplog (ChangeStreamHistoryLost). What happened in between is not relayed; the lab counts it.
    HISTORY_LOST = "history-lost"
    # A current-state sink's row went back: a write left an order below a version its document
    # had shown (detail: ``order 17 v3 after v5``), as the lab's watch of its collection saw it
    # (harness.pipeline.landing_watch).
    WENT_BACK = "went-back"
    # What the lab sees of a command consumer from outside (harness.pipeline.observer), as it
    # polled it - not what the program said:
    GROUP = "group"  # its consumer group's state changed (detail: stable, preparing-rebalancing...)
    COMMITTED = "committed"  # the group's committed offsets changed (offsets)
    SINK_COUNT = "sink-count"  # the documents in its sink collection changed (count)
    CONSUMER_LOG = "consumer-log"  # it logged a line that reads as an error (detail: the line)
    # A Kafka Connect connector's or task's state changed, as Connect's REST API said it
    # (detail: ``task 0 RUNNING on 10.0.0.2:8083``; a failed one's first line of its trace).
    CONNECTOR_STATE = "connector-state"
    # Kafka holds an acknowledged record more than once (found by reading the topic after the
    # run; at its acknowledgement; count: the extra copies; detail: the event id and where each
    # copy is): copies the topic's, not the variant's (checker.check's stored_twice).
    STORED_TWICE = "stored-twice"


# How the supervisor's RUNTIME_EXIT says a consumer died of SIGKILL.
KILLED = "killed by SIGKILL"


def connector_state(subject: str, said: str) -> str:
    """A CONNECTOR_STATE event's detail: its ``subject`` ("connector", "task N"), then what
    Connect said of it ("RUNNING on 10.0.0.2:8083", "created", a failed task's reason)."""
    return f"{subject} {said}"


def connector_subject(detail: str) -> str:
    """Whom a CONNECTOR_STATE event's detail (``connector_state``) is about."""
    words = detail.split()
    return " ".join(words[:2] if words[:1] == ["task"] else words[:1])


@dataclass(frozen=True)
class HistoryEvent:
    t: float
    kind: EventKind
    source: str  # who wrote it: "harness", "listener-0", "spark", "nemesis"
    variant: str = ""
    batch: int | None = None
    count: int | None = None
    offsets: dict[int, int] = field(default_factory=dict)
    detail: str = ""
    fault: str = ""  # the name of the fault this event belongs to

    @property
    def consumer(self) -> str:
        """The consumer process it is about: its writer's name, or - for what the supervisor
        records of a process ("command-0 pid 7", "listener-1 killed by SIGKILL") - the first
        word of its detail."""
        return self.detail.partition(" ")[0] if self.source == "harness" else self.source

    def to_json(self) -> str:
        raw = asdict(self)
        raw["offsets"] = {str(p): o for p, o in self.offsets.items()}
        return json.dumps({k: v for k, v in raw.items() if v not in (None, "", {})})

    @classmethod
    def from_json(cls, line: str) -> Self:
        raw = json.loads(line)
        raw["kind"] = EventKind(raw["kind"])
        raw["offsets"] = {int(p): o for p, o in raw.get("offsets", {}).items()}
        return cls(**raw)


class HistoryWriter:
    def __init__(self, directory: Path, source: str, variant: str = "") -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.source = source
        self.variant = variant
        path = directory / f"{source}-{os.getpid()}.jsonl"
        self._file: IO[str] = path.open("a", buffering=1)
        # The driver's monitor thread writes beside the consumer's: one line at a time.
        self._lock = threading.Lock()

    def record(self, kind: EventKind, **fields: Any) -> HistoryEvent:
        """An event that happens now."""
        return self.append(kind, t=time.time(), **fields)

    def append(self, kind: EventKind, *, t: float, **fields: Any) -> HistoryEvent:
        """An event that happened at ``t`` (unix seconds), e.g. read from a log afterwards."""
        event = HistoryEvent(t=t, kind=kind, source=self.source, variant=self.variant, **fields)
        line = event.to_json() + "\n"
        with self._lock:
            self._file.write(line)
        return event

    def close(self) -> None:
        self._file.close()


def _lines(path: Path) -> Iterator[str]:
    with path.open() as f:
        for line in f:
            if line.endswith("\n"):  # a torn last line (SIGKILL mid-write) is not an event
                yield line


def read_history(directory: Path) -> list[HistoryEvent]:
    """Every event of every writer, in time order."""
    events = [
        HistoryEvent.from_json(line)
        for path in sorted(directory.glob("*.jsonl"))
        for line in _lines(path)
    ]
    return sorted(events, key=lambda e: e.t)


class HistoryTail:
    """Reads the events appended since the last call (for watching a run's progress)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._positions: dict[Path, int] = {}

    def new_events(self) -> list[HistoryEvent]:
        events = []
        for path in sorted(self.directory.glob("*.jsonl")):
            with path.open() as f:
                f.seek(self._positions.get(path, 0))
                while line := f.readline():
                    if not line.endswith("\n"):
                        break  # being written; read it next time
                    self._positions[path] = f.tell()
                    events.append(HistoryEvent.from_json(line))
        return sorted(events, key=lambda e: e.t)


def written_again(events: Iterable[HistoryEvent]) -> int:
    """How many records a variant's consumers wrote more than once (each extra time counts),
    from their own history alone: a written batch covers, per partition, its BATCH's first
    offset to its WRITTEN's last. For a variant that writes whatever it is handed (naive),
    the checker's duplicates must equal it - whatever the run's timing made of the faults."""
    handed: dict[str, HistoryEvent] = {}  # the batch each consumer has in hand
    times: Counter[tuple[int, int]] = Counter()
    for e in sorted(events, key=lambda e: e.t):
        if e.kind is EventKind.BATCH:
            handed[e.source] = e
        elif e.kind is EventKind.WRITTEN and (batch := handed.pop(e.source, None)):
            for partition, first in batch.offsets.items():
                last = e.offsets.get(partition, first - 1)
                times.update((partition, o) for o in range(first, last + 1))
    return sum(n - 1 for n in times.values())


def of_kind(events: Iterable[HistoryEvent], *kinds: EventKind) -> list[HistoryEvent]:
    return [e for e in events if e.kind in kinds]

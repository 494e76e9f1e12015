"""The write tasks Spark's driver lost, read from its log after the run.

A task that fails - the connector's bulk write refused (E11000, a step-down's 10107), an
executor lost under it - is run again by Spark (on the standalone cluster, up to
``spark.task.maxFailures`` times) or fails its batch. Neither reaches the lab's code in the
driver when the connector writes in Spark's JVM; the driver logs each, naming the query and the
batch, and MongoDB's connector adds its abort to the task's error::

    2026-11-26T10:10:27.003Z WARN TaskSetManager: [queryId = fd96d] [batchId = 2] Lost task
    0.0 in stage 7.0 (TID 18) (127.0.0.1 executor 0): com.mongodb.MongoNotPrimaryException:
    Command failed with error 10107 (NotWritablePrimary): 'not primary' on server ...
        Suppressed: com.mongodb.spark.sql.connector.exceptions.DataException: Write aborted for:
    PartitionId: 0, TaskId: 18. Manual data clean up may be required.

``harvest`` turns each into a TASK_FAILED event of the lane's history. The driver's log is
``spark-driver-PID.log`` (``harness.environment.spark``), the query's id the one its
RUNTIME_START names. Pure but for the files.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from harness.history.events import EventKind, HistoryEvent, HistoryWriter

# The lab's log pattern (harness.environment.spark's LOG4J2_TEMPLATE) and Spark's own words.
_RECORD = re.compile(r"^\d{4}-\d\d-\d\dT")  # a log record's first line; the rest, its trace
_LOST = re.compile(
    r"^(?P<t>\d{4}-\d\d-\d\dT[\d:.]+(?:Z|[+-][\d:]+)) WARN TaskSetManager: "
    r"\[queryId = (?P<query>[0-9a-f]+)\] \[batchId = (?P<batch>\d+)\] "
    r"Lost (?P<task>task \S+ in stage \S+) \([^)]*\) \([^)]*\): (?P<error>.*)$"
)
ABORTED = "Manual data clean up may be required"  # MongoDB's connector's abort
_STARTED = re.compile(r"\bpid (?P<pid>\d+), query (?P<query>[0-9a-f-]+)")


@dataclass(frozen=True)
class LostTask:
    t: float  # unix seconds, the driver's stamp
    query: str  # the leading characters of its query's id, as Spark logs them
    batch: int
    task: str  # e.g. "task 0.0 in stage 7.0"
    error: str  # the task's error, first line
    aborted: bool  # the connector aborted its write: what it wrote stays

    @property
    def detail(self) -> str:
        abort = "; its write aborted - manual data clean up may be required" if self.aborted else ""
        return f"{self.task}: {self.error}{abort}"


def lost_tasks(lines: Iterable[str]) -> Iterator[LostTask]:
    """The tasks a driver's log says it lost, each with whether the connector aborted it."""
    found: LostTask | None = None
    for line in lines:
        match = _LOST.match(line.rstrip("\n"))
        if match is not None:
            if found is not None:
                yield found
            found = LostTask(
                datetime.fromisoformat(match["t"]).timestamp(),
                match["query"],
                int(match["batch"]),
                match["task"],
                match["error"].strip(),
                aborted=False,
            )
        elif found is not None and _RECORD.match(line):
            yield found  # the next record: the task's trace has ended
            found = None
        elif found is not None and ABORTED in line:
            found = LostTask(found.t, found.query, found.batch, found.task, found.error, True)
    if found is not None:
        yield found


def started(events: Iterable[HistoryEvent]) -> dict[int, str]:
    """The Spark drivers of a lane (pid -> its query's id), from their RUNTIME_START events."""
    found = {}
    for e in events:
        if e.kind is EventKind.RUNTIME_START and (match := _STARTED.search(e.detail)):
            found[int(match["pid"])] = match["query"]
    return found


def harvest(log_dir: Path, history_dir: Path, events: Iterable[HistoryEvent], variant: str) -> int:
    """Record in a lane's history the tasks its drivers lost (their logs in ``log_dir``, the
    lane's RUNTIME_START events in ``events``); returns how many."""
    found = []
    for pid, query in started(events).items():
        log = log_dir / f"spark-driver-{pid}.log"
        if log.exists():
            with log.open(errors="replace") as lines:
                found += [t for t in lost_tasks(lines) if query.startswith(t.query)]
    if not found:
        return 0
    writer = HistoryWriter(history_dir, "spark", variant)
    try:
        for task in found:
            writer.append(EventKind.TASK_FAILED, t=task.t, batch=task.batch, detail=task.detail)
    finally:
        writer.close()
    return len(found)

"""What an exploration exercised, read from the histories of its runs (pure).

The conditions are the "sometimes" events of a delivery pipeline - what has to happen for a
variant's promise to be tested at all. A condition no run reached is where the next
exploration should push; the report lists them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from harness.history.events import KILLED, EventKind, HistoryEvent
from harness.history.origin import Injects, Origin, origins


class Condition(StrEnum):
    REDELIVERED = "a batch redelivered"  # records handed out again after they were written
    COMMIT_FAILED = "a commit failed after its write"
    KILLED_MID_WRITE = "a consumer killed mid-write"
    EXECUTOR_LOST = "an executor lost mid-task"
    WRITE_RETRIED = "a write failed and was tried again"
    # A write or commit whose reply was lost, sent again by the MongoDB driver with its session
    # and transaction number, and answered from the server's record (retryable writes at work).
    DRIVER_RETRIED = "a write answered on the driver's retry"
    MOVED_IN_FLIGHT = "partitions moved with a batch in flight"
    RESTARTED = "a consumer restarted"
    # A broker answered a group request that it is no longer (or not yet) the coordinator - in
    # a client's words: librdkafka's error codes, the Java client's log lines.
    COORDINATOR_MOVED = "a coordinator moved"


COORDINATOR_CODES = ("NOT_COORDINATOR", "COORDINATOR_LOAD_IN_PROGRESS", "COORDINATOR_NOT_AVAILABLE")
COORDINATOR_WORDS = (
    "not the correct coordinator",
    "coordinator is loading",
    "coordinator is not available",
    "is either not started or not valid",
)


@dataclass(frozen=True)
class Exercised:
    """One lane's run: the conditions its history shows, and the crash points reached."""

    conditions: frozenset[Condition]
    crash_points: frozenset[str]


def exercised(events: Sequence[HistoryEvent], injects: Injects) -> Exercised:
    """The conditions one lane's history shows; ``injects``: what the faults made up on it (a
    coordinator error the fault proxy answered with is not a coordinator that moved)."""
    found: set[Condition] = set()
    written: dict[int, int] = {}  # partition -> the highest offset written so far
    open_batches: dict[str, int] = {}  # source -> batches handed out and not yet written
    spark_batches: set[int] = set()  # micro-batch ids handed out (Spark's say no offsets)
    ordered = sorted(events, key=lambda e: e.t)
    for e, origin in zip(ordered, origins(ordered, injects), strict=True):
        if _coordinator_moved(e) and origin is Origin.SYSTEM:
            found.add(Condition.COORDINATOR_MOVED)
        match e.kind:
            case EventKind.BATCH:
                if any(written.get(p, -1) >= first for p, first in e.offsets.items()):
                    found.add(Condition.REDELIVERED)
                if not e.offsets and e.batch is not None:
                    if e.batch in spark_batches:  # replayed from the checkpoint
                        found.add(Condition.REDELIVERED)
                    spark_batches.add(e.batch)
                open_batches[e.source] = open_batches.get(e.source, 0) + 1
            case EventKind.WRITTEN:
                for p, last in e.offsets.items():
                    written[p] = max(written.get(p, -1), last)
                open_batches[e.source] = max(0, open_batches.get(e.source, 0) - 1)
            case EventKind.COMMIT_FAILED:
                found.add(Condition.COMMIT_FAILED)
            case EventKind.KAFKA_ERROR if "OffsetCommit" in e.detail:
                found.add(Condition.COMMIT_FAILED)
            case EventKind.WRITE_FAILED:
                found.add(Condition.WRITE_RETRIED)
            case EventKind.MONGO_RETRIED:
                found.add(Condition.DRIVER_RETRIED)
            case EventKind.EXECUTOR_LOST:
                found.add(Condition.EXECUTOR_LOST)
            case EventKind.TASK_RETRIED:  # Spark ran a write task again: its records again
                found.add(Condition.REDELIVERED)
            case EventKind.CRASH if e.detail == "mid_write":
                found.add(Condition.KILLED_MID_WRITE)
            case EventKind.RUNTIME_EXIT if open_batches.get(e.consumer, 0) and KILLED in e.detail:
                found.add(Condition.KILLED_MID_WRITE)
            case EventKind.ASSIGNED if any(
                n for source, n in open_batches.items() if source != e.source
            ):
                found.add(Condition.MOVED_IN_FLIGHT)
    starts = [e for e in events if e.kind is EventKind.RUNTIME_START]
    if len(starts) > len({e.consumer for e in starts}):
        found.add(Condition.RESTARTED)
    points = frozenset(e.detail for e in events if e.kind is EventKind.CRASH)
    return Exercised(frozenset(found), points)


def _coordinator_moved(e: HistoryEvent) -> bool:
    if e.kind is EventKind.KAFKA_ERROR:
        return e.detail.startswith(COORDINATOR_CODES)
    return e.kind is EventKind.CONSUMER_LOG and any(w in e.detail for w in COORDINATOR_WORDS)


def unreached(seen: Iterable[Exercised]) -> tuple[Condition, ...]:
    """The conditions no lane reached."""
    reached = set().union(*(s.conditions for s in seen))
    return tuple(c for c in Condition if c not in reached)

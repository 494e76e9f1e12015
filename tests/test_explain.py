"""Whether a lane's duplicates are explained by its history and its ledger (pure)."""

from __future__ import annotations

from typing import Any

from harness.checker.explain import Explanation, handed_out_again
from harness.history.events import EventKind, HistoryEvent


def ev(t: float, kind: EventKind, source: str = "listener-0", **fields: Any) -> HistoryEvent:
    return HistoryEvent(t=t, kind=kind, source=source, **fields)


def test_a_batch_killed_before_its_write_ended_and_handed_out_again_counts_its_overlap() -> None:
    events = [
        ev(1, EventKind.BATCH, batch=1, count=50, offsets={0: 0}),
        ev(2, EventKind.WRITTEN, batch=1, count=50, offsets={0: 49}),
        ev(3, EventKind.BATCH, batch=2, count=50, offsets={0: 50}),  # killed mid-write
        ev(4, EventKind.BATCH, batch=1, count=50, offsets={0: 50}),  # the restarted process
        ev(5, EventKind.WRITTEN, batch=1, count=50, offsets={0: 99}),
        ev(6, EventKind.BATCH, batch=1, count=20, offsets={1: 0}, source="listener-1"),
        ev(7, EventKind.WRITTEN, batch=1, count=20, offsets={1: 19}, source="listener-1"),
    ]
    assert handed_out_again(events) == 50  # offsets 50-99 of partition 0, twice


def test_a_write_tried_again_counts_its_batch_once_more() -> None:
    events = [
        ev(1, EventKind.BATCH, batch=1, count=30, offsets={0: 0, 1: 0}),
        ev(2, EventKind.WRITE_FAILED, batch=1, detail="NotWritablePrimary"),
        ev(3, EventKind.WRITTEN, batch=1, count=30, offsets={0: 9, 1: 19}),
    ]
    assert handed_out_again(events) == 30


def test_spark_batches_replayed_or_with_a_lost_executor_count_their_records_again() -> None:
    events = [
        ev(1, EventKind.BATCH, "spark", batch=3),
        ev(2, EventKind.WRITTEN, "spark", batch=3, count=40, offsets={0: 39}),
        ev(3, EventKind.BATCH, "spark", batch=3),  # replayed from the checkpoint
        ev(4, EventKind.WRITTEN, "spark", batch=3, count=40, offsets={0: 39}),
        ev(5, EventKind.BATCH, "spark", batch=4),
        ev(6, EventKind.EXECUTOR_LOST, "spark-executor", batch=4, detail="mid_write"),
        ev(7, EventKind.WRITTEN, "spark", batch=4, count=30, offsets={0: 69}),
    ]
    assert handed_out_again(events) == 70
    users_job = [
        ev(1, EventKind.BATCH, "spark", batch=0),
        ev(2, EventKind.WRITTEN, "spark", batch=0),
    ]
    assert handed_out_again(users_job) is None  # it does not say what it wrote


def test_a_write_task_spark_ran_again_counts_its_records_again_once() -> None:
    # A worker lost with its executor (the engine killed its container): no crash point of the
    # lab's fired, and the task's second attempt says so itself.
    events = [
        ev(1, EventKind.BATCH, "spark", batch=5),
        ev(2, EventKind.TASK_RETRIED, "spark", batch=5, count=106, detail="task 1 attempt 1"),
        ev(3, EventKind.WRITTEN, "spark", batch=5, count=300, offsets={0: 99, 1: 99, 2: 99}),
    ]
    assert handed_out_again(events) == 106
    # A crash point's executor loss is the same task's rerun: counted once, not twice.
    lost = [
        ev(1, EventKind.BATCH, "spark", batch=4),
        ev(2, EventKind.EXECUTOR_LOST, "spark", batch=4, detail="mid_write"),
        ev(3, EventKind.TASK_RETRIED, "spark", batch=4, count=30, detail="task 0 attempt 1"),
        ev(4, EventKind.WRITTEN, "spark", batch=4, count=30, offsets={0: 69}),
    ]
    assert handed_out_again(lost) == 30


def test_duplicates_beyond_redeliveries_and_resends_fail_the_run() -> None:
    explained = Explanation(handed_out_again=40, resends=5)
    assert explained.failure(45) is None and explained.unexplained(45) == 0
    assert explained.unexplained(50) == 5
    assert explained.failure(50) == (
        "50 duplicates, 5 unexplained: the history shows 40 records handed out more than once "
        "and the ledger 5 resends and source copies"
    )
    assert Explanation(handed_out_again=None, resends=0).failure(10) is None

"""Who made each event of a history (pure): the lab, the lab in a server's place (an error code
its fault proxy or a failpoint answered with), or the systems - and the report tells them apart."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from harness.faults.kinds import injects
from harness.history.events import KILLED, EventKind, HistoryEvent
from harness.history.origin import Origin, origins
from harness.report.story import anomaly_sentences, variant_sentences
from harness.report.timeline import Mark, timeline_row
from tests.test_report import in_memory_run


def ev(t: float, kind: EventKind, source: str = "listener-0", **fields: Any) -> HistoryEvent:
    return HistoryEvent(t=t, kind=kind, source=source, **fields)


def window(kind: str, start: float, end: float) -> list[HistoryEvent]:
    return [
        ev(start, EventKind.FAULT_START, "nemesis", fault=f"{kind}#1", detail=kind),
        ev(end, EventKind.FAULT_END, "nemesis", fault=f"{kind}#1", detail=kind),
    ]


def test_an_error_the_proxy_answered_is_the_labs_and_the_same_error_outside_is_kafkas() -> None:
    storm = window("commit-failure", 10, 20)
    inside = ev(15, EventKind.KAFKA_ERROR, detail="NOT_COORDINATOR OffsetCommit")
    failed = ev(15.1, EventKind.COMMIT_FAILED, detail="NOT_COORDINATOR")
    outside = ev(25, EventKind.KAFKA_ERROR, detail="NOT_COORDINATOR OffsetCommit")
    events = [storm[0], inside, failed, storm[1], outside]
    assert origins(events, injects("listener")) == [
        Origin.LAB, Origin.INJECTED, Origin.INJECTED, Origin.LAB, Origin.SYSTEM,
    ]  # fmt: skip
    # A command consumer's own words about it too: the proxy answered its commits as well.
    said = ev(16, EventKind.CONSUMER_LOG, "observer", detail="command-0: This is not the correct")
    assert origins([*storm, said], injects("command"))[-1] is Origin.INJECTED
    # Spark's commit is its checkpoint: the lab made the directory unwritable and Spark's own
    # write failed - Spark's error, not one the lab made up.
    spark = ev(15, EventKind.COMMIT_FAILED, "spark", detail="... /commits/4 ...")
    assert origins([*storm, spark], injects("spark"))[-1] is Origin.SYSTEM


def test_a_failpoints_error_is_the_labs_and_a_restarted_servers_is_mongodbs() -> None:
    failed = ev(5, EventKind.WRITE_FAILED, detail="NotWritablePrimary")
    assert origins([*window("mongo-failcommand", 1, 9), failed], injects("listener"))[-1] == (
        Origin.INJECTED
    )
    assert origins([*window("mongo-restart", 1, 9), failed], injects("listener"))[-1] == (
        Origin.SYSTEM
    )
    # What the driver saw: the failpoint's code, the proxy's reset of an ack-lost - the lab's;
    # a timeout during a cut - the client's own (the lab only held the bytes).
    seen = ev(5, EventKind.MONGO_ERROR, detail="insert: connection reset")
    for kind in ("mongo-failcommand", "mongo-ack-lost"):
        assert origins([*window(kind, 1, 9), seen], injects("spark"))[-1] is Origin.INJECTED
    assert origins([*window("network", 1, 9), seen], injects("listener"))[-1] is Origin.SYSTEM


def test_a_kill_is_the_labs_and_a_consumer_that_exits_by_itself_is_not() -> None:
    events = [
        ev(1, EventKind.RUNTIME_START, "harness", detail="listener-0 pid 7"),
        ev(2, EventKind.CRASH, detail="after_write_before_commit", fault="crash"),
        ev(2.1, EventKind.RUNTIME_EXIT, "harness", detail=f"listener-0 {KILLED}"),
        ev(3, EventKind.RUNTIME_EXIT, "harness", detail="listener-1 exited with status 1"),
        ev(4, EventKind.ASSIGNED),
    ]
    assert origins(events, injects("listener")) == [
        Origin.LAB, Origin.LAB, Origin.LAB, Origin.SYSTEM, Origin.SYSTEM,
    ]  # fmt: skip


def test_the_timeline_and_the_story_keep_injected_errors_apart_from_the_brokers() -> None:
    run = in_memory_run()
    naive = run.variants[0]
    storm = window("commit-failure", 8, 9)
    proxy = ev(8.5, EventKind.KAFKA_ERROR, detail="NOT_COORDINATOR OffsetCommit")
    broker = ev(12, EventKind.KAFKA_ERROR, detail="COORDINATOR_LOAD_IN_PROGRESS OffsetCommit")
    events = tuple(sorted((*naive.events, *storm, proxy, broker), key=lambda e: e.t))
    naive = replace(naive, events=events)
    row = timeline_row(naive, run.started_at)
    assert [e.error for e in row.broker_errors] == ["COORDINATOR_LOAD_IN_PROGRESS OffsetCommit"]
    assert [e.error for e in row.injected] == ["kafka-error NOT_COORDINATOR OffsetCommit"]
    said = " ".join(variant_sentences(naive, row))
    assert "1 coordinator errors (1 COORDINATOR_LOAD_IN_PROGRESS)" in said
    assert "1 errors its consumers reported were the lab's, not a server's" in said
    assert "emulated: 1 kafka-error" in said


def test_the_workload_held_for_a_fault_to_come_is_the_labs_and_the_story_says_so() -> None:
    run = in_memory_run()
    naive = run.variants[0]
    t0 = run.started_at
    held = [
        ev(t0 + 7, EventKind.WORKLOAD_HELD, "harness",
           detail="the lab holds the workload at record 140: kill waits for pause's end"),
        ev(t0 + 11, EventKind.WORKLOAD_HELD, "harness", detail="the lab lets the workload go on"),
    ]  # fmt: skip
    assert origins(held, injects("listener")) == [Origin.LAB, Origin.LAB]
    naive = replace(naive, events=tuple(sorted((*naive.events, *held), key=lambda e: e.t)))
    said = " ".join(variant_sentences(naive, timeline_row(naive, t0)))
    assert (
        "the lab held the workload's last records back 1 time(s), first from +7.0 s to +11.0 s"
        in said
    )
    assert "(kill waits for pause's end): its doing, not the systems'" in said


def test_a_copy_written_after_a_window_ended_says_how_long_after() -> None:
    # A message retaken once its claim expired (dedup-log after a step-down): outside the
    # window, and the story says which window it followed, not that there was none.
    run = in_memory_run()
    row = timeline_row(run.variants[0], run.started_at)
    late = replace(
        row, deaths=(), anomalies=(Mark("duplicate", 14.2, None),), counts={"duplicate": 1}
    )
    assert anomaly_sentences(late, "duplicate") == [
        "listener/naive: 1 of 1 duplicates were written at +14.2 s, outside any fault window, "
        "2.2 s after broker-rolling-restart#1 ended."
    ]
    early = replace(late, anomalies=(Mark("duplicate", 1.0, None),))
    assert "with no fault window before them" in anomaly_sentences(early, "duplicate")[0]

"""The run's wait loop, driven without servers: the lanes are histories this test writes as a
consumer would (BATCH, then COMMIT with offsets), the producer is a summary it hands over, the
nemesis plays a producer burst (which touches no server)."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harness.faults.base import Target
from harness.faults.kinds import parse_fault
from harness.faults.nemesis import Nemesis
from harness.faults.schedule import plan
from harness.history.events import EventKind, HistoryTail, HistoryWriter, read_history
from harness.history.windows import fault_windows
from harness.pipeline.runtimes import LISTENER
from harness.pipeline.supervisor import RuntimeFailed
from harness.run.loop import (
    RunTimeout,
    Watch,
    await_ready,
    reserve_held,
    wait_until_consumed,
    wrote_records,
)
from harness.workload.producer import ProduceSummary, Reserve

ENDS = {0: 40, 1: 60}  # the next offset after the last acknowledged record, per partition


@dataclass
class Producer:
    acked: int = 0
    summary: ProduceSummary | None = None

    def done(self) -> bool:
        return self.summary is not None


@dataclass
class Consumer:
    """Each check, one batch of ``step`` records per partition, committed at once; with
    ``stuck`` it never commits past ``stuck``."""

    history: HistoryWriter
    producer: Producer
    step: int = 20
    stuck: int | None = None
    next: dict[int, int] = field(default_factory=dict)
    checks: int = 0

    def check(self) -> None:
        self.checks += 1
        if self.checks == 3:  # the producer finishes while the consumers work
            self.producer.summary = ProduceSummary(produced=100, acked=100, failed=0, seconds=1)
        self.producer.acked = min(100, self.checks * 30)
        self.history.record(EventKind.BATCH, count=self.step)
        self.history.record(EventKind.WRITTEN, count=self.step)
        for p, end in ENDS.items():
            at = min(end, self.next.get(p, 0) + self.step)
            self.next[p] = at if self.stuck is None else min(at, self.stuck)
        self.history.record(EventKind.COMMIT, offsets=dict(self.next))


def lane(tmp_path: Path, label: str) -> tuple[Watch, HistoryWriter]:
    directory = tmp_path / label
    harness = HistoryWriter(directory, "harness", label)
    watch = Watch(label, HistoryTail(directory), harness, directory / "logs", EventKind.ASSIGNED)
    return watch, HistoryWriter(directory, "listener-0", label)


def nemesis(tmp_path: Path, watches: list[Watch], faults: list[dict]) -> Nemesis:
    parsed = tuple(parse_fault(f, f"f{i}") for i, f in enumerate(faults))
    targets = [Target(HistoryWriter(w.tail.directory, "nemesis", w.label), None, tmp_path, LISTENER)  # type: ignore[arg-type]
               for w in watches]  # fmt: skip
    # A producer burst acts on no server and no consumer: the nemesis needs no environment.
    return Nemesis(None, plan(parsed, 1), targets)  # type: ignore[arg-type]


def test_it_returns_once_every_lane_committed_past_every_acknowledged_record(
    tmp_path: Path,
) -> None:
    producer = Producer()
    (fast, fast_out), (slow, slow_out) = lane(tmp_path, "fast"), lane(tmp_path, "slow")
    consumers = [Consumer(fast_out, producer, step=30), Consumer(slow_out, producer, step=10)]
    burst = {"kind": "poison", "start_event": 10, "events": 50, "fraction": 0.1}
    summary = wait_until_consumed(
        [fast, slow], consumers, producer, nemesis(tmp_path, [fast, slow], [burst]),
        lambda: dict(ENDS), timeout=30, progress=lambda _m: None,
    )  # fmt: skip
    assert summary.acked == 100
    assert fast.committed == ENDS and slow.committed == ENDS
    assert consumers[1].checks == 6  # the slow lane needs 60 / 10 batches; the loop waited
    for watch in (fast, slow):
        events = read_history(watch.tail.directory)
        assert [e.kind for e in events].count(EventKind.CAUGHT_UP) == 1
        assert [w.name for w in fault_windows(events)] == ["f0"]  # the burst played out


def test_a_lane_that_never_catches_up_times_out_naming_it(tmp_path: Path) -> None:
    producer = Producer()
    (good, good_out), (stuck, stuck_out) = lane(tmp_path, "good"), lane(tmp_path, "stuck")
    consumers = [Consumer(good_out, producer), Consumer(stuck_out, producer, stuck=30)]
    with pytest.raises(RunTimeout) as caught:
        wait_until_consumed(
            [good, stuck], consumers, producer, nemesis(tmp_path, [good, stuck], []),
            lambda: dict(ENDS), timeout=1.5, progress=lambda _m: None,
        )  # fmt: skip
    message = str(caught.value)
    assert "stuck committed {0: 30, 1: 30} of {0: 40, 1: 60} (see" in message
    assert "good committed" not in message
    assert good.finished and not stuck.finished


@dataclass
class Chain:
    """A nemesis as the reserve sees it: what waits for another fault's window."""

    awaiting: str = ""


def test_the_reserve_flows_unless_a_fault_waits_for_a_window_and_the_lanes_hear_it_held(
    tmp_path: Path,
) -> None:
    producer, chain = Producer(acked=90), Chain("kill waits for pause's end")
    (watch, _) = lane(tmp_path, "a")
    reserve = Reserve(100, threading.Event())
    held = reserve_held(reserve, chain, producer, [watch], False)  # type: ignore[arg-type]
    assert not reserve.flowing.is_set() and not held  # the producer is not at it yet
    producer.acked = 100
    held = reserve_held(reserve, chain, producer, [watch], held)  # type: ignore[arg-type]
    assert not reserve.flowing.is_set() and held
    chain.awaiting = ""
    held = reserve_held(reserve, chain, producer, [watch], held)  # type: ignore[arg-type]
    assert reserve.flowing.is_set() and not held
    said = [
        e.detail for e in read_history(watch.tail.directory) if e.kind is EventKind.WORKLOAD_HELD
    ]
    assert said == [
        "the lab holds the workload at record 100: kill waits for pause's end",
        "the lab lets the workload go on",
    ]


def test_the_fault_clock_starts_once_every_lane_wrote_a_batch(tmp_path: Path) -> None:
    producer = Producer()
    (first, first_out), (idle, _) = lane(tmp_path, "first"), lane(tmp_path, "idle")
    timed = {"kind": "consumer-kill", "at": 0}  # due at +0 s of the schedule's clock
    fault_nemesis = nemesis(tmp_path, [first, idle], [timed])
    with pytest.raises(RunTimeout):
        wait_until_consumed(
            [first, idle], [Consumer(first_out, producer)], producer, fault_nemesis,
            lambda: dict(ENDS), timeout=1.0, progress=lambda _m: None,
        )  # fmt: skip
    # The idle lane never wrote a batch: the clock never started, the kill never fired.
    assert first.running and not idle.running
    assert not any(e.kind is EventKind.FAULT_START for e in read_history(first.tail.directory))


def test_a_lane_runs_once_it_wrote_records_not_an_empty_batch(tmp_path: Path) -> None:
    # Spark's first micro-batch is often empty: its executors' Python workers have not started,
    # and a fault clock started there spent commit-failure-window's window on Spark's slow
    # first batch of records, so that no commit failed (docs/scenarios.md).
    watch, spark = lane(tmp_path, "spark")
    spark.record(EventKind.BATCH, batch=0)
    spark.record(EventKind.WRITTEN, batch=0, count=0)
    watch.read()
    assert not watch.running
    spark.record(EventKind.WRITTEN, batch=1, count=249)
    watch.read()
    assert watch.running
    assert wrote_records(spark.record(EventKind.WRITTEN, batch=2))  # a user's job: no count
    assert wrote_records(spark.record(EventKind.DEAD_LETTER, count=3))
    assert not wrote_records(spark.record(EventKind.DEAD_LETTER, count=0))
    assert not wrote_records(spark.record(EventKind.BATCH, count=250))


class Failing:
    """A supervisor whose consumer keeps failing: its check says so."""

    def check(self) -> None:
        raise RuntimeFailed("listener-0 failed 3 times in a row; last lines: boom")


def test_a_consumer_that_keeps_failing_before_it_is_ready_ends_the_wait_at_once(
    tmp_path: Path,
) -> None:
    watch, _ = lane(tmp_path, "naive")
    started = time.monotonic()
    with pytest.raises(RuntimeFailed, match="boom"):
        await_ready([watch], [Failing()], what="the consumers", timeout=60)
    assert time.monotonic() - started < 5  # not the readiness timeout


def test_a_lane_stopped_for_good_is_not_waited_for_and_did_not_catch_up(tmp_path: Path) -> None:
    producer = Producer()
    (good, good_out), (gone, gone_out) = lane(tmp_path, "good"), lane(tmp_path, "gone")
    # The gone lane's query failed on every restart at its first batch (a Spark lane's driver
    # says so), and never commits past 20.
    gone_out.record(EventKind.WRITTEN, count=20)
    gone_out.record(EventKind.FAILED_FOR_GOOD, detail="the query failed 3 times in a row")
    consumers = [Consumer(good_out, producer)]
    summary = wait_until_consumed(
        [good, gone], consumers, producer, nemesis(tmp_path, [good, gone], []),
        lambda: dict(ENDS), timeout=30, progress=lambda _m: None,
    )  # fmt: skip
    assert summary.acked == 100 and good.committed == ENDS
    assert gone.failed == "the query failed 3 times in a row" and gone.finished
    kinds = [e.kind for e in read_history(gone.tail.directory)]
    assert EventKind.CAUGHT_UP not in kinds


def test_a_connect_lane_that_never_catches_up_says_its_last_state(tmp_path: Path) -> None:
    producer = Producer()
    stuck, stuck_out = lane(tmp_path, "connect-default")
    # Connect's REST, as the lane's watcher records it: the task held after a rebalance.
    stuck_out.record(EventKind.CONNECTOR_STATE, detail="task 0 RUNNING on 127.0.0.1:8083")
    stuck_out.record(EventKind.CONNECTOR_STATE, detail="task 0 UNASSIGNED on 127.0.0.1:8083")
    # Another task's later word does not hide it; a task RUNNING is not named.
    stuck_out.record(EventKind.CONNECTOR_STATE, detail="task 1 RUNNING on 127.0.0.1:8083")
    with pytest.raises(RunTimeout) as caught:
        wait_until_consumed(
            [stuck], [Consumer(stuck_out, producer, stuck=30)], producer,
            nemesis(tmp_path, [stuck], []), lambda: dict(ENDS), timeout=1.5,
            progress=lambda _m: None,
        )  # fmt: skip
    message = str(caught.value)
    assert ", task 0 UNASSIGNED on 127.0.0.1:8083 (see" in message, message
    assert "task 1" not in message


def test_a_lane_never_ready_ends_the_wait_naming_it_and_its_logs(tmp_path: Path) -> None:
    (ready, ready_out), (late, _) = lane(tmp_path, "idempotent"), lane(tmp_path, "connector-sink")
    ready_out.record(EventKind.ASSIGNED)
    with pytest.raises(RunTimeout) as caught:
        await_ready([ready, late], [], what="the consumers of every lane", timeout=1.0)
    message = str(caught.value)
    assert message.startswith("the consumers of every lane not ready within 1s: "), message
    assert f"connector-sink (see {tmp_path / 'connector-sink' / 'logs'})" in message
    assert "idempotent" not in message

"""Which planned faults fired, from a variant's history; and, before a run, which cannot or may
not fire with the scenario's workload (pure: no servers)."""

from __future__ import annotations

from typing import Any

import pytest

from harness.history.events import EventKind, HistoryEvent
from harness.results.fired import unfired
from harness.scenario import parse_scenario, preflight

T0 = 1_700_000_000.0


def ev(t: float, kind: EventKind, source: str = "listener-0", **fields: Any) -> HistoryEvent:
    return HistoryEvent(t=T0 + t, kind=kind, source=source, **fields)


def scenario(*faults: dict[str, Any], events: int = 600, batch_size: int = 250) -> Any:
    return parse_scenario(
        {
            "name": "s",
            "workload": {"events": events, "partitions": 3},
            "pipeline": {"batch_size": batch_size},
            "variants": ["naive"],
            "faults": list(faults),
        }
    )


CRASH = {"kind": "consumer-crash", "point": "after_write_before_commit", "at_batch": 2}
KILL = {"kind": "broker-kill", "at": 5, "duration": 2}
BURST = {"kind": "poison", "start_event": 400, "events": 100, "fraction": 0.5}


def batches(n: int) -> list[HistoryEvent]:
    return [ev(1.0 + i, EventKind.BATCH, batch=i, count=100) for i in range(n)]


def test_a_crash_point_never_reached_did_not_fire() -> None:
    s = scenario(CRASH)
    (missed,) = unfired(s.faults, [*batches(1), ev(3, EventKind.CAUGHT_UP, "harness")], 600)
    assert (missed.name, missed.kind) == ("consumer-crash#1", "consumer-crash")
    assert missed.reason == (
        "its point (after_write_before_commit of batch 2) was never reached: a consumer "
        "handled at most 1 batches"
    )
    crashed = [*batches(2), ev(2.5, EventKind.CRASH, batch=2, fault="consumer-crash#1")]
    assert unfired(s.faults, crashed, 600) == ()


def test_a_window_that_opened_after_the_work_was_done_did_not_fire() -> None:
    s = scenario(KILL)
    clock = ev(1.0, EventKind.SCHEDULE_START, "nemesis")
    done = ev(4.0, EventKind.CAUGHT_UP, "harness")
    late = ev(6.0, EventKind.FAULT_START, "nemesis", fault="broker-kill#1")
    (missed,) = unfired(s.faults, [clock, done, late], 600)
    assert missed.reason == (
        "it started at +5.0s, after the work was done (the variant had consumed everything "
        "at +3.0s)"
    )
    (never,) = unfired(s.faults, [clock, done], 600)
    assert never.reason.startswith("it was due after the run's work was done")
    in_time = ev(2.0, EventKind.FAULT_START, "nemesis", fault="broker-kill#1")
    assert unfired(s.faults, [clock, in_time, done], 600) == ()


def test_a_commit_failure_that_failed_no_request_of_the_variant_did_not_fire() -> None:
    # Its window opened in time, but closed before the variant's next commit (Spark's first
    # batch of records outlasting it): it hit nothing, and says so rather than being judged.
    window = {"kind": "commit-failure", "at": 1, "duration": 15, "apis": ["OffsetCommit"]}
    s = scenario(window)
    clock = ev(20.0, EventKind.SCHEDULE_START, "nemesis")
    opened = ev(22.0, EventKind.FAULT_START, "nemesis", fault="commit-failure#1")
    closed = ev(37.4, EventKind.FAULT_END, "nemesis", fault="commit-failure#1")
    late_commit = ev(39.2, EventKind.COMMIT, "spark", offsets={0: 83})
    done = ev(70.0, EventKind.CAUGHT_UP, "harness")
    (missed,) = unfired(s.faults, [clock, opened, closed, late_commit, done], 600)
    assert missed.reason == (
        "none of the variant's OffsetCommit requests failed while it held (+2.0s to +17.4s)"
    )
    failed = ev(37.5, EventKind.COMMIT_FAILED, "spark", batch=1, detail="commits/.1: denied")
    assert unfired(s.faults, [clock, opened, closed, failed, done], 600) == ()
    # A listener's: the group error its client logged for one of the fault's APIs.
    logged = ev(25.0, EventKind.KAFKA_ERROR, detail="NOT_COORDINATOR OffsetCommit")
    assert unfired(s.faults, [clock, opened, logged, closed, done], 600) == ()
    other_api = ev(25.0, EventKind.KAFKA_ERROR, detail="NOT_COORDINATOR Heartbeat")
    assert len(unfired(s.faults, [clock, opened, other_api, closed, done], 600)) == 1


def test_a_burst_beyond_the_workload_did_not_fire() -> None:
    s = scenario(BURST)
    assert unfired(s.faults, [], 600) == ()
    (missed,) = unfired(s.faults, [], 300)
    assert missed.reason == "the workload has 300 events and the burst starts at event 400"


def test_preflight_refuses_what_cannot_fire_and_warns_of_what_may_not() -> None:
    assert preflight(scenario(CRASH, KILL, BURST)) == preflight(scenario())  # all reachable
    small = preflight(scenario(CRASH, KILL, BURST, events=200))
    assert small.impossible == (("faults[2]", "poison#3 starts at event 400 of a workload of "
                                 "200 events"),)  # fmt: skip
    (doubt,) = small.doubtful
    assert doubt.startswith("consumer-crash#1 is planned at batch 2, but a consumer may read its")
    assert "give at least 500 events, or a smaller pipeline.batch_size" in doubt
    tiny = preflight(scenario(CRASH, events=1))
    assert tiny.impossible == (
        ("faults[0]", "consumer-crash#1 is planned at batch 2, and a consumer gets at most 1 "
         "of the 1 events"),
    )  # fmt: skip
    mid = {"kind": "consumer-crash", "point": "mid_write", "after_docs": 300}
    assert (
        "no batch holds more than pipeline.batch_size (250)"
        in (preflight(scenario(mid)).impossible[0][1])
    )
    late = {"kind": "broker-bounce", "at_event": 700}
    assert preflight(scenario(late)).impossible[0][1] == (
        "broker-bounce#1 starts once 700 records were acknowledged, and the workload has 600"
    )


@pytest.mark.parametrize("events", [600, 2000])
def test_a_random_crash_is_never_doubted(events: int) -> None:
    anywhere = {**CRASH, "at_batch": 9, "probability": 0.5}
    assert preflight(scenario(anywhere, events=events)).doubtful == ()


def test_a_mid_write_crash_needs_that_many_records() -> None:
    mid = {"kind": "consumer-crash", "point": "mid_write", "after_docs": 150}
    assert preflight(scenario(mid, events=600)).impossible == ()
    assert preflight(scenario(mid, events=100)).impossible == (
        ("faults[0]", "consumer-crash#1 waits for 150 documents of one batch, and a consumer "
         "gets at most 100 of the 100 events"),
    )  # fmt: skip


def test_a_lane_stopped_for_good_is_not_held_to_what_came_after() -> None:
    s = scenario(CRASH, KILL)
    clock = ev(0.5, EventKind.SCHEDULE_START, "nemesis")
    stopped = ev(2.0, EventKind.FAILED_FOR_GOOD, "spark", detail="E11000 on every replay")
    # Its crash point could no longer be reached, and the kill was due after its stop.
    assert unfired(s.faults, [clock, *batches(1), stopped], 600) == ()
    # The same run had the lane gone on: both would be faults that did not fire.
    missed = unfired(s.faults, [clock, *batches(1)], 600)
    assert [m.name for m in missed] == ["consumer-crash#1", "broker-kill#2"]

"""The fault schedule (pure): the same scenario and seed give the same plan; each kind expands
into the steps the nemesis will take."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, ClassVar, cast

import pytest

from harness.environment.base import Environment
from harness.faults import nemesis as nemesis_module
from harness.faults.base import END, START, Actor, Context, FaultStuck, Step, Target, Timed
from harness.faults.families.broker import Do
from harness.faults.families.consumer import ConsumerFreeze
from harness.faults.families.mongo import OFF as FAILPOINT_OFF
from harness.faults.families.mongo import ON as FAILPOINT_ON
from harness.faults.families.mongo_restart import AWAIT_MONGO, START_MONGO, STOP_MONGO
from harness.faults.families.oplog import OFF as OPLOG_OFF
from harness.faults.families.oplog import ON as OPLOG_ON
from harness.faults.kinds import parse_fault
from harness.faults.nemesis import Nemesis
from harness.faults.schedule import describe, plan
from harness.history.events import EventKind, HistoryWriter, read_history
from harness.history.windows import fault_windows
from harness.pipeline.crash import Crasher, CrashPlan, CrashPoint
from harness.pipeline.runtimes import LISTENER
from harness.records import FieldErrors
from harness.run.runner import reserve_for
from harness.scenario import Scenario, ScenarioError, load_scenario, parse_scenario


def scenario(seed: int, faults: list[dict]) -> Scenario:
    return parse_scenario({"name": "s", "seed": seed, "variants": ["naive"], "faults": faults})


JITTERED = [
    {"kind": "broker-bounce", "at": 3, "jitter": 4, "hard": True},
    {"kind": "network", "link": "consumer-mongo", "action": "cut", "at": 5, "duration": 2,
     "jitter": 3},
    {"kind": "broker-kill", "at_event": 400, "duration": 3, "jitter": 2},
]  # fmt: skip


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another() -> None:
    first = describe(plan(scenario(4, JITTERED).faults, 4))
    again = describe(plan(scenario(4, JITTERED).faults, 4))
    other = describe(plan(scenario(5, JITTERED).faults, 5))
    assert first == again
    assert first != other
    starts = [p.steps[0] for p in plan(scenario(4, JITTERED).faults, 4)]
    bounce_at, network_at = starts[0].at, starts[1].at
    assert bounce_at is not None and network_at is not None
    assert 3 <= bounce_at <= 7 and 5 <= network_at <= 8
    assert starts[2].at_event == 400 and 0 <= starts[2].after <= 2


def test_without_jitter_the_schedule_is_the_file() -> None:
    steps = plan(scenario(1, [{"kind": "broker-bounce", "at": 3}]).faults, 99)[0].steps
    assert [(s.action, s.at, s.after) for s in steps] == [
        (START, 3, 0),
        (Do.AWAIT_TARGET, None, 0),  # named by the cluster, and no other fault holding it
        (Do.STOP, None, 0),
        (Do.AWAIT_STOPPED, None, 0),
        (Do.START, None, 0),
        (Do.AWAIT_READY, None, 0),
        (END, None, 0),
    ]


def test_a_rolling_restart_takes_one_node_at_a_time_and_waits_for_full_replication() -> None:
    fault = parse_fault(
        {"kind": "broker-rolling-restart", "at": 4, "rotations": 2, "interval": 6}, "rr"
    )
    steps = plan((fault,), 1)[0].steps
    assert [(s.action, s.after, s.rotation) for s in steps] == [
        ("start", 0, 0),
        ("await-target", 0, 0),
        ("stop-broker", 0, 0),
        ("await-broker-stopped", 0, 0),
        ("start-broker", 0, 0),
        ("await-broker-ready", 0, 0),
        ("await-replicated", 0, 0),
        ("await-target", 6, 1),  # the interval counts from full replication
        ("stop-broker", 0, 1),
        ("await-broker-stopped", 0, 1),
        ("start-broker", 0, 1),
        ("await-broker-ready", 0, 1),
        ("await-replicated", 0, 1),
        ("end", 0, 0),
    ]
    assert [s.waits for s in steps].count(True) == 8
    assert not any(s.hard for s in steps)


def test_windows_open_and_close_around_their_action() -> None:
    faults = scenario(
        1,
        [
            {"kind": "broker-kill", "at": 2, "duration": 3},
            {"kind": "mongo-failcommand", "at": 1, "duration": 4,
             "commands": ["commitTransaction"], "error_code": 91},
            {"kind": "poison", "start_event": 100, "events": 50, "fraction": 0.2},
            {"kind": "consumer-crash", "point": "mid_write", "after_docs": 3},
        ],
    ).faults  # fmt: skip
    kill, failpoint, poison, crash = plan(faults, 1)
    assert [s.action for s in kill.steps] == [
        START, Do.AWAIT_TARGET, Do.STOP, Do.AWAIT_STOPPED, Do.START,
        Do.AWAIT_READY, END
    ]  # fmt: skip
    assert kill.steps[2].hard and kill.steps[4].after == 3  # down for its duration
    assert [s.action for s in failpoint.steps][1:3] == [FAILPOINT_ON, FAILPOINT_OFF]
    assert [(s.action, s.at_event) for s in poison.steps] == [
        (START, 100), (END, 150)
    ]  # fmt: skip
    assert crash.steps == ()  # armed inside the runtime instead


def test_a_node_another_fault_holds_is_waited_for_until_it_is_back() -> None:
    # Composed faults: explore drew a rolling restart of node 3 and a bounce of node 3 a second
    # later; the bounce started the node again before the restart saw it stopped, and the
    # restart waited for the rest of the run. Now the second waits until the first has the
    # node back (and a node picked when it acts, until the cluster names it).
    restart, bounce = scenario(1, [
        {"kind": "broker-kill", "at": 2, "duration": 5, "broker": 3},
        {"kind": "broker-bounce", "at": 3, "broker": 3, "hard": True},
    ]).faults  # fmt: skip
    context = Context(cast(Environment, None), ())
    first, second = restart.actor(context), bounce.actor(context)
    aim = Step(Do.AWAIT_TARGET, waits=True)
    assert first.holds(aim)
    context.held[3] = restart.name  # what its STOP does
    assert not second.holds(aim)  # node 3 is the restart's until it is back
    first.take(Step(Do.AWAIT_READY, waits=True))  # back: released
    assert context.held == {} and second.holds(aim)
    controller = plan(scenario(1, [{"kind": "broker-pause", "at": 2, "duration": 3,
                                    "broker": "controller"}]).faults, 1)[0]  # fmt: skip
    assert [s.action for s in controller.steps] == [
        START, Do.AWAIT_TARGET, Do.PAUSE, Do.RESUME, END
    ]  # fmt: skip


def test_a_mongodb_restart_and_an_oplog_shrink_expand_into_their_steps() -> None:
    bounce, down, small = plan(
        scenario(1, [
            {"kind": "mongo-restart", "at": 2},
            {"kind": "mongo-restart", "at": 3, "hard": True, "down_for": 5},
            {"kind": "oplog-shrink", "at": 4, "size_mb": 0.5, "duration": 10},
        ]).faults,
        1,
    )  # fmt: skip
    assert [s.action for s in bounce.steps] == [START, AWAIT_MONGO, STOP_MONGO, END]
    assert [(s.action, s.after) for s in down.steps] == [
        (START, 0), (AWAIT_MONGO, 0), (STOP_MONGO, 0), (START_MONGO, 5), (END, 0)
    ]  # fmt: skip
    assert [(s.action, s.after) for s in small.steps] == [
        (START, 0), (OPLOG_ON, 0), (OPLOG_OFF, 10), (END, 0)
    ]  # fmt: skip


def test_two_mongodb_restarts_take_turns() -> None:
    first, second = (
        parse_fault({"kind": "mongo-restart", "at": at, "hard": True, "down_for": 5}, name)
        for at, name in ((1, "first"), (2, "second"))
    )
    context = Context(None, [])  # type: ignore[arg-type]  # holding MongoDB asks no server
    wait = Step(AWAIT_MONGO, waits=True)
    a, b = first.actor(context), second.actor(context)
    assert a.holds(wait) and not b.holds(wait)  # the second waits while the first has it down
    a.undo()  # it is back (nothing was stopped here): the other may have it
    assert b.holds(wait)


def test_a_mongodb_left_down_must_be_killed_and_an_oplog_must_have_a_size() -> None:
    with pytest.raises(FieldErrors) as left_down:
        parse_fault({"kind": "mongo-restart", "at": 1, "down_for": 4}, "m")
    assert "hard: true" in str(left_down.value)
    with pytest.raises(FieldErrors) as sizeless:
        parse_fault({"kind": "oplog-shrink", "at": 1, "size_mb": 0, "duration": -1}, "o")
    assert "size_mb" in str(sizeless.value) and "duration" in str(sizeless.value)


def test_a_burst_past_a_smaller_workload_ends_when_production_does(tmp_path: Path) -> None:
    # `--events 400` on a scenario whose poison burst starts at record 400: the run must not
    # wait for a record count the producer will never reach.
    faults = scenario(1, [{"kind": "poison", "start_event": 400, "events": 200, "fraction": 0.3}])
    history = HistoryWriter(tmp_path, "nemesis", "naive")
    # A producer burst touches neither the servers nor the consumers.
    target = Target(history, supervisor=None, run_dir=tmp_path, runtime=LISTENER)  # type: ignore[arg-type]
    nemesis = Nemesis(env=None, schedule=plan(faults.faults, 1), targets=[target])  # type: ignore[arg-type]
    nemesis.tick(0.5, 400)
    assert not nemesis.done
    nemesis.tick(1.0, 400, produced_all=True)
    assert nemesis.done
    history.close()
    windows = fault_windows(read_history(tmp_path))  # the window is in the history only
    assert [(w.name, w.kind, w.open_ended) for w in windows] == [("poison#1", "poison", False)]


def test_the_schedules_start_in_the_history_is_the_clocks_zero(tmp_path: Path) -> None:
    # Its first tick may come a while after the clock started (the run loop's thread is not
    # alone): the history's zero is when the clock started, not when the tick recorded it, or
    # a fault started at its planned second would look early against it.
    faults = scenario(1, [{"kind": "poison", "start_event": 400, "events": 200, "fraction": 0.3}])
    for name, started in (("given", 1_000.0), ("now less elapsed", None)):
        history = HistoryWriter(tmp_path / name, "nemesis", "naive")
        target = Target(history, supervisor=None, run_dir=tmp_path, runtime=LISTENER)  # type: ignore[arg-type]
        nemesis = Nemesis(env=None, schedule=plan(faults.faults, 1), targets=[target])  # type: ignore[arg-type]
        before = time.time()
        nemesis.tick(2.5, 0, started=started)
        nemesis.tick(3.0, 0, started=started)  # once
        after = time.time()
        history.close()
        starts = [e.t for e in read_history(tmp_path / name) if e.kind is EventKind.SCHEDULE_START]
        assert len(starts) == 1, name
        if started is not None:
            assert starts == [started]
        else:
            assert before - 2.5 <= starts[0] <= after - 2.5


def firing_batches(plan_: CrashPlan, batch_sizes: list[int], tmp_path: Path) -> list[int]:
    """The batches (1-based) in which ``plan_`` fires, written as a runtime writes them: the
    mid_write point after each chunk (cut at ``after_docs``), then the end of the write."""
    crasher = Crasher([plan_], tmp_path / "counts", HistoryWriter(tmp_path / "h", "test"))
    fired = []
    for batch_no, size in enumerate(batch_sizes, 1):
        cuts = sorted({c for c in (plan_.after_docs, size) if 0 < c <= size})
        for written in cuts:
            if crasher.firing(CrashPoint.MID_WRITE, batch_no, written):
                fired.append(batch_no)
        assert not crasher.firing(CrashPoint.AFTER_WRITE_BEFORE_COMMIT, batch_no)
    return fired


def test_a_mid_write_plan_whose_batch_is_too_small_fires_in_the_next_big_enough_one(
    tmp_path: Path,
) -> None:
    freeze = CrashPlan(CrashPoint.MID_WRITE, at_batch=3, after_docs=20, pause_s=12)
    # How many records a batch holds depends on timing: batch 3 held 10 in a slow run.
    assert firing_batches(freeze, [70, 76, 10, 8, 30, 100], tmp_path / "small") == [5]
    assert firing_batches(freeze, [70, 76, 100, 100], tmp_path / "big") == [3]
    assert firing_batches(freeze, [70, 76, 20, 100], tmp_path / "exact") == [3]
    # Once means once; a plan for every 2nd batch from the 2nd carries each miss forward.
    every = CrashPlan(CrashPoint.MID_WRITE, at_batch=2, every=2, times=3, after_docs=5)
    assert firing_batches(every, [9, 3, 9, 9, 9, 4, 2, 9], tmp_path / "every") == [3, 4, 8]


def test_a_fault_after_another_starts_its_clock_when_that_one_ends() -> None:
    faults = scenario(1, [
        {"kind": "consumer-freeze", "name": "pause", "at": 0, "duration": 0.5},
        {"kind": "consumer-kill", "name": "kill", "after": "pause", "at": 0.3},
    ]).faults  # fmt: skip
    schedule = plan(faults, 1)
    assert "kill (consumer-kill): at the end of pause +0.30s start" in describe(schedule)
    # No consumers to act on: what is under test is only when each step is due.
    nemesis = Nemesis(env=None, schedule=schedule, targets=[])  # type: ignore[arg-type]
    nemesis.tick(1000.0, 0)  # long past both faults' ``at`` on the schedule's clock
    assert "pause" in nemesis.under_way() and not nemesis.done  # the kill waits for the thaw
    pause_ended = None  # no later than the pause's end: taken before the tick that ended it
    deadline = time.monotonic() + 10
    while not nemesis.done and time.monotonic() < deadline:
        before = time.monotonic()
        nemesis.tick(1000.0, 0)
        if pause_ended is None and "pause" not in nemesis.under_way():
            pause_ended = before
            assert not nemesis.done  # the kill is not due the moment the pause ends
    assert nemesis.done and pause_ended is not None
    assert time.monotonic() - pause_ended >= 0.3


def test_the_nemesis_names_a_fault_that_waits_for_anothers_window_until_it_ends() -> None:
    faults = scenario(1, [
        {"kind": "consumer-freeze", "name": "pause", "at": 0, "duration": 0.3},
        {"kind": "consumer-kill", "name": "kill", "after": "pause", "at": 0.2},
    ]).faults  # fmt: skip
    nemesis = Nemesis(env=None, schedule=plan(faults, 1), targets=[])  # type: ignore[arg-type]
    # Not before the pause's window opens: it could wait for records a held workload never sends.
    assert nemesis.awaiting == ""
    nemesis.tick(1000.0, 0)
    assert "pause" in nemesis.under_way() and nemesis.awaiting == "kill waits for pause's end"
    deadline = time.monotonic() + 10
    while "pause" in nemesis.under_way() and time.monotonic() < deadline:
        nemesis.tick(1000.0, 0)
    # The pause over, the kill is not due for 0.2 s yet: it waits for its own delay, not a window.
    assert not nemesis.done and nemesis.awaiting == ""


def test_a_paced_workload_keeps_its_last_records_for_a_fault_after_anothers_window() -> None:
    java = load_scenario(Path("scenarios/msk-rolling-upgrade-java.yaml"))
    reserve = reserve_for(java, plan(java.faults, java.seed))
    # The pause's and the hard restarts' 5 s after the window before them, and 15 s more, at
    # 100 records a second: its last 2,000 of 16,000.
    assert reserve is not None and reserve.start == 14_000 and not reserve.flowing.is_set()
    chained = scenario(1, [
        {"kind": "consumer-freeze", "name": "pause", "at": 0, "duration": 1},
        {"kind": "consumer-kill", "name": "kill", "after": "pause", "at": 30},
    ])  # fmt: skip
    paced = replace(chained, rate=100.0)
    # Never the first batch, which starts the faults' clock.
    first = reserve_for(paced, plan(paced.faults, 1))
    assert first is not None and first.start == paced.pipeline.batch_size
    plain = scenario(1, JITTERED)
    assert reserve_for(replace(plain, rate=100.0), plan(plain.faults, 1)) is None


def test_a_thawed_consumer_has_its_aftermath_before_the_run_may_end() -> None:
    # A run stopped at the thaw cut off what the program did next (its stale write, its own
    # "session timed out" line): the run goes on for the freeze's aftermath; a kill has none.
    faults = scenario(1, [
        {"kind": "consumer-freeze", "name": "pause", "at": 0, "duration": 0.2},
        {"kind": "consumer-kill", "name": "kill", "at": 0},
    ]).faults  # fmt: skip
    nemesis = Nemesis(env=None, schedule=plan(faults, 1), targets=[])  # type: ignore[arg-type]
    assert not nemesis.settling
    deadline = time.monotonic() + 20
    while not nemesis.done and time.monotonic() < deadline:
        nemesis.tick(1000.0, 0)
        time.sleep(0.01)
    thawed = time.monotonic()
    assert nemesis.done and not nemesis.busy
    assert nemesis.settling  # the freeze ended under its 5 s aftermath ago
    while nemesis.settling and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not nemesis.settling
    assert time.monotonic() - thawed >= ConsumerFreeze.aftermath_s - 0.5


@dataclass
class _Patient(Actor):
    until: float  # time.monotonic() its wait comes true
    own: bool  # and says so: a deadline of its own

    def take(self, step: Step) -> None:
        pass  # it only waits

    def holds(self, step: Step) -> bool:
        return time.monotonic() >= self.until

    def waits_until(self, step: Step) -> float | None:
        return self.until if self.own else None


@dataclass(frozen=True)
class _Waits(Timed):
    """A fault whose one step waits ``for_s`` seconds from the start (test-only)."""

    kind: ClassVar[str] = "waits"
    name: str
    for_s: float
    own: bool
    at: float | None = 0.0
    at_event: int | None = None
    jitter: float = 0.0

    def steps(self, seed: int) -> tuple[Step, ...]:
        return (self.opening(seed), Step("wait", waits=True), Step(END))

    def actor(self, context: Context) -> Actor:
        return _Patient(time.monotonic() + self.for_s, self.own)

    @classmethod
    def example(cls, at: float, at_event: int | None, duration: float) -> dict[str, Any]:
        return {}


def _play(fault: _Waits, tmp_path: Path) -> None:
    # No server: the environment is only named in a stuck fault's message (its logs' folder).
    env = cast(Environment, SimpleNamespace(directory=tmp_path))
    nemesis = Nemesis(env=env, schedule=plan((fault,), 1), targets=[])
    deadline = time.monotonic() + 10
    while not nemesis.done and time.monotonic() < deadline:
        nemesis.tick(1000.0, 0)
        time.sleep(0.01)
    assert nemesis.done


def test_a_wait_with_a_deadline_of_its_own_outlasts_the_nemesis_s(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # connect-worker-kill waits for Connect's scheduled rebalance, five minutes by default: its
    # wait ends at its own deadline (holds says so), not as a stuck fault at the nemesis's.
    monkeypatch.setattr(nemesis_module, "WAIT_TIMEOUT_S", 0.3)
    started = time.monotonic()
    _play(_Waits("own", for_s=1.0, own=True), tmp_path)
    assert time.monotonic() - started >= 1.0
    with pytest.raises(FaultStuck, match="stuck: wait did not come true within"):
        _play(_Waits("stuck", for_s=1.0, own=False), tmp_path)


@pytest.mark.parametrize(
    ("faults", "problem"),
    [
        ([{"kind": "consumer-kill", "after": "nothing", "at": 1}], "no fault 'nothing'"),
        ([{"kind": "consumer-kill", "name": "k", "after": "k", "at": 1}], "names this fault"),
        ([{"kind": "consumer-kill", "name": "a", "after": "b", "at": 1},
          {"kind": "consumer-kill", "name": "b", "after": "a", "at": 1}], "a -> b -> a: a cycle"),
        ([{"kind": "consumer-kill", "name": "a", "at": 1},
          {"kind": "consumer-kill", "after": "a", "at_event": 5}], "give 'at'"),
        ([{"kind": "consumer-crash", "name": "c", "point": "before-write", "at_batch": 2},
          {"kind": "consumer-kill", "after": "c", "at": 1}], "with a window"),
    ],
)  # fmt: skip
def test_a_fault_after_another_must_name_one_it_can_follow(
    faults: list[dict], problem: str
) -> None:
    with pytest.raises(ScenarioError, match=problem):
        scenario(1, faults)

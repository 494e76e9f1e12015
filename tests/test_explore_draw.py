"""Exploration's pure parts: drawing trials from a seed, shrinking, promises, coverage."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from harness.checker.model import SOURCE, RelayStage
from harness.checker.model import Verdict as Counts
from harness.checker.promise import AT_LEAST_ONCE, EXACTLY_ONCE, NOTHING
from harness.environment.base import BackendAbilities
from harness.environment.options import LOCAL_ABILITIES
from harness.errors import BadInput
from harness.explore import report
from harness.explore.coverage import Condition, exercised, unreached
from harness.explore.explorer import no_room_left, race_replays, replay_s, write_scenario
from harness.explore.inputs import default_variants, plan
from harness.explore.model import (
    Aim,
    Aimed,
    Exploration,
    Finding,
    RunRecord,
    Violation,
    aims,
    same_cause,
    violations,
)
from harness.explore.shrink import (
    PASSED,
    PASSES,
    STILL_FAILS,
    Candidate,
    Replay,
    Tried,
    Verdict,
    pin_to_records,
    reliably,
    shrink,
    simplify_faults,
)
from harness.explore.trial import Explored, Shape, Trial, describe, draw_trial, drawable, refused
from harness.faults.base import Space
from harness.faults.kinds import KINDS, injects, parse_fault
from harness.history.events import EventKind, HistoryEvent
from harness.pipeline.runtimes import CONNECT
from harness.pipeline.variants import make_variant
from harness.results.model import ScenarioResult, VariantResult
from harness.scenario import load_scenario
from harness.workload.generator import generate

LANE = injects("listener")  # what the faults make up on a listener's lane

LOCAL = BackendAbilities("local", (1, 2, 3), link_faults=True)
LISTENER = Explored("listener", ("idempotent", "transactional"), drawable(), LOCAL)
CONNECT_KINDS = ("connect-task-restart", "connect-worker-kill")  # drawn beside a Connect lane
# drawn beside a Debezium source
SOURCE_KINDS = ("postgres-restart", "long-transaction", "slot-behind")


def test_the_same_seed_draws_the_same_trials_and_another_seed_others() -> None:
    first = [draw_trial(LISTENER, 7, n) for n in range(1, 30)]
    assert first == [draw_trial(LISTENER, 7, n) for n in range(1, 30)]
    assert first != [draw_trial(LISTENER, 8, n) for n in range(1, 30)]


def test_drawn_trials_are_scenarios_the_backend_can_play_with_one_to_four_faults() -> None:
    kinds_seen: set[str] = set()
    for n in range(1, 120):
        trial = draw_trial(LISTENER, 3, n)
        assert not refused(trial, LISTENER.backend), trial
        assert 1 <= len(trial.faults) <= 4
        kinds_seen |= {str(f["kind"]) for f in trial.faults}
    # Every family that draws itself and the listener can run is drawn in a few minutes' runs;
    # Connect's draw themselves only where a Connect lane runs, a database's beside its source.
    assert kinds_seen == set(LISTENER.kinds) - {"executor-loss", *CONNECT_KINDS, *SOURCE_KINDS}


def space_for(kind: str) -> Space:
    """A listener trial's space; a Connect fault's, with a Connect lane beside."""
    setting = draw_trial(LISTENER, 1, 1).scenario().setting
    if kind in CONNECT_KINDS:
        setting = replace(setting, runtimes=setting.runtimes | {CONNECT}, consumers=2)
    if kind in SOURCE_KINDS:
        setting = replace(setting, source="debezium")
    return Space(setting, LOCAL, 10.0)


def test_every_family_that_draws_gives_an_entry_its_own_record_accepts() -> None:
    for kind in drawable():
        space = space_for(kind)
        for k in range(20):
            entry = KINDS[kind].draw(random.Random(k), space)
            assert entry is not None
            assert parse_fault({"kind": kind, **entry}, kind).kind == kind


def test_every_drawn_fault_says_what_it_aims_at_for_the_coverage_table() -> None:
    aims: dict[str, set[str]] = {}
    for kind in drawable():
        space = space_for(kind)
        for k in range(40):
            entry = KINDS[kind].draw(random.Random(k), space)
            assert entry is not None
            aims.setdefault(kind, set()).add(parse_fault({"kind": kind, **entry}, kind).aim())
    # Only the producer's resends act on the workload itself; every other family names its target
    # (a poison window, the shapes of its bad records).
    assert {kind for kind, seen in aims.items() if "the workload" in seen} == {"producer-resend"}
    assert all(aim.startswith("bad records: ") for aim in aims["poison"])
    assert aims["broker-kill"] >= {"a node", "the controller", "a group coordinator"}
    assert aims["consumer-kill"] == {"every consumer", "one consumer"}
    assert aims["connect-worker-kill"] == {"a Connect worker"}


def test_a_drawn_connect_worker_kill_is_a_lost_machine_or_a_clean_restart() -> None:
    space = space_for("connect-worker-kill")
    drawn = [KINDS["connect-worker-kill"].draw(random.Random(k), space) for k in range(20)]
    assert {bool(entry["hard"]) for entry in drawn if entry is not None} == {True, False}


def test_a_backend_without_proxies_or_server_control_is_never_given_their_faults() -> None:
    external = BackendAbilities("external", None, link_faults=False, server_control=False)
    explored = replace(LISTENER, backend=external)
    for n in range(1, 60):
        kinds = {f["kind"] for f in draw_trial(explored, 5, n).faults}
        assert not kinds & {"network", "commit-failure", "broker-kill", "mongo-restart"}


def judged(fails: Callable[[Trial], bool]) -> Callable[[Trial, int], Replay]:
    """A replay that always judges, once: it fails or it passes."""
    return lambda t, _at_least: STILL_FAILS if fails(t) else PASSED


def _trial(*faults: Mapping[str, Any]) -> Trial:
    shape = Shape(events=800, keys=100, partitions=3, rate=200.0, batch_size=50, consumers=2)
    return Trial("t", 11, "listener", ("naive", "idempotent"), shape, tuple(faults))


def test_shrinking_keeps_the_one_fault_that_matters_at_its_simplest() -> None:
    crash = {"kind": "consumer-crash", "name": "consumer-crash#2", "point":
             "after_write_before_commit", "at_batch": 3, "after_docs": 7, "times": 2}  # fmt: skip
    trial = _trial(
        {"kind": "broker-kill", "name": "broker-kill#1", "at": 4.5, "duration": 9.0, "broker": 2},
        crash,
        {
            "kind": "network",
            "name": "network#3",
            "at": 2.0,
            "duration": 5.0,
            "link": "consumer-mongo",
            "action": "cut",
        },
    )

    replayed: list[str] = []

    def fails(t: Trial) -> bool:  # the failure needs a crash after the write, and naive
        replayed.append(repr(t.document()))
        return "naive" in t.variants and any(
            f["kind"] == "consumer-crash" and f["point"] == "after_write_before_commit"
            for f in t.faults
        )

    minimal, trail = shrink(
        trial,
        ("naive",),
        judged(fails),
        valid=lambda t: not refused(t, LOCAL),
        out_of_time=lambda: False,
        clock=lambda: 0.0,
    )
    assert minimal.variants == ("naive",)
    assert [dict(f) for f in minimal.faults] == [
        {**crash, "at_batch": 1, "after_docs": 1, "times": 1}
    ]
    assert minimal.shape.events == 50 and minimal.shape.consumers == 1
    assert minimal.shape.partitions == 1
    assert any(not t.kept for t in trail)
    assert len(replayed) == len(set(replayed))  # a candidate that passed is not replayed again


def test_a_poison_window_shrinks_to_the_one_bad_record_that_fails() -> None:
    window = {"kind": "poison", "name": "poison#1", "start_event": 100, "events": 300,
              "fraction": 0.3, "shapes": ["key-as-string", "not-utf8", "tombstone"]}  # fmt: skip

    def bad(t: Trial) -> list[tuple[int, str]]:
        return [(e.seq, str(e.poison)) for e in generate(t.scenario().workload) if e.poison]

    def fails(t: Trial) -> bool:  # a variant that drops a good change for a string key
        return any(shape == "key-as-string" for _, shape in bad(t))

    assert len(bad(_trial(window))) > 50
    minimal, trail = shrink(
        _trial(window),
        ("naive",),
        judged(fails),
        valid=lambda t: not refused(t, LOCAL),
        out_of_time=lambda: False,
        clock=lambda: 0.0,
    )
    ((fault,),) = [minimal.faults]
    assert (fault["events"], fault["shapes"]) == (1, ["key-as-string"])
    assert [shape for _, shape in bad(minimal)] == ["key-as-string"]
    # After the variants and the fault's drop, the window's earliest bad record alone.
    seq, shape = bad(_trial(window))[0]
    assert [t.what for t in trail[1:3]] == [
        f"drop {describe(window)}",
        f"poison#1: only record {seq}, {shape}",
    ]


def test_shrinking_stops_when_time_is_up() -> None:
    trial = _trial({"kind": "consumer-kill", "name": "consumer-kill#1", "at": 3.0})
    calls: list[Trial] = []

    def fails(t: Trial) -> bool:
        calls.append(t)
        return True

    _minimal, trail = shrink(
        trial, ("naive",), judged(fails), valid=lambda t: True,
        out_of_time=lambda: len(calls) >= 2,
        clock=lambda: 0.0,
    )  # fmt: skip
    assert len(calls) == 2 and len(trail) == 2


def test_a_candidate_whose_fault_never_fired_is_tried_again_once_the_trial_changed() -> None:
    # The notebook-07 case: a crash 67 documents into a batch fires only when some batch is that
    # big. Alone it never does here (the run says nothing about it); beside a second crash,
    # which restarts the consumer onto a backlog, it does. At 1 document it always fires.
    mid = {"kind": "consumer-crash", "name": "consumer-crash#1", "point": "mid_write",
           "at_batch": 1, "after_docs": 67, "times": 1}  # fmt: skip
    early = {"kind": "consumer-crash", "name": "consumer-crash#2", "point": "before_write",
             "at_batch": 2, "after_docs": 1, "times": 1}  # fmt: skip
    trial = _trial(mid, early)

    def replay(t: Trial, _at_least: int) -> Replay:
        crash = next((f for f in t.faults if f["point"] == "mid_write"), None)
        if crash is None:
            return PASSED
        if crash["after_docs"] > 40 and len(t.faults) == 1:
            return Replay(Verdict.UNJUDGED, "consumer-crash#1 never fired")
        return STILL_FAILS

    minimal, trail = shrink(trial, ("naive",), replay, valid=lambda t: True,
                            out_of_time=lambda: False, clock=lambda: 0.0)  # fmt: skip
    assert [dict(f) for f in minimal.faults] == [{**mid, "after_docs": 1}]
    tried = [(t.what, t.replay.verdict) for t in trail]
    dropped = tried.index(("drop consumer-crash(point=before_write, at_batch=2, after_docs=1, "
                           "times=1)", Verdict.FAILS))  # fmt: skip
    assert tried[dropped - 1] == ("consumer-crash#1: after_docs 67 -> 1", Verdict.FAILS)
    assert any(v is Verdict.UNJUDGED for _, v in tried[:dropped])
    # Straight after the simplification that made it fire, before the workload's passes.
    assert not any(what.startswith("events") for what, _ in tried[:dropped])


def test_promises_judge_the_counts_they_name() -> None:
    assert make_variant("naive").promise == NOTHING
    assert make_variant("transactional").promise == EXACTLY_ONCE
    assert make_variant("dedup-log").promise.name == AT_LEAST_ONCE.name
    keyed = make_variant("idempotent").promise
    assert "duplicates" not in keyed.under(resends=True).zero
    assert (
        "duplicates"
        in make_variant("idempotent", {"key": "business"}).promise.under(resends=True).zero
    )
    assert "naive" not in default_variants("listener")
    assert "transactional" in default_variants("spark")


def test_bad_explore_input_names_every_problem() -> None:
    with pytest.raises(BadInput) as caught:
        plan(runtime="flink", variants=["nosuch", "{name: dedup-log, key: x}"], kinds=["x"],
             backend=LOCAL, budget="soon", seed=1, out=Path("."))  # fmt: skip
    text = str(caught.value)
    for words in ("--runtime", "nosuch", "dedup-log", "--faults", "--budget"):
        assert words in text


def test_explore_takes_a_connector_its_runtime_beside_and_draws_connects_faults() -> None:
    planned = plan(runtime="listener", variants=["connect-idempotent"], kinds=list(CONNECT_KINDS),
                   backend=LOCAL, budget="60", seed=1, out=Path("."))  # fmt: skip
    trial = draw_trial(planned.explored, 1, 1)
    assert any(r.connect for r in trial.scenario().setting.runtimes)
    assert {str(f["kind"]) for f in trial.faults} <= set(CONNECT_KINDS) and trial.faults
    # A lost worker's tasks are placed again within the trial's time, not Connect's 5 minutes;
    # a trial without a connector keeps the pipeline's own settings.
    delay = "scheduled.rebalance.max.delay.ms"
    assert trial.scenario().pipeline.connect == {delay: 20_000}
    listener_only = plan(runtime="listener", variants=["naive"], kinds=None, backend=LOCAL,
                         budget="60", seed=1, out=Path("."))  # fmt: skip
    assert draw_trial(listener_only.explored, 1, 1).scenario().pipeline.connect == {}
    # A variant that runs on another of the lab's runtimes is still refused.
    with pytest.raises(BadInput, match="--variant connector-sink: does not run on listener"):
        plan(runtime="listener", variants=["connector-sink"], kinds=None, backend=LOCAL,
             budget="60", seed=1, out=Path("."))  # fmt: skip


def _event(t: float, kind: EventKind, source: str = "listener-0", **fields: Any) -> HistoryEvent:
    return HistoryEvent(t=t, kind=kind, source=source, **fields)


def test_coverage_reads_a_redelivery_a_kill_mid_write_and_a_restart() -> None:
    events = [
        _event(1, EventKind.RUNTIME_START),
        _event(2, EventKind.BATCH, offsets={0: 0}),
        _event(3, EventKind.WRITTEN, offsets={0: 49}),
        _event(4, EventKind.BATCH, offsets={0: 50}),
        _event(5, EventKind.RUNTIME_EXIT, source="harness", detail="listener-0 killed by SIGKILL"),
        _event(6, EventKind.RUNTIME_START),
        _event(7, EventKind.BATCH, offsets={0: 40}),
        _event(8, EventKind.WRITTEN, offsets={0: 99}),
    ]
    seen = exercised(events, LANE)
    assert seen.conditions == {
        Condition.REDELIVERED,
        Condition.KILLED_MID_WRITE,
        Condition.RESTARTED,
    }
    assert Condition.COMMIT_FAILED in unreached([seen])


def test_the_seeds_the_planted_bug_tests_use_draw_a_crash_after_the_write_first() -> None:
    # tests/test_explore.py and notebook 07 find the planted bug in their first run: that is
    # what these seeds draw (the budget is the suite's; the search itself is what is tested).
    planted = ("tests.planted_variant:WarmUpInsert",)
    own = ("tests.custom_variant:UpsertByBusinessKey", *planted)  # notebook 07's
    for kinds, seed, variants in ((["consumer-crash", "network", "broker-slow"], 1785, planted),
                                  (["consumer-crash", "network"], 707, own)):  # fmt: skip
        first = draw_trial(Explored("listener", variants, drawable(kinds), LOCAL), seed, 1)
        points = [f.get("point") for f in first.faults]
        assert "after_write_before_commit" in points and len(first.faults) >= 2, first


def test_coverage_reads_a_spark_micro_batch_replayed_from_its_checkpoint() -> None:
    events = [
        _event(1, EventKind.BATCH, source="spark", batch=4),
        _event(2, EventKind.WRITTEN, source="spark", batch=4, offsets={0: 99}),
        _event(3, EventKind.BATCH, source="spark", batch=4),
    ]
    assert Condition.REDELIVERED in exercised(events, LANE).conditions
    assert Condition.REDELIVERED not in exercised(events[:2], LANE).conditions


def test_coverage_counts_each_kind_target_and_variant_drawn_and_fired() -> None:
    trial = draw_trial(LISTENER, 1, 1)
    kill = Aimed("broker-kill#1", "broker-kill", "the controller", "idempotent", fired=True)
    runs = [
        RunRecord(1, trial, 1.0, aimed=(kill, replace(kill, variant="transactional"))),
        RunRecord(2, trial, 1.0, aimed=(replace(kill, fired=False),)),
    ]
    assert aims(runs) == (
        Aim("broker-kill", "the controller", "idempotent", drawn=2, fired=1),
        Aim("broker-kill", "the controller", "transactional", drawn=1, fired=1),
    )
    table = "\n".join(report.coverage(runs))
    assert "| broker-kill | the controller | 1/2 | 1/1 |" in table


def test_a_command_consumer_is_explored_without_the_crash_points_it_cannot_take() -> None:
    own = {"name": "command", "label": "mine", "command": "sh -c true", "instances": 2}
    own["sink"] = {"collection": "landed", "event_id": "event_id"}
    explored = Explored("listener", (own,), drawable(), LOCAL)
    kinds: set[str] = set()
    for n in range(1, 60):
        trial = draw_trial(explored, 5, n)
        assert not refused(trial, LOCAL), trial
        kinds |= {str(f["kind"]) for f in trial.faults}
    assert not kinds & {"consumer-crash", "consumer-pause", "executor-loss"}
    assert {"consumer-kill", "consumer-freeze", "network"} <= kinds


def test_coverage_reads_a_coordinator_move_from_the_clients_not_from_the_proxys_emulation() -> None:
    moved = _event(2, EventKind.KAFKA_ERROR, detail="NOT_COORDINATOR OffsetCommit")
    java = _event(2, EventKind.CONSUMER_LOG, detail="command-0: ... The coordinator is loading")
    assert Condition.COORDINATOR_MOVED in exercised([moved], LANE).conditions
    assert Condition.COORDINATOR_MOVED in exercised([java], LANE).conditions
    start = _event(1, EventKind.FAULT_START, detail="commit-failure", fault="storm")
    end = _event(3, EventKind.FAULT_END, detail="commit-failure", fault="storm")
    assert Condition.COORDINATOR_MOVED not in exercised([start, moved, end], LANE).conditions


def test_coverage_reads_a_write_the_driver_retried_and_the_server_answered() -> None:
    failed = _event(1, EventKind.MONGO_ERROR, detail="insert: connection reset")
    answered = _event(2, EventKind.MONGO_RETRIED, detail="insert answered on a retry")
    assert Condition.DRIVER_RETRIED in exercised([failed, answered], LANE).conditions
    assert Condition.DRIVER_RETRIED not in exercised([failed], LANE).conditions


def test_explore_varies_the_consumers_mongodb_settings_and_shrinks_them_back_to_defaults() -> None:
    trials = [draw_trial(LISTENER, 7, n) for n in range(1, 40)]
    drawn = {name for t in trials for name, _ in t.shape.mongo}
    assert drawn == {"retryWrites", "socketTimeoutMS", "connectTimeoutMS",
                     "serverSelectionTimeoutMS", "maxCommitTimeMS"}  # fmt: skip
    assert any(not t.shape.mongo for t in trials)  # often the drivers' defaults
    varied = next(t for t in trials if len(t.shape.mongo) > 1)
    # A scenario the run takes as any other (pipeline.mongo), and a finding replays.
    assert varied.scenario().pipeline.mongo == dict(varied.shape.mongo)

    def needs_no_retries(t: Trial) -> bool:  # fails only without retryable writes
        return ("retryWrites", False) in t.shape.mongo

    crash = {"kind": "consumer-kill", "name": "consumer-kill#1", "at": 3.0}
    settings = (("retryWrites", False), ("socketTimeoutMS", 2000))
    trial = _trial(crash)
    trial = replace(trial, shape=replace(trial.shape, mongo=settings))
    minimal, trail = shrink(trial, ("naive",), judged(needs_no_retries), valid=lambda t: True,
                            out_of_time=lambda: False, clock=lambda: 0.0)  # fmt: skip
    assert minimal.shape.mongo == (("retryWrites", False),)
    # All back to defaults first: one replay where no setting matters.
    tries = [t.what for t in trail if t.what.startswith("mongo")]
    assert tries[0] == "mongo retryWrites=false socketTimeoutMS=2000 -> defaults"
    independent, trail = shrink(trial, ("naive",), judged(lambda t: True), valid=lambda t: True,
                                out_of_time=lambda: False, clock=lambda: 0.0)  # fmt: skip
    assert independent.shape.mongo == ()
    assert len([t for t in trail if t.what.startswith("mongo")]) == 1


def test_the_report_counts_the_shrink_tries_that_said_nothing(tmp_path: Path) -> None:
    planned = plan(runtime="listener", variants=["naive"], kinds=["consumer-crash"],
                   backend=LOCAL, budget="60", seed=3, out=tmp_path)  # fmt: skip
    trial = draw_trial(planned.explored, 3, 1)
    silent = Replay(Verdict.UNJUDGED, "consumer-crash#1 never fired")
    trail = (
        Tried("drop consumer-crash#1", PASSED, 1.0),
        Tried("drop consumer-crash#2", silent, 1.0),
        Tried("consumer-crash#1: after_docs 67 -> 1", STILL_FAILS, 1.0),
    )
    found = Finding(1, 1, (), trial, trail, reproduced=1, replays=1, directory=tmp_path / "f")
    page = report.write(Exploration(planned, findings=[found])).read_text()
    assert "Shrunk in 3 tries (1 kept, 1 not judged: 1x consumer-crash#1 never fired)" in page
    assert str(trail[1].replay) == "not judged (consumer-crash#1 never fired)"


def test_a_run_that_breaks_a_promise_by_a_shrunk_cause_is_counted_with_its_finding(
    tmp_path: Path,
) -> None:
    # The cause: the lane, the clauses it broke, the kind and point of each fault the finding
    # was shrunk to. A later run with that fault among others, breaking a clause it broke, is the
    # same cause; another point, another lane or only other clauses is not.
    mid = {"kind": "consumer-crash", "name": "consumer-crash#1", "point": "mid_write",
           "at_batch": 2, "after_docs": 1}  # fmt: skip
    late = {**mid, "point": "after_write_before_commit", "after_docs": None}
    late = {k: v for k, v in late.items() if v is not None}
    slow = {"kind": "broker-slow", "name": "broker-slow#2", "at": 1.0, "duration": 3.0,
            "delay_ms": 200}  # fmt: skip
    base = draw_trial(LISTENER, 3, 1)
    lost = Violation("listener/idempotent", "exactly-once", ("lost 2",))
    found = Finding(1, 4, (lost,), base.with_faults([mid]), (), reproduced=5, replays=5,
                    directory=tmp_path / "found-1")  # fmt: skip

    def record(faults: list[dict[str, Any]], *broke: Violation) -> RunRecord:
        return RunRecord(9, base.with_faults(faults), 20.0, violations=broke)

    other_count = Violation("listener/idempotent", "exactly-once", ("lost 7",))
    assert same_cause(found, record([slow, mid], other_count))
    assert not same_cause(found, record([slow, late], lost))  # another point
    assert not same_cause(found, record([mid], replace(lost, variant="listener/transactional")))
    assert not same_cause(found, record([mid], replace(lost, broken=("duplicates 3",))))
    # A clause in common is the same cause: a crash that lost changes, and with them an order's
    # latest, left its projection stale as well.
    and_stale = replace(lost, broken=("lost 42", "stale 5"))
    assert same_cause(found, record([mid, slow], and_stale))
    assert not same_cause(found, record([late], and_stale))
    counted = replace(found, also=(9, 12))
    assert counted.runs == (4, 9, 12)
    planned = plan(runtime="listener", variants=["idempotent"], kinds=None, backend=LOCAL,
                   budget="60", seed=3, out=tmp_path)  # fmt: skip
    page = report.write(Exploration(planned, findings=[counted])).read_text()
    assert "**found-1** (runs 4, 9, 12: one cause)" in page


@pytest.mark.parametrize(
    ("reproduced", "replays", "runs"),
    [
        (5, 5, 1),  # every replay: one run gives the verdict
        (4, 5, 3),  # 0.2 ** 3 <= 1%, 0.2 ** 2 is not
        (3, 5, 6),  # 0.4 ** 6; 0.4 ** 5 is just over 1%
        (1, 5, 20),  # would need 21
    ],
)
def test_a_races_reproducer_replays_itself_until_one_run_gives_the_verdict(
    reproduced: int, replays: int, runs: int
) -> None:
    assert race_replays(reproduced, replays) == runs


def test_a_races_scenario_says_so_and_expects_its_promise_in_every_replay(tmp_path: Path) -> None:
    mid = {"kind": "consumer-crash", "name": "consumer-crash#1", "point": "mid_write",
           "at_batch": 2, "after_docs": 1}  # fmt: skip
    lost = Violation("listener/idempotent", "exactly-once", ("lost 2",))
    race = Finding(1, 4, (lost,), draw_trial(LISTENER, 3, 1).with_faults([mid]), (),
                   reproduced=3, replays=5, directory=tmp_path / "found-1")  # fmt: skip
    write_scenario(race)
    text = race.scenario_file.read_text()
    assert "# Reproduced in 3 of 5 replays with seed" in text
    assert "# A race: the run replays it 6 times with that seed and fails if any breaks" in text
    written = load_scenario(race.scenario_file)
    assert written.replays == 6
    (kept,) = [e for e in written.expect["idempotent"] if e.field == "lost"]
    assert (kept.op, kept.value, kept.rate) == ("==", 0, 1.0)
    sure = replace(race, reproduced=5, directory=tmp_path / "found-2")
    write_scenario(sure)
    once = load_scenario(sure.scenario_file)
    assert once.replays == 1 and "A race" not in sure.scenario_file.read_text()
    assert [(e.field, e.rate) for e in once.expect["idempotent"] if e.field == "lost"] == [
        ("lost", None)
    ]
    # Never again in its replays: no rate to speak of, the most replays.
    unseen = replace(race, reproduced=0, replays=3, directory=tmp_path / "found-3")
    write_scenario(unseen)
    text = unseen.scenario_file.read_text()
    assert "# Not reproduced in its replays: the run replays it 20 times" in text
    assert "A race" not in text and load_scenario(unseen.scenario_file).replays == 20


@pytest.mark.parametrize(
    ("shown", "runs", "at_least", "verdict", "ran"),
    [
        ("FFFFF", 5, 0, Verdict.FAILS, 5),  # a sure failure: every replay, its rate known
        ("FPFFF", 5, 0, Verdict.FAILS, 5),  # 4 of 5
        ("FPFP", 5, 0, Verdict.PASSES, 4),  # at most 3 of 5 now: not kept for being smaller
        ("PP", 5, 0, Verdict.PASSES, 2),
        ("FFU", 5, 0, Verdict.UNJUDGED, 3),  # a run that said nothing says nothing of it
        ("FP", 5, 5, Verdict.PASSES, 2),  # what it replaces failed in every replay: it must too
        ("FFFFF", 5, 5, Verdict.FAILS, 5),
        ("FF", 2, 0, Verdict.FAILS, 2),  # --replays 2: both
        ("P", 2, 0, Verdict.PASSES, 1),
        ("F", 1, 0, Verdict.FAILS, 1),
    ],
)
def test_a_candidate_is_kept_only_where_it_fails_in_four_of_five_replays_and_as_often(
    shown: str, runs: int, at_least: int, verdict: Verdict, ran: int
) -> None:
    replays = iter({"F": STILL_FAILS, "P": PASSED, "U": Replay(Verdict.UNJUDGED, "x")}[c]
                   for c in shown)  # fmt: skip
    calls = []

    def once() -> Replay:
        calls.append(1)
        return next(replays)

    judged = reliably(once, runs, at_least)
    assert (judged.verdict, len(calls)) == (verdict, ran)
    if verdict is not Verdict.UNJUDGED:
        assert judged.runs == ran and judged.failed == shown.count("F")


def test_a_shrink_never_trades_a_reproducer_that_always_fails_for_one_that_mostly_does() -> None:
    # A pause past a de-duplication window: 9 s and 6 s fail in every replay, 5.5 s (near the
    # window's 5 s) in 4 of 5, 1 s in none. Kept at 6 s: 5.5 s would fail less often.
    pause = {"kind": "consumer-pause", "name": "consumer-pause#1", "point": "after_write",
             "duration": 9.0}  # fmt: skip
    rates = {9.0: 5, 6.0: 5, 5.5: 4, 1.0: 0}

    def replay(t: Trial, at_least: int) -> Replay:
        (fault,) = t.faults
        failing = rates.get(float(fault["duration"]), 5)
        return reliably(iter([STILL_FAILS] * failing + [PASSED] * 5).__next__, 5, at_least)

    candidates = iter([6.0, 5.5])

    def halve(t: Trial, _violators: tuple[str, ...]) -> Iterator[Candidate]:
        for duration in candidates:
            yield Candidate(t.with_faults([{**pause, "duration": duration}]), f"-> {duration}")

    minimal, trail = shrink(_trial(pause), ("naive",), replay, valid=lambda t: True,
                            out_of_time=lambda: False, clock=lambda: 0.0,
                            passes=[halve])  # fmt: skip
    assert minimal.faults[0]["duration"] == 6.0
    assert [(t.what, t.replay.failed, t.kept) for t in trail] == [
        ("-> 6.0", 5, True),
        ("-> 5.5", 4, False),
    ]


def test_a_timed_fault_is_tried_at_the_record_count_the_producer_had_reached_by_then() -> None:
    base = draw_trial(LISTENER, 3, 1)
    timed = {"kind": "commit-failure", "name": "commit-failure#1", "at": 2.5, "jitter": 1.0,
             "duration": 4.0}  # fmt: skip
    chained = {**timed, "name": "commit-failure#2", "after": "commit-failure#1", "at": 1.0}
    crash = {"kind": "consumer-crash", "name": "consumer-crash#3", "point": "mid_write",
             "at_batch": 2, "after_docs": 1}  # fmt: skip
    trial = replace(base, shape=replace(base.shape, rate=200.0)).with_faults(
        [timed, chained, crash]
    )
    # The chained fault counts from its fault's end, and a crash is at its point already:
    # only the first is pinned.
    (pinned,) = list(pin_to_records(trial, ("idempotent",)))
    assert pinned.what == "commit-failure#1: at 2.5 s -> at_event 500"
    assert pinned.trial.faults[0] == {"kind": "commit-failure", "name": "commit-failure#1",
                                      "duration": 4.0, "at_event": 500}  # fmt: skip
    assert not refused(pinned.trial, LOCAL)
    assert pin_to_records in PASSES and PASSES.index(pin_to_records) < PASSES.index(simplify_faults)


def test_explore_beside_a_debezium_source_draws_its_faults_and_holds_its_stage() -> None:
    """``--source debezium``: the trials read PostgreSQL through Debezium; Debezium's worker,
    its task and the database are drawn beside the lanes' faults; a change lost at the source
    breaks Debezium's promise (at-least-once) whatever the lanes did."""
    planned = plan(runtime="listener", variants=["idempotent"], kinds=None, seed=1,
                   backend=LOCAL_ABILITIES, budget="60", out=Path("."),
                   source="debezium")  # fmt: skip
    trials = [draw_trial(planned.explored, 1, n) for n in range(1, 80)]
    for trial in trials:
        assert trial.scenario().source.cdc, trial
        assert not refused(trial, LOCAL_ABILITIES), trial
    drawn = {(str(f["kind"]), str(f.get("of", ""))) for t in trials for f in t.faults}
    assert {("connect-worker-kill", "source"), ("connect-task-restart", "source"),
            ("postgres-restart", "")} <= drawn, drawn  # fmt: skip
    assert not {k for k, _ in drawn} & {"producer-resend", "poison"}  # the producer's records
    # The coverage table names what a source's fault aimed at.
    on_source = [f for t in trials for f in t.faults if f.get("of") == "source"]
    assert {parse_fault(dict(f), "f").aim() for f in on_source} == {
        "the source's Connect worker (Debezium's)",
        "the source's Connect task (Debezium's)",
    }
    with pytest.raises(BadInput) as caught:
        plan(runtime="listener", variants=["connect-default"], kinds=None, backend=LOCAL_ABILITIES,
             budget="60", seed=1, out=Path("."), source="debezium")  # fmt: skip
    assert "--variant connect-default: reads its records its own way" in str(caught.value)
    with pytest.raises(BadInput, match="--source: one of producer, debezium, got 'mysql'"):
        plan(runtime="listener", variants=[], kinds=None, backend=LOCAL_ABILITIES, budget="60",
             seed=1, out=Path("."), source="mysql")  # fmt: skip
    # The source's stage: copies are within Debezium's promise, a lost change is not.
    scenario = trials[0].scenario()
    stage = RelayStage(verdict(lost=2, duplicates=5), of=SOURCE)
    lane = VariantResult(runtime="listener", variant="idempotent", verdict=verdict(),
                         seconds=1.0, relay=stage)  # fmt: skip
    result = ScenarioResult.of(scenario, "local", {}, 0.0, 1.0, (lane,), Path("."))
    assert [str(v) for v in violations(scenario, result)] == [
        "source/debezium broke its promise (at-least-once): lost 2"
    ]
    copies = replace(lane, relay=RelayStage(verdict(duplicates=5), of=SOURCE))
    assert violations(scenario, replace(result, variants=(copies,))) == ()


def verdict(**counts: int) -> Counts:
    fields = {"produced": 10, "acked": 10, "expected": 10, "in_sink": 10, "unique_in_sink": 10,
              "duplicates": 0, "duplicated_keys": 0, "copies": {}, "lost": 0, "phantoms": 0,
              "stale": 0, "dead_lettered": 0, "poison_missing": 0, "offsets_consistent": None,
              "anomalies": [], "anomalies_total": 0}  # fmt: skip
    return Counts(**{**fields, **counts})  # type: ignore[arg-type]


def test_a_search_share_stops_starting_runs_and_leaves_the_rest_to_shrinking() -> None:
    asked = plan(runtime="listener", variants=["naive"], kinds=None, backend=LOCAL,
                 budget="600", seed=1, out=Path("."))  # fmt: skip
    whole = Exploration(asked)
    assert whole.search_left() == pytest.approx(whole.left(), abs=1)
    searching = Exploration(replace(asked, search_s=60))
    assert searching.search_left() == pytest.approx(60, abs=1)
    assert searching.left() > 500  # shrinking's, after the search
    over = Exploration(replace(asked, search_s=60, started=asked.started - 61))
    assert over.search_left() < 0 < over.left()


def test_the_shrink_keeps_room_for_the_findings_replays_at_its_slowest_last_run() -> None:
    # Tries of 28-34 s: a replay is taken as the slowest of the last three, and a quarter more
    # (a minimal's replays ran slower than its tries), not their median; the first, slower
    # run of the search no longer counts once three tries failed after it.
    assert replay_s([60.0, 28.0, 34.0, 30.0]) == pytest.approx(42.5)
    assert replay_s([40.0]) == pytest.approx(50.0)
    # 5 replays and one more try at 42.5 s each, and half the shortest run to spare.
    need = 6 * 42.5 + 10
    assert no_room_left(need - 1, 5, 42.5) and not no_room_left(need, 5, 42.5)
    assert not no_room_left(need, 5, 30.0) and no_room_left(need, 10, 30.0)

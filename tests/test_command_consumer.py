"""A consumer the lab did not write - examples/python-listener, which knows nothing of the lab but
its environment variables - under the lab's kills at acknowledged-record counts, counted
exactly: the lab's duplicates and losses equal a recount of its own collection against the
ledger. A program that exits at once, or writes nowhere the lab looks, is named with the end of
its output, and nothing of it is left running."""

from __future__ import annotations

import math
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from pymongo import MongoClient

from harness import paths
from harness.environment.local import LocalEnvironment
from harness.errors import LabError
from harness.faults.base import Target
from harness.faults.kinds import parse_fault
from harness.faults.nemesis import Nemesis
from harness.faults.schedule import plan
from harness.history.events import EventKind, HistoryEvent, HistoryWriter, read_history
from harness.pipeline.runtime import RuntimeConfig
from harness.pipeline.runtimes import COMMAND
from harness.pipeline.supervisor import Lane, RuntimeFailed, RuntimeSupervisor, stop_all
from harness.readiness import NotReady, wait_for
from harness.results.fired import unfired
from harness.results.model import VariantResult
from harness.run.runner import run_scenario
from harness.scenario import Scenario, parse_scenario
from harness.workload.events import Kind
from harness.workload.ledger import read_ledger
from tests.support import processes_of

pytestmark = pytest.mark.servers

EXAMPLE = paths.project_root() / "examples" / "python-listener"
SINK = {"collection": "landed", "event_id": "event_id"}
# A librdkafka setting the example passes on: a killed instance's partitions are handed over
# after 6 s, not librdkafka's default 45 s (two kills cost a 6,000-record run 90 s of waiting).
SHORT = "session.timeout.ms=6000"


def command(label: str, program: str, **options: Any) -> dict[str, Any]:
    return {"name": "command", "label": label, "command": program, "sink": SINK, **options}


def scenario(*variants: dict[str, Any], faults: list[Any] | None = None) -> Scenario:
    raw = {
        "name": "own-consumer",
        "seed": 32,
        "workload": {"events": 1200, "keys": 200, "partitions": 3, "rate": 200},
        "pipeline": {"timeout_s": 180},
        "variants": list(variants),
        "faults": faults or [],
    }
    # Its folder is the example's: a command runs from its scenario's folder.
    return parse_scenario(raw, EXAMPLE / "scenario.yaml")


def recount(env: LocalEnvironment, lane: VariantResult) -> tuple[int, int]:
    """(duplicates, lost) of a lane, from its collection and the ledger, without the checker."""
    assert lane.directory is not None and lane.ledger is not None
    config = RuntimeConfig.load(lane.directory / "runtime.json")
    rows = read_ledger(lane.ledger)
    change = {r.event_id: (r.order_id, r.version) for r in rows}
    expected = {change[r.event_id] for r in rows if r.kind is not Kind.POISON}
    client: MongoClient[dict[str, Any]] = MongoClient(env.mongo_uri)
    with client:
        docs = client[config.database]["landed"].find({}, {"event_id": 1})
        copies = Counter(change[d["event_id"]] for d in docs)
    return sum(n - 1 for n in copies.values()), len(expected - set(copies))


def test_a_program_killed_at_acknowledged_counts_is_counted_exactly(
    scenario_env: LocalEnvironment, tmp_path: Path
) -> None:
    python = sys.executable
    kills = [
        {"kind": "consumer-kill", "at_event": 300},  # both instances
        {"kind": "consumer-kill", "at_event": 800, "consumer": 1},
    ]
    result = run_scenario(
        scenario_env,
        scenario(
            command("insert", f"{python} listener.py insert {SHORT}", instances=2),
            command("upsert", f"{python} listener.py upsert {SHORT}", instances=2),
            faults=kills,
        ),
        tmp_path / "run",
        progress=lambda _m: None,
    )
    lanes = {v.variant: v for v in result.variants}
    assert set(lanes) == {"insert", "upsert"} and {v.runtime for v in lanes.values()} == {"command"}
    for lane in lanes.values():
        assert lane.crashes == 3, lane  # two instances, then one: SIGKILLs the lab saw
        assert (lane.verdict.duplicates, lane.verdict.lost) == recount(scenario_env, lane)
        assert lane.verdict.acked == 1200 and lane.verdict.phantoms == 0
        assert lane.directory is not None
        seen = Counter(e.kind for e in read_history(lane.directory / "history"))
        assert seen[EventKind.RUNTIME_START] == 2 + 3  # the first starts, then each restart
        assert seen[EventKind.GROUP] and seen[EventKind.COMMITTED] and seen[EventKind.SINK_COUNT]
    # The upsert keyed by the producer's event id keeps its promise; the insert is at least once.
    assert (lanes["upsert"].verdict.duplicates, lanes["upsert"].verdict.lost) == (0, 0)
    assert lanes["insert"].verdict.lost == 0


def _none_left(env: LocalEnvironment) -> None:
    left = {pid: name for pid, name in processes_of(env.env_id).items() if "command" in name}
    assert not left, left


def test_a_program_that_exits_at_once_is_named_with_its_output(
    scenario_env: LocalEnvironment, tmp_path: Path
) -> None:
    failing = command("failing", "sh -c 'echo cannot reach the cluster: boom >&2; exit 3'")
    with pytest.raises(RuntimeFailed) as caught:
        run_scenario(scenario_env, scenario(failing), tmp_path / "run", progress=lambda _m: None)
    text = str(caught.value)
    assert "command-0 failed 3 times in a row" in text
    assert "cannot reach the cluster: boom" in text
    _none_left(scenario_env)


def test_a_program_that_writes_nowhere_the_lab_looks_is_named(
    scenario_env: LocalEnvironment, tmp_path: Path
) -> None:
    elsewhere = command("elsewhere", f"{sys.executable} listener.py insert")
    elsewhere["sink"] = {"collection": "not-where-it-writes", "event_id": "event_id"}
    with pytest.raises(LabError) as caught:
        run_scenario(
            scenario_env,
            parse_scenario({**_small(), "variants": [elsewhere]}, EXAMPLE / "scenario.yaml"),
            tmp_path / "run",
            progress=lambda _m: None,
        )
    text = str(caught.value)
    assert "elsewhere wrote no document to" in text and ".not-where-it-writes" in text
    assert "the last lines of" in text
    _none_left(scenario_env)


def _small() -> dict[str, Any]:
    return {"name": "writes-elsewhere", "workload": {"events": 100, "keys": 10, "rate": 200}}


def run_one(
    env: LocalEnvironment, tmp_path: Path, one: Scenario
) -> tuple[VariantResult, list[HistoryEvent]]:
    """The run of a scenario of one lane: its result, and its history."""
    result = run_scenario(env, one, tmp_path / "run", progress=lambda _m: None)
    (lane,) = result.variants
    assert lane.directory is not None
    return lane, read_history(lane.directory / "history")


def test_the_workload_waits_for_every_instance_of_a_program_in_its_group(
    scenario_env: LocalEnvironment, tmp_path: Path
) -> None:
    # Instance 1 starts 4 s late: the group is stable first with instance 0 alone, and instance
    # 1's join rebalances it. The lane is ready (the workload starts) only once both are in, so
    # a fault at the workload's 200th record does not meet a group still forming.
    program = f"{sys.executable} listener.py insert"
    late = f"sh -c '[ \"$CHAOSLAB_INSTANCE\" = 1 ] && sleep 4; exec {program}'"
    lane, events = run_one(scenario_env, tmp_path, scenario(command("late", late, instances=2)))
    ready = next(e.t for e in events if e.kind is EventKind.ASSIGNED)
    caught_up = next(e.t for e in events if e.kind is EventKind.CAUGHT_UP)
    states = [(e.t, e.detail) for e in events if e.kind is EventKind.GROUP]
    # Stable with one instance, then rebalanced by the other's join - all before it was ready.
    first_stable = next(t for t, state in states if state == "stable")
    assert any(first_stable < t < ready for t, state in states if state != "stable"), states
    assert not [t for t, state in states if ready < t < caught_up and state != "stable"], states
    assert (lane.verdict.duplicates, lane.verdict.lost) == (0, 0)


def test_a_program_frozen_past_its_session_loses_its_partitions_and_says_so_when_thawed(
    scenario_env: LocalEnvironment, tmp_path: Path
) -> None:
    # Frozen for 12 s with a 6 s session, instance 0 is put out of the group, which gives its
    # partitions to instance 1; thawed, it finds itself out - and writes the batch it held.
    freeze = {"kind": "consumer-freeze", "at_event": 200, "duration": 12, "consumer": 0}
    insert = command("insert", f"{sys.executable} listener.py insert {SHORT}", instances=2)
    lane, events = run_one(scenario_env, tmp_path, scenario(insert, faults=[freeze]))
    start = next(e.t for e in events if e.kind is EventKind.FAULT_START)
    end = next(e.t for e in events if e.kind is EventKind.FAULT_END)
    assert 11.5 <= end - start <= 20
    # Not thawed early by the supervisor (which thaws consumers paused at a crash point), not
    # killed: the same two processes throughout.
    assert lane.crashes == 0 and lane.restarts == 0
    # The group committed everything while instance 0 was frozen: instance 1 had its partitions.
    caught_up = next(e.t for e in events if e.kind is EventKind.CAUGHT_UP)
    assert start < caught_up < end, (start, caught_up, end)
    # Thawed, the program said in its own words that it had been put out.
    told = [e.detail for e in events if e.kind is EventKind.CONSUMER_LOG and e.t >= start]
    assert any("command-0" in d and ("SESSTMOUT" in d or "ASSIGNMENT_LOST" in d) for d in told)
    assert (lane.verdict.duplicates, lane.verdict.lost) == recount(scenario_env, lane)
    assert lane.verdict.lost == 0


def test_a_kill_due_while_its_instance_is_down_waits_until_it_is_back(
    scenario_env: LocalEnvironment, tmp_path: Path
) -> None:
    # Notebook 08's kills - every instance, then instance 1 again - with the first kill's
    # restart (4 s) still to come when the second is due (~1 s later, at 100 records/s): the
    # second kill waits until the supervisor has started instance 1 again, then kills it.
    # Without the wait its SIGKILL reached no process: two kills of three, and nothing said.
    kills = [
        {"kind": "consumer-kill", "name": "all", "at_event": 60},
        {"kind": "consumer-kill", "name": "again", "at_event": 150, "consumer": 1},
    ]
    raw = {
        "name": "kill-while-down",
        "seed": 32,
        "workload": {"events": 300, "keys": 50, "partitions": 3, "rate": 100},
        "pipeline": {"timeout_s": 120, "restart_delay_s": 4},
        "variants": [
            command("insert", f"{sys.executable} listener.py insert {SHORT}", instances=2)
        ],
        "faults": kills,
    }
    lane, events = run_one(scenario_env, tmp_path, parse_scenario(raw, EXAMPLE / "scenario.yaml"))
    assert lane.crashes == 3 and lane.unfired == (), lane
    steps = [(e.t, e.detail, e.count) for e in events
             if e.kind is EventKind.FAULT_STEP and e.fault == "again"]  # fmt: skip
    assert len(steps) == 2, steps
    (waits_at, waits, _), (killed_at, killed, count) = steps
    assert waits.startswith("command-1 down, restarting in ") and waits.endswith(
        "the kill waits until it is back"
    ), waits
    assert killed.startswith("command-1 SIGKILL, after waiting ") and count == 1, killed
    assert killed.endswith(" s for command-1 to be back"), killed
    # It waited for the restart, and killed the process started then.
    starts = [
        e.t for e in events if e.kind is EventKind.RUNTIME_START and e.consumer == "command-1"
    ]
    assert waits_at < starts[1] < killed_at < min(starts[2:], default=math.inf), (starts, steps)
    waited = float(killed.split("after waiting ")[1].split(" s")[0])
    assert waited == pytest.approx(killed_at - waits_at, abs=0.2) and waited > 1.0, steps
    start = next(e.t for e in events if e.kind is EventKind.FAULT_START and e.fault == "again")
    end = next(e.t for e in events if e.kind is EventKind.FAULT_END and e.fault == "again")
    assert start <= waits_at and killed_at <= end  # its window is the wait: the timeline shows it
    assert lane.verdict.lost == 0


def _sleepers(env: LocalEnvironment, tmp_path: Path, restart_delay: float) -> Target:
    """Two instances of a program that only sleeps, supervised as a lane's consumers: what a
    kill finds down or running, without a workload."""
    config = RuntimeConfig(
        runtime="command",
        bootstrap=env.kafka_bootstrap,
        mongo_uri=env.mongo_uri,
        topic="unused",
        group="unused",
        database="unused",
        variant="command",
        variant_options={},
        run_dir=str(tmp_path),
        command=("sleep", "120"),
    )
    history = HistoryWriter(config.history_dir, "nemesis", "sleepers")
    lane = Lane(config, tmp_path / "runtime.json", HistoryWriter(config.history_dir, "harness"))
    # Not watched from outside (the observer): there is no group or collection to watch.
    runtime = replace(COMMAND, black_box=False)
    supervisor = RuntimeSupervisor(
        env, [lane], consumers=2, restart_delay=restart_delay, log_dir=tmp_path / "logs",
        runtime=runtime,
    )  # fmt: skip
    return Target(history, supervisor, tmp_path, runtime, label="sleepers")


def _seen_killed(supervisor: RuntimeSupervisor, kills: int) -> None:
    supervisor.check()  # notices the consumers that ended
    if supervisor.crashes < kills:
        raise NotReady(f"{supervisor.crashes} of {kills} kills seen")


@contextmanager
def _running(target: Target) -> Iterator[RuntimeSupervisor]:
    """The target's consumers started, and stopped however the block ends."""
    target.supervisor.start()
    try:
        yield target.supervisor
    finally:
        stop_all([target.supervisor])


def _until_done(nemesis: Nemesis, supervisor: RuntimeSupervisor) -> float:
    """Tick the nemesis and the supervisor at the run loop's pace until every fault is done
    (at most 10 s); the seconds it took."""
    started = time.monotonic()
    while not nemesis.done and time.monotonic() - started < 10:
        nemesis.tick(time.monotonic() - started, 0)
        supervisor.check()
        time.sleep(0.05)  # the run loop's pace (POLL_S), not a wait for a condition
    assert nemesis.done, nemesis.under_way()
    return time.monotonic() - started


def test_a_kill_of_an_instance_down_for_good_is_reported_not_done(
    lab_env: LocalEnvironment, tmp_path: Path
) -> None:
    # A restart delay longer than any run: instance 1, killed first, is down for good. A kill of
    # every instance then kills instance 0 at once - it does not wait 600 s, nor its deadline,
    # for instance 1 - and says instance 1 was not killed, which is how the run reports it.
    target = _sleepers(lab_env, tmp_path, restart_delay=600)
    faults = (
        parse_fault({"kind": "consumer-kill", "at": 0, "consumer": 1}, "first"),
        parse_fault({"kind": "consumer-kill", "at": 0.5}, "all"),
    )
    with _running(target) as supervisor:
        took = _until_done(Nemesis(lab_env, plan(faults, 1), [target]), supervisor)
        assert took < 5  # not held for the deadline
        wait_for(lambda: _seen_killed(supervisor, 2), what="two kills seen", timeout=10)
        assert supervisor.restarts == 0
    events = read_history(tmp_path / "history")
    said = [(e.fault, e.detail, e.count) for e in events if e.kind is EventKind.FAULT_STEP]
    assert said[0] == ("first", "command-1 SIGKILL", 1), said
    assert said[1] == ("all", "command-0 SIGKILL", 1), said
    assert len(said) == 3 and said[2][0] == "all" and said[2][2] is None, said
    detail = said[2][1]
    assert detail.startswith("command-1 down, its restart due in ") and detail.endswith(
        " s, past the kill's 60 s: not killed"
    ), detail
    (missed,) = unfired(faults, events, workload_events=0)
    assert (missed.name, missed.reason) == ("all", detail)


def test_a_freeze_says_whom_it_stopped_and_one_that_stopped_no_one_did_not_fire(
    lab_env: LocalEnvironment, tmp_path: Path
) -> None:
    # Instance 1 killed for good first: a freeze aimed at it alone stops no process, and the
    # run says it did not fire; a freeze of every instance stops instance 0 and says instance 1
    # was down. (It said nothing, and counted as fired, before.)
    target = _sleepers(lab_env, tmp_path, restart_delay=600)
    faults = (
        parse_fault({"kind": "consumer-kill", "at": 0, "consumer": 1}, "kill"),
        parse_fault({"kind": "consumer-freeze", "at": 0.5, "duration": 0.5, "consumer": 1}, "one"),
        parse_fault({"kind": "consumer-freeze", "at": 1.5, "duration": 0.5}, "all"),
    )
    with _running(target) as supervisor:
        _until_done(Nemesis(lab_env, plan(faults, 1), [target]), supervisor)
    events = read_history(tmp_path / "history")
    said = [(e.fault, e.detail, e.count) for e in events if e.kind is EventKind.FAULT_STEP]
    assert said == [
        ("kill", "command-1 SIGKILL", 1),
        ("one", "command-1 down: not frozen", None),
        ("all", "command-0 SIGSTOP", 1),
        ("all", "command-1 down: not frozen", None),
    ], said
    missed = unfired(faults, events, workload_events=0)
    assert [(m.name, m.reason) for m in missed] == [("one", "command-1 down: not frozen")]

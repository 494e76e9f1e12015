"""A command consumer's pure parts: its scenario entry, the variables it is given, where it runs,
what the lab refuses to do to a black box, and how its history is drawn."""

from __future__ import annotations

import math
import sys
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pytest
from bson import ObjectId

from harness.environment.base import BackendAbilities
from harness.environment.options import CONTAINERS_ABILITIES
from harness.explore.coverage import Condition, exercised
from harness.faults.kinds import injects
from harness.history.events import EventKind, HistoryEvent
from harness.pipeline.command import VARIABLES, environment, with_app_name
from harness.pipeline.observer import MAX_LOG_LINES, Observer
from harness.pipeline.runtime import CONSUMER_APP, RuntimeConfig
from harness.pipeline.runtimes import COMMAND
from harness.pipeline.sink import written_at
from harness.pipeline.variants import make_variant
from harness.pipeline.variants.base import Landing
from harness.pipeline.variants.command import Command
from harness.report.timeline import consumer_restarts, written_per_second
from harness.scenario import ScenarioError, load_scenario, runnable
from tests.test_report import in_memory_run

LANE = injects("listener")  # what the faults make up on a listener's lane

LOCAL = BackendAbilities("local", (1, 2, 3), link_faults=True)
PYTHON = sys.executable


def scenario_file(tmp_path: Path, variants: str, faults: str = "[]") -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(
        f"name: own\nruntimes: [listener, spark]\nvariants: {variants}\nfaults: {faults}\n"
    )
    return path


def test_a_command_variant_names_its_sink_by_event_id_or_business_key() -> None:
    by_id = make_variant("command", {"command": "x", "sink": {"collection": "c", "event_id": "e"}})
    assert by_id.landing() == Landing("c", "order_id", "version", "e", "")
    keyed = make_variant(
        "command",
        {"command": "x", "sink": {"collection": "c", "business_key": ["o", "v"], "current": "s"}},
    )
    assert keyed.landing() == Landing("c", "o", "v", "", "s")
    assert isinstance(keyed, Command) and keyed.label == "command" and keyed.instances == 1


def test_a_bad_command_entry_names_every_problem(tmp_path: Path) -> None:
    entry = "[{name: command, command: '', instances: 0, promised: always, sink: {colour: red}}]"
    with pytest.raises(ScenarioError) as caught:
        load_scenario(scenario_file(tmp_path, entry))
    text = str(caught.value)
    for problem in (
        "variants[0]",
        "command: the program to run",
        "instances: at least 1",
        "promised: one of exactly-once, at-least-once, at-most-once, nothing",
        "sink: unknown field 'colour'",
        "sink.collection",
        "give one of event_id",
    ):
        assert problem in text


def test_a_command_runs_once_on_its_own_runtime_beside_the_scenario_runtimes(
    tmp_path: Path,
) -> None:
    own = f"{{name: command, label: mine, command: {PYTHON}, instances: 2, "
    own += "sink: {collection: landed, event_id: event_id}}"
    scenario = load_scenario(scenario_file(tmp_path, f"[naive, {own}]"))
    assert [(r, s.label) for r, s in scenario.lanes] == [
        ("listener", "naive"),
        ("spark", "naive"),
        ("command", "mine"),
    ]
    assert COMMAND in scenario.setting.runtimes
    assert scenario.setting.consumers == 1  # the fewest any lane has
    assert runnable(scenario, LOCAL) == ()


def test_crash_points_and_missing_programs_are_refused_by_name(tmp_path: Path) -> None:
    own = "{name: command, command: ./nothing-here.sh, sink: {collection: c, event_id: e}}"
    crash = "[{kind: consumer-crash, point: after_write_before_commit, at_batch: 1}]"
    scenario = load_scenario(scenario_file(tmp_path, f"[{own}]", crash))
    with pytest.raises(ScenarioError) as caught:
        runnable(scenario, LOCAL)
    text = str(caught.value)
    assert f"variants[0]: command: no program './nothing-here.sh' in {tmp_path}" in text
    assert "faults[0].point: after_write_before_commit needs the lab's code inside" in text
    kill = "[{kind: consumer-kill, at_event: 100}, {kind: consumer-freeze, at: 2, duration: 3}]"
    fine = load_scenario(
        scenario_file(tmp_path, f"[{own.replace('./nothing-here.sh', 'sh')}]", kill)
    )
    assert runnable(fine, LOCAL) == ()


def _config(tmp_path: Path) -> RuntimeConfig:
    return RuntimeConfig(
        runtime="command",
        bootstrap="127.0.0.1:9",
        mongo_uri="mongodb://127.0.0.1:7/?directConnection=true&appName=theirs",
        topic="t.1",
        group="t.1.command-mine",
        database="cl_1_command_mine",
        variant="command",
        variant_options={},
        run_dir=str(tmp_path),
    )


def test_a_command_is_given_every_documented_variable_and_the_consumers_app_name(
    tmp_path: Path,
) -> None:
    found = environment(_config(tmp_path), 1)
    assert found.keys() == VARIABLES.keys()
    assert found["CHAOSLAB_INSTANCE"] == "1"
    assert found["CHAOSLAB_DLQ_TOPIC"].startswith("t.1.command-mine")
    assert found["CHAOSLAB_MONGO_URI"] == (
        f"mongodb://127.0.0.1:7/?directConnection=true&appName={CONSUMER_APP}"
    )
    assert with_app_name("mongodb://a:1,b:2") == f"mongodb://a:1,b:2?appName={CONSUMER_APP}"


def test_the_observer_records_the_error_lines_a_program_logs_and_no_more_than_its_cap(
    tmp_path: Path,
) -> None:
    log = tmp_path / "command-0.log"
    log.write_text(
        "==== chaoslab: starting x at now: java -jar failing.jar\n"
        "INFO all good\n"
        "ERROR CommitFailedException: Commit cannot be completed\n"
        + "WARN offset commit failed\n" * (MAX_LOG_LINES + 5)
        + "half a line with an Exception"
    )
    observer = Observer(
        bootstrap="127.0.0.1:9",
        mongo_uri="mongodb://127.0.0.1:7/?serverSelectionTimeoutMS=100",
        config=_config(tmp_path),
        landing=Landing("landed", event_id="event_id", current=""),
        label="mine",
        logs=[log],
    )
    observer._read_log(log)  # the log only: no server is asked
    observer.stop()
    observer.history.close()
    events = [
        HistoryEvent.from_json(line)
        for path in (tmp_path / "history").glob("observer-*.jsonl")
        for line in path.read_text().splitlines()
    ]
    assert len(events) == MAX_LOG_LINES
    assert {e.kind for e in events} == {EventKind.CONSUMER_LOG}
    assert events[0].detail == "command-0: ERROR CommitFailedException: Commit cannot be completed"


def test_a_black_box_is_drawn_from_what_the_lab_polled() -> None:
    def at(t: float, kind: EventKind, **fields: object) -> HistoryEvent:
        return HistoryEvent(t, kind, fields.pop("source", "observer"), "mine", **fields)  # type: ignore[arg-type]

    events = [
        at(1, EventKind.RUNTIME_START, source="harness", detail="command-0 pid 7"),
        at(1, EventKind.RUNTIME_START, source="harness", detail="command-1 pid 8"),
        at(2, EventKind.SINK_COUNT, count=100),
        at(3, EventKind.SINK_COUNT, count=250),
        at(4, EventKind.RUNTIME_EXIT, source="harness", detail="command-0 killed by SIGKILL"),
        at(5, EventKind.RUNTIME_START, source="harness", detail="command-0 pid 9"),
    ]
    restarts = consumer_restarts(events, 0.0)
    assert [(r.t, r.consumer) for r in restarts] == [(5.0, "command-0")]
    variant = replace(in_memory_run().variants[0], events=tuple(events))
    written = written_per_second(variant, 0.0)
    assert list(written.t) == [2.0, 3.0] and list(written.rate) == [100.0, 150.0]


def test_a_black_boxs_first_starts_are_not_restarts_for_explores_coverage() -> None:
    def start(t: float, detail: str) -> HistoryEvent:
        return HistoryEvent(t, EventKind.RUNTIME_START, "harness", "mine", detail=detail)

    first = [start(1, "command-0 pid 7"), start(1, "command-1 pid 8")]
    assert Condition.RESTARTED not in exercised(first, LANE).conditions
    assert Condition.RESTARTED in exercised([*first, start(5, "command-0 pid 9")], LANE).conditions


def test_a_copy_is_placed_in_time_by_the_labs_stamp_else_by_the_drivers_object_id() -> None:
    # Seed 002's Java listener stamps nothing, but its driver minted each _id at the insert: the
    # copies of a redelivery are drawn at that second, not left out of the timeline.
    minted = datetime(2026, 11, 25, 10, 43, 7, tzinfo=UTC)
    assert written_at({"_id": ObjectId.from_datetime(minted)}) == minted.timestamp()
    assert written_at({"_id": ObjectId(), "_lab": {"written_at": 12.5}}) == 12.5
    assert math.isnan(written_at({"_id": "e-0001"}))  # keyed by the event id: no time known


def test_a_users_image_is_for_the_containers_backend_and_its_program_is_the_images(
    tmp_path: Path,
) -> None:
    own = (
        "{name: command, command: /opt/listener/bin/run, image: registry.local/listener:1.4, "
        "sink: {collection: c, event_id: e}}"
    )
    scenario = load_scenario(scenario_file(tmp_path, f"[{own}]", "[]"))
    with pytest.raises(ScenarioError) as caught:
        runnable(scenario, LOCAL)
    text = str(caught.value)
    assert (
        "variants[0].image: runs the command in the image registry.local/listener:1.4: the " in text
    )
    assert "containers backend only, and this is the local backend" in text
    # Its program is in the image, not on this machine: not looked for here.
    assert "no program" not in text
    assert runnable(scenario, CONTAINERS_ABILITIES) == ()
    [spec] = scenario.variants
    assert make_variant(spec.name, spec.options).container_image() == "registry.local/listener:1.4"

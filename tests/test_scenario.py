"""Scenario files: a valid file loads; a bad one names the file and the field, exits 2 from the
CLI, and starts nothing."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from harness.checker.model import Verdict
from harness.errors import BadInput
from harness.faults.families.broker import (
    BrokerBounce,
    BrokerKill,
    BrokerPause,
    BrokerRollingRestart,
)
from harness.pipeline.crash import CrashPoint
from harness.pipeline.runtimes import LISTENER, REGISTRY, get_runtime, names, register
from harness.scenario import ScenarioError, load_scenario, parse_scenario
from tests.support import chaoslab, processes_started_in

GOOD = """\
name: good
seed: 3
workload: {events: 100, keys: 10, partitions: 2, rate: 50}
runtimes: [listener]
variants: [naive, {name: dedup-log, key: business}]
faults:
  - {kind: consumer-crash, point: mid_write, at_batch: 2, after_docs: 5}
  - {kind: broker-rolling-restart, at: 2, rotations: 2, interval: 6, hard: true}
  - {kind: producer-resend, start_event: 40, events: 20, fraction: 0.5}
expect:
  "*": {duplicates: 0, lost: 0}
  naive: {duplicates: ">0"}
  "dedup-log[key=business]": {stale: "<=1"}
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "scenario.yaml"
    path.write_text(text)
    return path


def test_a_valid_scenario_loads_with_defaults_and_expectations(tmp_path: Path) -> None:
    s = load_scenario(write(tmp_path, GOOD))
    assert (s.name, s.seed, s.partitions, s.rate) == ("good", 3, 2, 50.0)
    assert s.workload.events == 100 and s.workload.seed == 3
    assert [v.label for v in s.variants] == ["naive", "dedup-log[key=business]"]
    assert s.crash_plans[0].point is CrashPoint.MID_WRITE and s.crash_plans[0].after_docs == 5
    assert [f.name for f in s.faults] == [
        "consumer-crash#1",
        "broker-rolling-restart#2",
        "producer-resend#3",
    ]
    rolling = s.faults[1]
    assert isinstance(rolling, BrokerRollingRestart)
    assert rolling.hard and rolling.interval == 6
    assert [(b.start, b.end, b.fraction) for b in s.workload.bursts] == [(40, 60, 0.5)]
    naive, dedup = s.variants
    assert sorted(map(str, s.expectations_for(naive, "listener"))) == [
        "duplicates > 0",
        "lost == 0",
    ]
    assert sorted(map(str, s.expectations_for(dedup, "listener"))) == [
        "duplicates == 0",
        "lost == 0",
        "stale <= 1",
    ]


def test_an_expectation_over_seeds_is_not_decided_by_one_run(tmp_path: Path) -> None:
    s = load_scenario(
        write(tmp_path, GOOD.replace('{duplicates: ">0"}', '{duplicates: ">0 in 80%"}'))
    )
    (rate,) = [e for e in s.expectations_for(s.variants[0], "listener") if e.rate is not None]
    assert (str(rate), rate.rate) == ("duplicates > 0 in 80% of runs", 0.8)
    none = Verdict.from_dict({"duplicates": 0})
    assert rate.failure(none) is None and not rate.holds(rate.actual(none))


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "name: x\nvariants: [naive]\nexpect: {naive: {duplicates: '>0 in 150%'}}\n",
            "expect.naive.duplicates: a share of runs is over 0% and at most 100%, got 150%",
        ),
        ("name: x\nvariants: [naive\n", "YAML syntax error at line 3, column 1"),
        ("name: x\nvariants: [naive]\nevnts: 3\n", "evnts: unknown field"),
        ("name: x\nvariants: [naive, nave]\n", "variants[1]: unknown variant 'nave'"),
        (
            "name: x\nvariants: [{name: dedup-log, key: nope}]\n",
            "variants[0]: variant dedup-log: 'nope' is not a valid Key",
        ),
        (
            "name: x\nvariants: [{name: idempotent, colour: red}]\n",
            "variants[0]: variant idempotent:",
        ),
        ("name: x\nvariants: [naive]\nworkload: {events: -5}\n", "workload.events: must be >= 0"),
        (
            "name: x\nvariants: [naive]\nworkload: {events: lots}\n",
            "workload.events: must be an integer",
        ),
        # Every section is built by the one coercer the faults use (harness.records).
        ("name: x\nvariants: [naive]\nworkload: {bursts: []}\n", "workload.bursts: unknown field"),
        ("name: x\nvariants: [naive]\nruntimes: [3]\n", "runtimes[0]: must be a string, got 3"),
        (
            "name: x\nvariants: [naive]\nrelays: [naive]\noutbox: {mix: {push: lots}}\n",
            "outbox.mix.push: must be a number, got 'lots'",
        ),
        (
            "name: x\nvariants: [naive]\npipeline: {parallel: 1}\n",
            "pipeline.parallel: must be true",
        ),
        ("name: x\nvariants: [naive]\nruntimes: [flink]\n", "runtimes[0]: unknown runtime"),
        (
            "name: x\nvariants: [naive]\nfaults: [{kind: consumer-crash, point: nowhere}]\n",
            "faults[0].point: unknown 'nowhere'",
        ),
        (
            "name: x\nvariants: [naive]\nfaults: [{kind: consumer-crash, point: mid_write, "
            "times: 0}]\n",
            "faults[0].times: must be >= 1",
        ),
        (
            "name: x\nvariants: [naive]\nfaults: [{kind: meteor, at: 3}]\n",
            "faults[0].kind: unknown",
        ),
        (
            "name: x\nvariants: [naive]\nfaults: [{kind: broker-pause, at: 3, duration: -2}]\n",
            "faults[0].duration: must be > 0, got -2",
        ),
        (
            "name: x\nvariants: [naive]\nfaults: [{kind: broker-bounce}]\n",
            "faults[0].at: give exactly one of 'at'",
        ),
        (
            "name: x\nvariants: [naive]\nfaults: [{kind: broker-bounce, at: 1, broker: [1]}]\n",
            "faults[0].broker: expected a node id, 'controller', {coordinator-of: VARIANT}",
        ),
        (
            "name: x\nvariants: [naive]\nfaults: [{kind: commit-failure, at: 1, duration: 2, "
            "error: OOPS}]\n",
            "faults[0].error: unknown Kafka error 'OOPS'",
        ),
        (
            "name: x\nvariants: [naive]\nfaults: [{kind: network, at: 1, duration: 2, "
            "link: consumer-mongo, action: smash}]\n",
            "faults[0].action: unknown 'smash'",
        ),
        (
            "name: x\nvariants: [naive]\nexpect: {navie: {lost: 0}}\n",
            "expect.navie: no such variant",
        ),
        ("name: x\nvariants: [naive]\nexpect: {naive: {speed: 3}}\n", "expect.naive.speed: cannot"),
        (
            "name: x\nvariants: [naive]\nexpect: {naive: {lost: lots}}\n",
            "expect.naive.lost: expected",
        ),
        ("variants: [naive]\n", "name: is required"),
        ("name: x\n", "variants: is required"),
        ("- a list\n", "the file must be a mapping"),
    ],
)
def test_a_bad_scenario_names_the_file_and_the_field(
    tmp_path: Path, text: str, message: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert message in str(caught.value)


# The five kinds of bad file the issue names, each refused by the CLI before anything starts.
REFUSED = {
    "yaml-syntax": ("name: x\nvariants: [naive\n", "YAML syntax error at line 3"),
    "unknown-fault-kind": (
        "name: x\nvariants: [naive]\nfaults: [{kind: meteor, at: 1}]\n",
        "faults[0].kind: unknown fault kind 'meteor'",
    ),
    "unknown-variant": (
        "name: x\nvariants: [naive, nave]\n",
        "variants[1]: unknown variant 'nave'",
    ),
    "negative-duration": (
        "name: x\nvariants: [naive]\nfaults: [{kind: broker-kill, at: 1, duration: -2}]\n",
        "faults[0].duration: must be > 0, got -2",
    ),
    "beyond-the-backend": (
        "name: x\nvariants: [naive]\nfaults: [{kind: broker-bounce, at: 1, broker: 4}]\n",
        "faults[0].broker: the local backend's Kafka nodes are 1, 2, 3; there is no node 4",
    ),
    "no-such-coordinator": (
        "name: x\nvariants: [naive]\nfaults: [{kind: broker-kill, at: 1, duration: 2, "
        "broker: {coordinator-of: nave}}]\n",
        "faults[0].broker: coordinator-of: no variant 'nave'",
    ),
}


@pytest.mark.parametrize("kind", REFUSED)
def test_the_cli_refuses_a_bad_scenario_with_exit_2_and_starts_nothing(
    tmp_path: Path, kind: str
) -> None:
    text, message = REFUSED[kind]
    path = write(tmp_path, text)
    out = tmp_path / "run"
    result = chaoslab("run", str(path), "--out", str(out))
    assert result.returncode == 2, result.stderr
    assert str(path) in result.stderr and message in result.stderr, result.stderr
    assert not out.exists()
    assert processes_started_in(out / "env") == []


def test_a_missing_scenario_file_exits_2(tmp_path: Path) -> None:
    result = chaoslab("run", str(tmp_path / "nope.yaml"), "--out", str(tmp_path / "run"))
    assert result.returncode == 2 and "nope.yaml: no such scenario file" in result.stderr
    result = chaoslab("run", "basline", "--out", str(tmp_path / "run"))
    assert result.returncode == 2 and "basline: no such scenario file" in result.stderr
    assert "library: baseline, " in result.stderr  # what the user could have meant


THREE_PROBLEMS = """\
name: x
workload: {events: 100, colour: red}
faults:
  - {kind: meteor-strike, at: 1}
  - {kind: broker-kill, at: -1, duration: 0}
"""


def test_every_problem_of_a_file_is_named_at_once(tmp_path: Path) -> None:
    path = write(tmp_path, THREE_PROBLEMS)
    out = tmp_path / "run"
    result = chaoslab("run", str(path), "--out", str(out))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    expected = [
        "workload.colour: unknown field",
        "variants: is required",
        "faults[0].kind: unknown fault kind 'meteor-strike'",
        "faults[1].at: must be >= 0, got -1",
        "faults[1].duration: must be > 0, got 0",
    ]
    assert len(lines) == len(expected), lines
    for line, problem in zip(lines, expected, strict=True):
        assert f"{path}: {problem}" in line, (line, problem)
    assert not out.exists()
    assert processes_started_in(out / "env") == []


def test_a_broker_fault_picks_its_node_by_id_role_or_partition(tmp_path: Path) -> None:
    s = load_scenario(
        write(
            tmp_path,
            "name: x\nvariants: [naive, idempotent]\nfaults:\n"
            "  - {kind: broker-bounce, at: 1, broker: 3}\n"
            "  - {kind: broker-bounce, at: 2, broker: controller}\n"
            "  - {kind: broker-kill, at: 3, duration: 1, broker: {coordinator-of: naive}}\n"
            "  - {kind: broker-pause, at: 4, duration: 1, broker: {leader-of: 2}}\n"
            "  - {kind: broker-bounce, at: 5}\n"
            "  - {kind: broker-rolling-restart, at: 6, start: {coordinator-of: idempotent}}\n",
        )
    )
    *targeted, rolling = s.faults
    assert isinstance(rolling, BrokerRollingRestart)
    assert str(rolling.start) == "the coordinator of idempotent"
    one_broker = (BrokerBounce, BrokerKill, BrokerPause)
    assert all(isinstance(f, one_broker) for f in targeted)
    assert [str(f.broker) for f in targeted if isinstance(f, one_broker)] == [
        "node 3",
        "the controller",
        "the coordinator of naive",
        "the leader of partition 2",
        "node 1",
    ]


def test_runtimes_are_registered_records() -> None:
    assert names() == ("listener", "spark")
    with pytest.raises(ValueError, match=r"unknown runtime 'flink' \(known: listener, spark\)"):
        get_runtime("flink")
    with pytest.raises(ValueError, match="registered already"):
        register(replace(LISTENER))
    # Registering is all it takes for a scenario to name a runtime.
    with pytest.raises(ScenarioError, match="unknown runtime 'listener-2'"):
        parse_scenario({"name": "x", "variants": ["naive"], "runtimes": ["listener-2"]})
    extra = register(replace(LISTENER, name="listener-2"))
    try:
        scenario = parse_scenario({"name": "x", "variants": ["naive"], "runtimes": ["listener-2"]})
        assert scenario.runtimes == ("listener-2",)
    finally:
        del REGISTRY[extra.name]


def test_a_variant_chosen_by_label_is_that_one_and_by_name_the_first_of_its_name() -> None:
    """mongo-ack-lost has naive and naive[retryWrites=false]: ``naive`` is the plain one (its
    label), ``naive[retryWrites=false]`` the other; one given twice is refused (two lanes of one
    label would share a topic)."""
    scenario = load_scenario("scenarios/mongo-ack-lost.yaml")
    chosen = scenario.with_overrides(variants=["naive", "naive[retryWrites=false]", "idempotent"])
    assert [v.label for v in chosen.variants] == [
        "naive", "naive[retryWrites=false]", "idempotent[retryWrites=false]"
    ]  # fmt: skip
    with pytest.raises(ScenarioError, match=r"--variants: naive given twice"):
        scenario.with_overrides(variants=["naive", "naive"])


def test_every_problem_of_the_overrides_is_named_at_once() -> None:
    scenario = load_scenario("scenarios/mongo-ack-lost.yaml")
    with pytest.raises(BadInput) as refused:
        scenario.with_overrides(events=-1, runtimes=["nope"], variants=["bogus", "naive", "naive"])
    lines = str(refused.value).splitlines()
    assert lines[:2] == [
        "--events must be >= 0, got -1",
        "--runtime: unknown ['nope'] (choose from listener, spark)",
    ]
    assert lines[2].startswith("scenarios/mongo-ack-lost.yaml: --variants: unknown variant 'bogus'")
    assert lines[3:] == ["scenarios/mongo-ack-lost.yaml: --variants: naive given twice"]


def test_a_variant_can_run_on_some_of_the_scenarios_runtimes_and_others_are_named() -> None:
    raw = {"name": "x", "runtimes": ["listener", "spark"],
           "variants": ["naive", {"name": "connector-sink", "runtimes": ["spark"]}]}  # fmt: skip
    assert [(r, v.label) for r, v in parse_scenario(raw).lanes] == [
        ("listener", "naive"), ("spark", "naive"), ("spark", "connector-sink"),
    ]  # fmt: skip
    raw["variants"] = [{"name": "naive", "runtimes": ["java"]},
                       {"name": "connect-default", "runtimes": ["listener"]}]  # fmt: skip
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(raw)
    said = str(refused.value)
    assert "variants[0].runtimes: not the scenario's: java (it runs listener, spark)" in said
    assert "variants[1].runtimes: connect-default runs on the runtime it brings (connect)" in said


@pytest.mark.parametrize(
    ("extra", "followed"),
    [
        ("workload: {poison_fraction: 0.05}", False),  # the default mix: dead-lettered or not
        ("workload: {poison_fraction: 0.05, poison_shapes: [tombstone]}", True),
        (
            "faults: [{kind: poison, start_event: 10, events: 1, fraction: 1, shapes: [oversize]}]",
            True,
        ),
        ("faults: [{kind: poison, start_event: 10, events: 20, fraction: 0.5}]", False),
        ("workload: {poison_fraction: 0.05}\nexpect: {naive: {bad_merged: 0}}", True),
        ("workload: {poison_shapes: [tombstone]}", False),  # no bad records at all
    ],
)
def test_a_runs_writes_are_followed_only_where_its_bad_records_take_shapes_or_it_asks(
    extra: str, followed: bool
) -> None:
    s = parse_scenario(yaml.safe_load(f"name: f\nvariants: [naive]\n{extra}\n"))
    assert s.follows_bad_records is followed


CUT_SETTINGS = """
name: waits
seed: 3
workload: {events: 900, keys: 90}
pipeline: {connect: {workers: 2, scheduled.rebalance.max.delay.ms: 60000}}
variants:
  - naive
  - {name: connect-default, config: {tasks.max: 3}}
faults:
  - {name: outage, kind: network, link: consumer-mongo, action: reset, at: 3, duration: 90}
ci:
  variants: [connect-default]
  settings:
    pipeline: {connect: {scheduled.rebalance.max.delay.ms: 15000}}
    variants: {connect-default: {config: {consumer.override.session.timeout.ms: 10000}}}
    faults: {outage: {duration: 40}}
"""


def test_a_cuts_settings_are_merged_into_the_file_and_checked_as_the_file_is() -> None:
    raw = yaml.safe_load(CUT_SETTINGS)
    scenario = parse_scenario(raw, "waits.yaml")
    cut = scenario.cut("ci")
    # Merged key by key: what the cut sets, and the rest of the file's as it was.
    assert cut.pipeline.connect == {"workers": 2, "scheduled.rebalance.max.delay.ms": 15000}
    (connector,) = cut.variants
    config = connector.options["config"]
    assert config == {"tasks.max": 3, "consumer.override.session.timeout.ms": 10000}
    (outage,) = cut.faults
    assert (outage.name, outage.duration, outage.at) == ("outage", 40, 3)  # type: ignore[attr-defined]
    assert cut.workload.events == 900 and cut.ci is None
    # The whole scenario keeps its own; the docs' column names every setting.
    assert scenario.faults[0].duration == 90  # type: ignore[attr-defined]
    assert str(scenario.ci) == (
        "connect-default; settings: pipeline.connect.scheduled.rebalance.max.delay.ms 15000, "
        "variants.connect-default.config.consumer.override.session.timeout.ms 10000, "
        "faults.outage.duration 40"
    )
    # Every problem named at once: an entry that is not there, and a value the file refuses.
    raw["ci"]["settings"]["faults"] = {"outgae": {"duration": 40}}
    raw["ci"]["settings"]["workload"] = {"events": -1}
    raw["ci"]["settings"]["name"] = "other"
    with pytest.raises(ScenarioError) as refused:
        parse_scenario(raw, "waits.yaml")
    assert {w for w, _ in refused.value.problems} == {
        "ci.settings.faults.outgae", "ci.settings.name", "ci.settings: workload.events",
    }, refused.value.problems  # fmt: skip
    assert "no such fault (have: outage)" in str(refused.value)
